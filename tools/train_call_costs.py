"""Where training's env time goes, call by call, next to the same env alone.

``make train`` runs its envs at about half the rate the env reaches alone (``train_throughput.py``). This script
times the same calls in both settings, each in a fresh process, with timers put on the classes (``perf_counter``
around each call; they add ~0.3 us a call):

1. ``edo train`` with ``make train``'s arguments (``--timesteps``, default 300k, evaluation off): every
   ``EDOEnv.step`` (by action kind) and ``EDOEnv.reset``, inside those the seeding of ``reset(seed=...)`` (Gymnasium's
   ``Env.reset``: a new numpy ``Generator``), an env's first reset's retrieval set-up, the planner call with its parsing (``_ask_planner``, at reset and on
   replan steps), the plan tables (``_plan_state``) and the observation; and the policy's forward pass per vector step;
2. the env alone, as ``env_throughput.py`` steps it (random legal actions after ``--warmup`` steps), the same timers
   over ``--steps`` steps;
3. the policy's forward pass on 16 EDO observations (``make train``'s policy, untrained), in a tight loop and
   alternated with vector steps of the 16 envs (random legal actions), split into its parts: observations to tensors,
   features, the MLP, sampling.

Per part: calls per env step, microseconds per call and per env step, in training and alone. Each of the three runs on
its own copy of one fresh cache directory prepared as ``make prepare`` leaves it (``--cache prepared``, the default, as
``train_throughput.py`` does): what the env alone meets does not depend on what earlier runs stored. ``--cache default``
uses the configured cache directory (``EDO_GYM_CACHE_DIR`` or the default) as it is, for all three.

Usage::

    python -m tools.train_call_costs                     # 300k training steps, 150k + 100k steps alone
    python -m tools.train_call_costs --timesteps 100000 --steps 50000
    python -m tools.train_call_costs --cache default     # on the configured cache directory, as it is

Results: ``tools/results/train_call_costs.{json,md}`` (or ``--out-dir``).
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

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.bench_lib import REPO  # noqa: E402
from benchmarks.common import git_revision, machine_line, write_results  # noqa: E402
from benchmarks.train_throughput import TRAIN_ARGS, prepare_cache  # noqa: E402

_CHILD = r"""
import collections, json, sys, time
import numpy as np
import gymnasium
from edo_gym.envs.edo_env import EDOEnv

mode, opts = sys.argv[1], json.loads(sys.argv[2])
seconds, calls = collections.defaultdict(float), collections.Counter()

def timed(cls, name, label, skip_none=False):
    # skip_none: a call that returns None (declined) is not counted
    inner = getattr(cls, name)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        result = None
        try:
            result = inner(*args, **kwargs)
            return result
        finally:
            if not (skip_none and result is None):
                seconds[label] += time.perf_counter() - t
                calls[label] += 1
    setattr(cls, name, wrapper)

step = EDOEnv.step
def timed_step(self, action):
    kind, _, retrieve = self.decode_action(int(action))
    label = "step: " + kind + (" with retrieval" if retrieve else "")
    t = time.perf_counter()
    try:
        return step(self, action)
    finally:
        dt = time.perf_counter() - t
        seconds[label] += dt; calls[label] += 1
        seconds["step"] += dt; calls["step"] += 1
EDOEnv.step = timed_step
timed(EDOEnv, "reset", "reset")
timed(gymnasium.Env, "reset", "reset: seeding (Gymnasium's Env.reset)")
timed(EDOEnv, "_prepare_retrieval", "reset: retrieval indexes (an env's first reset)")
timed(EDOEnv, "_ask_planner", "planner call and parsing (reset, replan)")
timed(EDOEnv, "_plan_state", "plan tables (reset, replan)")
timed(EDOEnv, "_observation", "observation")

out = {}
if mode == "train":
    from baselines.grpo.policies import GRPOPolicy
    # GRPO's rollouts sample straight from the numpy observations (sample_from_numpy); where that declines (None), they
    # call the policy (forward): each vector step's pass is counted once, on the path it took
    timed(GRPOPolicy, "forward", "policy forward pass (per vector step)")
    timed(GRPOPolicy, "sample_from_numpy", "policy forward pass (per vector step)", skip_none=True)
    from baselines.cli import main
    rc = main(["train", *opts["train_args"], "--timesteps", str(opts["timesteps"]), "--output-dir", opts["out"]])
    if rc != 0:
        raise SystemExit(f"edo train failed with exit code {rc}")
