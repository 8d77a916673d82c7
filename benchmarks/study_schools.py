"""Caveat study 6: orchestration schools on one success-versus-cost chart.

Static pipeline (a fixed script), greedy LLM-style router (reads the state and decides every step; each decision
is charged on the env ledger by ``GreedyRouter``: 150 tokens, one call, 0.6 s), an oracle that reads hidden state
(an upper bound, not deployable), a random floor, and learned policies (GRPO, GiGPO, PPO, MaskablePPO), all on the same
held-out tasks with the same per-episode seeds.

Learned policies come from ``grpo_vs_ppo.json`` when it exists (``--from-results``, default: that file in
``--out-dir``, else in ``benchmarks/results``): the final evaluation point of every run
(``runs[algo][i]["curve"][-1]``), averaged over seeds; the heuristics are then evaluated on that file's env and
number of held-out tasks. Otherwise (or with ``--train``) they are trained here briefly (``--train-steps``).

The rule-based heuristic (the strongest observation-only hand-written policy) is a row of its own. The LLM router
with a real language model (SmolLM2-135M served locally) comes from ``sim_to_real.json`` when it exists
(``--llm-router-from``): it ran on its own held-out tasks with the real backend, so it is shown beside the table and
kept out of the Pareto fronts.

Cost axes: mean tokens per episode, and mean cost per episode in reward units = success - return (the reward is
``success_reward`` (1, exact match only on EDO-v0 defaults) minus the weighted tokens, calls and latency, minus
illegal-action penalties).

Usage::

    python -m benchmarks.study_schools                      # learned from grpo_vs_ppo.json, else trained 100k steps x 3 seeds
    python -m benchmarks.study_schools --quick              # learned from grpo_vs_ppo.json, else 20k steps x 1 seed, 60 tasks
    python -m benchmarks.study_schools --train --train-steps 50000 --seeds 0 1

Results: ``benchmarks/results/study_schools.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``source``, ``policies`` (name -> school, learned, success, return, tokens, calls, latency_s, cost_reward_units),
``pareto_tokens``, ``pareto_cost``, ``conclusion``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_lib import RunSpec
from benchmarks.common import RESULTS_DIR
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered, shown_path, train_spec
from benchmarks.summary import header, heuristic_results, pyplot

NAME = "study_schools"
ALGOS = ("grpo", "gigpo", "ppo", "maskable_ppo")
SOURCE = "grpo_vs_ppo"
#: The LLM router's row comes from the sim-to-real benchmark (a real model; its own tasks and backend).
LLM_SOURCE = "sim_to_real"
HEURISTIC_ROWS = ("random", "static_pipeline", "rule_based", "greedy_router", "oracle")
SCHOOLS = {
    "random": "random floor",
    "static_pipeline": "static pipeline",
    "rule_based": "hand-written rules (observation only)",
    "greedy_router": "LLM router (greedy, charged per decision)",
    "oracle": "oracle (reads hidden state; not deployable)",
    "grpo": "learned (RL)",
    "gigpo": "learned (RL)",
    "llm_router": "LLM router (real SmolLM2-135M deciding every step; sim_to_real.json: its own tasks, real backend)",
    "ppo": "learned (RL)",
    "maskable_ppo": "learned (RL)",
}


def source_path(cfg: StudyConfig) -> Path | None:
    """The ``grpo_vs_ppo.json`` to read learned policies from; None when they are trained here."""
    if cfg.options.train:
        return None
    if cfg.options.from_results:
        return Path(cfg.options.from_results)
    if SOURCE in cfg.upstream:  # summarised just before this study, in the same invocation
        return cfg.out_dir / f"{SOURCE}.json"
    return next((p for p in (cfg.out_dir / f"{SOURCE}.json", RESULTS_DIR / f"{SOURCE}.json") if p.is_file()), None)


def points(cfg: StudyConfig) -> dict[str, Point]:
    return {} if source_path(cfg) is not None else {"": Point(env_id=cfg.options.env)}


def spec(cfg: StudyConfig, point: Point, algo: str, seed: int) -> RunSpec:
    """As :func:`train_spec`, for ``--train-steps`` env steps when given."""
    run = train_spec(cfg, point, algo, seed)
    if cfg.options.train_steps:
        run.total_timesteps, run.eval_every = cfg.options.train_steps, cfg.options.train_steps + 1
    return run


def learned_from_results(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per algo: the mean over seeds of the final evaluation point of ``grpo_vs_ppo.json`` runs; and its settings."""
    data = json.loads(path.read_text())
    out = {}
    for algo, runs in data["runs"].items():
        finals = [r["curve"][-1] for r in runs]
        if finals:
            out[algo] = _mean_point(
                finals, [r["spec"]["seed"] for r in runs], int(np.median([r["num_timesteps"] for r in runs]))
            )
    return out, data.get("settings", {})


