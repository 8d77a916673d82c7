"""A/B of the deviations from the script: the warm step's cost with each kind switched on, side by side.

One process makes EDO-v0 with no deviation (the scripted world, ``edo_gym.SCRIPTED``), with each kind alone at rate
1.0 on it (``phrasing``, ``team``, ``drift``, ``extra_step``, ``plan_review``: ``verify_plan`` actions in the action
space) and as registered (``default``: every kind at its default rate), warms each up with random legal actions,
then times them in alternated rounds (process CPU time, ``--steps`` random legal steps per arm and round). Each arm's
rate is divided by the no-deviation arm's in the same round; the median and range over rounds are reported. A kind
that makes episodes differ (other answers, other first-seen queries) pays for that realism here too.

Usage: ``python -m tools.ab_deviations [--rounds 5] [--steps 15000] [--warmup 60000]``.
Results: ``tools/results/ab_deviations.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import edo_gym  # noqa: E402, F401
from benchmarks.common import machine_line, write_results  # noqa: E402
from benchmarks.deviations import KINDS  # noqa: E402
from edo_gym.registration import SCRIPTED  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
#: The deviation kinds of ``benchmarks.deviations`` (each alone at rate 1.0 on the scripted world), less their sum,
#: the paid plan check alone, and EDO-v0's defaults (every kind at its default rate, the plan check on).
ARMS: dict[str, dict[str, Any]] = {
    **{kind: {**SCRIPTED, **kwargs} for kind, kwargs in KINDS.items() if kind not in ("all", "default")},
    "plan_review": {**SCRIPTED, "enable_plan_review": True},
    "default": {},
}


class Arm:
    """One env, stepped with random legal actions; ``run(n)`` returns its steps per CPU second."""

    def __init__(self, kwargs: dict[str, Any], seed: int) -> None:
        self.env = gym.make("EDO-v0", **kwargs).unwrapped
        self.rng = np.random.default_rng(seed)
        self.obs, self.info = self.env.reset(seed=seed)

    def run(self, n: int) -> float:
        env, rng, info = self.env, self.rng, self.info
        start = time.process_time()
        for _ in range(n):
            legal = np.flatnonzero(info["action_mask"])
            _, _, terminated, truncated, info = env.step(int(legal[rng.integers(len(legal))]))
            if terminated or truncated:
                _, info = env.reset()
        self.info = info
        return n / (time.process_time() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=15_000, help="steps per arm and round")
    parser.add_argument("--warmup", type=int, default=60_000, help="steps per arm before the first round")
    args = parser.parse_args(argv)
    if min(args.rounds, args.steps) < 1 or args.warmup < 0:
        parser.error("--rounds and --steps must be >= 1 and --warmup >= 0")
    arms = {name: Arm(kwargs, seed=1) for name, kwargs in ARMS.items()}
    if args.warmup:
        for arm in arms.values():
            arm.run(args.warmup)
    ratios: dict[str, list[float]] = {name: [] for name in arms}
    rates: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        this = {name: arm.run(args.steps) for name, arm in arms.items()}
        for name in arms:
            rates[name].append(this[name])
            ratios[name].append(this[name] / this["none"])
    summary = {
        name: {
            "median_ratio": float(np.median(ratios[name])),
            "min_ratio": float(min(ratios[name])),
            "max_ratio": float(max(ratios[name])),
            "median_steps_per_cpu_s": float(np.median(rates[name])),
        }
        for name in arms
    }
    lines = [
        "# The warm step with each deviation switched on, over no deviation",
        "",
        f"{machine_line()}. Command: `python -m tools.ab_deviations --rounds {args.rounds} --steps {args.steps} "
        f"--warmup {args.warmup}`. Process CPU time, alternated rounds in one process.",
        "",
        "| arm | env settings | steps per CPU second (median) | over no deviation, median (range) |",
        "|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | `{ARMS[name]}` | {s['median_steps_per_cpu_s']:,.0f} | {s['median_ratio']:.3f} "
            f"({s['min_ratio']:.3f}-{s['max_ratio']:.3f}) |"
        )
    payload = {"rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "arms": ARMS, "summary": summary}
    json_path, md_path = write_results("ab_deviations", payload, "\n".join(lines), out_dir=RESULTS)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