elif mode == "alone":
    from benchmarks.env_throughput import random_legal_steps
    env = gymnasium.make("EDO-v0"); rng = np.random.default_rng(0)
    random_legal_steps(env, opts["warmup"], rng, masked=True)
    seconds.clear(); calls.clear()
    out["wall_s"] = random_legal_steps(env, opts["steps"], rng, masked=True)
else:  # forward: the policy's forward pass, tight and alternated with env steps
    import torch as th
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.utils import obs_as_tensor
    from baselines.grpo.policies import sample_masked_categorical
    from baselines.training import TrainConfig, make_algo, make_train_env
    th.set_num_threads(1)
    venv = make_train_env(TrainConfig(algo="grpo", env_id="EDO-v0"))
    policy = make_algo(TrainConfig(algo="grpo", env_id="EDO-v0"), venv).policy
    obs, rng = venv.reset(), np.random.default_rng(0)
    def parts(obs, masks):
        t0 = time.perf_counter()
        with th.inference_mode():
            tensors = obs_as_tensor(obs, "cpu"); t1 = time.perf_counter()
            features = policy._flat_features(tensors); t2 = time.perf_counter()
            logits = policy.action_net(policy.actor_net(features)); t3 = time.perf_counter()
            actions, log_probs = sample_masked_categorical(logits, masks); t4 = time.perf_counter()
        return np.array([t1 - t0, t2 - t1, t3 - t2, t4 - t3])
    n = opts["iters"]
    masks = get_action_masks(venv)
    for _ in range(200):
        parts(obs, masks)
    tight = sum(parts(obs, masks) for _ in range(n)) / n
    alternated = np.zeros(4)
    for _ in range(n):
        masks = get_action_masks(venv)
        alternated += parts(obs, masks)
        actions = np.array([np.flatnonzero(m)[int(rng.random() * m.sum())] for m in masks])
        obs, _, _, _ = venv.step(actions)
    names = ["observations to tensors", "features", "MLP", "sampling"]
    out["forward_us"] = {"tight": dict(zip(names, (1e6 * tight).tolist())),
                         "alternated": dict(zip(names, (1e6 * alternated / n).tolist()))}
    venv.close()
