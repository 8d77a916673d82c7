"""Fairness check: does PPO / MaskablePPO catch up with GRPO when *they* get a few hyperparameter settings too?

GRPO's ``make train`` settings were picked after trying about eight settings on EDO-v0 (see README,
"What we learned tuning GRPO"); the main benchmark gives PPO and MaskablePPO the same shared settings, which
were not tuned for them. This study tries a comparable handful of PPO settings, including SB3's own defaults,
at the same budget, and reports them beside the shared-settings runs. It picks nothing automatically: it
prints every setting's held-out success.

Usage: ``python benchmarks/study_ppo_tuning.py [--quick] [--seeds 0] [--timesteps 300000]``.
Results: ``benchmarks/results/study_ppo_tuning.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.study_common import (  # noqa: E402
    command,
    finish,
    header,
    mode_of,
    resolve_common,
    run_all,
    seed_stats,
    study_parser,
    train_spec,
)

#: name -> TrainConfig overrides (on top of the shared defaults: lr 5e-4, ent 0.01, n_steps 256 x 16 envs,
#: batch 512, 4 epochs, gamma 0.99, gae 0.95).
SETTINGS: dict[str, dict[str, Any]] = {
    "shared (main benchmark)": {},
    "sb3 defaults": {"learning_rate": 3e-4, "ent_coef": 0.0, "n_steps": 128, "batch_size": 64, "n_epochs": 10},
    "sb3 defaults + ent 0.01": {"learning_rate": 3e-4, "ent_coef": 0.01, "n_steps": 128, "batch_size": 64, "n_epochs": 10},
    "lr 1e-3": {"learning_rate": 1e-3},
    "undiscounted (gamma 1)": {"gamma": 1.0},
    "ent 0.03": {"ent_coef": 0.03},
}


def main(argv: list[str] | None = None) -> None:
    parser = study_parser(__doc__)
    parser.add_argument("--algos", nargs="+", default=["maskable_ppo", "ppo"], choices=["ppo", "maskable_ppo"])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args(argv)
    resolve_common(args, seeds=((0,), (0,), (0,)), timesteps=(300_000, 60_000, 600), episodes=(100, 60, 4))
    specs = []
    for algo in args.algos:
        for name in args.settings:
            for seed in args.seeds:
                spec = train_spec(algo, seed, "EDO-v0", args.timesteps, args.eval_episodes, train_overrides=SETTINGS[name])
                specs.append((f"{algo}/{name}/s{seed}", spec))
    out_dir = Path(args.out_dir)
    records = run_all(specs, out_dir, "study_ppo_tuning")
    rows: dict[str, dict[str, Any]] = {}
    for algo in args.algos:
        for name in args.settings:
            recs = [records[f"{algo}/{name}/s{s}"] for s in args.seeds]
            rows[f"{algo}/{name}"] = {
                "algo": algo,
                "setting": name,
                "overrides": SETTINGS[name],
                "success": seed_stats([r["final"]["success"] for r in recs]),
                "return": seed_stats([r["final"]["return"] for r in recs]),
                "calls_per_episode": float(sum(r["final"]["calls"] for r in recs) / len(recs)),
            }
    cmd = command("study_ppo_tuning.py", argv)
    lines = header(
        "PPO / MaskablePPO settings on EDO-v0",
        cmd,
        mode_of(args),
        f"{args.timesteps:,} env steps per run, seeds {args.seeds}, {args.eval_episodes} held-out tasks, actor [128, 128]",
    )
    lines += ["", "| algo | setting | held-out success | return | calls/ep |", "|---|---|---|---|---|"]
    for row in rows.values():
        lines.append(
            f"| {row['algo']} | {row['setting']} | {row['success']['mean']:.3f} | {row['return']['mean']:+.3f} "
            f"| {row['calls_per_episode']:.1f} |"
        )
    best = max(rows.values(), key=lambda r: r["success"]["mean"])
    lines += [
        "",
        "## What this shows",
        "",
        f"Best setting tried: {best['algo']} with '{best['setting']}' at {best['success']['mean']:.3f} held-out success "
        f"({len(args.seeds)} seed(s)). Compare with GRPO's row in `grpo_vs_ppo.md` (same budget and task set). "
        "A handful of settings is not a full search; single-seed differences of a few points are noise.",
    ]
    payload = {"settings": vars(args) | {"command": cmd}, "rows": rows, "runs": records}
    finish("study_ppo_tuning", payload, "\n".join(lines), out_dir)


if __name__ == "__main__":
    main()
