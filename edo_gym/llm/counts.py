"""Thread-safe counts of backend calls, for the CLI's ``backend calls: N real, M from cache, K failed`` line."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class CallCounts:
    """How calls were answered.

    :param real: answered by a model (an HTTP answer from the server, or the wrapped backend in a cache).
    :param cached: answered from a record/replay cache.
    :param failed: calls that raised (after the backend's own retries), replay misses included.
    """

    real: int = 0
    cached: int = 0
    failed: int = 0

    def __add__(self, other: CallCounts) -> CallCounts:
        return CallCounts(self.real + other.real, self.cached + other.cached, self.failed + other.failed)

    def __str__(self) -> str:
        return f"backend calls: {self.real} real, {self.cached} from cache, {self.failed} failed"


class CallCounter:
    """A :class:`CallCounts` that several threads may add to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {"real": 0, "cached": 0, "failed": 0}

    def add(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def snapshot(self) -> CallCounts:
        with self._lock:
            return CallCounts(**self._counts)

    def __getstate__(self) -> dict:
        return {"counts": self.snapshot()}

    def __setstate__(self, state: dict) -> None:
        self.__init__()  # type: ignore[misc]
        c = state["counts"]
        self._counts = {"real": c.real, "cached": c.cached, "failed": c.failed}
