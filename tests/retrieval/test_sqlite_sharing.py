"""Several processes opening one new SQLite cache file at once (subprocess vector envs, parallel recorders).

SQLite answers "database is locked" at once, without waiting for its busy timeout, when several connections switch a
new file to WAL together; before ``edo_gym._sqlite`` retried that step, one process in a few failed to open the LLM
response cache (an error) or silently ran without the run-time retrieval cache (a ``CacheWarning``).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from edo_gym._sqlite import is_locked, retry_locked, set_wal

PROCESSES, ROUNDS = 8, 20
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", ["llm", "runtime"])
def test_processes_opening_a_new_cache_file_together_all_succeed(tmp_path, kind):
    """8 processes open one new file at once, 20 times: on the old code most runs of this test failed."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("sqlite_race.py")), kind, str(PROCESSES), str(ROUNDS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list(tmp_path.iterdir())) == ROUNDS


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
