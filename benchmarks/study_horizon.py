"""Caveat study 1: horizon. Does GRPO keep up with PPO as tasks get longer?

GRPO's advantage is the group-normalised episode outcome. As the number of hops grows, success gets rarer, more
groups have no successful member, and the only signal left in a group is the spread of its costs. This study
trains GRPO, PPO (and MaskablePPO in the full run) on multihop-only tasks with exactly ``h`` hops
(``tasks={"families": ["multihop"], "min_hops": h, "max_hops": h}``) for h = 2..12, with the same env-step
budget and seeds at every h, and evaluates each model on the first ``eval_episodes`` held-out tasks. The oracle,
greedy router, static pipeline and random policies are evaluated on the same tasks for reference. For GRPO it
also reports, averaged over the rollouts of training, the fraction of groups dropped from the update because all
returns tied, and the fraction of groups in which every member failed.

Usage::

    python benchmarks/study_horizon.py            # full: h = 2,4,...,12, 3 seeds, GRPO/PPO/MaskablePPO, 150k steps
    python benchmarks/study_horizon.py --quick    # h = 2,4,8,12, 2 seeds, GRPO/PPO, 12k steps, 60 tasks
    python benchmarks/study_horizon.py --hops 2 6 12 --algos grpo ppo --seeds 0 1

Results: ``benchmarks/results/study_horizon.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``results`` (per h: ``algos`` -> figures, ``heuristics`` -> EvalResult dicts), ``gap_grpo_minus_ppo``,
``conclusion``, ``runs``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.study_common import (  # noqa: E402
    collapsed_note,
    command,
    finish,
    fmt_eval,
    fmt_frac,
    fmt_stats,
    header,
    heuristic_results,
    mode_of,
    pick,
    pyplot,
    resolve_common,
    run_all,
    study_parser,
    summarise_runs,
    train_spec,
)

NAME = "study_horizon"
ALGOS = ("grpo", "ppo", "maskable_ppo")
HEURISTICS = ("oracle", "greedy_router", "static_pipeline", "random")


def grpo_config() -> str:
    from baselines.training import TrainConfig

    d = TrainConfig()
    return f"group size {d.group_size}, normalize_std={d.normalize_std}, ent_coef={d.ent_coef:g}, kl_coef={d.kl_coef:g}"


def env_kwargs(h: int) -> dict[str, Any]:
    return {"tasks": {"families": ["multihop"], "min_hops": h, "max_hops": h}}


def conclusion(hops: list[int], results: dict[str, Any]) -> dict[str, Any]:
    """Where GRPO's mean held-out success stops being above PPO's, and where its groups stop carrying an outcome."""
    out: dict[str, Any] = {"grpo_above_ppo": [], "tied": [], "grpo_below_ppo": [], "both_zero": [],
                           "first_h_grpo_not_above_ppo": None, "first_h_grpo_all_fail_ge_0.9": None}  # fmt: skip
    for h in hops:
        algos = results[str(h)]["algos"]
        if "grpo" in algos and "ppo" in algos:
            g, p = algos["grpo"]["success"]["mean"], algos["ppo"]["success"]["mean"]
            out["grpo_above_ppo" if g > p + 1e-9 else "grpo_below_ppo" if g < p - 1e-9 else "tied"].append(h)
            if g == 0 and p == 0:
                out["both_zero"].append(h)
            if g <= p + 1e-9 and out["first_h_grpo_not_above_ppo"] is None:
                out["first_h_grpo_not_above_ppo"] = h
        fail = algos.get("grpo", {}).get("all_fail_group_fraction")
        if fail is not None and fail >= 0.9 and out["first_h_grpo_all_fail_ge_0.9"] is None:
            out["first_h_grpo_all_fail_ge_0.9"] = h
    return out


def markdown(settings: dict[str, Any], results: dict[str, Any], concl: dict[str, Any]) -> str:
    algos, hops = settings["algos"], settings["hops"]
    lines = header(
        "Caveat study: success versus horizon (multihop tasks with exactly h hops)",
        settings["command"],
        settings["mode"],
        f"Budget: {settings['timesteps']:,} env steps per run at every h, seeds {settings['seeds']}, evaluation on "
        f"{settings['eval_episodes']} held-out tasks (deterministic actions). GRPO as configured by TrainConfig "
        f"({settings['grpo_config']}). Success: mean over seeds (95% CI when more than one seed); heuristics: success "
        "(Wilson 95% CI over tasks).",
    )
    lines += ["", "| h | " + " | ".join(algos) + " | " + " | ".join(HEURISTICS) + " |",
              "|---|" + "---|" * (len(algos) + len(HEURISTICS))]  # fmt: skip
    for h in hops:
        r = results[str(h)]
        cells = [fmt_stats(r["algos"][a]["success"]) + collapsed_note(r["algos"][a]["calls"]) for a in algos]
        cells += [fmt_eval(r["heuristics"][n]) for n in HEURISTICS]
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    if "grpo" in algos:
        lines += ["", "GRPO group statistics (means over the rollouts of training; 'all fail' = no member succeeded, "
                  "so the group-relative advantage only ranks costs; 'dropped' = all returns tied, no update):", "",
                  "| h | dropped groups | all-fail groups | all-success groups | GRPO calls/ep | GRPO tokens/ep |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for h in hops:
            g = results[str(h)]["algos"]["grpo"]
            lines.append(
                f"| {h} | {fmt_frac(g['dropped_group_fraction'])} | {fmt_frac(g['all_fail_group_fraction'])} "
                f"| {fmt_frac(g['all_success_group_fraction'])} | {g['calls']:.1f} | {g['tokens']:.0f} |"
            )
    lines += ["", "## What this shows", ""]
    if "grpo" in algos and "ppo" in algos:
        first = concl["first_h_grpo_not_above_ppo"]
        lines.append(
            f"- GRPO's mean success is above PPO's at h = {concl['grpo_above_ppo'] or 'none'}, equal at "
            f"h = {concl['tied'] or 'none'} and below at h = {concl['grpo_below_ppo'] or 'none'}; the first h at which "
            f"GRPO is no longer above PPO is {first if first is not None else 'none in the range'}."
        )
        if concl["both_zero"]:
            lines.append(f"- Both GRPO and PPO have zero held-out success at h = {concl['both_zero']}: at this budget "
                         "the comparison says nothing there.")  # fmt: skip
    if "grpo" in algos:
        h90 = concl["first_h_grpo_all_fail_ge_0.9"]
        lines.append(
            "- The first h at which, averaged over training, at least 90% of GRPO's groups had no successful member "
            f"(so the group-relative advantage only ranks costs): {h90 if h90 is not None else 'none in the range'}."
        )
    if len(settings["seeds"]) < 2:
        lines.append("- One seed per cell: no interval over seeds; differences inside the heuristics' Wilson "
                     f"interval width (about +-{_wilson_half(settings['eval_episodes']):.2f} at p=0.5) are not evidence.")  # fmt: skip
    return "\n".join(lines)


def _wilson_half(n: int) -> float:
    return 1.96 * (0.25 / n) ** 0.5


def plot(settings: dict[str, Any], results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    hops = settings["hops"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for algo in settings["algos"]:
        st = [results[str(h)]["algos"][algo]["success"] for h in hops]
        axes[0].plot(hops, [s["mean"] for s in st], marker="o", label=algo)
        if len(settings["seeds"]) > 1:
            lo, hi = [max(0.0, s["ci95"][0]) for s in st], [min(1.0, s["ci95"][1]) for s in st]  # clipped to [0, 1]
            axes[0].fill_between(hops, lo, hi, alpha=0.2)
    for name in HEURISTICS:
        axes[0].plot(hops, [results[str(h)]["heuristics"][name]["success_rate"] for h in hops], ls=":", marker=".", label=name)
    axes[0].set_xlabel("hops h")
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_ylabel("held-out success rate (band: 95% CI over seeds, clipped)")
    axes[0].legend(fontsize=8)
    if "grpo" in settings["algos"]:
        for key, label in (("all_fail_group_fraction", "all members failed"), ("dropped_group_fraction", "dropped (tied)")):
            vals = [results[str(h)]["algos"]["grpo"][key] for h in hops]
            axes[1].plot(hops, [float("nan") if v is None else v for v in vals], marker="o", label=label)
        axes[1].set_ylim(-0.05, 1.05)
        axes[1].set_xlabel("hops h")
        axes[1].set_ylabel("fraction of GRPO groups (mean over rollouts)")
        axes[1].legend(fontsize=8)
    fig.suptitle(f"Success vs horizon ({settings['timesteps']:,} steps/run, seeds {settings['seeds']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--hops", type=int, nargs="+", default=None, help="horizons (hops per task)")
    parser.add_argument("--algos", nargs="+", default=None, choices=ALGOS)
    args = parser.parse_args(argv)
    resolve_common(args, seeds=([0, 1, 2], [0, 1], [0]), timesteps=(150_000, 12_000, 300), episodes=(200, 60, 3))
    hops = args.hops or pick(args, [2, 4, 6, 8, 10, 12], [2, 4, 8, 12], [2, 4])
    algos = args.algos or pick(args, list(ALGOS), ["grpo", "ppo"], ["grpo"])
    out_dir = Path(args.out_dir)
    settings = {"command": command("study_horizon.py", argv), "mode": mode_of(args), "hops": hops, "algos": algos,
                "seeds": args.seeds, "timesteps": args.timesteps, "eval_episodes": args.eval_episodes,
                "heuristics": list(HEURISTICS), "env_id": "EDO-v0", "grpo_config": grpo_config(), "env_kwargs_by_h": {h: env_kwargs(h) for h in hops}}  # fmt: skip

    specs = [(f"h{h}-{algo}-s{seed}", train_spec(algo, seed, "EDO-v0", args.timesteps, args.eval_episodes, env_kwargs=env_kwargs(h)))
             for h in hops for seed in args.seeds for algo in algos]  # fmt: skip
    records = run_all(specs, out_dir, NAME)
    results: dict[str, Any] = {}
    for h in hops:
        print(f"heuristics at h={h} ...", flush=True)
        results[str(h)] = {
            "algos": {a: summarise_runs([records[f"h{h}-{a}-s{s}"] for s in args.seeds]) for a in algos},
            "heuristics": heuristic_results("EDO-v0", env_kwargs(h), list(HEURISTICS), args.eval_episodes),
        }
    gap = None
    if "grpo" in algos and "ppo" in algos:
        gap = {str(h): results[str(h)]["algos"]["grpo"]["success"]["mean"] - results[str(h)]["algos"]["ppo"]["success"]["mean"]
               for h in hops}  # fmt: skip
    concl = conclusion(hops, results)
    md = markdown(settings, results, concl)
    payload = {"settings": settings, "results": results, "gap_grpo_minus_ppo": gap, "conclusion": concl, "runs": records}
    plot(settings, results, out_dir / f"{NAME}.png")
    finish(NAME, payload, md, out_dir)
    return payload


if __name__ == "__main__":
    main()