from edo_gym.retrieval.cache import default_cache_dir
out["seconds"], out["calls"], out["cache_dir"] = dict(seconds), dict(calls), str(default_cache_dir())
print("\n" + json.dumps(out))
"""


def run_child(mode: str, opts: dict[str, Any], cache_dir: Path | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh process (on ``cache_dir``, else the configured cache directory); its JSON result."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if cache_dir is not None:
        env["EDO_GYM_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, json.dumps(opts)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {mode} measurement failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if cache_dir is not None and result["cache_dir"] != str(cache_dir):
        raise SystemExit(f"the {mode} measurement ran on {result['cache_dir']}, not on its cache copy {cache_dir}")
    return result


def per_step(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per timed part: calls per env step, microseconds per call and per env step."""
    steps = max(result["calls"].get("step", 0), 1)
    return {
        label: {
            "calls_per_step": result["calls"][label] / steps,
            "us_per_call": 1e6 * result["seconds"][label] / result["calls"][label],
            "us_per_step": 1e6 * result["seconds"][label] / steps,
        }
        for label in result["calls"]
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=300_000, help="training steps (make train: 300k)")
    parser.add_argument("--warmup", type=int, default=150_000, help="env-alone warm-up steps (as env_throughput.py)")
    parser.add_argument("--steps", type=int, default=100_000, help="env-alone timed steps")
    parser.add_argument("--forward-iters", type=int, default=2_000, help="forward passes timed, tight and alternated")
    parser.add_argument(
        "--cache",
        choices=("prepared", "default"),
        default="prepared",
        help="prepared: copies of one fresh cache directory prepared as `make prepare` leaves it (default); default: the "
        "configured cache directory, with what earlier runs stored",
    )
    parser.add_argument(
        "--no-reachable",
        action="store_true",
        help="with --cache prepared: prepare it without the reachable queries (complete embedding lists only)",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args(argv)
    for name, low in (("timesteps", 1), ("warmup", 0), ("steps", 1), ("forward_iters", 1)):
        if getattr(args, name) < low:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    if args.no_reachable and args.cache != "prepared":
        raise SystemExit("--no-reachable applies to --cache prepared only")
    with tempfile.TemporaryDirectory() as tmp:
        caches: dict[str, Path | None] = dict.fromkeys(("train", "alone", "forward"))
        if args.cache == "prepared":
            base = Path(tmp) / "prepared"
            print("preparing a fresh cache directory (as `make prepare` leaves it) ...", flush=True)
            prepare_cache(base, reachable=not args.no_reachable)
            for mode in caches:  # each measurement on its own copy: none sees what another stored
                caches[mode] = Path(tmp) / f"cache_{mode}"
                shutil.copytree(base, caches[mode])
        print(f"edo train ({args.timesteps:,} steps) with timers ...", flush=True)
        train = run_child(
            "train", {"train_args": TRAIN_ARGS, "timesteps": args.timesteps, "out": str(Path(tmp) / "runs")}, caches["train"]
        )
        print(f"the env alone ({args.warmup:,} + {args.steps:,} steps) ...", flush=True)
        alone = run_child("alone", {"warmup": args.warmup, "steps": args.steps}, caches["alone"])
        print("the policy's forward pass, tight and alternated with env steps ...", flush=True)
        forward = run_child("forward", {"iters": args.forward_iters}, caches["forward"])["forward_us"]
    parts_train, parts_alone = per_step(train), per_step(alone)
    payload = {"settings": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None, "train_args": TRAIN_ARGS},
               "train": parts_train, "alone": parts_alone, "alone_steps_per_s": args.steps / alone["wall_s"],
               "forward_us": forward, "revision": git_revision()}  # fmt: skip
    command = " ".join(["python", "-m", "tools.train_call_costs", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        "# Where training's env time goes, call by call, next to the env alone",
        "",
        f"{machine_line()}. Command: `{command}`.",
        "",
        f"Training: `edo train` with `make train`'s arguments, {args.timesteps:,} steps. Alone: random legal actions after "
        f"{args.warmup:,} warm-up steps, {args.steps:,} timed steps ({payload['alone_steps_per_s']:,.0f} steps/s with "
        "the timers). Times include the parts called inside them. "
        + (
            "Each measurement ran on its own copy of one fresh cache directory prepared as `make prepare` leaves it"
            + (" (without the reachable queries)." if args.no_reachable else ".")
            if args.cache == "prepared"
            else "All ran on the configured cache directory, with what earlier runs stored."
        ),
        "",
        "| part | calls per env step, training / alone | us per call, training / alone | training / alone | "
        "us per env step, training / alone |",
        "|---|---|---|---|---|",
    ]
    for label in sorted(set(parts_train) | set(parts_alone), key=lambda k: (not k.startswith(("step", "reset")), k)):
        t, a = parts_train.get(label), parts_alone.get(label)

        def cell(d: dict[str, float] | None, key: str, fmt: str) -> str:
            return format(d[key], fmt) if d else "--"

        ratio = f"{t['us_per_call'] / a['us_per_call']:.2f}" if t and a else "--"
        lines.append(
            f"| {label} | {cell(t, 'calls_per_step', '.3f')} / {cell(a, 'calls_per_step', '.3f')} | "
            f"{cell(t, 'us_per_call', '.1f')} / {cell(a, 'us_per_call', '.1f')} | {ratio} | "
            f"{cell(t, 'us_per_step', '.1f')} / {cell(a, 'us_per_step', '.1f')} |"
        )
    lines += [
        "",
        f"The policy's forward pass on 16 observations, us, over {args.forward_iters:,} passes: in a tight loop, and "
        "alternated with a vector step of the 16 envs:",
        "",
        "| part | tight | alternated with env steps |",
        "|---|---|---|",
        *(f"| {k} | {forward['tight'][k]:.0f} | {forward['alternated'][k]:.0f} |" for k in forward["tight"]),
    ]
    json_path, md_path = write_results("train_call_costs", payload, "\n".join(lines) + "\n", args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
