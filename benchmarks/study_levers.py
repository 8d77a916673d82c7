"""Which levers make learned orchestration beat hand-written orchestration? One lever at a time, then together.

Each point is a GRPO run (or any ``--algos``) on EDO-v0 with the same env-step budget, seeds and held-out tasks; the
points differ by one lever from the one before:

- ``flat``: the observation of EDO-Gym before the pointer-free view (``focus_view=False``), SB3's flattening
  extractor, no warm start, learning rate 5e-4: where learning started;
- ``view``: the pointer-free view (``current``, ``last``, ``tried``; the default observation);
- ``view+table``: ... and :class:`baselines.extractors.EDOTableExtractor` (shared row encoders);
- ``view+bc_rule_based_lr5e-4``: the view, and a warm start by behaviour cloning on 2,000 recorded ``rule_based``
  episodes (:mod:`baselines.experience`), then GRPO at 5e-4;
- ``view+bc_rule_based``: the same at 1e-4 (``make train``'s default);
- ``view+bc_oracle``: the warm start on the oracle's episodes (a privileged teacher: it acts on hidden state, the
  cloned policy sees only the observation);
- ``view+bc_rule_based+dapo``, ``+table``, ``+text``: the default with DAPO's success filter and dynamic sampling,
  with the table extractor, with the text features (``text_features=True``);
- ``view+curriculum`` and ``view+bc_rule_based+curriculum``: a hop-count curriculum (:mod:`baselines.curriculum`:
  2-hop tasks for the first quarter of the steps, 2-3 hops up to half, then all), from scratch and on the default;
- ``view+bc_plan_check_text+text``: the text features and a warm start on the episodes of ``plan_check_text`` (the
  validity benchmark's text-reading probe): experience from a policy that reads the plan text, cloned into one that
  sees the text only through the text features;
- ``view+bc_plan_check_text+text+check``: the same, with the plan check in the observation (``plan_check=True``:
  whether each written step is the one a rule-based planner writes from the task text, the check
  ``plan_check_text`` makes).

Beside them, on the same held-out tasks and evaluation seed: the hand-written policies (static pipeline, rule_based),
the policy right after behaviour cloning (the curve's first point) and the oracle (an upper bound). The summary
says which lever gave what and whether the best learned point beats rule_based.

Usage::

    python -m benchmarks.study_levers             # full: 5 seeds x 300k steps, 200 held-out tasks (GRPO; the
                                                  # text-reading teacher's lever also with MaskablePPO)
    python -m benchmarks.study_levers --quick     # 2 seeds x 100k steps, 100 tasks
    python -m benchmarks.study_levers --smoke     # plumbing only
    python -m benchmarks.study_levers --levers view view+bc_rule_based --algos grpo maskable_ppo

Results: ``benchmarks/results/study_levers.{json,md}``; one record per run under ``benchmarks/results/records/``
(finished runs are skipped on a restart). JSON keys: ``settings``, ``levers`` (name -> ``description``,
``overrides``, ``env_kwargs`` and per algo ``success``, ``return``, ``after_warm_start``), ``heuristics``,
``best``, ``runs``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered, shown_path
from benchmarks.summary import MISSING, fmt_stats, header, seed_stats

NAME = "study_levers"

#: lever -> (description, gym.make kwargs, TrainConfig overrides). Every setting is spelled out, so that a change of
#: ``TrainConfig``'s defaults does not change a lever.
SCRATCH = {"warm_start": None, "learning_rate": 5e-4}
WARM = {"warm_start": "rule_based", "learning_rate": 1e-4}
#: the hop curriculum of the curriculum levers (EDO-v0's tasks have 2-4 hops): 2-hop tasks for the first quarter of the
#: env steps, 2-3 hops up to half, then every task (``TrainConfig.hop_curriculum``)
CURRICULUM = [[0.25, 2], [0.5, 3]]
LEVERS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "flat": ("no pointer-free view, from scratch, lr 5e-4", {"focus_view": False}, dict(SCRATCH)),
    "view": ("pointer-free view, from scratch, lr 5e-4", {}, dict(SCRATCH)),
    "view+table": (
        "pointer-free view, table extractor, from scratch, lr 5e-4",
        {},
        {**SCRATCH, "features_extractor": "table"},
    ),
    "view+bc_rule_based_lr5e-4": (
        "pointer-free view, warm start on rule_based's episodes, lr 5e-4",
        {},
        {"warm_start": "rule_based", "learning_rate": 5e-4},
    ),
    "view+bc_rule_based": ("pointer-free view, warm start on rule_based's episodes, lr 1e-4 (the default)", {}, dict(WARM)),
    "view+bc_oracle": (
        "pointer-free view, warm start on the oracle's episodes, lr 1e-4",
        {},
        {"warm_start": "oracle", "learning_rate": 1e-4},
    ),
    "view+bc_rule_based+dapo": (
        "the default, with the success filter and dynamic sampling",
        {},
        {**WARM, "filter_on": "success", "dynamic_sampling": True},
    ),
    "view+curriculum": (
        "pointer-free view, from scratch, lr 5e-4, hop curriculum (2 hops to 25% of the steps, 2-3 to 50%, then all)",
        {},
        {**SCRATCH, "hop_curriculum": CURRICULUM},
    ),
    "view+bc_rule_based+curriculum": (
        "the default, with the hop curriculum",
        {},
        {**WARM, "hop_curriculum": CURRICULUM},
    ),
    "view+bc_rule_based+table": ("the default, with the table extractor", {}, {**WARM, "features_extractor": "table"}),
    "view+bc_rule_based+text": ("the default, with the text features", {"text_features": True}, dict(WARM)),
    "view+bc_plan_check_text+text": (
        "the text features, warm start on plan_check_text's episodes (a policy that reads the text), lr 1e-4",
        {"text_features": True},
        {**WARM, "warm_start": "plan_check_text"},
    ),
    "view+bc_plan_check_text+text+check": (
        "the same, and the plan check in the observation (plan_check=True: each written step against the plan a "
        "rule-based planner writes from the task text)",
        {"text_features": True, "plan_check": True},
        {**WARM, "warm_start": "plan_check_text"},
    ),
}

#: Levers also trained with other algorithms than GRPO (when the study's ``--algos`` names them): the best GRPO point,
#: with MaskablePPO, the best algorithm of the GRPO-vs-PPO comparison.
LEVER_ALGOS: dict[str, tuple[str, ...]] = {
    "view+bc_plan_check_text+text": ("grpo", "maskable_ppo"),
    "view+bc_plan_check_text+text+check": ("grpo", "maskable_ppo"),
}

#: the hand-written policies and the oracle evaluated beside the runs
REFERENCE_POLICIES = ("static_pipeline", "rule_based", "oracle")


def points(cfg: StudyConfig) -> dict[str, Point]:
    out = {}
    for lever in cfg.options.levers:
        _, env_kwargs, overrides = LEVERS[lever]
        out[lever] = Point(
            env_kwargs=dict(env_kwargs), train_overrides=dict(overrides), algos=LEVER_ALGOS.get(lever, ("grpo",))
        )
    return out


def reference_rows(episodes: int) -> dict[str, dict[str, Any]]:
    """Success and return of :data:`REFERENCE_POLICIES`, of the validity benchmark's other hand-written probes and of
    its text-reading probes (on an env made with ``info_text=True``), on the runs' held-out tasks and evaluation seed."""
    from baselines.evaluation import evaluate_heuristic, make_eval_env
    from baselines.heuristics import make_heuristic
    from baselines.probes import PROBES, TEXT_PROBES
    from benchmarks.bench_lib import EVAL_SEED, eval_task_ids

    def row(r: Any, probe: bool, reads_text: bool) -> dict[str, Any]:
        return {"success": r.success_rate, "return": r.mean_return, "uses_hidden_state": r.uses_hidden_state,
                "probe": probe, "reads_text": reads_text}  # fmt: skip

    rows: dict[str, dict[str, Any]] = {}
    env = make_eval_env("EDO-v0")
    try:
        ids = eval_task_ids(env, episodes)
        for name in REFERENCE_POLICIES:
            rows[name] = row(evaluate_heuristic(make_heuristic(name), env, ids, seed=EVAL_SEED), False, False)
        for name, cls in PROBES.items():
            if name not in rows:
                rows[name] = row(evaluate_heuristic(cls(), env, ids, seed=EVAL_SEED), True, False)
    finally:
        env.close()
    text_env = make_eval_env("EDO-v0", info_text=True)
    try:
        for name, cls in TEXT_PROBES.items():
            rows[name] = row(evaluate_heuristic(cls(), text_env, ids, seed=EVAL_SEED), True, True)
    finally:
        text_env.close()
    return rows


