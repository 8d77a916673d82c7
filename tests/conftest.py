"""Shared set-up of the EDO-Gym test suite.

At import time (before any test module imports ``edo_gym``):

- ``HF_HUB_OFFLINE=1``: nothing is ever downloaded;
- ``MINARI_DATASETS_PATH``: when the user has not set it, ``<repo>/.pytest_cache/minari`` (the warm start's datasets);
- ``EDO_GYM_CACHE_DIR``: when the user has not set it, the embedding cache goes to
  ``<repo>/.pytest_cache/edo_embeddings`` (ignored by git). It is an environment variable, so subprocesses
  started by the tests inherit it, and a rerun of the suite finds the cache warm. Tests that need a cold or
  corrupt cache use their own temporary directory (``retrieval_cache_dir=...``), never this one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if not os.environ.get("EDO_GYM_CACHE_DIR"):
    os.environ["EDO_GYM_CACHE_DIR"] = str(REPO_ROOT / ".pytest_cache" / "edo_embeddings")
# the warm start's Minari datasets (``TrainConfig.warm_start``) stay in the checkout, never in ~/.minari
if not os.environ.get("MINARI_DATASETS_PATH"):
    os.environ["MINARI_DATASETS_PATH"] = str(REPO_ROOT / ".pytest_cache" / "minari")

#: The smallest world ``WorldConfig`` accepts and a 10-task pool: a cold embedding cache for it builds in seconds.
SMALL_WORLD_KWARGS: dict[str, Any] = {
    "world": {"n_people": 8, "n_companies": 4, "n_cities": 4, "n_orders": 4, "n_carriers": 2, "n_stores": 2, "n_months": 1},
    "tasks": {"n_tasks": 10},
}


@pytest.fixture
def small_world_kwargs() -> dict[str, Any]:
    """``gym.make`` kwargs of a tiny world (fresh dicts per test, so a test may extend them)."""
    return {key: dict(value) for key, value in SMALL_WORLD_KWARGS.items()}


@pytest.fixture
def make_env() -> Iterator[Callable[..., Any]]:
    """``gym.make`` that closes every env it made at teardown."""
    import gymnasium as gym

    import edo_gym  # noqa: F401  (registers the ids)

    made: list[Any] = []

    def _make(env_id: str = "EDO-v0", **kwargs: Any) -> Any:
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close()


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess]:
    """Run ``code`` in a fresh ``python -c`` process (own process group) and return the completed process.

    On timeout the whole process group is killed (a hung child may have hung grandchildren, e.g. the workers of
    a vector env) and the test fails with the output so far.
    """

    def _run(code: str, timeout: float = 120.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env=env if env is not None else dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(
                f"subprocess did not finish within {timeout} s (killed).\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
            )
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    return _run
