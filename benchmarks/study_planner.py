"""Caveat study 3: planner errors and the replan action.

The Planner's decomposition is wrong with probability ``planner_error_rate`` (a dropped, merged, reordered or
mislabelled step). This study sweeps that rate (0, 0.2, 0.4, 0.6) on EDO-v0, with the ``replan`` action enabled
and disabled (``enable_replan``), and reports held-out success of GRPO trained in each setting, and of the
oracle, greedy router and static pipeline on the same tasks. The "replan benefit" is success with replan minus
success without, per error rate and policy. Every run trains with ``--setup`` (default ``make-train``: ``make train``'s settings, a warm start cloned from the static pipeline's logs; see ``grpo_vs_ppo.SETUPS``).

Usage::

    python -m benchmarks.study_planner            # full: 4 rates x replan on/off, GRPO 3 seeds x 150k steps, 200 tasks
    python -m benchmarks.study_planner --quick    # GRPO 1 seed x 10k steps, 60 tasks
    python -m benchmarks.study_planner --rates 0 0.4 --algos grpo ppo

Results: ``benchmarks/results/study_planner.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``results`` (one entry per (rate, replan): ``error_rate``, ``enable_replan``, ``algos``, ``heuristics``),
``replan_benefit`` (policy -> rate -> success difference), ``conclusion``, ``runs``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks.grpo_vs_ppo import SETUPS, setup_option, setup_settings
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered
from benchmarks.summary import (
    MISSING,
    difference,
    finite_mean,
    fmt_eval,
    fmt_figures,
    fmt_signed,
    header,
    heuristic_results,
    nan_if_none,
    pyplot,
    success_mean,
    summarise_runs,
)

NAME = "study_planner"
ALGOS = ("grpo", "ppo", "maskable_ppo")
HEURISTICS = ("oracle", "greedy_router", "static_pipeline")


def key(rate: float, replan: bool) -> str:
    return f"p{rate:g}-{'replan' if replan else 'noreplan'}"


def env_kwargs(rate: float, replan: bool) -> dict[str, Any]:
    return {"planner_error_rate": rate, "enable_replan": replan}


def points(cfg: StudyConfig) -> dict[str, Point]:
    _, setup_env, setup_overrides = SETUPS[cfg.options.setup]
    return {
        key(r, rp): Point(env_kwargs={**setup_env, **env_kwargs(r, rp)}, train_overrides=dict(setup_overrides))
        for r in cfg.options.rates
        for rp in (True, False)
    }


def policy_success(cell: dict[str, Any], policy: str) -> float | None:
    if policy in cell["algos"]:
        return success_mean(cell["algos"][policy])
    return cell["heuristics"][policy]["success_rate"]


def markdown(settings: dict[str, Any], results: dict[str, Any], benefit: dict[str, Any]) -> str:
    algos, rates = settings["algos"], settings["rates"]
    lines = header(
        "Caveat study: planner error rate and the replan action",
        settings["command"],
        settings["mode"],
        f"EDO-v0 with `planner_error_rate` swept and `enable_replan` on/off. Budget: {settings['timesteps']:,} env "
        f"steps per learned run, seeds {settings['seeds']}, the setup '{settings['setup']}' "
        f"({settings['setup_description']}); evaluation on {settings['eval_episodes']} held-out tasks. "
        "Learned: mean over seeds (95% CI when more than one seed); heuristics: success (Wilson 95% CI).",
    )
    policies = [*algos, *HEURISTICS]
    lines += ["", "| error rate | replan | " + " | ".join(policies) + " |", "|---|---|" + "---|" * len(policies)]
    for rate in rates:
        for replan in (True, False):
            c = results[key(rate, replan)]
            cells = [fmt_figures(c["algos"][a]) for a in algos] + [fmt_eval(c["heuristics"][n]) for n in HEURISTICS]
            lines.append(f"| {rate:g} | {'on' if replan else 'off'} | " + " | ".join(cells) + " |")
    lines += ["", "Replan benefit (success with replan minus without):", "",
              "| policy | " + " | ".join(f"p={r:g}" for r in rates) + " |", "|---|" + "---|" * len(rates)]  # fmt: skip
    for pol in policies:
        lines.append(f"| {pol} | " + " | ".join(fmt_signed(benefit[pol][f"{r:g}"]) for r in rates) + " |")
    lines += ["", "## What this shows", ""]
    for pol in policies:
        on = [policy_success(results[key(r, True)], pol) for r in rates]
        known = [v for v in benefit[pol].values() if v is not None]
        span = f"from {min(known):+.3f} to {max(known):+.3f}" if known else MISSING
        lines.append(
            f"- {pol}: success with replan goes {' -> '.join(MISSING if v is None else f'{v:.3f}' for v in on)} as the "
            f"error rate goes {' -> '.join(f'{r:g}' for r in rates)}; the replan benefit ranges {span}."
        )
    if len(settings["seeds"]) < 2:
        lines.append("- One seed per learned cell: no interval over seeds.")
    return "\n".join(lines)


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    rates = list(cfg.options.rates)
    settings = {**cfg.settings(), "rates": rates, "env_id": "EDO-v0", "heuristics": list(HEURISTICS),
                **setup_settings(cfg.options.setup)}  # fmt: skip
    results: dict[str, Any] = {}
    for r in rates:
        for rp in (True, False):
            print(f"heuristics at error rate {r:g}, replan {rp} ...", flush=True)
            results[key(r, rp)] = {
                "error_rate": r,
                "enable_replan": rp,
                "algos": {a: summarise_runs(runs.seeds(key(r, rp), a)) for a in cfg.algos},
                "heuristics": heuristic_results("EDO-v0", env_kwargs(r, rp), HEURISTICS, cfg.budget.eval_episodes),
            }
    policies = [*cfg.algos, *HEURISTICS]
    benefit = {
        pol: {f"{r:g}": difference(policy_success(results[key(r, True)], pol), policy_success(results[key(r, False)], pol))
              for r in rates}
        for pol in policies
    }  # fmt: skip
    concl = {
        pol: {"mean_replan_benefit": finite_mean(list(b.values())),
              "success_drop_from_lowest_to_highest_rate_with_replan": difference(
                  policy_success(results[key(rates[0], True)], pol), policy_success(results[key(rates[-1], True)], pol))}
        for pol, b in benefit.items()
    }  # fmt: skip
    payload = {"settings": settings, "results": results, "replan_benefit": benefit, "conclusion": concl,
               "runs": runs.by_key()}  # fmt: skip
    return payload, markdown(settings, results, benefit)


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    settings, results = payload["settings"], payload["results"]
    plt = pyplot()
    rates = settings["rates"]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for k, pol in enumerate([*settings["algos"], *HEURISTICS]):
        color = f"C{k}"
        for replan, ls in ((True, "-"), (False, "--")):
            ys = nan_if_none([policy_success(results[key(r, replan)], pol) for r in rates])
            ax.plot(rates, ys, ls=ls, marker="o", color=color, label=f"{pol} ({'replan' if replan else 'no replan'})")
    ax.set_xlabel("planner error rate")
    ax.set_ylabel("held-out success rate")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"EDO-v0: planner errors (solid: replan on, dashed: off); {settings['timesteps']:,} steps/run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(150_000, (0, 1, 2), 200), quick=Budget(10_000, (0,), 60), smoke=Budget(300, (0,), 3)),
    algos=Tiered(full=("grpo",), quick=("grpo",), smoke=("grpo",)),
    options=(
        Option(
            "--rates",
            Tiered(full=[0.0, 0.2, 0.4, 0.6], quick=[0.0, 0.2, 0.4, 0.6], smoke=[0.0, 0.6]),
            "planner error rates",
            type=float,
            nargs="+",
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
