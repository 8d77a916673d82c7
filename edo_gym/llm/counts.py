"""Thread-safe counts of backend calls, for the CLI's ``backend calls: N real, M from cache, K failed`` line, with the
first failure's full message (what a command shows before it exits non-zero)."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class CallCounts:
    """How calls were answered.

    :param real: answered by a model (an HTTP answer from the server, or the wrapped backend in a cache).
    :param cached: answered from a record/replay cache.
    :param failed: calls that raised (after the backend's own retries), replay misses and cache errors included.
    :param first_error: the full message of the first call that failed (``""`` when none failed).
    :param last_error: the full message of the latest call that failed (``""`` when none failed).
    """

    real: int = 0
    cached: int = 0
    failed: int = 0
    first_error: str = ""
    last_error: str = ""

    def __add__(self, other: CallCounts) -> CallCounts:
        return CallCounts(
            self.real + other.real,
            self.cached + other.cached,
            self.failed + other.failed,
            self.first_error or other.first_error,
            other.last_error or self.last_error,
        )

    def __sub__(self, earlier: CallCounts) -> CallCounts:
        """The calls made since ``earlier`` (a snapshot of the same counter). Its ``first_error`` is the first failure
        after ``earlier``, or, when ``earlier`` had failures already, the latest one (the counter keeps no others)."""
        if self.failed == earlier.failed:
            first = last = ""
        else:
            first, last = (self.first_error if not earlier.failed else self.last_error), self.last_error
        return CallCounts(self.real - earlier.real, self.cached - earlier.cached, self.failed - earlier.failed, first, last)

    @property
    def total(self) -> int:
        """All calls counted."""
        return self.real + self.cached + self.failed

    def __str__(self) -> str:
        return f"backend calls: {self.real} real, {self.cached} from cache, {self.failed} failed"


class CallCounter:
    """A :class:`CallCounts` that several threads may add to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {"real": 0, "cached": 0, "failed": 0}
        self._first_error = ""
        self._last_error = ""

    def add(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def fail(self, message: str) -> None:
        """Count a failed call; ``message`` (the error's full text) is kept when it is the first."""
        with self._lock:
            self._counts["failed"] += 1
            self._last_error = message or "(no message)"
            if not self._first_error:
                self._first_error = self._last_error

    def snapshot(self) -> CallCounts:
        with self._lock:
            return CallCounts(**self._counts, first_error=self._first_error, last_error=self._last_error)

    def __getstate__(self) -> dict:
        return {"counts": self.snapshot()}

    def __setstate__(self, state: dict) -> None:
        self.__init__()  # type: ignore[misc]
        c = state["counts"]
        self._counts = {"real": c.real, "cached": c.cached, "failed": c.failed}
        self._first_error = getattr(c, "first_error", "")
        self._last_error = getattr(c, "last_error", "")
