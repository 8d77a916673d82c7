"""Entropy-coefficient sweep for GRPO, PPO and MaskablePPO with Ray Tune, at the same budget per trial for all.

So that the GRPO-vs-PPO comparison (``grpo_vs_ppo.py``) is not won by tuning, every algorithm gets its entropy
coefficient chosen the same way: a grid over ``ent_coef`` x seeds, one Ray Tune trial per (algorithm, ent_coef,
seed), every trial with the same env-step budget, actor ``net_arch``, evaluation tasks and per-episode seeds.
The other hyperparameters are the shared ``TrainConfig`` defaults, with the setup of the comparison (``--setup``, as
in ``grpo_vs_ppo.py``; default ``make-train``, ``make train``'s configuration).

Selection is on **validation** tasks: the *last* ``eval_episodes`` tasks of the held-out split
(``RunSpec(eval_on="validation")``), disjoint from the first ones that ``grpo_vs_ppo.py`` and the studies report
on (the split has 300 tasks on EDO-v0; they are disjoint while 2 x eval_episodes <= 300). The best value per
algorithm is the highest mean validation success over seeds (ties: the higher mean return, then the smaller
ent_coef). Feed it to the comparison with ``grpo_vs_ppo.py --ent-coef-from <out-dir>/tune_ent_coef.json``.

Each trial runs one training run in its own subprocess (``benchmarks.bench_lib.run_subprocess``), as the benchmark
runner does; a trial that fails is retried once by Tune (``FailureConfig(max_failures=1)``), then reported.
Finished trials are stored as run records (``<out-dir>/records/tune_ent_coef/``): a rerun skips them.

Needs Ray (``pip install "edo-gym[ray]"``). Usage::

    python -m benchmarks.tune_ent_coef                         # full: 6 values x 3 seeds x 3 algorithms x 300k steps
    python -m benchmarks.tune_ent_coef --quick                 # 3 values x 1 seed x 40k steps, 60 tasks
    python -m benchmarks.tune_ent_coef --smoke --ray-workers 2 # plumbing only
    python -m benchmarks.tune_ent_coef --ray-address auto      # on an existing Ray cluster

Results: ``benchmarks/results/tune_ent_coef.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``, ``grid``
(algo -> ent_coef -> validation success/return over seeds), ``best`` (algo -> chosen ent_coef and its figures),
``runs``, ``completeness``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.bench_lib import REPO, RunSpec
from benchmarks.executors import RAY_MISSING, RETRIES, OnFailure, OnSuccess, init_ray, run_spec_dict
from benchmarks.grpo_vs_ppo import SETUPS, setup_option, setup_settings
from benchmarks.study import (
    Budget,
    Execution,
    Option,
    PlannedRun,
    Point,
    RunSet,
    Study,
    StudyConfig,
    Tiered,
    execution_of,
    run_studies,
    train_spec,
)
from benchmarks.summary import MISSING, fmt_stats, header, pyplot, seed_stats

NAME = "tune_ent_coef"
ALGOS = ("grpo", "ppo", "maskable_ppo")


def point_id(ent_coef: float) -> str:
    return f"ent{ent_coef:g}"


def points(cfg: StudyConfig) -> dict[str, Point]:
    _, env_kwargs, setup_overrides = SETUPS[cfg.options.setup]
    return {
        point_id(e): Point(env_kwargs=dict(env_kwargs), train_overrides={**setup_overrides, "ent_coef": e})
        for e in cfg.options.ent_coefs
    }


def spec(cfg: StudyConfig, point: Point, algo: str, seed: int) -> RunSpec:
    """The study's default run (same budget for every trial), evaluated on the validation tasks."""
    return replace(train_spec(cfg, point, algo, seed), eval_on="validation")


