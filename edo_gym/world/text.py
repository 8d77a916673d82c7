"""Answer text: normalisation (what a downstream parser or the grader recovers) and format drift.

A worker's answer can come back in a drifted format. Some drifts are *recoverable* (case, an ``Answer:``
prefix, trailing punctuation): :func:`normalize` undoes them. Others are not (a reordered name, a hedge
suffix): the downstream parser and the exact-match grader both see a different string, so the error
propagates exactly as a real format change upstream would.
"""

from __future__ import annotations

import re

ABSTAIN_TEXT = "I don't know."
_SPACE = re.compile(r"\s+")
_PREFIX = re.compile(r"^(answer|final answer|result)\s*[:\-]\s*", re.IGNORECASE)

#: Drift styles; the first ones are recoverable by :func:`normalize`.
RECOVERABLE_DRIFTS: tuple[str, ...] = ("upper", "prefix", "trailing_period")
UNRECOVERABLE_DRIFTS: tuple[str, ...] = ("reordered", "hedged")


def normalize(text: str) -> str:
    """Canonical form used for parsing and exact-match grading: lower case, no prefix, single spaces."""
    text = _PREFIX.sub("", text.strip())
    text = text.strip().rstrip(".!").strip()
    return _SPACE.sub(" ", text).lower()


def drift(text: str, style: str) -> str:
    """``text`` rendered in a drifted format ``style`` (one of the drift tuples above)."""
    if style == "upper":
        return text.upper()
    if style == "prefix":
        return f"Answer: {text}"
    if style == "trailing_period":
        return f"{text}."
    if style == "reordered":
        words = text.split()
        return ", ".join(reversed(words)) if len(words) > 1 else f"{text} (approx.)"
    if style == "hedged":
        return f"probably {text}, I think"
    raise ValueError(f"unknown drift style {style!r}; allowed: {list(RECOVERABLE_DRIFTS + UNRECOVERABLE_DRIFTS)}")
