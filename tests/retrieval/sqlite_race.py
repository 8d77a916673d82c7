"""Helper for ``tests/retrieval/test_sqlite_sharing.py``, run as its own small interpreter (forking the test process, which holds
torch and chromadb, costs ~70 ms a child): ``python tests/retrieval/sqlite_race.py llm|runtime PROCESSES ROUNDS DIR``.

Each round, ``PROCESSES`` forked children wait at a barrier, then open one new cache file at once. Prints one line
per child that failed (its traceback's last line) and exits 1 if any did.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import traceback
import warnings
from pathlib import Path


def _open(kind: str, path: str) -> None:
    if kind == "llm":
        from edo_gym.llm.cache import ResponseCache

        ResponseCache(Path(path) / "llm.sqlite")
    else:
        from edo_gym.retrieval.runtime_cache import RuntimeCache

        cache = RuntimeCache(path, "model", 4)
        assert cache._connection() is not None and not cache.disabled, "run-time cache disabled"


def _child(kind: str, path: str, barrier, queue) -> None:
    try:
        warnings.simplefilter("error")  # a disabled run-time cache warns: fail on it
        barrier.wait(timeout=60)
        _open(kind, path)
        queue.put("")
    except BaseException:
        queue.put(traceback.format_exc().strip().splitlines()[-1])


def main(kind: str, processes: int, rounds: int, directory: str) -> int:
    if kind == "llm":
        import edo_gym.llm.cache  # noqa: F401  (imported before forking, as a vector env's workers have it)
    else:
        import edo_gym.retrieval.runtime_cache  # noqa: F401
    ctx = mp.get_context("fork")
    errors = []
    for r in range(rounds):  # each round on a new file: the race is in the first open
        path = str(Path(directory) / f"round{r}")
        barrier, queue = ctx.Barrier(processes), ctx.Queue()
        procs = [ctx.Process(target=_child, args=(kind, path, barrier, queue)) for _ in range(processes)]
        for p in procs:
            p.start()
        errors += [e for e in (queue.get(timeout=120) for _ in procs) if e]
        for p in procs:
            p.join(timeout=30)
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
