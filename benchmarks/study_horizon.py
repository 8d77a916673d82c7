"""Caveat study 1: horizon. Does GRPO keep up with PPO as tasks get longer?

GRPO's advantage is the group-normalised episode outcome. As the number of hops grows, success gets rarer, more
groups have no successful member, and the only signal left in a group is the spread of its costs. This study
trains GRPO, GiGPO, PPO and MaskablePPO (GRPO and PPO in the quick tier) on multihop-only tasks with exactly ``h`` hops
(``tasks={"families": ["multihop"], "min_hops": h, "max_hops": h}``) for h = 2..12, with the same env-step
budget and seeds at every h, and evaluates each model on the first ``eval_episodes`` held-out tasks. Every learned
run trains with ``--setup`` (default ``make-train``: ``make train``'s settings, a warm start cloned from the static pipeline's logs; see ``grpo_vs_ppo.SETUPS``). The oracle, rule-based, greedy router, static
pipeline and random policies, and ``plan_check_text`` (which reads the text), are evaluated on the same tasks for
reference. For GRPO it
also reports, averaged over the rollouts of training, the fraction of groups dropped from the update because all
returns tied, and the fraction of groups in which every member failed.

**Success-filter protocol** (``--protocols ... success_filter``, in the full tier): GRPO and GiGPO trained again at
every h with ``filter_on="success"`` and ``dynamic_sampling=True``: groups whose members all failed (or all
succeeded) are dropped, as DAPO drops prompts of accuracy 0 or 1, and more groups are drawn until enough carry an
outcome difference. With the default return filter the cost terms make returns of an all-fail group differ, so those
groups stay in the update and push towards the cheapest failure, submitting at once. Results under
``<algo>_success_filter`` keys.

**Curriculum protocol** (``--protocols ... curriculum``, in the full tier, at h >= 4): every algorithm trained on
multihop tasks of 2 to ``h`` hops with a hop curriculum (:mod:`baselines.curriculum`: 2-hop tasks for the first fifth
of the steps, up to ``max(3, h // 2)`` hops until two fifths, then all of them) and evaluated on the same exactly-h
held-out tasks as the default protocol. Results under ``<algo>_curriculum`` keys.

Usage::

    python -m benchmarks.study_horizon            # full: h = 2,4,...,12, 3 seeds, GRPO/GiGPO/PPO/MaskablePPO, 150k steps
    python -m benchmarks.study_horizon --quick    # h = 2,4,8,12, 2 seeds, GRPO/PPO, 12k steps, 60 tasks
    python -m benchmarks.study_horizon --hops 2 6 12 --algos grpo ppo --seeds 0 1
    python -m benchmarks.study_horizon --protocols success_filter   # only the success-filter runs
    python -m benchmarks.study_horizon --setup train-defaults        # TrainConfig's defaults, no levers

Results: ``benchmarks/results/study_horizon.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``results`` (per h: ``algos`` -> figures, ``heuristics`` -> EvalResult dicts), ``gap_grpo_minus_ppo``,
``conclusion``, ``runs``; and ``long_horizon.json`` in the fixed schema ``{"hops": [...], "algos": {name: {"success",
"success_ci95", "return"}}, "heuristics": {name: {"success"}}}`` (one value per h; ``null`` where a cell has no run).

Budget (full): 150k env steps per run, half of ``make train``'s 300k. The default protocol is 72 runs (6 h x 4
algorithms x 3 seeds), the three protocols 168 runs, about 3.3 run-hours (a run takes about 70 s on one core of a
2-core x86-64 machine); every finished run is kept, so the study resumes where it stopped. At 2 hops every algorithm
has converged well before 150k (see the quick tier), and the question at 6-12 hops is whether any signal arrives at
all, which the per-rollout group statistics answer.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import write_json_atomic
from benchmarks.grpo_vs_ppo import SETUPS, setup_option, setup_settings
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered
from benchmarks.summary import (
    difference,
    fmt_eval,
    fmt_figures,
    fmt_frac,
    header,
    heuristic_results,
    nan_if_none,
    pyplot,
    success_mean,
    summarise_runs,
)

NAME = "study_horizon"
ALGOS = ("grpo", "gigpo", "ppo", "maskable_ppo")
HEURISTICS = ("oracle", "rule_based", "greedy_router", "static_pipeline", "random")
#: Hand-written policies that read the text (``info_text=True``), evaluated beside HEURISTICS: ``plan_check_text`` is
#: the teacher of the ``levers`` setup's warm start (0.3.0's) and the
#: best text reader.
TEXT_REFERENCES = ("plan_check_text",)
REFERENCES = HEURISTICS + TEXT_REFERENCES
#: The issue's fixed-schema file, written beside study_horizon.json.
LONG_HORIZON = "long_horizon.json"
#: Training protocols: ``default`` (every algorithm as configured by TrainConfig) and ``success_filter`` (GRPO and
#: GiGPO with DAPO's filter on success and dynamic sampling).
PROTOCOLS = ("default", "success_filter", "curriculum")
SUCCESS_FILTER = {"filter_on": "success", "dynamic_sampling": True}
SUCCESS_FILTER_ALGOS = ("grpo", "gigpo")
#: The curriculum protocol's shortest tasks.
CURRICULUM_MIN_HOPS = 2


def curriculum(h: int) -> list[list[float | int]]:
    """The hop curriculum at horizon ``h`` (``TrainConfig.hop_curriculum``): 2-hop tasks for the first fifth of the
    steps, up to ``h // 2`` hops (at least 3) until two fifths, then every task (2 to ``h`` hops)."""
    return [[0.2, CURRICULUM_MIN_HOPS], [0.4, max(CURRICULUM_MIN_HOPS + 1, h // 2)]]


def curriculum_env_kwargs(h: int) -> dict[str, Any]:
    """The curriculum protocol's training tasks: multihop with 2 to ``h`` hops."""
    return {"tasks": {"families": ["multihop"], "min_hops": CURRICULUM_MIN_HOPS, "max_hops": h}}


#: The target of the long-horizon issue: GiGPO's success at this h at least MARGIN above GRPO's and above rule_based's.
TARGET_H, TARGET_MARGIN = 8, 0.15


def grpo_config(overrides: dict[str, Any] | None = None) -> str:
    """GRPO's settings that shape its groups, as a run with the setup's ``overrides`` gets them."""
    from baselines.training import TrainConfig, settings_for

    d = TrainConfig(**settings_for("grpo", dict(overrides or {})))
    return f"group size {d.group_size}, normalize_std={d.normalize_std}, ent_coef={d.ent_coef:g}, kl_coef={d.kl_coef:g}"


def env_kwargs(h: int) -> dict[str, Any]:
    return {"tasks": {"families": ["multihop"], "min_hops": h, "max_hops": h}}


def point_id(h: int, protocol: str = "default") -> str:
    return {"default": f"h{h}", "success_filter": f"h{h}sf", "curriculum": f"h{h}cur"}[protocol]


def variant_algos(algos: Sequence[str]) -> tuple[str, ...]:
    """The algorithms trained under the success-filter protocol (those of the study that have the filter)."""
    return tuple(a for a in algos if a in SUCCESS_FILTER_ALGOS)


def points(cfg: StudyConfig) -> dict[str, Point]:
    _, setup_env, setup_overrides = SETUPS[cfg.options.setup]
    out: dict[str, Point] = {}
    for h in cfg.options.hops:
        exactly_h = {**setup_env, **env_kwargs(h)}
        if "default" in cfg.options.protocols:
            out[point_id(h)] = Point(env_kwargs=exactly_h, train_overrides=dict(setup_overrides))
        if "success_filter" in cfg.options.protocols and variant_algos(cfg.algos):
            out[point_id(h, "success_filter")] = Point(
                env_kwargs=exactly_h, train_overrides={**setup_overrides, **SUCCESS_FILTER}, algos=variant_algos(cfg.algos)
            )
        if "curriculum" in cfg.options.protocols and h > CURRICULUM_MIN_HOPS + 1:
            # trained on 2..h hops, short ones first; evaluated on the same exactly-h tasks as the default protocol
            out[point_id(h, "curriculum")] = Point(
                env_kwargs={**setup_env, **curriculum_env_kwargs(h)},
                train_overrides={**setup_overrides, "hop_curriculum": curriculum(h)},
                extra_eval=(("EDO-v0", exactly_h),),
            )
    return out


def reference_results(h: int, episodes: int) -> dict[str, dict[str, Any]]:
    """:data:`HEURISTICS` and :data:`TEXT_REFERENCES` on the first ``episodes`` held-out exactly-h tasks."""
    from baselines.evaluation import evaluate_heuristic, heldout_task_ids, make_eval_env
    from baselines.probes import TEXT_PROBES
    from benchmarks.bench_lib import EVAL_SEED

    out = heuristic_results("EDO-v0", env_kwargs(h), HEURISTICS, episodes)
    env = make_eval_env("EDO-v0", info_text=True, **env_kwargs(h))
    try:
        ids = heldout_task_ids(env, episodes)
        out |= {n: evaluate_heuristic(TEXT_PROBES[n](), env, ids, seed=EVAL_SEED).as_dict() for n in TEXT_REFERENCES}
    finally:
        env.close()
    return out


def on_exactly_h(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Curriculum records with ``final`` replaced by their evaluation on the exactly-h tasks (``extra_eval``)."""
    out = []
    for r in records:
        e = r["extra_eval"][0]["result"]
        final = {"success": e["success_rate"], "return": e["mean_return"], "tokens": e["tokens"], "calls": e["calls"],
                 "latency_s": e["latency_s"]}  # fmt: skip
        out.append({**r, "final": final})
    return out


def target_check(hops: list[int], results: dict[str, Any], key: str) -> dict[str, Any] | None:
    """GiGPO's mean success at TARGET_H against GRPO's + TARGET_MARGIN and rule_based's (``key``: ``algos`` or
    ``algos_success_filter``); None when h = TARGET_H or a run is missing."""
    if TARGET_H not in hops:
        return None
    cell = results[str(TARGET_H)]
    g, r = success_mean(cell.get(key, {}).get("gigpo")), success_mean(cell.get(key, {}).get("grpo"))
    rule = cell["heuristics"]["rule_based"]["success_rate"]
    if g is None or r is None:
        return None
    return {"h": TARGET_H, "gigpo": g, "grpo": r, "rule_based": rule, "gigpo_minus_grpo": g - r, "margin": TARGET_MARGIN,
            "met": bool(g >= r + TARGET_MARGIN and g > rule)}  # fmt: skip


def conclusion(hops: list[int], results: dict[str, Any]) -> dict[str, Any]:
    """Where GRPO's mean held-out success stops being above PPO's, and where its groups stop carrying an outcome."""
    out: dict[str, Any] = {"grpo_above_ppo": [], "tied": [], "grpo_below_ppo": [], "both_zero": [],
                           "first_h_grpo_not_above_ppo": None, "first_h_grpo_all_fail_ge_0.9": None,
                           "best_learned": {}}  # fmt: skip
    for h in hops:
        algos = results[str(h)]["algos"]
        g, p = success_mean(algos.get("grpo")), success_mean(algos.get("ppo"))
        if g is not None and p is not None:
            out["grpo_above_ppo" if g > p + 1e-9 else "grpo_below_ppo" if g < p - 1e-9 else "tied"].append(h)
            if g == 0 and p == 0:
                out["both_zero"].append(h)
            if g <= p + 1e-9 and out["first_h_grpo_not_above_ppo"] is None:
                out["first_h_grpo_not_above_ppo"] = h
        means = {a: m for a in algos if (m := success_mean(algos.get(a))) is not None}
        if means:
            best = max(means, key=means.__getitem__)
            refs = results[str(h)]["heuristics"]
            out["best_learned"][str(h)] = {"algo": best, "success": means[best],
                                           **{n: refs[n]["success_rate"] for n in ("rule_based", *TEXT_REFERENCES) if n in refs}}  # fmt: skip
        fail = (algos.get("grpo") or {}).get("all_fail_group_fraction")
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
        f"{settings['eval_episodes']} held-out tasks (deterministic actions). Every learned run trains with the setup "
        f"'{settings['setup']}' ({settings['setup_description']}); GRPO "
        f"({settings['grpo_config']}). Success: mean over seeds (95% CI when more than one seed); heuristics: success "
        "(Wilson 95% CI over tasks).",
    )
    refs = [n for n in REFERENCES if n in results[str(hops[0])]["heuristics"]]
    lines += ["", "| h | " + " | ".join(algos) + " | " + " | ".join(refs) + " |",
              "|---|" + "---|" * (len(algos) + len(refs))]  # fmt: skip
    for h in hops:
        r = results[str(h)]
        cells = [fmt_figures(r["algos"][a]) for a in algos] + [fmt_eval(r["heuristics"][n]) for n in refs]
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    variant = variant_algos(algos) if "success_filter" in settings.get("protocols", ()) else ()
    if variant:
        lines += ["", "Success-filter protocol: the same runs with `filter_on=\"success\"` and `dynamic_sampling=True` "
                  "(groups whose members all failed or all succeeded are dropped and replaced, DAPO's criterion); "
                  "'dropped' below is the fraction of drawn groups dropped that way.", "",
                  "| h | " + " | ".join(f"{a} (success filter)" for a in variant) + " | dropped groups (grpo) |",
                  "|---|" + "---|" * (len(variant) + 1)]  # fmt: skip
        for h in hops:
            r = results[str(h)]["algos_success_filter"]
            g = r.get("grpo")
            dropped = fmt_frac(g["dropped_group_fraction"]) if g is not None else "missing"
            lines.append(f"| {h} | " + " | ".join(fmt_figures(r[a]) for a in variant) + f" | {dropped} |")
    cur_hops = [h for h in hops if results[str(h)].get("algos_curriculum")]
    if cur_hops:
        lines += ["", "Curriculum protocol: trained on multihop tasks of 2 to h hops with a hop curriculum (`TrainConfig."
                  "hop_curriculum`: 2 hops for the first fifth of the steps, up to max(3, h // 2) until two fifths, then "
                  "all), evaluated on the same exactly-h tasks as above.", "",
                  "| h | " + " | ".join(f"{a} (curriculum)" for a in algos) + " |", "|---|" + "---|" * len(algos)]  # fmt: skip
        for h in cur_hops:
            r = results[str(h)]["algos_curriculum"]
            lines.append(f"| {h} | " + " | ".join(fmt_figures(r.get(a)) for a in algos) + " |")
    for name, key in (("default", "algos"), ("success filter", "algos_success_filter"), ("curriculum", "algos_curriculum")):
        if key == "algos_success_filter" and not variant:
            continue
        t = target_check(hops, results, key)
        if t is not None:
            lines.append(
                f"\nTarget at h = {t['h']} ({name} protocol): GiGPO {t['gigpo']:.3f} vs GRPO {t['grpo']:.3f} "
                f"(difference {t['gigpo_minus_grpo']:+.3f}, needed >= +{t['margin']:.2f}) and rule_based {t['rule_based']:.3f}: "
                + ("met." if t["met"] else "NOT met.")
            )
    if "grpo" in algos:
        lines += ["", "GRPO group statistics (means over the rollouts of training; 'all fail' = no member succeeded, "
                  "so the group-relative advantage only ranks costs; 'dropped' = all returns tied, no update):", "",
                  "| h | dropped groups | all-fail groups | all-success groups | GRPO calls/ep | GRPO tokens/ep |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for h in hops:
            g = results[str(h)]["algos"]["grpo"]
            if g is None:
                lines.append(f"| {h} | missing | missing | missing | missing | missing |")
                continue
            lines.append(
                f"| {h} | {fmt_frac(g['dropped_group_fraction'])} | {fmt_frac(g['all_fail_group_fraction'])} "
                f"| {fmt_frac(g['all_success_group_fraction'])} | {g['calls']:.1f} | {g['tokens']:.0f} |"
            )
    lines += ["", "## What this shows", ""]
    if concl.get("best_learned"):
        parts = []
        for h, b in concl["best_learned"].items():
            against = ", ".join(f"{n} {b[n]:.3f}" for n in ("rule_based", *TEXT_REFERENCES) if n in b)
            parts.append(f"h = {h}: {b['algo']} {b['success']:.3f} ({against})")
        lines.append(
            "- The best learned policy of the default protocol against the hand-written ones: " + "; ".join(parts) + "."
        )
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


def long_horizon(hops: list[int], algos: Sequence[str], results: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``{"hops": [...], "algos": {name: {"success", "success_ci95", "return"}}, "heuristics": {name: {"success"}}}``,
    one entry per h (``None`` where a cell has no finished run), plus the settings that produced it. The
    success-filter protocol adds ``<algo>_success_filter`` entries to ``algos``; ``targets`` holds the 8-hop check."""

    def cell(algo: str, h: int, key: str, group: str = "algos") -> Any:
        fig = results[str(h)].get(group, {}).get(algo)
        if fig is None:
            return None
        return list(fig["success"]["ci95"]) if key == "ci95" else fig[key]["mean"]

    def series(algo: str, group: str = "algos") -> dict[str, list[Any]]:
        return {
            "success": [cell(algo, h, "success", group) for h in hops],
            "success_ci95": [cell(algo, h, "ci95", group) for h in hops],
            "return": [cell(algo, h, "return", group) for h in hops],
        }

    by_algo = {a: series(a) for a in algos}
    if "success_filter" in settings.get("protocols", ()):
        by_algo |= {f"{a}_success_filter": series(a, "algos_success_filter") for a in variant_algos(algos)}
    if "curriculum" in settings.get("protocols", ()):
        by_algo |= {f"{a}_curriculum": series(a, "algos_curriculum") for a in algos}
    return {
        "hops": hops,
        "algos": by_algo,
        "targets": {
            "default": target_check(hops, results, "algos"),
            "success_filter": target_check(hops, results, "algos_success_filter"),
            "curriculum": target_check(hops, results, "algos_curriculum"),
        },  # fmt: skip
        "heuristics": {n: {"success": [results[str(h)]["heuristics"][n]["success_rate"] for h in hops]} for n in REFERENCES},
        "settings": {k: settings[k] for k in ("command", "timesteps", "seeds", "eval_episodes") if k in settings},
    }


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    hops = list(cfg.options.hops)
    protocols = list(cfg.options.protocols)
    settings = {**cfg.settings(), "hops": hops, "heuristics": list(REFERENCES), "env_id": "EDO-v0",
                "grpo_config": grpo_config(SETUPS[cfg.options.setup][2]), "env_kwargs_by_h": {h: env_kwargs(h) for h in hops}, "protocols": protocols,
                "success_filter_overrides": SUCCESS_FILTER,
                "curriculum_by_h": {h: curriculum(h) for h in hops if h > CURRICULUM_MIN_HOPS + 1},
                "curriculum_env_kwargs_by_h": {h: curriculum_env_kwargs(h) for h in hops if h > CURRICULUM_MIN_HOPS + 1},
                **setup_settings(cfg.options.setup)}  # fmt: skip
    results: dict[str, Any] = {}
    for h in hops:
        print(f"heuristics at h={h} ...", flush=True)
        results[str(h)] = {
            "algos": {a: summarise_runs(runs.seeds(point_id(h), a)) for a in cfg.algos},
            "heuristics": reference_results(h, cfg.budget.eval_episodes),
        }
        if "success_filter" in protocols:
            results[str(h)]["algos_success_filter"] = {
                a: summarise_runs(runs.seeds(point_id(h, "success_filter"), a)) for a in variant_algos(cfg.algos)
            }
        if "curriculum" in protocols and h > CURRICULUM_MIN_HOPS + 1:
            results[str(h)]["algos_curriculum"] = {
                a: summarise_runs(on_exactly_h(runs.seeds(point_id(h, "curriculum"), a))) for a in cfg.algos
            }
    gap = None
    if "grpo" in cfg.algos and "ppo" in cfg.algos:
        gap = {str(h): difference(success_mean(results[str(h)]["algos"]["grpo"]), success_mean(results[str(h)]["algos"]["ppo"]))
               for h in hops}  # fmt: skip
    concl = conclusion(hops, results)
    write_json_atomic(cfg.out_dir / LONG_HORIZON, long_horizon(hops, cfg.algos, results, settings))
    payload = {"settings": settings, "results": results, "gap_grpo_minus_ppo": gap, "conclusion": concl,
               "runs": runs.by_key()}  # fmt: skip
    return payload, markdown(settings, results, concl)


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    settings, results = payload["settings"], payload["results"]
    plt = pyplot()
    hops = settings["hops"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for algo in settings["algos"]:
        st = [(results[str(h)]["algos"][algo] or {}).get("success") for h in hops]
        axes[0].plot(hops, nan_if_none([None if s is None else s["mean"] for s in st]), marker="o", label=algo)
        if len(settings["seeds"]) > 1:  # CI clipped to [0, 1]
            lo = nan_if_none([None if s is None else max(0.0, s["ci95"][0]) for s in st])
            hi = nan_if_none([None if s is None else min(1.0, s["ci95"][1]) for s in st])
            axes[0].fill_between(hops, lo, hi, alpha=0.2)
    for name in REFERENCES:
        axes[0].plot(hops, [results[str(h)]["heuristics"][name]["success_rate"] for h in hops], ls=":", marker=".", label=name)
    axes[0].set_xlabel("hops h")
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_ylabel("held-out success rate (band: 95% CI over seeds, clipped)")
    axes[0].legend(fontsize=8)
    if "grpo" in settings["algos"]:
        for key, label in (("all_fail_group_fraction", "all members failed"), ("dropped_group_fraction", "dropped (tied)")):
            vals = [(results[str(h)]["algos"]["grpo"] or {}).get(key) for h in hops]
            axes[1].plot(hops, nan_if_none(vals), marker="o", label=label)
        axes[1].set_ylim(-0.05, 1.05)
        axes[1].set_xlabel("hops h")
        axes[1].set_ylabel("fraction of GRPO groups (mean over rollouts)")
        axes[1].legend(fontsize=8)
    fig.suptitle(f"Success vs horizon ({settings['timesteps']:,} steps/run, seeds {settings['seeds']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(150_000, (0, 1, 2), 200), quick=Budget(12_000, (0, 1), 60), smoke=Budget(300, (0,), 3)),
    algos=Tiered(full=ALGOS, quick=("grpo", "ppo"), smoke=("grpo",)),
    options=(
        Option(
            "--hops",
            Tiered(full=[2, 4, 6, 8, 10, 12], quick=[2, 4, 8, 12], smoke=[2, 4]),
            "horizons (hops per task)",
            type=int,
            nargs="+",
        ),
        Option(
            "--protocols",
            Tiered(full=list(PROTOCOLS), quick=["default"], smoke=list(PROTOCOLS)),
            "training protocols: default, success_filter (GRPO/GiGPO with filter_on=success and dynamic sampling), "
            "curriculum (trained on 2..h hops, short ones first; evaluated on exactly h)",
            nargs="+",
            choices=PROTOCOLS,
        ),
        setup_option("every learned run"),
    ),  # fmt: skip
    points=points,
    summarise=summarise,
    plot=plot,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
