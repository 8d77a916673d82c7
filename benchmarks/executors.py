"""Execute planned benchmark runs: one after the other, or as Ray tasks on a local instance or a cluster.

Both executors run every run the same way -- :func:`benchmarks.bench_lib.run_subprocess`, a fresh Python
subprocess per run with the run's own seed -- and hand each outcome back to the driver
(:func:`benchmarks.study.run_studies`), which writes the run's record file. A run that fails (non-zero exit,
no record, a Ray worker or node lost) is retried once after the first pass; if it fails again it is reported,
never dropped.

Ray is optional: it is imported only here, only when ``--ray`` or ``--ray-address`` is given.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from benchmarks.bench_lib import REPO, RunSpec, run_subprocess

if TYPE_CHECKING:
    from benchmarks.study import Execution, PlannedRun

RAY_MISSING = 'Ray is not installed; --ray / --ray-address need it: pip install "edo-gym[ray]" (that is, ray[tune])'
#: Paths a cluster's workers do not need (the code is shipped to them as Ray's working_dir).
RAY_EXCLUDES = [".git", ".venv", "**/__pycache__", ".pytest_cache", ".ruff_cache", "runs", "build", "dist", "*.egg-info",
                "benchmarks/results"]  # fmt: skip
#: Retries of a failed run before it is reported.
RETRIES = 1

OnSuccess = Callable[["PlannedRun", dict[str, Any], int], None]
OnFailure = Callable[["PlannedRun", dict[str, Any], int, bool], None]


def run_spec_dict(spec: dict[str, Any]) -> dict[str, Any]:
    """The task body: run one spec (given as a plain dict, so it pickles anywhere) in a subprocess."""
    return run_subprocess(RunSpec(**spec))


def execute(runs: Sequence[PlannedRun], execution: Execution, on_success: OnSuccess, on_failure: OnFailure) -> None:
    """Execute ``runs`` serially or on Ray; report each outcome through the callbacks as it arrives.

    Runs that fail are executed once more after the first pass (``RETRIES``); ``on_failure(..., final=True)``
    reports a run that failed every attempt.
    """
    mapper = RayMapper(execution.ray_address, execution.ray_workers) if execution.ray else SerialMapper()
    try:
        todo = list(runs)
        for attempt in range(1, RETRIES + 2):
            retry = []
            for run, outcome in mapper.map(todo):
                if outcome["ok"]:
                    on_success(run, outcome, attempt)
                else:
                    final = attempt == RETRIES + 1
                    on_failure(run, outcome, attempt, final)
                    if not final:
                        retry.append(run)
            if not retry:
                break
            todo = retry
    finally:
        mapper.close()


class SerialMapper:
    """Runs one after the other, in plan order."""

    def map(self, runs: Sequence[PlannedRun]) -> Iterator[tuple[PlannedRun, dict[str, Any]]]:
        for run in runs:
            yield run, run_spec_dict(asdict(run.spec))

    def close(self) -> None:
        pass


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def init_ray(address: str | None, workers: int | None) -> Any:
    """Start a local Ray instance with ``workers`` CPUs (default: every core), or join the cluster at ``address``
    (shipping this repository's code to its nodes as the job's ``working_dir``); return the ``ray`` module."""
    try:
        import ray
    except ImportError:
        sys.exit(RAY_MISSING)
    env_vars = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "TOKENIZERS_PARALLELISM": "false"}
    if address is None:
        if "EDO_GYM_CACHE_DIR" in os.environ:
            env_vars["EDO_GYM_CACHE_DIR"] = os.environ["EDO_GYM_CACHE_DIR"]
        runtime_env = {"env_vars": {**env_vars, "PYTHONPATH": str(REPO)}}
        ray.init(num_cpus=workers or usable_cores(), include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    else:
        runtime_env = {"working_dir": str(REPO), "excludes": RAY_EXCLUDES, "env_vars": env_vars}
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    where = "local instance" if address is None else f"cluster at {address}"
    print(f"Ray: {where}, {cpus} CPUs on {len(ray.nodes())} node(s): up to {cpus} runs at a time", flush=True)
    return ray


class RayMapper:
    """Runs as Ray tasks (one CPU each), yielded as they finish.

    Without ``address``: a local Ray instance with ``workers`` CPUs (default: every core), so ``workers`` runs at a
    time. With ``address``: the existing cluster there; this repository's code is shipped to its nodes as the
    job's ``working_dir`` (each node needs the same Python environment: ``pip install -c constraints.txt
    ".[ray]"``).
    """

    def __init__(self, address: str | None, workers: int | None) -> None:
        self.ray = init_ray(address, workers)
        # max_retries=0: retries are ours (execute), the same for both executors, and counted in the run's provenance
        self.task = self.ray.remote(num_cpus=1, max_retries=0)(run_spec_dict)

    def map(self, runs: Sequence[PlannedRun]) -> Iterator[tuple[PlannedRun, dict[str, Any]]]:
        ray = self.ray
        by_ref = {self.task.remote(asdict(run.spec)): run for run in runs}
        while by_ref:
            (ref,), _ = ray.wait(list(by_ref), num_returns=1)
            run = by_ref.pop(ref)
            try:
                outcome = ray.get(ref)
            except Exception as exc:  # the task itself died: worker crash, node lost, out of memory
                outcome = {"ok": False, "record": None, "error": f"Ray task failed: {type(exc).__name__}: {exc}",
                           "log": "", "host": None, "seconds": None}  # fmt: skip
            yield run, outcome

    def close(self) -> None:
        self.ray.shutdown()