def best_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """The chosen ent_coef of one algorithm's row: highest mean success, then return, then the smaller value."""
    known = [(float(e), c) for e, c in row.items() if c["success"] is not None]
    if not known:
        return None
    ent, cell = max(known, key=lambda ec: (ec[1]["success"]["mean"], ec[1]["return"]["mean"], -ec[0]))
    return {"ent_coef": ent, "success": cell["success"], "return": cell["return"], "seeds": cell["seeds"]}


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    grid: dict[str, dict[str, Any]] = {}
    for algo in cfg.algos:
        grid[algo] = {}
        for e in cfg.options.ent_coefs:
            recs = runs.seeds(point_id(e), algo)
            grid[algo][f"{e:g}"] = {"success": seed_stats([r["final"]["success"] for r in recs]),
                                    "return": seed_stats([r["final"]["return"] for r in recs]),
                                    "seeds": [r["spec"]["seed"] for r in recs]}  # fmt: skip
    best = {algo: best_of(row) for algo, row in grid.items()}
    b = cfg.budget
    setup = cfg.options.setup
    settings = {**cfg.settings(), "ent_coefs": list(cfg.options.ent_coefs), "eval_on": "validation", **setup_settings(setup),
                "validation_tasks": f"the last {b.eval_episodes} tasks of the held-out split", "net_arch": [128, 128],
                "tuner": "ray.tune.Tuner, grid search, one trial per (algo, ent_coef, seed), max_failures=1"}  # fmt: skip
    lines = header(
        "Entropy coefficient per algorithm (Ray Tune grid, equal budget per trial)",
        cfg.command,
        cfg.tier,
        f"Every trial: {b.timesteps:,} env steps, actor [128, 128], the shared TrainConfig settings but ent_coef, with "
        f"the setup '{setup}' ({SETUPS[setup][0]}); "
        f"seeds {list(b.seeds)}; validation success on the last {b.eval_episodes} held-out tasks (disjoint from the "
        "first ones the comparisons report on). Cells: mean over seeds (95% CI when more than one seed); **bold**: chosen.",
    )
    algos = list(cfg.algos)
    lines += ["", "| ent_coef | " + " | ".join(algos) + " |", "|---|" + "---|" * len(algos)]
    for e in cfg.options.ent_coefs:
        cells = []
        for algo in algos:
            text = fmt_stats(grid[algo][f"{e:g}"]["success"])
            chosen = best[algo] is not None and best[algo]["ent_coef"] == float(e)
            cells.append(f"**{text}**" if chosen else text)
        lines.append(f"| {e:g} | " + " | ".join(cells) + " |")
    lines += ["", "## What this shows", ""]
    for algo in algos:
        if best[algo] is None:
            lines.append(f"- {algo}: {MISSING} (no finished trial).")
        else:
            lines.append(
                f"- {algo}: ent_coef {best[algo]['ent_coef']:g} (validation success {fmt_stats(best[algo]['success'])})."
            )
    path = cfg.out_dir / (cfg.name + ".json")
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    lines.append(f"- Use them: `python -m benchmarks.grpo_vs_ppo --ent-coef-from {shown}`.")
    if len(b.seeds) < 2:
        lines.append("- One seed per cell: the choice is noisy; differences of a few tasks are not evidence.")
    payload = {"settings": settings, "grid": grid, "best": best, "runs": runs.by_key()}
    return payload, "\n".join(lines)


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    ents = payload["settings"]["ent_coefs"]
    xs = list(range(len(ents)))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for algo, row in payload["grid"].items():
        cells = [row[f"{e:g}"]["success"] for e in ents]
        ax.plot(xs, [float("nan") if c is None else c["mean"] for c in cells], marker="o", label=algo)
    ax.set_xticks(xs, [f"{e:g}" for e in ents])
    ax.set_xlabel("ent_coef")
    ax.set_ylabel("validation success (mean over seeds)")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=8)
    ax.set_title(f"Entropy coefficient sweep, {payload['settings']['timesteps']:,} steps per trial")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(300_000, (0, 1, 2), 100), quick=Budget(40_000, (0,), 60), smoke=Budget(300, (0,), 3)),
    algos=Tiered(full=ALGOS, quick=ALGOS, smoke=ALGOS),
    options=(
        Option(
            "--ent-coefs",
            Tiered(full=[0.0, 0.003, 0.01, 0.03, 0.1, 0.3], quick=[0.0, 0.01, 0.03], smoke=[0.0, 0.01]),
            "entropy coefficients to try",
            type=float,
            nargs="+",
        ),
        setup_option("every trial"),
    ),
    points=points,
    spec=spec,
    summarise=summarise,
    plot=plot,
)


def trainable(config: dict[str, Any]) -> dict[str, Any]:
    """One Tune trial: one training run in a subprocess. Raises on failure, so that Tune retries it."""
    outcome = run_spec_dict(config["run"]["spec"])
    if not outcome["ok"]:
        raise RuntimeError(f"run {config['run']['key']} failed: {outcome['error']}")
    final = outcome["record"]["final"]
    return {"validation_success": final["success"], "validation_return": final["return"], "outcome_json": json.dumps(outcome)}


def execute_with_tune(
    runs: Sequence[PlannedRun], execution: Execution, on_success: OnSuccess, on_failure: OnFailure, storage: Path
) -> None:
    """Execute ``runs`` as the trials of one ``ray.tune.Tuner`` grid; report each trial as it finishes.

    ``storage``: Tune's experiment folder (trial logs and results; the run records are written by the caller).
    """
    ray = init_ray(execution.ray_address, execution.ray_workers)
    from ray import tune

    by_key = {run.key: run for run in runs}

    def run_of(trial: Any) -> PlannedRun:
        return by_key[trial.config["run"]["key"]]

    def error_of(trial: Any) -> dict[str, Any]:
        try:
            error = str(trial.get_error())
        except Exception as exc:  # the error file may be unreadable; the failure is reported anyway
            error = f"trial errored ({type(exc).__name__} reading its error: {exc})"
        return {"ok": False, "record": None, "error": error, "log": error, "host": None, "seconds": None}

    class Report(tune.Callback):
        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            on_success(run_of(trial), json.loads(trial.last_result["outcome_json"]), trial.num_failures + 1)

        def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            on_failure(run_of(trial), error_of(trial), trial.num_failures, False)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            on_failure(run_of(trial), error_of(trial), trial.num_failures, True)

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"run": tune.grid_search([{"key": run.key, "spec": asdict(run.spec)} for run in runs])},
        tune_config=tune.TuneConfig(reuse_actors=False),
        run_config=tune.RunConfig(
            name=NAME,
            storage_path=str(storage.resolve()),
            failure_config=tune.FailureConfig(max_failures=RETRIES),
            callbacks=[Report()],
            verbose=0,
        ),
    )
    try:
        tuner.fit()
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = STUDY.parser().parse_args(argv)
    cfg = STUDY.configure(args, argv)
    execution = execution_of(args)
    execution.ray = True  # a Tune sweep always runs on Ray (a local instance without --ray-address)
    if importlib.util.find_spec("ray") is None:
        raise SystemExit(RAY_MISSING)
    storage = cfg.out_dir / "logs" / "ray_tune"
    outcomes = run_studies([(STUDY, cfg)], execution, executor=partial(execute_with_tune, storage=storage))
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