def best_hand_written(refs: dict[str, dict[str, Any]], reads_text: bool) -> tuple[str, dict[str, Any]] | None:
    """The hand-written observation-only policy with the highest success (then return) of one group."""
    group = {k: v for k, v in refs.items() if not v["uses_hidden_state"] and bool(v.get("reads_text")) == reads_text}
    if not group:
        return None
    name = max(group, key=lambda k: (group[k]["success"], group[k]["return"]))
    return name, group[name]


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    b = cfg.budget
    refs = reference_rows(b.eval_episodes)
    levers: dict[str, dict[str, Any]] = {}
    for lever in cfg.options.levers:
        description, env_kwargs, overrides = LEVERS[lever]
        entry: dict[str, Any] = {"description": description, "env_kwargs": env_kwargs, "overrides": overrides}
        for algo in [a for a in cfg.algos if a in LEVER_ALGOS.get(lever, ("grpo",))]:
            recs = runs.seeds(lever, algo)
            entry[algo] = {
                "success": seed_stats([r["final"]["success"] for r in recs]),
                "return": seed_stats([r["final"]["return"] for r in recs]),
                # the policy the warm start made, before RL
                "after_warm_start": seed_stats([r["warm_start"]["eval"]["success"] for r in recs if r.get("warm_start")]),
                "train_wall_s": float(np.median([r["wall_time_s"] for r in recs])) if recs else None,
            }
        levers[lever] = entry
    lines = header(
        "Levers of learned orchestration on EDO-v0",
        cfg.command,
        cfg.tier,
        f"{b.timesteps:,} env steps per run, seeds {list(b.seeds)}, {b.eval_episodes} held-out tasks, "
        f"algorithms {list(cfg.algos)}; success and return: mean over seeds (95% interval)",
    )
    lines += [
        "",
        "| lever | algo | held-out success | return | success before RL | train s (median) |",
        "|---|---|---|---|---|---|",
    ]
    best: dict[str, Any] | None = None
    not_run: list[str] = []
    for lever, entry in levers.items():
        for algo in [a for a in cfg.algos if a in entry]:
            fig = entry[algo]
            if fig["success"] is None:
                not_run.append(f"{lever} ({algo})")
                continue
            before = fmt_stats(fig["after_warm_start"]) if fig["after_warm_start"] else "-"
            lines.append(
                f"| {lever} | {algo} | {fmt_stats(fig['success'])} | {fmt_stats(fig['return'])} | {before} "
                f"| {fig['train_wall_s']:.0f} |"
            )
            if best is None or fig["success"]["mean"] > best["success"]:
                best = {"lever": lever, "algo": algo, "success": fig["success"]["mean"], "return": fig["return"]["mean"]}
    if not_run:
        lines += ["", f"{MISSING} (no finished run): " + ", ".join(not_run) + "."]
    lines += ["", "Hand-written policies (probes: the validity benchmark's; text: reads `info[\"text\"]`) and the oracle on the "
              "same tasks and evaluation seed:", ""]  # fmt: skip
    lines += ["| policy | success | return |", "|---|---|---|"]
    for name, row in refs.items():
        note = (
            " (reads hidden state: an upper bound)"
            if row["uses_hidden_state"]
            else " (probe, text)"
            if row.get("reads_text")
            else " (probe)"
            if row.get("probe")
            else ""
        )
        lines.append(f"| {name}{note} | {row['success']:.3f} | {row['return']:+.3f} |")
    if best is not None:
        rb = refs["rule_based"]
        best["beats_rule_based_success_by"] = best["success"] - rb["success"]
        best["beats_rule_based_return_by"] = best["return"] - rb["return"]
        lines += [
            "",
            "## What this shows",
            "",
            f"Best point: {best['lever']} ({best['algo']}) at {best['success']:.3f} success and {best['return']:+.3f} return, "
            f"{best['beats_rule_based_success_by']:+.3f} success and {best['beats_rule_based_return_by']:+.3f} return "
            f"against rule_based ({len(b.seeds)} seed(s)).",
        ]
        fig = levers[best["lever"]][best["algo"]]
        for key, reads_text, what in (("vs_best_numeric", False, "numeric"), ("vs_best_text_reading", True, "text-reading")):
            top = best_hand_written(refs, reads_text)
            if top is None:
                continue
            name, row = top
            best[key] = {"hand_written": name, "hand_written_success": row["success"], "hand_written_return": row["return"],
                         "success_gap": best["success"] - row["success"], "return_gap": best["return"] - row["return"],
                         "success_gap_ci95": [fig["success"]["ci95"][0] - row["success"],
                                              fig["success"]["ci95"][1] - row["success"]]}  # fmt: skip
            g = best[key]
            lines.append(
                f"Against the best {what} hand-written policy on these tasks ({name}, {row['success']:.3f} success, "
                f"{row['return']:+.3f} return): {g['success_gap']:+.3f} success (95% interval over seeds "
                f"{g['success_gap_ci95'][0]:+.3f} to {g['success_gap_ci95'][1]:+.3f}), {g['return_gap']:+.3f} return."
            )
    settings = {**cfg.settings(), "levers": list(cfg.options.levers), "out_dir": shown_path(cfg.out_dir)}
    payload = {"settings": settings, "levers": levers, "heuristics": refs, "best": best, "runs": runs.by_key()}
    return payload, "\n".join(lines)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(300_000, (0, 1, 2, 3, 4), 200), quick=Budget(100_000, (0, 1), 100), smoke=Budget(600, (0,), 4)),
    algos=Tiered(full=("grpo", "maskable_ppo"), quick=("grpo", "maskable_ppo"), smoke=("grpo",)),
    options=(
        Option(
            "--levers",
            Tiered(full=list(LEVERS), quick=list(LEVERS), smoke=["flat", "view+bc_rule_based"]),
            "levers to run",
            nargs="+",
            choices=list(LEVERS),
        ),
    ),
    points=points,
    summarise=summarise,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
