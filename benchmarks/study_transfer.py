"""Caveat study 2: transfer across task families. Does a policy trained on one family work on the others?

Each algorithm is trained on one family (EDO-Support-v0, EDO-MultiHop-v0, EDO-Analytics-v0; same hop range, so
the same observation shapes) and its final model is evaluated on the held-out tasks of all three families. Every run
trains with ``--setup`` (default ``make-train``: ``make train``'s settings, a warm start cloned from the static pipeline's logs; see ``grpo_vs_ppo.SETUPS``); the evaluation envs get the same options. Row =
training family, column = evaluation family; the diagonal is "trained on the family it is tested on", the
off-diagonal cells are zero-shot transfer. The oracle and greedy router on each family's held-out tasks give the
reference for each column.

Usage::

    python -m benchmarks.study_transfer            # full: GRPO and PPO, 3 seeds, 150k steps, 200 tasks
    python -m benchmarks.study_transfer --quick    # GRPO, 1 seed, 15k steps, 60 tasks
    python -m benchmarks.study_transfer --algos grpo ppo maskable_ppo --seeds 0 1

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
from benchmarks.study import Budget, Point, RunSet, Study, StudyConfig, Tiered
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


def short(env_id: str) -> str:
    return env_id.removeprefix("EDO-").removesuffix("-v0")


def points(cfg: StudyConfig) -> dict[str, Point]:
    """One point per training family; the final model is also evaluated on the other families, with the setup's env
    options there too (the observation spaces must match the model's)."""
    _, setup_env, setup_overrides = SETUPS[cfg.options.setup]
    return {
        short(tr): Point(
            env_id=tr,
            env_kwargs=dict(setup_env),
            train_overrides=dict(setup_overrides),
            extra_eval=tuple((ev, dict(setup_env)) for ev in FAMILY_ENVS if ev != tr),
        )
        for tr in FAMILY_ENVS
    }


def success_on(record: dict[str, Any], env_id: str) -> dict[str, Any]:
    """The record's held-out evaluation on ``env_id``: its own env (``final``) or one of ``extra_eval``."""
    if record["spec"]["env_id"] == env_id:
        f = record["final"]
        return {"success": f["success"], "calls": f["calls"]}
    for e in record["extra_eval"]:
        if e["env_id"] == env_id:
            return {"success": e["result"]["success_rate"], "calls": e["result"]["calls"]}
    raise KeyError(env_id)


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
    settings = {**cfg.settings(), "envs": envs, **setup_settings(cfg.options.setup)}
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
    payload = {"settings": settings, "matrix": matrix, "heuristics": heur, "transfer_gap": gaps, "conclusion": concl,
               "runs": runs.by_key()}  # fmt: skip
    return payload, markdown(settings, matrix, heur, gaps)


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
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
    options=(setup_option("every learned run"),),
    points=points,
    summarise=summarise,
    plot=plot,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
