"""Caveat study 3: planner errors and the replan action.

The Planner's decomposition is wrong with probability ``planner_error_rate`` (a dropped, merged, reordered or
mislabelled step). This study sweeps that rate (0, 0.2, 0.4, 0.6) on EDO-v0, with the ``replan`` action enabled
and disabled (``enable_replan``), and reports held-out success of GRPO trained in each setting, and of the
oracle, greedy router and static pipeline on the same tasks. The "replan benefit" is success with replan minus
success without, per error rate and policy.

Usage::

    python benchmarks/study_planner.py            # full: 4 rates x replan on/off, GRPO 3 seeds x 150k steps, 200 tasks
    python benchmarks/study_planner.py --quick    # GRPO 1 seed x 10k steps, 60 tasks
    python benchmarks/study_planner.py --rates 0 0.4 --algos grpo ppo

Results: ``benchmarks/results/study_planner.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``results`` (one entry per (rate, replan): ``error_rate``, ``enable_replan``, ``algos``, ``heuristics``),
``replan_benefit`` (policy -> rate -> success difference), ``conclusion``, ``runs``.
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

NAME = "study_planner"
ALGOS = ("grpo", "ppo", "maskable_ppo")
HEURISTICS = ("oracle", "greedy_router", "static_pipeline")


def key(rate: float, replan: bool) -> str:
    return f"p{rate:g}-{'replan' if replan else 'noreplan'}"


def env_kwargs(rate: float, replan: bool) -> dict[str, Any]:
    return {"planner_error_rate": rate, "enable_replan": replan}


def policy_success(cell: dict[str, Any], policy: str) -> float:
    if policy in cell["algos"]:
        return cell["algos"][policy]["success"]["mean"]
    return cell["heuristics"][policy]["success_rate"]


def markdown(settings: dict[str, Any], results: dict[str, Any], benefit: dict[str, Any]) -> str:
    algos, rates = settings["algos"], settings["rates"]
    lines = header(
        "Caveat study: planner error rate and the replan action",
        settings["command"],
        settings["mode"],
        f"EDO-v0 with `planner_error_rate` swept and `enable_replan` on/off. Budget: {settings['timesteps']:,} env "
        f"steps per learned run, seeds {settings['seeds']}; evaluation on {settings['eval_episodes']} held-out tasks. "
        "Learned: mean over seeds (95% CI when more than one seed); heuristics: success (Wilson 95% CI).",
    )
    policies = [*algos, *HEURISTICS]
    lines += ["", "| error rate | replan | " + " | ".join(policies) + " |", "|---|---|" + "---|" * len(policies)]
    for rate in rates:
        for replan in (True, False):
            c = results[key(rate, replan)]
            cells = [fmt_stats(c["algos"][a]["success"]) + collapsed_note(c["algos"][a]["calls"]) for a in algos]
            cells += [fmt_eval(c["heuristics"][n]) for n in HEURISTICS]
            lines.append(f"| {rate:g} | {'on' if replan else 'off'} | " + " | ".join(cells) + " |")
    lines += ["", "Replan benefit (success with replan minus without):", "",
              "| policy | " + " | ".join(f"p={r:g}" for r in rates) + " |", "|---|" + "---|" * len(rates)]  # fmt: skip
    for pol in policies:
        lines.append(f"| {pol} | " + " | ".join(f"{benefit[pol][f'{r:g}']:+.3f}" for r in rates) + " |")
    lines += ["", "## What this shows", ""]
    for pol in policies:
        on = [policy_success(results[key(r, True)], pol) for r in rates]
        lines.append(
            f"- {pol}: success with replan goes {' -> '.join(f'{v:.3f}' for v in on)} as the error rate goes "
            f"{' -> '.join(f'{r:g}' for r in rates)}; the replan benefit ranges from "
            f"{min(benefit[pol].values()):+.3f} to {max(benefit[pol].values()):+.3f}."
        )
    if len(settings["seeds"]) < 2:
        lines.append("- One seed per learned cell: no interval over seeds.")
    return "\n".join(lines)


def plot(settings: dict[str, Any], results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rates = settings["rates"]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for k, pol in enumerate([*settings["algos"], *HEURISTICS]):
        color = f"C{k}"
        for replan, ls in ((True, "-"), (False, "--")):
            ys = [policy_success(results[key(r, replan)], pol) for r in rates]
            ax.plot(rates, ys, ls=ls, marker="o", color=color, label=f"{pol} ({'replan' if replan else 'no replan'})")
    ax.set_xlabel("planner error rate")
    ax.set_ylabel("held-out success rate")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"EDO-v0: planner errors (solid: replan on, dashed: off); {settings['timesteps']:,} steps/run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--rates", type=float, nargs="+", default=None, help="planner error rates")
    parser.add_argument("--algos", nargs="+", default=None, choices=ALGOS)
    args = parser.parse_args(argv)
    resolve_common(args, seeds=([0, 1, 2], [0], [0]), timesteps=(150_000, 10_000, 300), episodes=(200, 60, 3))
    rates = args.rates or pick(args, [0.0, 0.2, 0.4, 0.6], [0.0, 0.2, 0.4, 0.6], [0.0, 0.6])
    algos = args.algos or ["grpo"]
    out_dir = Path(args.out_dir)
    settings = {"command": command("study_planner.py", argv), "mode": mode_of(args), "rates": rates, "algos": algos,
                "seeds": args.seeds, "timesteps": args.timesteps, "eval_episodes": args.eval_episodes, "env_id": "EDO-v0",
                "heuristics": list(HEURISTICS)}  # fmt: skip
    specs = [(f"{key(r, rp)}-{a}-s{s}", train_spec(a, s, "EDO-v0", args.timesteps, args.eval_episodes, env_kwargs=env_kwargs(r, rp)))
             for r in rates for rp in (True, False) for s in args.seeds for a in algos]  # fmt: skip
    records = run_all(specs, out_dir, NAME)
    results: dict[str, Any] = {}
    for r in rates:
        for rp in (True, False):
            print(f"heuristics at error rate {r:g}, replan {rp} ...", flush=True)
            results[key(r, rp)] = {
                "error_rate": r,
                "enable_replan": rp,
                "algos": {a: summarise_runs([records[f"{key(r, rp)}-{a}-s{s}"] for s in args.seeds]) for a in algos},
                "heuristics": heuristic_results("EDO-v0", env_kwargs(r, rp), list(HEURISTICS), args.eval_episodes),
            }
    benefit = {
        pol: {
            f"{r:g}": policy_success(results[key(r, True)], pol) - policy_success(results[key(r, False)], pol) for r in rates
        }
        for pol in [*algos, *HEURISTICS]
    }
    concl = {
        pol: {"mean_replan_benefit": sum(b.values()) / len(b),
              "success_drop_from_lowest_to_highest_rate_with_replan": policy_success(results[key(rates[0], True)], pol)
              - policy_success(results[key(rates[-1], True)], pol)}
        for pol, b in benefit.items()
    }  # fmt: skip
    md = markdown(settings, results, benefit)
    payload = {"settings": settings, "results": results, "replan_benefit": benefit, "conclusion": concl, "runs": records}
    plot(settings, results, out_dir / f"{NAME}.png")
    finish(NAME, payload, md, out_dir)
    return payload


if __name__ == "__main__":
    main()
