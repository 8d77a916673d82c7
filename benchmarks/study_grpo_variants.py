"""Caveat study 5: which GRPO design choices matter here? Group size, std normalisation, KL, supervision.

One factor at a time around the default GRPO of ``baselines.training.TrainConfig`` (whatever its group size,
std normalisation, KL coefficient and supervision are; the table header prints them), on EDO-v0, with the same env-step budget, seeds and
held-out tasks for every variant, all with ``--setup`` (default ``make-train``: ``make train``'s settings, a warm start cloned from the static pipeline's logs; see ``grpo_vs_ppo.SETUPS``):

- group size G = 4, 8, 16, with the number of groups per rollout scaled so that every rollout has the same
  number of episodes as the default (so only the grouping changes, not the batch);
- std normalisation flipped: ``normalize_std`` True (GRPO: divide the centred group returns by their std) versus
  False (Dr. GRPO: centre only);
- KL flipped: ``kl_coef`` 0 versus ``--kl`` (0.05; k3 KL penalty to the initial policy);
- supervision flipped: ``"process"`` (per-step rewards normalised over the group, then return-to-go) versus
  ``"outcome"`` (episode return).

Reported per variant: final held-out success (mean over seeds, 95% CI), return, calls per episode, training
wall time (median; rollout and update split), and GRPO's group statistics (dropped tied groups, groups where
every member failed). Runs are one subprocess each, one after the other, seeds interleaved across variants.

Usage::

    python -m benchmarks.study_grpo_variants            # full: 3 seeds x 150k steps, 200 tasks
    python -m benchmarks.study_grpo_variants --quick    # 1 seed x 15k steps, 60 tasks
    python -m benchmarks.study_grpo_variants --kl 0.1 --groups 4 8 16 32 --seeds 0 1

Results: ``benchmarks/results/study_grpo_variants.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``variants`` (name -> ``overrides`` and figures), ``conclusion``, ``runs``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.grpo_vs_ppo import SETUPS, setup_option, setup_settings
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered
from benchmarks.summary import (
    MISSING,
    difference,
    fmt_figures,
    fmt_frac,
    fmt_stats,
    header,
    pyplot,
    summarise_runs,
)

NAME = "study_grpo_variants"
BASE = "base"


def variants(groups: list[int], kl: float) -> dict[str, dict[str, Any]]:
    """Variant name -> TrainConfig overrides; ``base`` is the TrainConfig default GRPO."""
    from baselines.training import TrainConfig

    default = TrainConfig()
    episodes_per_rollout = default.group_size * default.groups_per_rollout
    out: dict[str, dict[str, Any]] = {BASE: {}}
    for g in groups:
        if g != default.group_size:
            out[f"G={g}"] = {"group_size": g, "groups_per_rollout": max(1, episodes_per_rollout // g)}
    # each remaining factor is flipped relative to the default, whatever the default is
    if default.normalize_std:
        out["no std (Dr. GRPO)"] = {"normalize_std": False}
    else:
        out["std normalisation (GRPO)"] = {"normalize_std": True}
    if default.kl_coef == 0:
        out[f"KL {kl:g}"] = {"kl_coef": kl}
    else:
        out["no KL"] = {"kl_coef": 0.0}
    other = "process" if default.supervision == "outcome" else "outcome"
    out[f"{other} supervision"] = {"supervision": other}
    return out


def base_description() -> str:
    from baselines.training import TrainConfig

    d = TrainConfig()
    return (f"G={d.group_size}, {d.groups_per_rollout} groups/rollout, normalize_std={d.normalize_std}, kl_coef={d.kl_coef:g}, "
            f"supervision={d.supervision}, lr={d.learning_rate:g}, batch {d.batch_size}, {d.n_epochs} epochs")  # fmt: skip


def slug(variant: str) -> str:
    """A variant's point id (file-name safe): ``"no std (Dr. GRPO)"`` -> ``"no_std_Dr._GRPO"``, ``"G=4"`` -> ``"G4"``."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", variant.replace("=", "")).strip("_")


def points(cfg: StudyConfig) -> dict[str, Point]:
    _, env_kwargs, setup_overrides = SETUPS[cfg.options.setup]
    return {
        slug(name): Point(env_kwargs=dict(env_kwargs), train_overrides={**setup_overrides, **ov}, algos=("grpo",))
        for name, ov in variants(cfg.options.groups, cfg.options.kl).items()
    }


