"""Several processes opening one new SQLite cache file at once (subprocess vector envs, parallel recorders).

SQLite answers "database is locked" at once, without waiting for its busy timeout, when several connections switch a
new file to WAL together; before ``edo_gym._sqlite`` retried that step, one process in a few failed to open the LLM
response cache (an error) or silently ran without the run-time retrieval cache (a ``CacheWarning``).
"""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading
import time
import traceback
import warnings

import pytest

from edo_gym._sqlite import is_locked, retry_locked, set_wal
from edo_gym.llm.cache import ResponseCache
from edo_gym.retrieval.runtime_cache import RuntimeCache

PROCESSES, ROUNDS = 8, 20


def _open_llm_cache(path: str) -> None:
    ResponseCache(path)


def _open_runtime_cache(directory: str) -> None:
    cache = RuntimeCache(directory, "model", 4)
    assert cache._connection() is not None and not cache.disabled


def _child(opener, path: str, barrier, queue) -> None:
    try:
        warnings.simplefilter("error")  # a disabled run-time cache warns: fail on it
        barrier.wait(timeout=60)
        opener(path)
        queue.put(None)
    except BaseException:
        queue.put(traceback.format_exc())


@pytest.mark.parametrize("opener, name", [(_open_llm_cache, "llm.sqlite"), (_open_runtime_cache, "")])
def test_processes_opening_a_new_cache_file_together_all_succeed(tmp_path, opener, name):
    ctx = mp.get_context("fork")
    errors = []
    for r in range(ROUNDS):  # each round on a new file: the race is in the first open
        path = str(tmp_path / f"round{r}" / name) if name else str(tmp_path / f"round{r}")
        barrier, queue = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [ctx.Process(target=_child, args=(opener, path, barrier, queue)) for _ in range(PROCESSES)]
        for p in procs:
            p.start()
        errors += [e for e in (queue.get(timeout=120) for _ in procs) if e]
        for p in procs:
            p.join(timeout=30)
    assert errors == [], errors[0]


def _hold_exclusive_lock(path, seconds: float, held: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    held.set()
    time.sleep(seconds)
    conn.execute("COMMIT")
    conn.close()


def test_retry_locked_waits_out_a_lock_that_sqlite_reports_at_once(tmp_path):
    path = tmp_path / "x.sqlite"
    sqlite3.connect(path).close()
    held = threading.Event()
    holder = threading.Thread(target=_hold_exclusive_lock, args=(path, 0.4, held))
    holder.start()
    held.wait(5)
    conn = sqlite3.connect(path, timeout=0.0, isolation_level=None)  # no busy wait: "locked" at once, like the race
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        conn.execute("PRAGMA journal_mode = WAL")
    start = time.monotonic()
    set_wal(conn, timeout_s=10.0)
    assert 0.0 < time.monotonic() - start < 10.0
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    holder.join()
    conn.close()


def test_retry_locked_gives_up_at_its_deadline_and_passes_other_errors_through(tmp_path):
    calls = []

    def locked():
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    start = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_locked(locked, timeout_s=0.3)
    assert 0.3 <= time.monotonic() - start < 2.0 and len(calls) > 1

    def broken():
        calls.append(2)
        raise sqlite3.OperationalError("no such table: t")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_locked(broken, timeout_s=5.0)
    assert calls.count(2) == 1  # not retried
    assert is_locked(sqlite3.OperationalError("database is busy")) and not is_locked(ValueError("locked"))
