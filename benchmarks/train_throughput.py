"""``make train``'s training rate against the env's own steady-state rate, measured in the same run.

Each repeat runs, one after the other and each in a fresh process, on copies of one cache directory in the same
state (complete embeddings and the world's reachable queries embedded and searched ahead, as ``make prepare`` leaves
it; no other run-time cache entries):

1. ``edo train`` with ``make train``'s arguments (GRPO, 300k steps, 16 envs) and ``--eval-episodes 0``: training
   steps per second (env steps / training wall time, from the run's saved ``.json``), and its printed time breakdown;
2. the env alone, as ``benchmarks/env_throughput.py`` measures it: ``--warmup`` random legal steps, then the median
   of ``--repeats-warm`` timed windows of ``--steps`` steps.

Reported: per repeat the ratio (1) / (2) and the median over repeats; the target is >= 0.35. Beside it, the same
ratio in steps per CPU second of each process, and the median training rate over the median env-alone rate. The two
measurements alternate, so slow drift of a shared machine hits both. Absolute rates depend on the machine and its
load; the ratio is the figure.

Also per repeat, in microseconds per recorded training step (:func:`per_step_breakdown`): the training step and its
parts from ``edo train``'s time breakdown (env stepping, policy inference, update, other rollout work, set-up and
logging), the env alone's step, the training step the target would need (the env alone's step / 0.35) and the
"in-run" ratio that ``edo train`` prints (training steps/s over its envs' steps per second of env stepping inside
training, a different reference from (2): the policy's actions, 16 envs, seeded resets).

Usage::

    python -m benchmarks.train_throughput                 # 2 repeats, 300k training steps
    python -m benchmarks.train_throughput --repeats 1 --timesteps 100000
    python -m benchmarks.train_throughput --train-arg=--vec-env=subproc     # make train's arguments plus these

With ``--train-arg`` options (extra ``edo train`` arguments, appended to make train's), the figures are those of
that training setting; with worker processes (``--vec-env subproc``), the per-CPU-second ratio is not
reported (the training's CPU time would leave out its workers').

Results: ``benchmarks/results/train_throughput.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.bench_lib import REPO
from benchmarks.common import machine_line, median_iqr, write_results

TARGET = 0.35
#: ``make train``'s arguments (Makefile, target ``train``), evaluation off.
TRAIN_ARGS = ["--algo", "grpo", "--env", "EDO-v0", "--seed", "0", "--n-envs", "16", "--net-arch", "128,128",
              "--learning-rate", "3e-4", "--ent-coef", "0.02", "--group-size", "8", "--groups-per-rollout", "16", "--batch-size", "512", "--n-epochs", "4", "--scale-rewards", "none",
              "--loss-type", "bnpo", "--text-features", "--warm-start", "static_pipeline", "--bc-ent-coef", "0.2",
              "--eval-episodes", "0", "--no-progress"]  # fmt: skip


def option_spans(args: list[str]) -> list[list[str]]:
    """``args`` (``--option [value]`` items, as :data:`TRAIN_ARGS`) cut into one list per option, its value with it."""
    spans: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not spans:
            spans.append([arg])
        else:
            spans[-1].append(arg)
    return spans


def without_options(args: list[str], options: set[str]) -> list[str]:
    """``args`` less the named options and their values."""
    return [arg for span in option_spans(args) if span[0] not in options for arg in span]


#: A child process's code that prepares its cache directory as ``make prepare`` does (argv: ``1``/``0`` for the
#: reachable queries, then the env kwargs as JSON).
COMPLETE_CACHE = """
import json, sys, gymnasium as gym, edo_gym
env = gym.make("EDO-v0", **(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})); env.reset(seed=0)
top_k = [w.spec.top_k for w in env.unwrapped.workers]
env.unwrapped.service.complete_all(reachable_queries=sys.argv[1] == "1", top_k=top_k); env.close()
"""

_WARM = """
import json, sys, time, numpy as np, gymnasium as gym, edo_gym
from benchmarks.env_throughput import random_legal_steps
warmup, steps, repeats = map(int, sys.argv[1:4])
env = gym.make("EDO-v0"); rng = np.random.default_rng(0)
random_legal_steps(env, warmup, rng, masked=True)
wall, cpu = [], []
for _ in range(repeats):
    c0 = time.process_time()
    wall.append(steps / random_legal_steps(env, steps, rng, masked=True))
    cpu.append(steps / (time.process_time() - c0))
