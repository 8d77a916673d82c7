"""Caveat study 2: transfer across task families. Does a policy trained on one family work on the others?

Each algorithm is trained on one family (EDO-Support-v0, EDO-MultiHop-v0, EDO-Analytics-v0; same hop range, so
the same observation shapes) and its final model is evaluated on the held-out tasks of all three families. Row =
training family, column = evaluation family; the diagonal is "trained on the family it is tested on", the
off-diagonal cells are zero-shot transfer. The oracle and greedy router on each family's held-out tasks give the
reference for each column.

Usage::

    python benchmarks/study_transfer.py            # full: GRPO and PPO, 3 seeds, 150k steps, 200 tasks
    python benchmarks/study_transfer.py --quick    # GRPO, 1 seed, 15k steps, 60 tasks
    python benchmarks/study_transfer.py --algos grpo ppo maskable_ppo --seeds 0 1

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.study_common import (  # noqa: E402
    command,
    finish,
    fmt_eval,
    fmt_stats,
    header,
    heuristic_results,
    mode_of,
    pick,
    pyplot,
    resolve_common,
    run_all,
    seed_stats,
    study_parser,
    train_spec,
)

NAME = "study_transfer"
FAMILY_ENVS = ("EDO-Support-v0", "EDO-MultiHop-v0", "EDO-Analytics-v0")
ALGOS = ("grpo", "ppo", "maskable_ppo")
HEURISTICS = ("oracle", "greedy_router")


def short(env_id: str) -> str:
    return env_id.removeprefix("EDO-").removesuffix("-v0")


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
        "family. Cells: success, mean over seeds (95% CI when more than one seed); `*` marks the diagonal.",
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
        parts = [f"{short(e)} {v:+.3f}" for e, v in per_env.items()]
        lines.append(f"- {algo}: mean success of the models trained on another family minus the model trained on the "
                     f"family itself, per evaluation family: {', '.join(parts)} (negative = transfer loses).")  # fmt: skip
        diag = [matrix[algo][e][e]["mean"] for e in envs]
        lines.append(
            f"- {algo}: in-family (diagonal) success {', '.join(f'{short(e)} {d:.3f}' for e, d in zip(envs, diag, strict=True))}."
        )
    if len(settings["seeds"]) < 2:
        lines.append("- One seed per cell: differences of a few tasks out of "
                     f"{settings['eval_episodes']} are within noise.")  # fmt: skip
    return "\n".join(lines)


def plot(settings: dict[str, Any], matrix: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    envs = settings["envs"]
    algos = list(matrix)
    fig, axes = plt.subplots(1, len(algos), figsize=(4.8 * len(algos), 4.2), squeeze=False)
    for ax, algo in zip(axes[0], algos, strict=True):
        grid = np.array([[matrix[algo][tr][ev]["mean"] for ev in envs] for tr in envs])
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for i in range(len(envs)):
            for j in range(len(envs)):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", color="w" if grid[i, j] < 0.6 else "k")
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--algos", nargs="+", default=None, choices=ALGOS)
    args = parser.parse_args(argv)
    resolve_common(args, seeds=([0, 1, 2], [0], [0]), timesteps=(150_000, 15_000, 300), episodes=(200, 60, 3))
    algos = args.algos or pick(args, ["grpo", "ppo"], ["grpo"], ["grpo"])
    envs = list(FAMILY_ENVS)
    out_dir = Path(args.out_dir)
    settings = {"command": command("study_transfer.py", argv), "mode": mode_of(args), "algos": algos, "envs": envs,
                "seeds": args.seeds, "timesteps": args.timesteps, "eval_episodes": args.eval_episodes}  # fmt: skip

    specs = []
    for tr in envs:
        for seed in args.seeds:
            for algo in algos:
                extra = [(ev, {}) for ev in envs if ev != tr]
                specs.append(
                    (
                        f"{short(tr)}-{algo}-s{seed}",
                        train_spec(algo, seed, tr, args.timesteps, args.eval_episodes, extra_eval=extra),
                    )
                )
    records = run_all(specs, out_dir, NAME)
    matrix = {
        algo: {tr: {ev: seed_stats([success_on(records[f"{short(tr)}-{algo}-s{s}"], ev)["success"] for s in args.seeds])
                    for ev in envs} for tr in envs}
        for algo in algos
    }  # fmt: skip
    gaps = {
        algo: {ev: float(np.mean([matrix[algo][tr][ev]["mean"] for tr in envs if tr != ev]) - matrix[algo][ev][ev]["mean"])
               for ev in envs}
        for algo in algos
    }  # fmt: skip
    print("heuristic references ...", flush=True)
    heur = {ev: heuristic_results(ev, {}, list(HEURISTICS), args.eval_episodes) for ev in envs}
    concl = {
        algo: {"mean_transfer_gap": float(np.mean(list(gaps[algo].values()))),
               "diagonal_success": {ev: matrix[algo][ev][ev]["mean"] for ev in envs}}
        for algo in algos
    }  # fmt: skip
    md = markdown(settings, matrix, heur, gaps)
    payload = {
        "settings": settings,
        "matrix": matrix,
        "heuristics": heur,
        "transfer_gap": gaps,
        "conclusion": concl,
        "runs": records,
    }
    plot(settings, matrix, out_dir / f"{NAME}.png")
    finish(NAME, payload, md, out_dir)
    return payload


if __name__ == "__main__":
    main()
