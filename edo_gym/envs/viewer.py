"""``render_mode="rgb_array"``: the episode trace drawn as a fixed-size RGB image (matplotlib's Agg backend).

The viewer draws the text lines of :func:`edo_gym.envs.render.render_trace` (the ``"ansi"`` rendering), not the
env's internal trace, so that it keeps up with any change of what the trace says. One frame shows the first
lines (the task and the plan), then as many of the most recent lines as fit, with the last line (the running
totals: steps, tokens, calls, simulated latency) at the bottom. Lines are coloured by what they report:
failures, flags and illegal actions red, passed verifications green, retrieval hits grey, dispatches and the
submission highlighted.

Rows are drawn on a ``FigureCanvasAgg`` without pyplot, so rendering never opens a window, never switches the
process's matplotlib backend and works in vector-env worker processes. Each process keeps the bitmaps of the
recently drawn rows, so a frame redraws only the lines that are new since the last one.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

#: Default frame size in pixels (height, width): 16:9, a multiple of 16 as video encoders prefer.
FRAME_SHAPE: tuple[int, int] = (576, 1024)
#: Lines kept from the top of the trace (the task and the start of the plan) when not everything fits.
HEAD_LINES = 10

_DPI = 100
_FONT_SIZE = 8.5  # points
_ROW_PX = 15  # 1.3 font sizes
_CHAR_PX = 0.602 * _FONT_SIZE * _DPI / 72  # advance width of DejaVu Sans Mono, matplotlib's monospace font
_MARGIN_PX = 6
_BACKGROUND = "#ffffff"
#: Smallest frame (height, width): one row of 8 characters.
MIN_SHAPE: tuple[int, int] = (2 * _MARGIN_PX + _ROW_PX, math.ceil(2 * _MARGIN_PX + 8 * _CHAR_PX))
_COLOURS = {
    "default": "#202020",
    "task": "#000000",
    "hit": "#707070",
    "bad": "#c0392b",
    "good": "#1e8449",
    "action": "#1f4e99",
    "elided": "#a0a0a0",
}


def line_colour(line: str) -> str:
    """Colour of one trace line, from the words it contains (unknown lines get the default colour)."""
    text = line.strip()
    lower = text.lower()
    if any(word in text for word in ("FAILED", "FLAGGED")) or lower.startswith(("illegal", "token budget")):
        return _COLOURS["bad"]
    if lower.startswith("task"):
        return _COLOURS["task"]
    if lower.startswith("hit"):
        return _COLOURS["hit"]
    if lower.startswith("verify") and lower.endswith("ok"):
        return _COLOURS["good"]
    if lower.startswith(("dispatch", "verify", "rollback", "replan", "submit")):
        return _COLOURS["action"]
    return _COLOURS["default"]


def fit_lines(lines: Sequence[str], rows: int, head: int = HEAD_LINES) -> list[str]:
    """At most ``rows`` lines: all of them if they fit, else the first ``head``, a marker, and the most recent ones."""
    lines = list(lines)
    if len(lines) <= rows:
        return lines
    head = max(0, min(head, rows // 3))
    tail = rows - head - 1
    skipped = len(lines) - head - tail
    return [*lines[:head], f"  ... {skipped} earlier lines not shown ...", *lines[len(lines) - tail :]]


class _RowPainter:
    """Draws one text row at a time on a one-row Agg canvas and keeps the recent rows as bitmaps.

    A frame is a stack of rows, and between two steps most rows of the trace stay the same, so a frame costs one
    Agg draw per *new* row (a few per step) instead of one per visible row.
    """

    def __init__(self, width: int, row_px: int, cache_rows: int = 256) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.figure = Figure(figsize=(width / _DPI, row_px / _DPI), dpi=_DPI, facecolor=_BACKGROUND)
        self.canvas = FigureCanvasAgg(self.figure)
        self.text = self.figure.text(_MARGIN_PX / width, 0.5, "", family="monospace", fontsize=_FONT_SIZE, va="center")
        self.shape = (row_px, width, 3)
        self.cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self.cache_rows = cache_rows
        self.lock = threading.Lock()

    def row(self, line: str, colour: str) -> np.ndarray:
        key = (line, colour)
        with self.lock:
            bitmap = self.cache.get(key)
            if bitmap is None:
                self.text.set_text(line)
                self.text.set_color(colour)
                self.canvas.draw()
                bitmap = np.asarray(self.canvas.buffer_rgba())[..., :3].copy()
                assert bitmap.shape == self.shape, (bitmap.shape, self.shape)
                self.cache[key] = bitmap
                if len(self.cache) > self.cache_rows:
                    self.cache.popitem(last=False)
            else:
                self.cache.move_to_end(key)
            return bitmap


@functools.lru_cache(maxsize=4)
def _painter(width: int) -> _RowPainter:
    return _RowPainter(width, _ROW_PX)


def draw_trace(lines: Sequence[str], shape: tuple[int, int] = FRAME_SHAPE) -> np.ndarray:
    """The trace ``lines`` as a ``uint8`` image of ``shape + (3,)`` (height, width, RGB), always the same size.

    :param lines: text lines of the episode so far, e.g. ``render_trace(env).splitlines()``.
    :param shape: ``(height, width)`` in pixels.
    """
    height, width = (int(v) for v in shape)
    if height < MIN_SHAPE[0] or width < MIN_SHAPE[1]:
        raise ValueError(
            f"frame shape (height, width) must be at least {MIN_SHAPE} pixels (one row of 8 characters), got {shape}"
        )
    rows = (height - 2 * _MARGIN_PX) // _ROW_PX
    columns = int((width - 2 * _MARGIN_PX) // _CHAR_PX)
    painter = _painter(width)
    frame = np.full((height, width, 3), 255, dtype=np.uint8)
    for i, line in enumerate(fit_lines(lines, rows)):
        line = line.expandtabs(4)
        if len(line) > columns:
            line = line[: columns - 3] + "..."
        colour = _COLOURS["elided"] if line.lstrip().startswith("... ") else line_colour(line)
        top = _MARGIN_PX + i * _ROW_PX
        frame[top : top + _ROW_PX] = painter.row(line, colour)
    return frame
