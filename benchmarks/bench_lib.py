"""One benchmark training run: its declaration (``RunSpec``), its execution in a fresh subprocess, and statistics.

A run trains one algorithm with one seed on one env setting, evaluates it on held-out tasks (periodically and at
the end) and returns a JSON-serialisable *record*. Every run executes in its own Python subprocess
(``run_subprocess`` / ``execute_run``): its own peak memory, no state shared with other runs, the same code path
whether the benchmark runs serially or as Ray tasks (``benchmarks.executors``).

A run's wall time is split into *rollout* (collecting env steps, policy forward passes included) and *update*
(``train()``: gradient steps); evaluation time is measured separately and excluded from both.

Optional per run (``RunSpec``): evaluate the final model on further envs (``extra_eval``, e.g. other task
families), save it (``save_model_path``), skip the step-0 evaluation (``eval_at_start``), evaluate on the
validation tasks instead of the test tasks (``eval_on``). For GRPO the record also carries per-rollout group
statistics (``grpo_stats``): the fraction of groups dropped from the update because their returns tie, and the
fractions of groups whose members all failed / all succeeded.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
#: Seed of the first held-out evaluation episode (episode k uses ``EVAL_SEED + k``), for models and heuristics alike.
EVAL_SEED = 10_000

# two-sided 95% Student t critical values by degrees of freedom (1..30); larger df use 1.96
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
        2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]  # fmt: skip


def mean_ci95(values: list[float]) -> tuple[float, tuple[float, float]]:
    """Mean and 95% Student-t confidence interval over seeds (the interval is the mean itself for one value)."""
    arr = np.asarray(values, dtype=float)
    m = float(arr.mean()) if arr.size else float("nan")
    if arr.size < 2:
        return m, (m, m)
    t = _T95[min(arr.size - 1, len(_T95)) - 1] if arr.size - 1 <= len(_T95) else 1.96
    half = t * float(arr.std(ddof=1)) / np.sqrt(arr.size)
    return m, (m - half, m + half)


@dataclass
class RunSpec:
    """One training run of a benchmark."""

    algo: str
    seed: int
    env_id: str = "EDO-v0"
    total_timesteps: int = 200_000
    eval_every: int = 25_000
    eval_episodes: int = 100
    eval_env_id: str | None = None  # None: the held-out split of env_id
    train_overrides: dict[str, Any] = field(default_factory=dict)  # TrainConfig fields
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    eval_env_kwargs: dict[str, Any] | None = None  # None: same as env_kwargs
    # (env_id, env_kwargs) pairs to evaluate the final model on too (held-out split, same task count and seed)
    extra_eval: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    save_model_path: str | None = None  # where to save the trained model (model.save); None: not saved
    eval_at_start: bool = True  # evaluate the untrained policy at step 0 (the first point of the curve)
    # "test": the first eval_episodes held-out tasks (what every comparison reports); "validation": the LAST
    # eval_episodes held-out tasks, disjoint from the first ones while 2 * eval_episodes <= the split's size
    # (300 tasks on EDO-v0), for tuning without selecting on the test tasks
    eval_on: str = "test"

    def __post_init__(self) -> None:
        if self.eval_on not in EVAL_SETS:
            raise ValueError(f"RunSpec.eval_on must be one of {list(EVAL_SETS)}, got {self.eval_on!r}")

    def key(self) -> str:
        return f"{self.algo}-s{self.seed}"


#: Which held-out tasks a run is evaluated on (``RunSpec.eval_on``).
EVAL_SETS = ("test", "validation")


def eval_task_ids(env: Any, n: int, eval_on: str = "test") -> list[int]:
    """The held-out task ids of ``eval_on``: the first ``n`` (test) or the last ``n`` (validation) of the split."""
    from baselines.evaluation import heldout_task_ids

    if eval_on == "test":
        return heldout_task_ids(env, n)
    everything = heldout_task_ids(env)
    return everything[max(0, len(everything) - n) :]


def optimizer_state_bytes(optimizer: Any) -> int:
    """Bytes held by the optimizer's per-parameter state (Adam: exp_avg and exp_avg_sq)."""
    import torch as th

    total = 0
    for state in optimizer.state_dict()["state"].values():
        for value in state.values():
            if isinstance(value, th.Tensor):
                total += value.numel() * value.element_size()
    return total


