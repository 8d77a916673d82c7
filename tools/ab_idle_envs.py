"""A/B of GRPO leaving the envs idle at the end of a rollout where they are (``FreshInfoDummyVecEnv.step_some``).

``make train``'s run (GRPO, 16 envs) steps every env of its VecEnv on every vector step, also those whose episodes are
done while the rollout waits for its last episodes; those steps are never recorded (14% of the env steps of a 300k
run). With ``step_some`` the idle envs do not step; the trained parameters are the same to the bit
(``tests/baselines/test_training.py``). This script alternates fresh ``edo train`` processes with ``make train``'s arguments
and ``--eval-episodes 0``, "off" (``step_some`` removed from the class, so every env steps) then "on", ``--repeats``
times, on one cache directory prepared as ``make prepare`` leaves it. Reported per arm: training steps/s, CPU
seconds of the process, env stepping seconds and env steps taken (medians), and the on / off ratios.

Usage: ``python -m tools.ab_idle_envs [--repeats 3] [--timesteps 300000]``.
Results: ``tools/results/ab_idle_envs.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import git_revision, machine_line, write_results  # noqa: E402
from benchmarks.train_throughput import COMPLETE_CACHE, TRAIN_ARGS, child_env  # noqa: E402

_TRAIN = """
import sys
import baselines.training as training
if sys.argv[1] == "off":
    del training.FreshInfoDummyVecEnv.step_some  # every env steps on every vector step, as a plain DummyVecEnv
from baselines.cli import main
sys.exit(main(["train", *sys.argv[2:]]))
"""


def train_once(arm: str, cache_dir: Path, out_dir: Path, timesteps: int) -> dict[str, Any]:
    """One fresh ``edo train`` process in arm ``arm``: its saved summary's rate and time breakdown."""
    args = [*TRAIN_ARGS, "--timesteps", str(timesteps), "--output-dir", str(out_dir)]
    proc = subprocess.run([sys.executable, "-c", _TRAIN, arm, *args], env=child_env(cache_dir), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"edo train ({arm}) failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (summary,) = out_dir.glob("*.json")
    data = json.loads(summary.read_text())
    times = data["time_breakdown"]
    return {
        "arm": arm,
        "steps": data["num_timesteps"],
        "steps_per_s": data["num_timesteps"] / data["train_wall_s"],
        "process_cpu_s": times["process_cpu_s"],
        "env_s": times["env_s"],
        "env_steps": times["env_steps"],
        "time_breakdown": times,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="(off, on) pairs, alternated")
    parser.add_argument("--timesteps", type=int, default=300_000)
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.timesteps < 1:
        parser.error(f"--timesteps must be >= 1, got {args.timesteps}")
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        print("preparing the cache (as make prepare) ...", flush=True)
        subprocess.run([sys.executable, "-c", COMPLETE_CACHE, "1"], env=child_env(cache), check=True, capture_output=True)
        for r in range(args.repeats):
            for arm in ("off", "on"):
                run = train_once(arm, cache, Path(tmp) / f"{arm}{r}", args.timesteps)
                runs[arm].append(run)
                print(
                    f"  {arm}: {run['steps_per_s']:,.0f} steps/s, {run['process_cpu_s']:.1f} CPU s, env {run['env_s']:.1f} s "
                    f"for {run['env_steps']:,} env steps ({run['steps']:,} recorded)",
                    flush=True,
                )

    def med(arm: str, key: str) -> float:
        return float(np.median([run[key] for run in runs[arm]]))

    keys = ("steps_per_s", "process_cpu_s", "env_s", "env_steps")
    summary = {arm: {key: med(arm, key) for key in keys} for arm in runs}
    ratios = {key: summary["on"][key] / summary["off"][key] for key in keys}
    payload = {"settings": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None, "train_args": TRAIN_ARGS},
               "revision": git_revision(), "runs": runs, "summary": summary, "on_over_off": ratios}  # fmt: skip
    command = " ".join(["python", "-m", "tools.ab_idle_envs", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        "# Idle envs at the end of a GRPO rollout: stepped (off) or left where they are (on)",
        "",
        f"{machine_line()}. Command: `{command}`. Fresh `edo train` processes with "
        f"`make train`'s arguments, {args.timesteps:,} steps, alternated off / on, {args.repeats} of each; medians.",
        "",
        "| arm | training steps/s | CPU s of the process | env stepping s | env steps taken |",
        "|---|---|---|---|---|",
        *(
            f"| {arm} | {summary[arm]['steps_per_s']:,.0f} | {summary[arm]['process_cpu_s']:.1f} | "
            f"{summary[arm]['env_s']:.1f} | {summary[arm]['env_steps']:,.0f} |"
            for arm in ("off", "on")
        ),
        f"| on / off | {ratios['steps_per_s']:.3f} | {ratios['process_cpu_s']:.3f} | {ratios['env_s']:.3f} | "
        f"{ratios['env_steps']:.3f} |",
        "",
        "Per run (steps/s): off " + ", ".join(f"{r['steps_per_s']:,.0f}" for r in runs["off"])
        + "; on " + ", ".join(f"{r['steps_per_s']:,.0f}" for r in runs["on"]) + ".",
    ]  # fmt: skip
    json_path, md_path = write_results("ab_idle_envs", payload, "\n".join(lines) + "\n", args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
