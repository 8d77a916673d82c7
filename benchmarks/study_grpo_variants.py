"""Caveat study 5: which GRPO design choices matter here? Group size, std normalisation, KL, supervision.

One factor at a time around the default GRPO of ``baselines.training.TrainConfig`` (whatever its group size,
std normalisation, KL coefficient and supervision are; the table header prints them), on EDO-v0, with the same env-step budget, seeds and
held-out tasks for every variant:

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

    python benchmarks/study_grpo_variants.py            # full: 3 seeds x 150k steps, 200 tasks
    python benchmarks/study_grpo_variants.py --quick    # 1 seed x 15k steps, 60 tasks
    python benchmarks/study_grpo_variants.py --kl 0.1 --groups 4 8 16 32 --seeds 0 1

Results: ``benchmarks/results/study_grpo_variants.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``variants`` (name -> ``overrides`` and figures), ``conclusion``, ``runs``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.study_common import (  # noqa: E402
    collapsed_note,
    command,
    finish,
    fmt_frac,
    fmt_stats,
    header,
    mode_of,
    pyplot,
    resolve_common,
    run_all,
    study_parser,
    summarise_runs,
    train_spec,
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


def markdown(settings: dict[str, Any], results: dict[str, Any]) -> str:
    lines = header(
        "Caveat study: GRPO variants (one factor at a time)",
        settings["command"],
        settings["mode"],
        f"EDO-v0, {settings['timesteps']:,} env steps per run, seeds {settings['seeds']}, evaluation on "
        f"{settings['eval_episodes']} held-out tasks. Base = TrainConfig default GRPO ({settings['base']}). Group-size "
        "variants keep the episodes per rollout constant. Success: mean over seeds (95% CI when more than one seed); "
        "times: medians, evaluation excluded.",
    )
    lines += ["", "| variant | overrides | success | return | calls/ep | train wall (s) | rollout / update (s) "
              "| dropped groups | all-fail groups | collapsed runs |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, v in results.items():
        ov = ", ".join(f"{k}={val}" for k, val in v["overrides"].items()) or "-"
        lines.append(
            f"| {name} | {ov} | {fmt_stats(v['success'])}{collapsed_note(v['calls'])} | {fmt_stats(v['return'])} "
            f"| {v['calls']:.1f} | {v['wall_time_s']:.0f} | {v['rollout_s']:.0f} / {v['update_s']:.0f} "
            f"| {fmt_frac(v['dropped_group_fraction'])} | {fmt_frac(v['all_fail_group_fraction'])} "
            f"| {v['collapsed_runs']}/{len(v['seeds'])} |"
        )
    base = results[BASE]
    lines += ["", "## What this shows", ""]
    for name, v in results.items():
        if name == BASE:
            continue
        d = v["success"]["mean"] - base["success"]["mean"]
        t = v["wall_time_s"] / base["wall_time_s"] if base["wall_time_s"] > 0 else float("nan")
        lines.append(f"- {name}: success {d:+.3f} versus base, train wall time x{t:.2f}.")
    best = max(results, key=lambda n: results[n]["success"]["mean"])
    lines.append(f"- Highest mean success: {best} ({results[best]['success']['mean']:.3f}).")
    if len(settings["seeds"]) < 2:
        lines.append("- One seed per variant: no interval over seeds; single-seed differences are not evidence.")
    return "\n".join(lines)


def plot(settings: dict[str, Any], results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    names = list(results)
    x = np.arange(len(names))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    means = [results[n]["success"]["mean"] for n in names]
    if len(settings["seeds"]) > 1:
        ci = [(max(0.0, results[n]["success"]["ci95"][0]), min(1.0, results[n]["success"]["ci95"][1])) for n in names]
        err = np.array([[m - lo, hi - m] for (lo, hi), m in zip(ci, means, strict=True)]).T  # CI clipped to [0, 1]
        axes[0].bar(x, means, yerr=err, capsize=3)
    else:
        axes[0].bar(x, means)
    axes[0].set_ylabel("held-out success")
    axes[0].set_ylim(0, 1.03)
    axes[1].bar(x, [results[n]["wall_time_s"] for n in names], color="C1")
    axes[1].set_ylabel("train wall time (s, median)")
    for ax in axes:
        ax.set_xticks(x, names, rotation=25, ha="right", fontsize=8)
    fig.suptitle(f"GRPO variants on EDO-v0, {settings['timesteps']:,} steps/run, seeds {settings['seeds']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--groups", type=int, nargs="+", default=[4, 8, 16], help="group sizes")
    parser.add_argument("--kl", type=float, default=0.05, help="kl_coef of the KL variant")
    args = parser.parse_args(argv)
    resolve_common(args, seeds=([0, 1, 2], [0], [0]), timesteps=(150_000, 15_000, 300), episodes=(200, 60, 3))
    groups = args.groups if not args.tiny else [g for g in args.groups if g <= 4] or args.groups[:1]
    table = variants(groups, args.kl)
    out_dir = Path(args.out_dir)
    settings = {"command": command("study_grpo_variants.py", argv), "mode": mode_of(args), "seeds": args.seeds,
                "timesteps": args.timesteps, "eval_episodes": args.eval_episodes, "env_id": "EDO-v0", "base": base_description(),
                "variants": table}  # fmt: skip
    slug = {name: name.replace(" ", "_").replace("(", "").replace(")", "").replace("=", "").replace(".", "") for name in table}
    specs = [(f"{slug[name]}-s{s}", train_spec("grpo", s, "EDO-v0", args.timesteps, args.eval_episodes, train_overrides=ov))
             for s in args.seeds for name, ov in table.items()]  # fmt: skip
    records = run_all(specs, out_dir, NAME, isolated=True)  # wall times are compared: one process per run
    results = {}
    for name, ov in table.items():
        recs = [records[f"{slug[name]}-s{s}"] for s in args.seeds]
        results[name] = {"overrides": ov, **summarise_runs(recs),
                         "rollout_s": float(np.median([r["rollout_s"] for r in recs])),
                         "update_s": float(np.median([r["update_s"] for r in recs]))}  # fmt: skip
    base = results[BASE]
    concl = {
        "success_minus_base": {n: v["success"]["mean"] - base["success"]["mean"] for n, v in results.items() if n != BASE},
        "wall_time_over_base": {n: v["wall_time_s"] / base["wall_time_s"] for n, v in results.items() if n != BASE and base["wall_time_s"] > 0},
        "best_variant": max(results, key=lambda n: results[n]["success"]["mean"]),
    }  # fmt: skip
    md = markdown(settings, results)
    payload = {"settings": settings, "variants": results, "conclusion": concl, "runs": records}
    plot(settings, results, out_dir / f"{NAME}.png")
    finish(NAME, payload, md, out_dir)
    return payload


if __name__ == "__main__":
    main()
