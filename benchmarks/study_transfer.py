"""Caveat study 2: transfer across task families and across deviations. Does a policy trained on one family work on
the others, and one trained without a deviation kind on tasks that have it?

Each algorithm is trained on one family (EDO-Support-v0, EDO-MultiHop-v0, EDO-Analytics-v0; same hop range, so
the same observation shapes) and its final model is evaluated on the held-out tasks of all three families. Every run
trains with ``--setup`` (default ``make-train``: ``make train``'s settings, a warm start cloned from the static pipeline's logs; see ``grpo_vs_ppo.SETUPS``); the evaluation envs get the same options. Row =
training family, column = evaluation family; the diagonal is "trained on the family it is tested on", the
off-diagonal cells are zero-shot transfer. The oracle and greedy router on each family's held-out tasks give the
reference for each column.

**Across deviations** (``--parts deviations``): for each deviation kind of EDO-v0 (phrasing, team, drift,
extra step), a model is trained on EDO-v0 with that kind's rate at 0 (the other defaults on) and evaluated on the
held-out tasks of EDO-v0 as registered (the kind on, with its held-out draws) and of its own env (the kind off); one
model is trained on EDO-v0 itself. Per kind: the *transfer loss* (trained without the kind minus trained with it, both
tested with it) and the *kind's cost* (tested with the kind minus tested without it) for the learned models and for
the hand-written policies (``rule_based``, ``static_pipeline``, ``plan_check_text``, evaluated on both envs).

Usage::

    python -m benchmarks.study_transfer            # full: GRPO and PPO, 3 seeds, 150k steps, 200 tasks, both parts
    python -m benchmarks.study_transfer --quick    # GRPO, 1 seed, 15k steps, 60 tasks
    python -m benchmarks.study_transfer --algos grpo ppo maskable_ppo --seeds 0 1
    python -m benchmarks.study_transfer --parts deviations --algos grpo --seeds 0 1 2 --timesteps 1000000

Results: ``benchmarks/results/study_transfer.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``matrix`` (algo -> train env -> eval env -> success over seeds), ``heuristics`` (eval env -> name ->
EvalResult dict), ``transfer_gap`` (algo -> eval env -> mean off-diagonal minus diagonal success),
``conclusion``, ``runs``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.grpo_vs_ppo import SETUPS, setup_option, setup_settings
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered
from benchmarks.summary import (
    difference,
    finite_mean,
    fmt_eval,
    fmt_signed,
    fmt_stats,
    header,
    heuristic_results,
    pyplot,
    seed_stats,
    stat_mean,
)

NAME = "study_transfer"
FAMILY_ENVS = ("EDO-Support-v0", "EDO-MultiHop-v0", "EDO-Analytics-v0")
ALGOS = ("grpo", "ppo", "maskable_ppo")
HEURISTICS = ("oracle", "greedy_router")
#: The deviations part: per kind, the EDO-v0 settings that switch it off (the other defaults stay on).
WITHOUT_KIND: dict[str, dict[str, Any]] = {
    "phrasing": {"tasks_phrasing_rate": 0.0},
    "team": {"deviations_team_rate": 0.0},
    "drift": {"deviations_drift_rate": 0.0},
    "extra_step": {"tasks_extra_step_rate": 0.0},
}
#: The point trained on EDO-v0 as registered (every kind on).
WITH_ALL = "EDO-v0"
#: Hand-written policies of the deviations part (the text reader on an env with ``info_text=True``).
DEVIATION_REFERENCES = ("rule_based", "static_pipeline", "plan_check_text")
PARTS = ("families", "deviations")


def short(env_id: str) -> str:
    return env_id.removeprefix("EDO-").removesuffix("-v0")


def points(cfg: StudyConfig) -> dict[str, Point]:
    """Families part: one point per training family; the final model is also evaluated on the other families, with the
    setup's env options there too (the observation spaces must match the model's). Deviations part: one point per
    kind, trained without it and also evaluated on EDO-v0 as registered, and one point trained on EDO-v0."""
    _, setup_env, setup_overrides = SETUPS[cfg.options.setup]
    out: dict[str, Point] = {}
    if "families" in cfg.options.parts:
        for tr in FAMILY_ENVS:
            out[short(tr)] = Point(
                env_id=tr,
                env_kwargs=dict(setup_env),
                train_overrides=dict(setup_overrides),
                extra_eval=tuple((ev, dict(setup_env)) for ev in FAMILY_ENVS if ev != tr),
            )
    if "deviations" in cfg.options.parts:
        out[WITH_ALL] = Point(env_id=WITH_ALL, env_kwargs=dict(setup_env), train_overrides=dict(setup_overrides))
        for kind, off in WITHOUT_KIND.items():
            out[f"no_{kind}"] = Point(
                env_id=WITH_ALL,
                env_kwargs={**setup_env, **off},
                train_overrides=dict(setup_overrides),
                extra_eval=((WITH_ALL, dict(setup_env)),),
            )
    return out


def success_on(record: dict[str, Any], env_id: str, extra: bool = False) -> dict[str, Any]:
    """The record's held-out evaluation on ``env_id``: its own env (``final``) or one of ``extra_eval`` (``extra``:
    only those, for a point whose extra evaluation is on its own env id with other options)."""
    if record["spec"]["env_id"] == env_id and not extra:
        f = record["final"]
        return {"success": f["success"], "calls": f["calls"]}
    for e in record["extra_eval"]:
        if e["env_id"] == env_id:
            return {"success": e["result"]["success_rate"], "calls": e["result"]["calls"]}
    raise KeyError(env_id)


def deviation_table(cfg: StudyConfig, runs: RunSet) -> dict[str, Any]:
    """Per kind: the learned models' success with and without it, transfer loss and the kind's cost, and the
    hand-written policies' success with and without it and the kind's cost (None where a run is missing)."""
    _, setup_env, _ = SETUPS[cfg.options.setup]
    episodes = cfg.budget.eval_episodes
    with_all = heuristic_results(WITH_ALL, dict(setup_env), DEVIATION_REFERENCES, episodes)
    trained_with = {algo: stat_mean(seed_stats([success_on(r, WITH_ALL)["success"] for r in runs.seeds(WITH_ALL, algo)]))
                    for algo in cfg.algos}  # fmt: skip
    table: dict[str, Any] = {}
    for kind, off in WITHOUT_KIND.items():
        point = f"no_{kind}"
        learned = {}
        for algo in cfg.algos:
            recs = runs.seeds(point, algo)
            tested_with = seed_stats([success_on(r, WITH_ALL, extra=True)["success"] for r in recs])
            tested_without = seed_stats([success_on(r, WITH_ALL)["success"] for r in recs])
            learned[algo] = {
                "trained_with_tested_with": trained_with[algo],
                "trained_without_tested_with": tested_with,
                "trained_without_tested_without": tested_without,
                "transfer_loss": difference(stat_mean(tested_with), trained_with[algo]),
                "kind_cost": difference(stat_mean(tested_with), stat_mean(tested_without)),
            }
        without = heuristic_results(WITH_ALL, {**setup_env, **off}, DEVIATION_REFERENCES, episodes)
        hand = {name: {"tested_with": with_all[name]["success_rate"], "tested_without": without[name]["success_rate"],
                       "kind_cost": with_all[name]["success_rate"] - without[name]["success_rate"]}
                for name in DEVIATION_REFERENCES}  # fmt: skip
        table[kind] = {"learned": learned, "hand_written": hand}
    return table


def deviation_markdown(table: dict[str, Any]) -> list[str]:
    def f(x: Any) -> str:
        return "-" if x is None else (f"{x['mean']:.3f}" if isinstance(x, dict) else f"{x:.3f}")

    lines = ["", "## Across deviations", "",
             "Trained on EDO-v0 without a kind (its rate at 0), tested on held-out EDO-v0 tasks with it (as registered) "
             "and without it. Transfer loss: trained without minus trained with, both tested with the kind. Kind's cost: "
             "tested with minus tested without (hand-written policies: the same two envs).", "",
             "| kind | policy | trained with, tested with | trained without, tested with | tested without | transfer loss | "
             "kind's cost |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind, row in table.items():
        for algo, x in row["learned"].items():
            lines.append(f"| {kind} | {algo} | {f(x['trained_with_tested_with'])} | {f(x['trained_without_tested_with'])} | "
                         f"{f(x['trained_without_tested_without'])} | {fmt_signed(x['transfer_loss'])} | "
                         f"{fmt_signed(x['kind_cost'])} |")  # fmt: skip
        for name, x in row["hand_written"].items():
            lines.append(f"| {kind} | {name} (hand-written) | - | {x['tested_with']:.3f} | "
                         f"{x['tested_without']:.3f} | - | {fmt_signed(x['kind_cost'])} |")  # fmt: skip
    return lines


def markdown(settings: dict[str, Any], matrix: dict[str, Any], heur: dict[str, Any], gaps: dict[str, Any]) -> str:
    envs = settings["envs"]
    lines = header(
        "Caveat study: transfer across task families",
        settings["command"],
        settings["mode"],
        f"Budget: {settings['timesteps']:,} env steps per run, seeds {settings['seeds']}, evaluation on the first "
        f"{settings['eval_episodes']} held-out tasks of each family. Rows: training family; columns: evaluation "
        f"family. Every learned run trains with the setup '{settings['setup']}' ({settings['setup_description']}). "
        "Cells: success, mean over seeds (95% CI when more than one seed); `*` marks the diagonal.",
    )
    for algo, rows in matrix.items():
        lines += ["", f"**{algo}**", "", "| trained on \\ evaluated on | " + " | ".join(short(e) for e in envs) + " |",
                  "|---|" + "---|" * len(envs)]  # fmt: skip
        for tr in envs:
            cells = [fmt_stats(rows[tr][ev]) + (" *" if tr == ev else "") for ev in envs]
            lines.append(f"| {short(tr)} | " + " | ".join(cells) + " |")
    lines += ["", "Reference on each family's held-out tasks (success, Wilson 95% CI):", "",
              "| policy | " + " | ".join(short(e) for e in envs) + " |", "|---|" + "---|" * len(envs)]  # fmt: skip
    for name in HEURISTICS:
        lines.append(f"| {name} | " + " | ".join(fmt_eval(heur[e][name]) for e in envs) + " |")
    lines += ["", "## What this shows", ""]
    for algo, per_env in gaps.items():
        parts = [f"{short(e)} {fmt_signed(v)}" for e, v in per_env.items()]
        lines.append(f"- {algo}: mean success of the models trained on another family minus the model trained on the "
                     f"family itself, per evaluation family: {', '.join(parts)} (negative = transfer loses).")  # fmt: skip
        diag = [fmt_stats(matrix[algo][e][e]) for e in envs]
        lines.append(
            f"- {algo}: in-family (diagonal) success {', '.join(f'{short(e)} {d}' for e, d in zip(envs, diag, strict=True))}."
        )
    if len(settings["seeds"]) < 2:
        lines.append("- One seed per cell: differences of a few tasks out of "
                     f"{settings['eval_episodes']} are within noise.")  # fmt: skip
    return "\n".join(lines)


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    envs = list(FAMILY_ENVS)
    settings = {**cfg.settings(), "envs": envs, "parts": list(cfg.options.parts), **setup_settings(cfg.options.setup)}
    payload: dict[str, Any] = {"settings": settings}
    md = ""
    if "families" in cfg.options.parts:
        matrix = {
            algo: {tr: {ev: seed_stats([success_on(r, ev)["success"] for r in runs.seeds(short(tr), algo)]) for ev in envs}
                   for tr in envs}
            for algo in cfg.algos
        }  # fmt: skip
        gaps = {
            algo: {ev: difference(finite_mean([stat_mean(matrix[algo][tr][ev]) for tr in envs if tr != ev]), stat_mean(matrix[algo][ev][ev]))
                   for ev in envs}
            for algo in cfg.algos
        }  # fmt: skip
        print("heuristic references ...", flush=True)
        heur = {ev: heuristic_results(ev, {}, HEURISTICS, cfg.budget.eval_episodes) for ev in envs}
        concl = {
            algo: {"mean_transfer_gap": finite_mean(list(gaps[algo].values())),
                   "diagonal_success": {ev: stat_mean(matrix[algo][ev][ev]) for ev in envs}}
            for algo in cfg.algos
        }  # fmt: skip
        payload.update({"matrix": matrix, "heuristics": heur, "transfer_gap": gaps, "conclusion": concl})
        md = markdown(settings, matrix, heur, gaps)
    if "deviations" in cfg.options.parts:
        print("deviations: hand-written references ...", flush=True)
        table = deviation_table(cfg, runs)
        payload["deviations"] = table
        lines = deviation_markdown(table)
        if not md:
            lines = header("Caveat study: transfer across deviations", settings["command"], settings["mode"],
                           f"Budget: {settings['timesteps']:,} env steps per run, seeds {settings['seeds']}, evaluation on "
                           f"the first {settings['eval_episodes']} held-out tasks. Every learned run trains with the setup "
                           f"'{settings['setup']}' ({settings['setup_description']}).") + lines  # fmt: skip
        md = "\n".join([md, *lines]) if md else "\n".join(lines)
    payload["runs"] = runs.by_key()
    return payload, md


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    if "matrix" not in payload:  # the deviations part alone: its table is the figure
        return
    settings, matrix = payload["settings"], payload["matrix"]
    plt = pyplot()
    envs = settings["envs"]
    algos = list(matrix)
    fig, axes = plt.subplots(1, len(algos), figsize=(4.8 * len(algos), 4.2), squeeze=False)
    for ax, algo in zip(axes[0], algos, strict=True):
        grid = np.array(
            [[np.nan if matrix[algo][tr][ev] is None else matrix[algo][tr][ev]["mean"] for ev in envs] for tr in envs]
        )
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for i in range(len(envs)):
            for j in range(len(envs)):
                text = "missing" if np.isnan(grid[i, j]) else f"{grid[i, j]:.2f}"
                ax.text(j, i, text, ha="center", va="center", color="w" if not grid[i, j] >= 0.6 else "k")
        ax.set_xticks(range(len(envs)), [short(e) for e in envs])
        ax.set_yticks(range(len(envs)), [short(e) for e in envs])
        ax.set_xlabel("evaluated on")
        ax.set_ylabel("trained on")
        ax.set_title(algo)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"Held-out success, {settings['timesteps']:,} steps/run, seeds {settings['seeds']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(150_000, (0, 1, 2), 200), quick=Budget(15_000, (0,), 60), smoke=Budget(300, (0,), 3)),
    algos=Tiered(full=("grpo", "ppo"), quick=("grpo",), smoke=("grpo",)),
    options=(
        setup_option("every learned run"),
        Option(
            "--parts",
            list(PARTS),
            "what to measure: families (cross-family transfer), deviations (train without a deviation kind, test with it)",
            nargs="+",
            choices=PARTS,
        ),
    ),
    points=points,
    summarise=summarise,
    plot=plot,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
