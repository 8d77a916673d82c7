"""Opening a SQLite file that several processes share (the LLM response cache, the run-time retrieval cache).

SQLite's busy timeout does not cover every conflict: when waiting could deadlock, SQLite answers "database is locked"
at once instead of calling the busy handler. That happens when several processes open a new file together and each
switches it to WAL (``PRAGMA journal_mode = WAL`` needs an exclusive lock while the others hold shared ones), as
subprocess vector envs and parallel recorders do. :func:`retry_locked` runs such a step again, after a short random
pause, until it succeeds or its deadline passes.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Jitter for the pauses, private so that the global ``random`` stream (a user's seeds) is never drawn from.
_JITTER = random.Random()


def is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" / "database is busy" (another connection holds the lock)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def retry_locked(action: Callable[[], T], timeout_s: float) -> T:
    """``action()``, run again while it fails with "database is locked", for at most ``timeout_s`` seconds in all.

    Pauses start at ~5 ms and double up to ~0.25 s, with jitter so that competing processes do not retry in step.
    Any other error, or "locked" after the deadline, is raised as is. ``action`` must be safe to repeat (the
    statements it runs are idempotent, or it runs them in one transaction).
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(min(pause * (0.5 + _JITTER.random()), max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.25)


def set_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Put ``conn``'s database in WAL mode (readers never block the writer, nor the writer readers), retrying while
    another process holds the lock; a file already in WAL mode is left as is, without taking any lock."""

    def switch() -> None:
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")

    retry_locked(switch, timeout_s)
