"""``make train``'s held-out table across seeds: how far one table is from another draw.

Each run is a fresh ``edo train`` process with ``make train``'s arguments (:data:`TRAIN_ARGS`: the Makefile's, with
its 200-episode evaluation) and one ``--seed``. Its own summary (config, time breakdown, the table), with the machine
it ran on, is kept as ``seed<s>.json`` in the output directory; a run whose file is there is not run again, so an
interrupted sweep resumes where it stopped. Then ``make_train_seeds.md`` tabulates every summary in the directory:
GRPO's held-out success per run beside the clone of the warm start before RL and the best hand-written policy of the
same table (observation only: the oracle excluded), and over seeds GRPO's median, mean and range and its median lead
over that policy. ``--summarise-only`` writes the table
from the summaries there without training.

Usage::

    python -m benchmarks.make_train_seeds                          # seeds 0-3 (~16 min)
    python -m benchmarks.make_train_seeds --seeds 0 1 --timesteps 30000
    python -m benchmarks.make_train_seeds --summarise-only         # the table from the finished runs

Results: ``benchmarks/results/make_train_seeds/`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from baselines.experience import demonstrators
from benchmarks.bench_lib import REPO
from benchmarks.common import RESULTS_DIR, machine_line, write_json_atomic, write_text_atomic
from benchmarks.train_throughput import TRAIN_ARGS as MAKE_TRAIN_ARGS
from benchmarks.train_throughput import without_options

#: Names of the hand-written policies a table may hold (the heuristics and the probes)
HAND_WRITTEN = frozenset(demonstrators())

#: ``make train``'s arguments (train_throughput's copy of the Makefile's) less those each run sets: the seed and the
#: evaluation (``--eval-episodes``: ``make train``'s own 200 by default)
TRAIN_ARGS = without_options(MAKE_TRAIN_ARGS, {"--seed", "--eval-episodes"})
#: Where a run's files go while it runs, as its summary names it (the directory is gone once the run is kept)
TEMPORARY = "<temporary>"


def run_name(seed: int) -> str:
    return f"seed{seed}"


def train_run(seed: int, timesteps: int, out_dir: Path, eval_episodes: int = 200, keep_models: Path | None = None) -> Path:
    """One ``edo train`` process; its summary is moved into ``out_dir`` only once complete (nothing partial). The
    summary's paths into the run's temporary output directory are written as :data:`TEMPORARY`. With
    ``keep_models``, the model and the ``.json`` beside it are kept there as ``seed<s>.zip`` / ``seed<s>.json``."""
    path = out_dir / f"{run_name(seed)}.json"
    with tempfile.TemporaryDirectory() as tmp:
        args = [*TRAIN_ARGS, "--eval-episodes", str(eval_episodes), "--timesteps", str(timesteps), "--seed", str(seed),
                "--output-dir", tmp]  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "baselines.cli", "train", *args], cwd=REPO, capture_output=True,
                              text=True)  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"edo train (seed {seed}) failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        (summary,) = Path(tmp).glob("*.json")
        if keep_models is not None:
            keep_models.mkdir(parents=True, exist_ok=True)
            for kept in (summary.with_suffix(".zip"), summary):
                shutil.copyfile(kept, keep_models / f"{run_name(seed)}{kept.suffix}")
        data = json.loads(summary.read_text().replace(json.dumps(tmp)[1:-1], TEMPORARY))
        data["command"] = " ".join(["edo", "train", *args[:-2], "--output-dir", TEMPORARY])
        data["date_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        data["machine"] = machine_line()
        write_json_atomic(path, data)
    return path


def load_runs(out_dir: Path) -> list[dict[str, Any]]:
    """Every ``seed<s>.json`` in ``out_dir``, with its seed, machine and GRPO / heuristic rows."""
    runs = []
    for path in sorted(out_dir.glob("seed*.json")):
        data = json.loads(path.read_text())
        rows = {row["policy"]: row for row in data["results"]}
        if "grpo" not in rows:
            raise SystemExit(f"{path} has no grpo row in its results (an evaluation with 0 episodes?)")
        config = data["config"]
        hand = [row for name, row in rows.items() if name in HAND_WRITTEN and not row.get("uses_hidden_state")]
        best = max(hand, key=lambda row: (row["success_rate"], row["mean_return"])) if hand else None
        clone = next((row for name, row in rows.items() if name.startswith("clone of ")), None)
        runs.append({"file": path.name, "seed": config["seed"], "machine": data.get("machine"), "grpo": rows["grpo"],
                     "static": rows.get("static_pipeline"), "rule_based": rows.get("rule_based"),
                     "plan_check_text": rows.get("plan_check_text"), "clone": clone, "best": best,
                     "steps": data["num_timesteps"], "warm_start": config.get("warm_start"),
                     "train_wall_s": data["train_wall_s"], "date_utc": data.get("date_utc", "?")})  # fmt: skip
    return sorted(runs, key=lambda r: r["seed"])


def markdown(runs: list[dict[str, Any]], command: str) -> str:
    """The table of ``runs`` (:func:`load_runs`): one row per seed, then GRPO's median, mean and range over seeds and
    the heuristics' figures on the same tasks; ``command`` is the command that trains them."""
    machines = sorted({r["machine"] or machine_line() for r in runs})
    # the steps asked for (GRPO overshoots them by less than a rollout)
    steps = {int(round(r["steps"], -5)) for r in runs}
    episodes = sorted({r["grpo"]["episodes"] for r in runs})
    lines = [
        "# `make train` across seeds"
        + ("" if steps == {1_000_000} else f" ({', '.join(f'{n:,}' for n in sorted(steps))} steps)"),
        "",
        f"{'; '.join(machines)}. Command: `{command}`. Each run: `edo train` with `make train`'s arguments and its seed "
        "(the command and the date are in its `.json`; runs from "
        f"{min(r['date_utc'] for r in runs)} to {max(r['date_utc'] for r in runs)}), evaluated on the same "
        f"{'/'.join(map(str, episodes))} held-out tasks (eval seed 0).",
        "",
        "| seed | GRPO success (95% CI) | mean return | tokens/ep | clone before RL | best hand-written | GRPO lead, "
        "success / return | env steps | training s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        g, c, b = r["grpo"], r["clone"], r["best"]
        clone = f"{c['success_rate']:.3f}" if c else "-"
        best = f"{b['policy']} {b['success_rate']:.3f} / {b['mean_return']:+.3f}" if b else "-"
        lead = f"{g['success_rate'] - b['success_rate']:+.3f} / {g['mean_return'] - b['mean_return']:+.3f}" if b else "-"
        lines.append(f"| {r['seed']} | {g['success_rate']:.3f} ({g['success_ci95'][0]:.2f}-{g['success_ci95'][1]:.2f}) | "
                     f"{g['mean_return']:+.3f} | {g['tokens']:.0f} | {clone} | {best} | {lead} | {r['steps']:,} | "
                     f"{r['train_wall_s']:.1f} |")  # fmt: skip
    values = [r["grpo"]["success_rate"] for r in runs]
    returns = [r["grpo"]["mean_return"] for r in runs]
    leads = [r["grpo"]["success_rate"] - r["best"]["success_rate"] for r in runs if r["best"]]
    lines += [
        "",
        "| runs | median GRPO success | mean | range | median GRPO return | median lead over the best hand-written |",
        "|---|---|---|---|---|---|",
        f"| {len(values)} | {statistics.median(values):.3f} | {statistics.mean(values):.3f} | "
        f"{min(values):.3f}-{max(values):.3f} | {statistics.median(returns):+.3f} | "
        + (f"{statistics.median(leads):+.3f} |" if leads else "- |"),
    ]
    teacher = runs[0].get("warm_start") if runs else None
    for key, name in (("static", "static pipeline" + (" (the warm start's teacher)" if teacher == "static_pipeline" else "")),
                      ("rule_based", "rule_based policy"),
                      ("plan_check_text", "text-reading plan_check_text policy")):  # fmt: skip
        rows = {(r[key]["success_rate"], r[key]["mean_return"]) for r in runs if r.get(key)}
        if rows:
            figures = ", ".join(f"{s:.3f} success and {m:+.3f} return" for s, m in sorted(rows))
            lines += ["", f"The {name} on the same tasks: {figures}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--timesteps", type=int, default=1_000_000, help="training steps per run (make train: 1M)")
    parser.add_argument(
        "--eval-episodes", type=int, default=200, help="held-out tasks each run is evaluated on (make train: 200)"
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR / "make_train_seeds")
    parser.add_argument("--summarise-only", action="store_true", help="write the table from the runs in --out-dir, train none")
    parser.add_argument(
        "--keep-models",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep each run's model and settings there (seed<s>.zip and .json; default: discarded)",
    )
    args = parser.parse_args(argv)
    if any(s < 0 for s in args.seeds):
        parser.error(f"--seeds must be >= 0, got {args.seeds}")
    if args.eval_episodes < 1:
        parser.error(f"--eval-episodes must be >= 1, got {args.eval_episodes}")
    if args.timesteps < 1:
        parser.error(f"--timesteps must be >= 1, got {args.timesteps}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    todo = [] if args.summarise_only else args.seeds
    for k, seed in enumerate(todo, 1):
        path = args.out_dir / f"{run_name(seed)}.json"
        if path.is_file():
            print(f"[{k}/{len(todo)}] seed {seed}: done before ({path.name})", flush=True)
            continue
        print(f"[{k}/{len(todo)}] seed {seed}: edo train ({args.timesteps:,} steps) ...", flush=True)
        train_run(seed, args.timesteps, args.out_dir, args.eval_episodes, args.keep_models)
    runs = load_runs(args.out_dir)
    if not runs:
        raise SystemExit(f"no run summaries (seed<s>.json) in {args.out_dir}")
    # the command that trains the runs tabulated (a summary-only invocation writes the same table)
    given = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--summarise-only"]
    md = markdown(runs, " ".join(["python", "-m", "benchmarks.make_train_seeds", *given]))
    write_text_atomic(args.out_dir / "make_train_seeds.md", md)
    print(md)
    print(f"wrote {args.out_dir / 'make_train_seeds.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