def markdown(settings: dict[str, Any], results: dict[str, Any]) -> str:
    lines = header(
        "Caveat study: GRPO variants (one factor at a time)",
        settings["command"],
        settings["mode"],
        f"EDO-v0, {settings['timesteps']:,} env steps per run, seeds {settings['seeds']}, evaluation on "
        f"{settings['eval_episodes']} held-out tasks. Base = TrainConfig default GRPO ({settings['base']}), with the "
        f"setup '{settings['setup']}' ({settings['setup_description']}). Group-size "
        "variants keep the episodes per rollout constant. Success: mean over seeds (95% CI when more than one seed); "
        "times: medians, evaluation excluded.",
    )
    lines += ["", "| variant | overrides | success | return | calls/ep | train wall (s) | rollout / update (s) "
              "| dropped groups | all-fail groups | collapsed runs |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, v in results.items():
        ov = ", ".join(f"{k}={val}" for k, val in v["overrides"].items()) or "-"
        if v["success"] is None:
            lines.append(f"| {name} | {ov} | {MISSING} |" + " |" * 7)
            continue
        lines.append(
            f"| {name} | {ov} | {fmt_figures(v)} | {fmt_stats(v['return'])} "
            f"| {v['calls']:.1f} | {v['wall_time_s']:.0f} | {v['rollout_s']:.0f} / {v['update_s']:.0f} "
            f"| {fmt_frac(v['dropped_group_fraction'])} | {fmt_frac(v['all_fail_group_fraction'])} "
            f"| {v['collapsed_runs']}/{len(v['seeds'])} |"
        )
    lines += ["", "## What this shows", ""]
    base = results[BASE]
    for name, v in results.items():
        if name == BASE:
            continue
        d = difference(mean_success(v), mean_success(base))
        t = ratio(v.get("wall_time_s"), base.get("wall_time_s"))
        lines.append(f"- {name}: success {MISSING if d is None else f'{d:+.3f}'} versus base, train wall time "
                     f"{MISSING if t is None else f'x{t:.2f}'}.")  # fmt: skip
    known = [n for n in results if results[n]["success"] is not None]
    if known:
        best = max(known, key=lambda n: results[n]["success"]["mean"])
        lines.append(f"- Highest mean success: {best} ({results[best]['success']['mean']:.3f}).")
    if len(settings["seeds"]) < 2:
        lines.append("- One seed per variant: no interval over seeds; single-seed differences are not evidence.")
    return "\n".join(lines)


def mean_success(variant: dict[str, Any]) -> float | None:
    return None if variant["success"] is None else variant["success"]["mean"]


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    table = variants(cfg.options.groups, cfg.options.kl)
    settings = {**cfg.settings(), "env_id": "EDO-v0", "base": base_description(), "variants": table,
                **setup_settings(cfg.options.setup)}  # fmt: skip
    results = {}
    for name, ov in table.items():
        recs = runs.seeds(slug(name), "grpo")
        figures = summarise_runs(recs) or {"success": None}
        results[name] = {"overrides": ov, **figures,
                         "rollout_s": float(np.median([r["rollout_s"] for r in recs])) if recs else None,
                         "update_s": float(np.median([r["update_s"] for r in recs])) if recs else None}  # fmt: skip
    base = results[BASE]
    known = [n for n in results if results[n]["success"] is not None]
    concl = {
        "success_minus_base": {n: difference(mean_success(v), mean_success(base)) for n, v in results.items() if n != BASE},
        "wall_time_over_base": {n: ratio(v.get("wall_time_s"), base.get("wall_time_s")) for n, v in results.items() if n != BASE},
        "best_variant": max(known, key=lambda n: results[n]["success"]["mean"]) if known else None,
    }  # fmt: skip
    payload = {"settings": settings, "variants": results, "conclusion": concl, "runs": runs.by_key()}
    return payload, markdown(settings, results)


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    settings, results = payload["settings"], payload["variants"]
    plt = pyplot()
    names = list(results)
    x = np.arange(len(names))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    stats = [results[n]["success"] for n in names]
    means = [np.nan if s is None else s["mean"] for s in stats]
    if len(settings["seeds"]) > 1:  # CI clipped to [0, 1]
        err = np.array([[0.0, 0.0] if s is None else [s["mean"] - max(0.0, s["ci95"][0]), min(1.0, s["ci95"][1]) - s["mean"]]
                        for s in stats]).T  # fmt: skip
        axes[0].bar(x, means, yerr=err, capsize=3)
    else:
        axes[0].bar(x, means)
    axes[0].set_ylabel("held-out success")
    axes[0].set_ylim(0, 1.03)
    axes[1].bar(x, [np.nan if results[n].get("wall_time_s") is None else results[n]["wall_time_s"] for n in names], color="C1")
    axes[1].set_ylabel("train wall time (s, median)")
    for ax in axes:
        ax.set_xticks(x, names, rotation=25, ha="right", fontsize=8)
    fig.suptitle(f"GRPO variants on EDO-v0, {settings['timesteps']:,} steps/run, seeds {settings['seeds']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(150_000, (0, 1, 2), 200), quick=Budget(15_000, (0,), 60), smoke=Budget(300, (0,), 3)),
    algos=Tiered(full=("grpo",), quick=("grpo",), smoke=("grpo",)),
    options=(
        Option("--groups", Tiered(full=[4, 8, 16], quick=[4, 8, 16], smoke=[4]), "group sizes", type=int, nargs="+"),
        Option("--kl", 0.05, "kl_coef of the KL variant", type=float),
        setup_option("every variant"),
    ),
    points=points,
    summarise=summarise,
    plot=plot,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