def run_in_process(spec: RunSpec) -> dict[str, Any]:
    """Train and evaluate one run in *this* process; returns the run record (see ``execute_run``)."""
    import torch as th
    from stable_baselines3.common.callbacks import BaseCallback

    from baselines.evaluation import evaluate_model, make_eval_env
    from baselines.training import (
        TrainConfig,
        apply_warm_start,
        count_parameters,
        curriculum_callbacks,
        make_algo,
        make_train_env,
        settings_for,
    )

    th.set_num_threads(1)
    # a study's overrides are shared by its algorithms: those of another algorithm's group (GRPO's for PPO) do not apply
    cfg = TrainConfig(
        algo=spec.algo, env_id=spec.env_id, seed=spec.seed, total_timesteps=spec.total_timesteps, eval_episodes=0,
        progress_bar=False, env_kwargs=dict(spec.env_kwargs), **settings_for(spec.algo, spec.train_overrides),
    )  # fmt: skip
    env = make_train_env(cfg)
    model = make_algo(cfg, env)
    warm = apply_warm_start(model, cfg)
    eval_kwargs = spec.env_kwargs if spec.eval_env_kwargs is None else spec.eval_env_kwargs
    eval_env = make_eval_env(spec.eval_env_id or spec.env_id, **eval_kwargs)
    task_ids = eval_task_ids(eval_env, spec.eval_episodes, spec.eval_on)
    use_cuda = th.cuda.is_available() and str(model.device).startswith("cuda")
    if use_cuda:
        th.cuda.reset_peak_memory_stats()

    curve: list[dict[str, Any]] = []
    grpo_stats: list[dict[str, Any]] = []  # GRPO only: one entry per rollout
    group_success: dict[int, list[float]] = {}
    clock = {"rollout": 0.0, "update": 0.0, "eval": 0.0, "last_end": None, "start": None}

    def evaluate() -> None:
        t0 = time.perf_counter()
        res = evaluate_model(model, eval_env, task_ids, seed=EVAL_SEED, name=spec.algo)
        clock["eval"] += time.perf_counter() - t0
        curve.append({
            "env_steps": int(model.num_timesteps), "train_time_s": clock["rollout"] + clock["update"],
            "rollout_s": clock["rollout"], "update_s": clock["update"], "success": res.success_rate,
            "return": res.mean_return, "tokens": res.tokens, "calls": res.calls, "latency_s": res.latency_s,
        })  # fmt: skip

    class BenchCallback(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval = spec.eval_every

        def _on_rollout_start(self) -> None:
            now = time.perf_counter()
            if clock["last_end"] is not None:
                clock["update"] += now - clock["last_end"]  # the train() call between two rollouts
            if self.model.num_timesteps >= self.next_eval:
                evaluate()
                while self.next_eval <= self.model.num_timesteps:
                    self.next_eval += spec.eval_every
            clock["start"] = time.perf_counter()

        def _on_rollout_end(self) -> None:
            now = time.perf_counter()
            clock["rollout"] += now - clock["start"]
            clock["last_end"] = now
            buffer = self.model.rollout_buffer
            if hasattr(buffer, "dropped_group_fraction"):  # GRPO: statistics of the groups of this rollout
                outcomes = [np.asarray(v) for v in group_success.values() if v]
                grpo_stats.append({
                    "env_steps": int(self.model.num_timesteps),
                    "dropped_group_fraction": float(buffer.dropped_group_fraction),
                    "group_return_std": float(np.mean(buffer.group_return_std)) if len(buffer.group_return_std) else 0.0,
                    "all_fail_fraction": float(np.mean([o.max() == 0 for o in outcomes])) if outcomes else None,
                    "all_success_fraction": float(np.mean([o.min() == 1 for o in outcomes])) if outcomes else None,
                })  # fmt: skip
                group_success.clear()

        def _on_training_end(self) -> None:
            if clock["last_end"] is not None:
                clock["update"] += time.perf_counter() - clock["last_end"]
                clock["last_end"] = None

        def _on_step(self) -> bool:
            # GRPO's wave loop exposes which envs are recorded and their group ids: collect episode outcomes
            recorded, members = self.locals.get("recorded"), self.locals.get("wave_members")
            if recorded is not None and members is not None:
                dones, infos = self.locals["dones"], self.locals["infos"]
                for i in recorded:
                    stats = infos[i].get("episode_stats") if dones[i] else None
                    if stats is not None:
                        group_success.setdefault(int(members[i][0]), []).append(float(stats["success"]))
            return True

    if warm:  # the policy the warm start made, before any RL
        t_warm = time.perf_counter()
        res = evaluate_model(model, eval_env, task_ids, seed=EVAL_SEED, name=spec.algo)
        clock["eval"] += time.perf_counter() - t_warm
        warm["eval"] = {"success": res.success_rate, "return": res.mean_return}
    if spec.eval_at_start:
        evaluate()  # the untrained policy, at step 0
    eval_before = clock["eval"]
    t0 = time.perf_counter()
    model.learn(total_timesteps=spec.total_timesteps, callback=[BenchCallback(), *curriculum_callbacks(cfg)])
    wall = time.perf_counter() - t0 - (clock["eval"] - eval_before)  # minus the evaluations done inside learn()
    evaluate()
    extra: list[dict[str, Any]] = []
    for extra_id, extra_kwargs in spec.extra_eval:
        t1 = time.perf_counter()
        other = make_eval_env(extra_id, **extra_kwargs)
        ids = eval_task_ids(other, spec.eval_episodes, spec.eval_on)
        res = evaluate_model(model, other, ids, seed=EVAL_SEED, name=spec.algo)
        other.close()
        clock["eval"] += time.perf_counter() - t1
        extra.append({"env_id": extra_id, "env_kwargs": extra_kwargs, "result": res.as_dict()})
    if spec.save_model_path:
        Path(spec.save_model_path).parent.mkdir(parents=True, exist_ok=True)
        model.save(spec.save_model_path)
    record = {
        "spec": asdict(spec),
        "num_timesteps": int(model.num_timesteps),
        "wall_time_s": wall,
        "rollout_s": clock["rollout"],
        "update_s": clock["update"],
        "eval_s": clock["eval"],
        "trainable_params": count_parameters(model),
        "optimizer_state_bytes": optimizer_state_bytes(model.policy.optimizer),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cuda_peak_bytes": int(th.cuda.max_memory_allocated()) if use_cuda else None,
        "device": str(model.device),
        "curve": curve,
        "final": curve[-1],
        "extra_eval": extra,
        "grpo_stats": grpo_stats if spec.algo == "grpo" else None,
        "warm_start": warm,
    }
    env.close()
    eval_env.close()
    return record


def run_subprocess(spec: RunSpec) -> dict[str, Any]:
    """Run ``spec`` in a fresh Python subprocess and return its outcome; never raises for a failed run.

    The outcome: ``ok`` (bool), ``record`` (the run record, or None), ``error`` (None, or the exit code and the tail
    of stderr), ``log`` (the tail of the run's stderr), ``host`` and ``seconds`` (subprocess wall time, start-up
    included). One intra-op thread per run (``OMP_NUM_THREADS=1``, as Ray sets for a one-CPU task), so that runs
    side by side do not oversubscribe the cores and give the same numbers as runs one after the other.
    """
    cmd = [sys.executable, "-m", "benchmarks.bench_lib", json.dumps(asdict(spec))]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    outcome: dict[str, Any] = {"ok": False, "record": None, "error": None, "log": proc.stderr[-20000:],
                               "host": socket.gethostname(), "seconds": time.perf_counter() - t0}  # fmt: skip
    if proc.returncode != 0:
        outcome["error"] = f"exit {proc.returncode}: {proc.stderr[-4000:]}"
        return outcome
    try:
        outcome["record"] = json.loads(proc.stdout.strip().splitlines()[-1])
        outcome["ok"] = True
    except (IndexError, json.JSONDecodeError) as exc:
        outcome["error"] = f"exit 0 but no JSON record on stdout ({exc}): {proc.stdout[-2000:]}"
    return outcome


def execute_run(spec: RunSpec, log_dir: Path | None = None) -> dict[str, Any]:
    """Run ``spec`` in a fresh Python subprocess and return its record; raise ``RuntimeError`` if it fails."""
    outcome = run_subprocess(spec)
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{spec.key()}.log").write_text(outcome["log"])
    if not outcome["ok"]:
        raise RuntimeError(f"run {spec.key()} failed ({outcome['error']})")
    return outcome["record"]


def time_to_target(record: dict[str, Any], target: float) -> tuple[float | None, int | None]:
    """Train wall time (s) and env steps at the first evaluation whose success reaches ``target`` (None if never)."""
    for point in record["curve"]:
        if point["success"] >= target - 1e-9:
            return point["train_time_s"], point["env_steps"]
    return None, None


def median_or_none(values: list[float | None]) -> float | None:
    """Median where a missing value (never reached) counts as +infinity; None when the median is infinite."""
    if not values:
        return None
    arr = np.array([np.inf if v is None else v for v in values], dtype=float)
    med = float(np.median(arr))
    return None if not np.isfinite(med) else med


if __name__ == "__main__":
    print(json.dumps(run_in_process(RunSpec(**json.loads(sys.argv[1])))))