def _mean_point(finals: list[dict[str, Any]], seeds: list[int], steps: int) -> dict[str, Any]:
    return {
        "success": float(np.mean([f["success"] for f in finals])),
        "return": float(np.mean([f["return"] for f in finals])),
        "tokens": float(np.mean([f["tokens"] for f in finals])),
        "calls": float(np.mean([f["calls"] for f in finals])),
        "latency_s": float(np.mean([f["latency_s"] for f in finals])),
        "success_by_seed": [float(f["success"]) for f in finals],
        "seeds": seeds,
        "env_steps": steps,
    }


def llm_router_row(cfg: StudyConfig) -> dict[str, Any] | None:
    """The LLM router with the real model, from ``sim_to_real.json`` (``--llm-router-from``, default: that file in
    ``--out-dir``, else in ``benchmarks/results``); None when there is none."""
    given = cfg.options.llm_router_from
    candidates = [Path(given)] if given else [cfg.out_dir / f"{LLM_SOURCE}.json", RESULTS_DIR / f"{LLM_SOURCE}.json"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        if given:
            raise SystemExit(f"--llm-router-from {given}: no such file (run python -m benchmarks.sim_to_real first)")
        return None
    data = json.loads(path.read_text())
    row = data.get("results", {}).get("real", {}).get("llm_router")
    if row is None:
        return None
    return {"school": SCHOOLS["llm_router"], "learned": False, "separate": True, "source_path": shown_path(path),
            "episodes": row["episodes"], "model": data["settings"]["real"].get("model"), "success": row["success_rate"],
            "return": row["mean_return"], "tokens": row["tokens"], "calls": row["calls"], "latency_s": row["latency_s"],
            "success_ci95": row["success_ci95"], "cost_reward_units": row["success_rate"] - row["mean_return"]}  # fmt: skip


def pareto(policies: dict[str, dict[str, Any]], cost_key: str) -> list[str]:
    """Deployable policies (oracle excluded) that no other deployable policy beats on both success and cost."""
    names = [n for n in policies if n != "oracle" and not policies[n].get("separate")]
    front = []
    for n in names:
        p = policies[n]
        dominated = any(
            policies[m]["success"] >= p["success"] and policies[m][cost_key] <= p[cost_key]
            and (policies[m]["success"] > p["success"] or policies[m][cost_key] < p[cost_key])
            for m in names if m != n
        )  # fmt: skip
        if not dominated:
            front.append(n)
    return sorted(front, key=lambda n: policies[n][cost_key])


def markdown(settings: dict[str, Any], policies: dict[str, Any], front_tok: list[str], front_cost: list[str]) -> str:
    lines = header(
        "Caveat study: orchestration schools, success versus cost",
        settings["command"],
        settings["mode"],
        f"{settings['env_id']}, first {settings['eval_episodes']} held-out tasks, same per-episode seeds for all. Learned "
        f"policies: {settings['source']}. Cost in reward units = success - return (token, call, latency costs and "
        "illegal-action penalties).",
    )
    lines += ["", "| policy | school | success | return | tokens/ep | calls/ep | latency s/ep | cost (reward units) |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, p in sorted(policies.items(), key=lambda kv: kv[1]["tokens"]):
        n = len(p["seeds"]) if p["learned"] else 0
        extra = f" ({n} seed{'s' if n > 1 else ''}, {p['env_steps']:,} steps)" if p["learned"] else ""
        if p.get("separate"):
            extra = f" ({p['episodes']} tasks, {p['model']})"
        lines.append(
            f"| {name}{extra} | {p['school']} | {p['success']:.3f} | {p['return']:+.3f} | {p['tokens']:.0f} | {p['calls']:.1f} "
            f"| {p['latency_s']:.1f} | {p['cost_reward_units']:.3f} |"
        )
    lines += ["", "## What this shows", "",
              f"- Success/tokens Pareto front of the deployable policies (cheapest first): {', '.join(front_tok)}.",
              f"- Success/cost (reward units) Pareto front: {', '.join(front_cost)}."]  # fmt: skip
    best = max(
        (n for n in policies if n != "oracle" and not policies[n].get("separate")), key=lambda n: policies[n]["success"]
    )  # heuristics always exist
    lines.append(f"- Highest success among deployable policies: {best} ({policies[best]['success']:.3f}); the oracle "
                 f"reaches {policies['oracle']['success']:.3f}.")  # fmt: skip
    if "llm_router" in policies:
        r = policies["llm_router"]
        lines.append(
            f"- The LLM router with a real model ({r['model']}, {r['episodes']} tasks of its own, real backend, from "
            f"`{r['source_path']}`) reaches {r['success']:.3f} at {r['tokens']:.0f} tokens per episode; it is not on the "
            "fronts above, which compare policies on the same tasks and backend."
        )
    if "greedy_router" in policies:
        g = policies["greedy_router"]
        lines.append(
            f"- The greedy router spends {g['tokens']:.0f} tokens and {g['calls']:.1f} calls per episode, its own routing decisions included."
        )
    for a in ALGOS:
        if a in policies and policies[a]["calls"] < 0.5:
            lines.append(f"- {a}: {policies[a]['calls']:.2f} calls per episode: it mostly submits at once (near-zero cost, "
                         f"success {policies[a]['success']:.3f}).")  # fmt: skip
    return "\n".join(lines)


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    settings, policies = payload["settings"], payload["policies"]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, label in (
        (axes[0], "tokens", "mean tokens per episode"),
        (axes[1], "cost_reward_units", "mean cost per episode (reward units)"),
    ):
        for k, (name, p) in enumerate(policies.items()):
            marker = "*" if p["learned"] else "x" if name == "oracle" else "o"
            ax.scatter(p[key], p["success"], s=70, marker=marker, color=f"C{k}", label=name)
            ax.annotate(name, (p[key], p["success"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("held-out success rate")
        ax.set_ylim(-0.03, 1.03)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Orchestration schools on {settings['env_id']} ({settings['eval_episodes']} held-out tasks)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    source_file = source_path(cfg)
    env_id, episodes = cfg.options.env, cfg.budget.eval_episodes
    learned: dict[str, Any] = {}
    if source_file is not None:
        learned, gsettings = learned_from_results(source_file)
        learned = {a: v for a, v in learned.items() if a in cfg.algos}
        env_id = gsettings.get("env", env_id)
        if "eval_episodes" not in cfg.given:
            episodes = int(gsettings.get("eval_episodes", episodes))  # the same held-out tasks as those runs
        source = f"final evaluation of the runs in `{shown_path(source_file)}` (mean over seeds)"
    else:
        for a in cfg.algos:
            recs = runs.seeds("", a)
            if recs:
                learned[a] = _mean_point([r["final"] for r in recs], [r["spec"]["seed"] for r in recs],
                                         int(np.median([r["num_timesteps"] for r in recs])))  # fmt: skip
        steps = runs.planned[0].spec.total_timesteps if runs.planned else cfg.budget.timesteps
        source = f"trained here, {steps:,} env steps x seeds {list(cfg.budget.seeds)}"
    print(f"heuristics on {episodes} held-out {env_id} tasks ...", flush=True)
    heur = heuristic_results(env_id, {}, list(HEURISTIC_ROWS), episodes)
    policies: dict[str, Any] = {}
    for name, h in heur.items():
        policies[name] = {"school": SCHOOLS[name], "learned": False, "success": h["success_rate"], "return": h["mean_return"],
                          "tokens": h["tokens"], "calls": h["calls"], "latency_s": h["latency_s"], "success_ci95": h["success_ci95"]}  # fmt: skip
    for name, p in learned.items():
        policies[name] = {"school": SCHOOLS[name], "learned": True, **p}
    for p in policies.values():
        p["cost_reward_units"] = p["success"] - p["return"]
    front_tok, front_cost = pareto(policies, "tokens"), pareto(policies, "cost_reward_units")
    llm_row = llm_router_row(cfg)
    if llm_row is not None:  # beside the table, outside the Pareto fronts: other tasks, other backend
        policies["llm_router"] = llm_row
    trained_here = source_file is None
    settings = {"command": cfg.command, "mode": cfg.tier, "env_id": env_id, "eval_episodes": episodes, "source": source,
                "source_path": None if trained_here else shown_path(source_file), "algos": list(learned),
                "seeds": list(cfg.budget.seeds) if trained_here else None,
                "train_steps": (cfg.options.train_steps or cfg.budget.timesteps) if trained_here else None}  # fmt: skip
    deployable = [n for n in policies if n not in ("oracle", "llm_router")]
    concl = {"pareto_tokens": front_tok, "pareto_cost": front_cost,
             "best_deployable": max(deployable, key=lambda n: policies[n]["success"]),
             "collapsed_learned": [a for a in learned if policies[a]["calls"] < 0.5]}  # fmt: skip
    payload = {"settings": settings, "source": source, "policies": policies, "pareto_tokens": front_tok, "pareto_cost": front_cost,
               "conclusion": concl}  # fmt: skip
    return payload, markdown(settings, policies, front_tok, front_cost)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(100_000, (0, 1, 2), 200), quick=Budget(20_000, (0,), 60), smoke=Budget(300, (0,), 3)),
    algos=Tiered(full=ALGOS, quick=ALGOS, smoke=ALGOS),
    options=(
        Option("--from-results", None, f"{SOURCE}.json to read learned policies from"),
        Option("--train", store_true=True, help=f"train the learned policies here even if {SOURCE}.json exists"),
        Option("--train-steps", None, "env steps per learned run when training here (a synonym of --timesteps)", type=int),
        Option("--env", "EDO-v0", "env id"),
        Option("--llm-router-from", None, f"{LLM_SOURCE}.json to read the real-model LLM router's row from"),
    ),
    points=points,
    spec=spec,
    summarise=summarise,
    plot=plot,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
