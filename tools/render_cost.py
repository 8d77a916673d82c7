"""What an ``rgb_array`` frame costs, against the env step it follows, measured in the same run.

One process, EDO-v0 with ``render_mode="rgb_array"``, random legal actions (seeded). Each repeat plays
``--episodes`` episodes and times every ``env.step`` and every ``env.render()`` that follows it (one frame per step,
as ``gymnasium.wrappers.RecordVideo`` takes them). Reported per repeat: the median milliseconds of a frame, of a
step, and their ratio; then the median over repeats. A frame is drawn from the episode's trace (text on a fixed-size
``uint8`` image), so its cost does not grow with the number of steps behind it; the ratio says how much slower
recording a video makes stepping.

Usage: ``python -m tools.render_cost [--episodes 20] [--repeats 3] [--seed 0]``.
Results: ``tools/results/render_cost.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import check_counts, git_revision, machine_line, median_iqr, write_results  # noqa: E402


def time_frames(env: Any, episodes: int, rng: np.random.Generator) -> tuple[list[float], list[float]]:
    """Seconds of each ``env.step`` and of each ``env.render()`` after it, over ``episodes`` random legal episodes."""
    steps: list[float] = []
    frames: list[float] = []
    for _ in range(episodes):
        obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
        done = False
        while not done:
            legal = np.flatnonzero(obs["action_mask"])
            action = int(legal[int(rng.random() * len(legal))])
            t0 = time.perf_counter()
            obs, _, terminated, truncated, _ = env.step(action)
            t1 = time.perf_counter()
            frame = env.render()
            frames.append(time.perf_counter() - t1)
            steps.append(t1 - t0)
            if not (isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3):
                raise SystemExit(f"render() did not return an RGB uint8 frame: {type(frame).__name__}")
            done = terminated or truncated
    return steps, frames


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20, help="episodes per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (median over them)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the actions and episode seeds")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args(argv)
    check_counts(parser, args, positive=("episodes", "repeats"), non_negative=("seed",))

    import gymnasium as gym

    import edo_gym  # noqa: F401 - registers EDO-v0

    env = gym.make("EDO-v0", render_mode="rgb_array")
    rng = np.random.default_rng(args.seed)
    time_frames(env, 2, rng)  # builds the indexes and fills the memo caches: not a frame's cost
    runs = []
    for r in range(args.repeats):
        steps, frames = time_frames(env, args.episodes, rng)
        frame_ms, step_ms = 1e3 * float(np.median(frames)), 1e3 * float(np.median(steps))
        runs.append({"frames": len(frames), "frame_ms_median": frame_ms, "step_ms_median": step_ms,
                     "frame_ms_p90": 1e3 * float(np.percentile(frames, 90)), "frame_over_step": frame_ms / step_ms})  # fmt: skip
        print(f"repeat {r + 1}: {len(frames)} frames, median {frame_ms:.2f} ms a frame, {step_ms:.3f} ms a step", flush=True)
    env.close()
    frame = median_iqr([r["frame_ms_median"] for r in runs])
    ratio = median_iqr([r["frame_over_step"] for r in runs])
    payload = {"settings": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None}, "revision": git_revision(), "runs": runs,
               "frame_ms": frame, "frame_over_step": ratio}  # fmt: skip
    lines = [
        "# rgb_array frames against env steps, same run",
        "",
        machine_line() + ".",
        f"Command: `{' '.join(['python', '-m', 'tools.render_cost', *(argv if argv is not None else sys.argv[1:])])}`.",
        "",
        "| repeat | frames | frame ms (median) | frame ms (p90) | step ms (median) | frame / step |",
        "|---|---|---|---|---|---|",
        *(
            f"| {i + 1} | {r['frames']} | {r['frame_ms_median']:.2f} | {r['frame_ms_p90']:.2f} | {r['step_ms_median']:.3f} | "
            f"{r['frame_over_step']:.0f} |"
            for i, r in enumerate(runs)
        ),  # fmt: skip
        "",
        f"Median over repeats: {frame['median']:.2f} ms a frame, {ratio['median']:.0f}x a step.",
    ]
    json_path, md_path = write_results("render_cost", payload, "\n".join(lines), out_dir=args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
