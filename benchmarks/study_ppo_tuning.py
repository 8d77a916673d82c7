"""Fairness check: does PPO / MaskablePPO catch up with GRPO when *they* get a few hyperparameter settings too?

GRPO's ``make train`` settings were picked after trying about eight settings on EDO-v0 (see
baselines/grpo/NOTES.md); the main benchmark gives PPO and MaskablePPO the same shared settings (``TrainConfig``'s,
with the entropy coefficient the sweep chose for each), which were not otherwise tuned for them. This study tries a
comparable handful of PPO settings, including SB3's own defaults, at the same budget, and reports them beside the
shared-settings runs, all with ``--setup`` (default ``make-train``: ``make train``'s settings, a warm start cloned from the static pipeline's logs; see ``grpo_vs_ppo.SETUPS``). It picks nothing automatically: it
prints every setting's held-out success.

Usage: ``python -m benchmarks.study_ppo_tuning [--quick] [--seeds 0] [--timesteps 300000]``.
Results: ``benchmarks/results/study_ppo_tuning.{json,md}``.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from benchmarks.grpo_vs_ppo import SETUPS, setup_option, setup_settings
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered, shown_path
from benchmarks.summary import MISSING, header, seed_stats

NAME = "study_ppo_tuning"
#: name -> TrainConfig overrides (on top of the shared defaults: lr 1e-4, ent 0.01, n_steps 256 x 16 envs,
#: batch 512, 4 epochs, gamma 0.99, gae 0.95).
SETTINGS: dict[str, dict[str, Any]] = {
    "shared (TrainConfig)": {},
    "sb3 defaults": {"learning_rate": 3e-4, "ent_coef": 0.0, "n_steps": 128, "batch_size": 64, "n_epochs": 10},
    "sb3 defaults + ent 0.01": {"learning_rate": 3e-4, "ent_coef": 0.01, "n_steps": 128, "batch_size": 64, "n_epochs": 10},
    "lr 1e-3": {"learning_rate": 1e-3},
    "undiscounted (gamma 1)": {"gamma": 1.0},
    "ent 0.03": {"ent_coef": 0.03},
}


def slug(setting: str) -> str:
    """A setting's point id (file-name safe): ``"sb3 defaults + ent 0.01"`` -> ``"sb3_defaults_+_ent_0.01"``."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", setting).strip("_")


def points(cfg: StudyConfig) -> dict[str, Point]:
    _, env_kwargs, setup_overrides = SETUPS[cfg.options.setup]
    return {
        slug(name): Point(env_kwargs=dict(env_kwargs), train_overrides={**setup_overrides, **SETTINGS[name]})
        for name in cfg.options.settings
    }


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    rows: dict[str, dict[str, Any]] = {}
    for algo in cfg.algos:
        for name in cfg.options.settings:
            recs = runs.seeds(slug(name), algo)
            rows[f"{algo}/{name}"] = {
                "algo": algo,
                "setting": name,
                "overrides": SETTINGS[name],
                "success": seed_stats([r["final"]["success"] for r in recs]),
                "return": seed_stats([r["final"]["return"] for r in recs]),
                "calls_per_episode": float(sum(r["final"]["calls"] for r in recs) / len(recs)) if recs else None,
            }
    b = cfg.budget
    lines = header("PPO / MaskablePPO settings on EDO-v0", cfg.command, cfg.tier,
                   f"{b.timesteps:,} env steps per run, seeds {list(b.seeds)}, {b.eval_episodes} held-out tasks, actor [128, 128], "
                   f"the setup '{cfg.options.setup}' ({SETUPS[cfg.options.setup][0]})")  # fmt: skip
    lines += ["", "| algo | setting | held-out success | return | calls/ep |", "|---|---|---|---|---|"]
    for row in rows.values():
        if row["success"] is None:
            lines.append(f"| {row['algo']} | {row['setting']} | {MISSING} | | |")
            continue
        lines.append(
            f"| {row['algo']} | {row['setting']} | {row['success']['mean']:.3f} | {row['return']['mean']:+.3f} "
            f"| {row['calls_per_episode']:.1f} |"
        )
    lines += ["", "## What this shows", ""]
    known = [r for r in rows.values() if r["success"] is not None]
    if known:
        best = max(known, key=lambda r: r["success"]["mean"])
        lines.append(
            f"Best setting tried: {best['algo']} with '{best['setting']}' at {best['success']['mean']:.3f} held-out success "
            f"({len(b.seeds)} seed(s)). Compare with GRPO's row in `grpo_vs_ppo.md` (same budget and task set). "
            "A handful of settings is not a full search; single-seed differences of a few points are noise."
        )
    settings = {**cfg.settings(), "settings": list(cfg.options.settings), "out_dir": shown_path(cfg.out_dir),
                **setup_settings(cfg.options.setup)}  # fmt: skip
    payload = {"settings": settings, "rows": rows, "runs": runs.by_key()}
    return payload, "\n".join(lines)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(300_000, (0,), 100), quick=Budget(60_000, (0,), 60), smoke=Budget(600, (0,), 4)),
    algos=Tiered(full=("maskable_ppo", "ppo"), quick=("maskable_ppo", "ppo"), smoke=("maskable_ppo",)),
    options=(
        Option(
            "--settings",
            Tiered(full=list(SETTINGS), quick=list(SETTINGS), smoke=["shared (TrainConfig)", "sb3 defaults"]),
            "settings to try",
            nargs="+",
            choices=list(SETTINGS),
        ),
        setup_option("every setting"),
    ),  # fmt: skip
    points=points,
    summarise=summarise,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