print(json.dumps({"wall": wall, "cpu": cpu}))
"""


def child_env(cache_dir: Path, code_dir: Path = REPO) -> dict[str, str]:
    """The environment of a process that runs the code in ``code_dir`` (first on ``PYTHONPATH``) on ``cache_dir``."""
    return dict(os.environ, EDO_GYM_CACHE_DIR=str(cache_dir), HF_HUB_OFFLINE="1",
                PYTHONPATH=str(code_dir) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # fmt: skip


def prepare_cache(cache_dir: Path, reachable: bool = True, env_kwargs: dict[str, Any] | None = None) -> None:
    """Build ``cache_dir`` as ``make prepare`` leaves it, in a fresh process: the complete embedding lists and, with
    ``reachable``, the world's reachable queries embedded and searched ahead (no other run-time cache entries).

    :param env_kwargs: ``gym.make("EDO-v0", ...)`` kwargs of the env prepared (e.g. ``{"retrieval": {"encoder":
        "static"}}``, as ``edo prepare --retrieval-encoder static``); JSON-serialisable."""
    proc = subprocess.run([sys.executable, "-c", COMPLETE_CACHE, "1" if reachable else "0", json.dumps(env_kwargs or {})],
                          env=child_env(cache_dir), capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"preparing the cache directory {cache_dir} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def has_workers(extra_args: list[str]) -> bool:
    """Whether ``edo train`` arguments ask for a VecEnv with worker processes."""
    joined = " ".join(extra_args).replace("=", " ").split()
    return any(a == "--vec-env" and b == "subproc" for a, b in zip(joined, joined[1:], strict=False))


def train_rate(cache_dir: Path, out_dir: Path, timesteps: int, extra_args: list[str] | None = None) -> dict[str, Any]:
    """Run ``edo train`` (make train's arguments, then ``extra_args``) in a fresh process; its steps/s and time
    breakdown."""
    extra_args = list(extra_args or [])
    cmd = [
        sys.executable,
        "-m",
        "baselines.cli",
        "train",
        *TRAIN_ARGS,
        *extra_args,
        "--timesteps",
        str(timesteps),
        "--output-dir",
        str(out_dir),
    ]
    proc = subprocess.run(cmd, env=child_env(cache_dir), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"edo train failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (summary,) = out_dir.glob("*.json")
    data = json.loads(summary.read_text())
    times = data.get("time_breakdown") or {}
    cpu_s = None if has_workers(extra_args) else times.get("process_cpu_s")  # workers' CPU time is not in it
    return {"steps": data["num_timesteps"], "train_wall_s": data["train_wall_s"],
            "steps_per_s": data["num_timesteps"] / data["train_wall_s"], "time_breakdown": data.get("time_breakdown"),
            "steps_per_cpu_s": data["num_timesteps"] / cpu_s if cpu_s else None,
            "printed": [line for line in proc.stdout.splitlines() if "rate" in line or "%" in line][-8:]}  # fmt: skip


#: ``edo train``'s time-breakdown parts (``TrainResult.time_breakdown`` keys) and their names in the report.
PARTS = {
    "env_s": "env stepping",
    "policy_inference_s": "policy inference",
    "update_s": "update",
    "rollout_other_s": "other rollout work",
    "other_s": "set-up and logging",
}


def per_step_breakdown(run: dict[str, Any], target: float = TARGET) -> dict[str, float] | None:
    """Microseconds per recorded training step of one repeat: ``train_step`` (training wall time / recorded steps), each
    of :data:`PARTS` (from ``edo train``'s time breakdown, its own total scaled to the training wall time), ``env_alone``
    (1 / the env alone's median rate), ``needed_for_target`` (``env_alone / target``: the training step at which the
    ratio would reach ``target``) and ``in_run_ratio`` (training steps/s over the envs' own rate inside training, env
    steps / env stepping seconds, as ``edo train`` prints it; a ratio, not microseconds). None without a breakdown.

    :param run: One entry of the results' ``runs`` (``steps``, ``train_wall_s``, ``warm_median``, ``time_breakdown``)
    """
    times = run.get("time_breakdown") or {}
    if not times.get("total_s") or not run.get("steps"):
        return None
    steps, wall = run["steps"], run["train_wall_s"]
    scale = wall / times["total_s"]  # the breakdown's parts add up to its own total, measured inside the same call
    out = {"train_step": 1e6 * wall / steps}
    out.update({key: 1e6 * times[key] * scale / steps for key in PARTS})
    out["env_alone"] = 1e6 / run["warm_median"]
    out["needed_for_target"] = out["env_alone"] / target
    env_steps, env_s = times.get("env_steps") or steps, times.get("env_s") or 0.0
    out["in_run_ratio"] = (steps / wall) / (env_steps / env_s) if env_s > 0 else float("nan")
    return out


def warm_rate(cache_dir: Path, warmup: int, steps: int, repeats: int) -> dict[str, list[float]]:
    """The env alone in a fresh process, over ``repeats`` windows after ``warmup`` random legal steps: steps per
    second (``"wall"``) and per CPU second of the process (``"cpu"``) of each window."""
    proc = subprocess.run([sys.executable, "-c", _WARM, str(warmup), str(steps), str(repeats)], env=child_env(cache_dir),
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"warm env measurement failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="alternated (training, env alone) pairs")
    parser.add_argument("--timesteps", type=int, default=300_000, help="training steps (make train: 1M)")
    parser.add_argument("--warmup", type=int, default=150_000, help="env-alone warm-up steps (as env_throughput.py)")
    parser.add_argument("--steps", type=int, default=20_000, help="env-alone steps per timed window")
    parser.add_argument("--repeats-warm", type=int, default=5, help="env-alone timed windows (median)")
    parser.add_argument(
        "--no-reachable",
        action="store_true",
        help="prepare the cache without the reachable queries (complete embedding lists only)",
    )
    parser.add_argument("--train-arg", action="append", default=[], metavar="ARG",
                        help="an extra `edo train` argument after make train's (repeatable), e.g. --train-arg=--vec-env=subproc")  # fmt: skip
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.train_arg and not args.train_arg[0].startswith("--"):
        raise SystemExit(
            f"--train-arg: the first extra argument must be an option (starting with --), got {args.train_arg[0]!r}"
        )
    for name in ("repeats", "timesteps", "warmup", "steps", "repeats_warm"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    load0 = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "cache"
        print("embedding cache: building it complete once ...", flush=True)
        prepare_cache(base, reachable=not args.no_reachable)
        for r in range(args.repeats):
            train_cache, warm_cache = Path(tmp) / f"train{r}", Path(tmp) / f"warm{r}"
            shutil.copytree(base, train_cache)
            shutil.copytree(base, warm_cache)
            print(f"repeat {r + 1}: edo train ({args.timesteps:,} steps) ...", flush=True)
            t = train_rate(train_cache, Path(tmp) / f"runs{r}", args.timesteps, args.train_arg)
            print(f"  {t['steps_per_s']:,.0f} steps/s; env alone ...", flush=True)
            w = warm_rate(warm_cache, args.warmup, args.steps, args.repeats_warm)
            warm, warm_cpu = float(np.median(w["wall"])), float(np.median(w["cpu"]))
            cpu_ratio = t["steps_per_cpu_s"] / warm_cpu if t["steps_per_cpu_s"] else None
            runs.append({**t, "warm_steps_per_s": w["wall"], "warm_steps_per_cpu_s": w["cpu"], "warm_median": warm,
                         "warm_cpu_median": warm_cpu, "ratio": t["steps_per_s"] / warm, "cpu_ratio": cpu_ratio,
                         "load_avg_1min": os.getloadavg()[0]})  # fmt: skip
            runs[-1]["per_step_us"] = per_step_breakdown(runs[-1])
            print(f"  env alone {warm:,.0f} steps/s: ratio {runs[-1]['ratio']:.3f}", flush=True)
    ratio = median_iqr([r["ratio"] for r in runs])
    cpu_ratios = [r["cpu_ratio"] for r in runs if r["cpu_ratio"] is not None]
    # the same in steps per CPU second of each process (less sensitive to waiting for the CPU, not to its speed), and
    # as the ratio of the medians over repeats (pairs no training run with its own env-alone run)
    cpu_ratio = median_iqr(cpu_ratios) if cpu_ratios else None
    pooled = float(np.median([r["steps_per_s"] for r in runs]) / np.median([r["warm_median"] for r in runs]))
    payload = {"settings": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None, "train_args": TRAIN_ARGS + args.train_arg},
               "load_avg_1min_at_start": load0, "runs": runs, "train_over_env": ratio, "target": TARGET,
               "met": bool(ratio["median"] >= TARGET), "train_over_env_cpu": cpu_ratio,
               "median_train_over_median_env": pooled}  # fmt: skip
    breakdowns = [r["per_step_us"] for r in runs if r["per_step_us"]]
    if breakdowns:  # medians over repeats, part by part
        payload["per_step_us_median"] = {key: float(np.median([b[key] for b in breakdowns])) for key in breakdowns[0]}
    lines = [
        "# make train's rate against the env's own steady-state rate, same run",
        "",
        machine_line(),
        f"Command: `{' '.join(['python', '-m', 'benchmarks.train_throughput', *(argv if argv is not None else sys.argv[1:])])}`. "
        f"Load average at start {load0:.1f}.",
        "",
        "| repeat | training steps/s | env alone steps/s (median) | ratio | same, per CPU second | env stepping share of "
        "training | env steps of idle envs (not recorded) |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs):
        times = r["time_breakdown"] or {}
        share, env_steps = times.get("env_s"), times.get("env_steps")
        share_txt = f"{share / r['train_wall_s']:.0%}" if share else "n/a"
        idle_txt = f"{(env_steps - r['steps']) / env_steps:.0%}" if env_steps else "n/a"
        cpu_txt = f"{r['cpu_ratio']:.3f}" if r["cpu_ratio"] is not None else "n/a"
        lines.append(
            f"| {i + 1} | {r['steps_per_s']:,.0f} | {r['warm_median']:,.0f} | {r['ratio']:.3f} | {cpu_txt} | {share_txt} "
            f"| {idle_txt} |"
        )
    if breakdowns:
        lines += [
            "",
            "Microseconds per recorded training step (the parts from `edo train`'s time breakdown); the env alone's step; "
            f"the training step at which the ratio would reach {TARGET}; and the in-run ratio `edo train` prints (its "
            "envs' own rate inside training as the reference):",
            "",
            "| repeat | training step | " + " | ".join(PARTS.values()) + " | env alone | needed for "
            f"{TARGET}x | in-run ratio |",
            "|---|" + "---|" * (len(PARTS) + 4),
        ]
        for i, r in enumerate(runs):
            b = r["per_step_us"]
            if b:
                lines.append(
                    f"| {i + 1} | {b['train_step']:.1f} | " + " | ".join(f"{b[key]:.1f}" for key in PARTS)
                    + f" | {b['env_alone']:.1f} | {b['needed_for_target']:.1f} | {b['in_run_ratio']:.2f} |"
                )  # fmt: skip
    lines += [
        "",
        f"Median ratio {ratio['median']:.3f} (target >= {TARGET}): {'met' if payload['met'] else 'NOT met'}. "
        + (f"Per CPU second of each process: median {cpu_ratio['median']:.3f}. " if cpu_ratio else "")
        + f"Median training rate over median env-alone rate: {pooled:.3f}.",
    ]
    json_path, md_path = write_results("train_throughput", payload, "\n".join(lines) + "\n", args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
