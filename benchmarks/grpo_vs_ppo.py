"""GRPO versus PPO versus MaskablePPO on EDO-v0: training cost and task performance, side by side.

Tests the claim behind the project: *GRPO cuts PPO's training cost about in half (no value network: about
half the parameters and memory, 40-50% less time) at equal task performance.* Every algorithm gets the same
actor ``net_arch``, the same env-step budget, the same seeds, and is evaluated at the same intervals on the
same fixed held-out task set (EDO-v0 ``test`` split, deterministic actions). Each (algorithm, seed) run is a
separate subprocess, run one after the other so that timings do not compete.

Recorded per run: learning curve (success, return, tokens, calls, simulated latency vs env steps and train
wall time), wall time split into rollout and update, trainable parameters, optimizer state bytes, peak
resident memory of the process, CUDA peak memory when a GPU is used. Reported: means with 95% Student-t
confidence intervals over seeds, medians of times, GRPO/PPO ratios, and time/env steps to reach PPO's final
success. Heuristic policies are evaluated on the same task set for reference.

Usage::

    python -m benchmarks.grpo_vs_ppo                    # full: 5 seeds x 4 algorithms x 500k steps, 200 tasks
    python -m benchmarks.grpo_vs_ppo --setup scratch    # the same from scratch (no warm start)
    python -m benchmarks.grpo_vs_ppo --quick            # reduced: 2 seeds x 40k steps, 60 tasks (make bench-quick)

Setup (``--setup``): by default (``make-train``) every algorithm trains with ``make train``'s settings: the text
features in the observation, a warm start by behaviour cloning on 2,000 recorded episodes of the static pipeline (the
logs a team running a pipeline already has, ``bc_ent_coef=0.2``), learning rate 3e-4 and ``ent_coef=0.02`` for every
algorithm. ``--setup scratch`` is the same without the warm start; ``--setup train-defaults`` trains with
``TrainConfig``'s defaults; ``--setup levers`` is the configuration of EDO-Gym 0.3.0 (the privileged plan check in the
observation, a warm start on ``plan_check_text``'s episodes), kept to reproduce old results, used in no headline figure.

Entropy coefficients: every algorithm gets the setup's ``ent_coef`` unless ``--ent-coef-from PATH`` names an
entropy sweep of ``tune_ent_coef.py`` (``benchmarks/results/tune_ent_coef.json``), whose per-algorithm choice then wins.

Results: ``benchmarks/results/grpo_vs_ppo.{json,md}`` and ``grpo_vs_ppo_curves.png`` (or ``--out-dir``); one
record per run in ``records/grpo_vs_ppo/`` (finished runs are skipped when the command is run again).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_lib import EVAL_SEED, RunSpec, mean_ci95, median_or_none, time_to_target
from benchmarks.common import machine_info, machine_line
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered

NAME = "grpo_vs_ppo"
#: The entropy sweep's committed result, relative to the repository root (the full tier's default).
TUNED_ENT_COEFS = "benchmarks/results/tune_ent_coef.json"
ALGOS = ("grpo", "gigpo", "ppo", "maskable_ppo")
#: The best learned policy should beat the strongest observation-only heuristic by this much.
RULE_BASED_MARGIN = 0.05
TARGETS = {"params_ratio_max": 0.55, "success_gap_max": 0.02, "time_to_target_ratio_max": 0.6}
#: ``--setup``: a description, the env options and the training overrides (besides ``net_arch``) that every algorithm
#: gets. ``make-train`` is ``make train``'s configuration (the default); ``levers`` is 0.3.0's, with the privileged plan
#: check, kept only to reproduce old results.
MAKE_TRAIN_OVERRIDES: dict[str, Any] = {"learning_rate": 3e-4, "ent_coef": 0.02, "scale_rewards": "none"}
SETUPS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "make-train": (
        "make train's: the text features, a warm start cloned from the static pipeline's logs (bc_ent_coef 0.2), "
        "learning rate 3e-4, ent_coef 0.02",
        {"text_features": True},
        {"warm_start": "static_pipeline", "bc_ent_coef": 0.2, **MAKE_TRAIN_OVERRIDES},
    ),
    "scratch": (
        "from scratch: make train's settings without a warm start (text features, learning rate 3e-4, ent_coef 0.02)",
        {"text_features": True},
        {"warm_start": None, **MAKE_TRAIN_OVERRIDES},
    ),
    "train-defaults": ("TrainConfig's defaults: the default observation, a warm start on the static pipeline's logs", {}, {}),
    "levers": (
        "EDO-Gym 0.3.0's levers: the text features and the privileged plan check in the observation, a warm start on "
        "plan_check_text's episodes",
        {"text_features": True, "plan_check": True},
        {"warm_start": "plan_check_text"},
    ),
}
#: The setup every study trains with unless ``--setup`` says otherwise.
DEFAULT_SETUP = "make-train"


def setup_option(what: str) -> Option:
    """The ``--setup`` option (default ``make-train``) of a study whose runs train with one of :data:`SETUPS`."""
    return Option(
        "--setup",
        DEFAULT_SETUP,
        f"what {what} trains with: 'make-train' (make train's settings, warm start on the static pipeline's logs), "
        "'scratch' (the same without a warm start), 'train-defaults' (TrainConfig's) or 'levers' (0.3.0's, with the "
        "privileged plan check)",
        choices=tuple(SETUPS),
    )


def setup_settings(name: str) -> dict[str, Any]:
    """The settings keys that record a setup in a result file."""
    description, env_kwargs, train_overrides = SETUPS[name]
    return {"setup": name, "setup_description": description, "env_kwargs": env_kwargs, "train_overrides": train_overrides}


def heuristic_reference(env_id: str, episodes: int) -> list[dict[str, Any]]:
    from baselines.evaluation import evaluate_heuristic, heldout_task_ids, make_eval_env
    from baselines.heuristics import HEURISTICS, make_heuristic
    from baselines.probes import PROBES, TEXT_PROBES

    env = make_eval_env(env_id)
    ids = heldout_task_ids(env, episodes)
    out = [evaluate_heuristic(make_heuristic(name), env, ids, seed=EVAL_SEED).as_dict() for name in HEURISTICS]
    # the validity benchmark's other hand-written observation-only policies, on the same tasks
    out += [
        {**evaluate_heuristic(cls(), env, ids, seed=EVAL_SEED).as_dict(), "probe": True}
        for name, cls in PROBES.items()
        if name not in HEURISTICS
    ]
    env.close()
    text_env = make_eval_env(env_id, info_text=True)
    out += [
        {**evaluate_heuristic(cls(), text_env, ids, seed=EVAL_SEED).as_dict(), "probe": True, "reads_text": True}
        for cls in TEXT_PROBES.values()
    ]
    text_env.close()
    return out


def best_learned_vs_best_hand_written(
    summary: dict[str, Any], heuristics: list[dict[str, Any]], reads_text: bool = False
) -> dict[str, Any] | None:
    """The learned algorithm with the highest mean final success against the hand-written observation-only policy
    with the highest success on the same tasks: of those reading the numeric observation (``reads_text=False``) or
    of those also reading ``info["text"]``."""
    hand = [h for h in heuristics if not h["uses_hidden_state"] and bool(h.get("reads_text")) == reads_text]
    learned = {a: summary[a] for a in ALGOS if a in summary}
    if not hand or not learned:
        return None
    best = max(learned, key=lambda a: learned[a]["final_success_mean"])
    top = max(hand, key=lambda h: (h["success_rate"], h["mean_return"]))
    return {
        "algo": best,
        "success": learned[best]["final_success_mean"],
        "return": learned[best]["final_return_mean"],
        "hand_written": top["policy"],
        "hand_written_success": top["success_rate"],
        "hand_written_return": top["mean_return"],
        "success_gap": learned[best]["final_success_mean"] - top["success_rate"],
        "return_gap": learned[best]["final_return_mean"] - top["mean_return"],
    }


def update_time_per_sample_epoch(record: dict[str, Any]) -> float | None:
    """
    A run's update time per env step and epoch: ``update_s / (num_timesteps x n_epochs)``, in seconds.

    ``n_epochs`` is the run's ``train_overrides["n_epochs"]``, else ``TrainConfig``'s default. The steps are the
    collected ones: PPO trains on all of them, GRPO on those of its untied groups (its tie filter may leave some out).
    ``update_s`` is the time between rollouts (``train()`` plus logging), as ``bench_lib`` records it.

    :param record: A run record of ``bench_lib.run_in_process``
    :return: Seconds per step and epoch; None when the record lacks ``update_s`` or ``num_timesteps``
    """
    update_s, steps = record.get("update_s"), record.get("num_timesteps")
    if update_s is None or not steps:
        return None
    overrides = record.get("spec", {}).get("train_overrides", {})
    if "n_epochs" in overrides:
        n_epochs = int(overrides["n_epochs"])
    else:
        from baselines.training import TrainConfig

        n_epochs = int(TrainConfig.__dataclass_fields__["n_epochs"].default)
    return float(update_s) / (int(steps) * n_epochs)


def warm_start_figures(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean held-out success and return of the warm-started policy before any RL step (None without a warm start)."""
    evals = [r["warm_start"]["eval"] for r in recs if (r.get("warm_start") or {}).get("eval")]
    if len(evals) != len(recs):
        return {"warm_start_success_mean": None, "warm_start_return_mean": None}
    return {
        "warm_start_success_mean": float(np.mean([e["success"] for e in evals])),
        "warm_start_return_mean": float(np.mean([e["return"] for e in evals])),
    }


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The ``summary`` object: per algorithm figures plus GRPO/PPO ratios and target checks."""
    summary: dict[str, Any] = {}
    ppo_final = mean_ci95([r["final"]["success"] for r in runs.get("ppo", [])])[0] if runs.get("ppo") else None
    for algo, recs in runs.items():
        finals = [r["final"]["success"] for r in recs]
        mean, ci = mean_ci95(finals)
        per_sample_epoch = [update_time_per_sample_epoch(r) for r in recs]
        ttt = [time_to_target(r, ppo_final)[0] for r in recs] if ppo_final is not None else []
        stt = [time_to_target(r, ppo_final)[1] for r in recs] if ppo_final is not None else []
        summary[algo] = {
            "seeds": [r["spec"]["seed"] for r in recs],
            "final_success_mean": mean,
            "final_success_ci95": list(ci),
            "final_return_mean": float(np.mean([r["final"]["return"] for r in recs])),
            "trainable_params": int(recs[0]["trainable_params"]),
            "optimizer_state_bytes": int(recs[0]["optimizer_state_bytes"]),
            "peak_rss_bytes": int(np.median([r["peak_rss_bytes"] for r in recs])),
            "cuda_peak_bytes": recs[0]["cuda_peak_bytes"],
            "wall_time_s": float(np.median([r["wall_time_s"] for r in recs])),
            "rollout_time_s": float(np.median([r["rollout_s"] for r in recs])),
            "update_time_s": float(np.median([r["update_s"] for r in recs])),
            "update_time_per_sample_epoch_s": (
                None if None in per_sample_epoch else float(np.median(per_sample_epoch))  # type: ignore[arg-type]
            ),
            "env_steps": int(np.median([r["num_timesteps"] for r in recs])),
            "time_to_target_s": median_or_none(ttt),
            "env_steps_to_target": median_or_none([None if s is None else float(s) for s in stt]),
            "runs_reaching_target": sum(t is not None for t in ttt),
            "runs_at_target_before_rl": sum(s == 0 for s in stt),
            **warm_start_figures(recs),
        }
    summary["target_success"] = ppo_final
    if "grpo" in summary and "ppo" in summary:
        g, p = summary["grpo"], summary["ppo"]

        def ratio(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None or b == 0 else a / b

        ratios = {
            "trainable_params": ratio(g["trainable_params"], p["trainable_params"]),
            "optimizer_state_bytes": ratio(g["optimizer_state_bytes"], p["optimizer_state_bytes"]),
            "peak_rss_bytes": ratio(g["peak_rss_bytes"], p["peak_rss_bytes"]),
            "wall_time_s": ratio(g["wall_time_s"], p["wall_time_s"]),
            "rollout_time_s": ratio(g["rollout_time_s"], p["rollout_time_s"]),
            "update_time_s": ratio(g["update_time_s"], p["update_time_s"]),
            "update_time_per_sample_epoch_s": ratio(g["update_time_per_sample_epoch_s"], p["update_time_per_sample_epoch_s"]),
            "time_to_target_s": ratio(g["time_to_target_s"], p["time_to_target_s"]),
            "env_steps_to_target": ratio(g["env_steps_to_target"], p["env_steps_to_target"]),
        }
        gap = g["final_success_mean"] - p["final_success_mean"]
        summary["grpo_over_ppo"] = ratios
        summary["targets"] = {
            "params_and_optimizer_at_most_0.55": bool(
                ratios["trainable_params"] is not None
                and ratios["trainable_params"] <= TARGETS["params_ratio_max"]
                and ratios["optimizer_state_bytes"] <= TARGETS["params_ratio_max"]
            ),
            "final_success_within_2_points": bool(gap >= -TARGETS["success_gap_max"]),
            "time_to_target_at_most_0.6": bool(
                ratios["time_to_target_s"] is not None and ratios["time_to_target_s"] <= TARGETS["time_to_target_ratio_max"]
            ),
            "success_gap_points": 100 * gap,
        }
    return summary


def markdown(summary: dict[str, Any], heuristics: list[dict[str, Any]], settings: dict[str, Any], machine: str) -> str:
    algos = [a for a in ALGOS if a in summary]
    lines = [
        "# GRPO vs GiGPO vs PPO vs MaskablePPO on EDO-v0",
        "",
        f"Machine: {machine}. Command: `{settings['command']}`.",
        f"Budget: {settings['timesteps']:,} env steps per run, seeds {settings['seeds']}, actor net_arch "
        f"{settings['net_arch']}, evaluation every {settings['eval_every']:,} steps on {settings['eval_episodes']} "
        "held-out tasks (deterministic actions). Times are medians over seeds and exclude evaluation.",
        *([f"Setup ({settings['setup']}): {settings['setup_description']}."] if settings.get("setup") else []),
        "",
        "| algo | final success (95% CI) | final return | before RL (warm start) | params | optimizer state | peak RSS "
        "| wall time | rollout | update | time to PPO's final success | env steps to it |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def before_rl(s: dict[str, Any]) -> str:
        if s.get("warm_start_success_mean") is None:
            return "-"
        return f"{s['warm_start_success_mean']:.3f} / {s['warm_start_return_mean']:+.3f}"

    for a in algos:
        s = summary[a]
        ttt = "never (median)" if s["time_to_target_s"] is None else f"{s['time_to_target_s']:.0f} s"
        stt = "-" if s["env_steps_to_target"] is None else f"{s['env_steps_to_target']:,.0f}"
        lines.append(
            f"| {a} | {s['final_success_mean']:.3f} ({s['final_success_ci95'][0]:.3f}-{s['final_success_ci95'][1]:.3f}) "
            f"| {s['final_return_mean']:+.3f} | {before_rl(s)} | {s['trainable_params']:,} | {s['optimizer_state_bytes'] / 1024:.0f} KiB "
            f"| {s['peak_rss_bytes'] / 2**20:.0f} MiB | {s['wall_time_s']:.0f} s | {s['rollout_time_s']:.0f} s "
            f"| {s['update_time_s']:.0f} s | {ttt} ({s['runs_reaching_target']}/{len(s['seeds'])} runs) | {stt} |"
        )
    if "grpo_over_ppo" in summary:
        r, t = summary["grpo_over_ppo"], summary["targets"]

        def fmt(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.2f}"

        lines += [
            "",
            f"Target success (PPO's final mean): {summary['target_success']:.3f}.",
            "",
            "| GRPO / PPO | ratio |",
            "|---|---|",
            *(f"| {k} | {fmt(v)} |" for k, v in r.items()),
            "",
            "| target | met? |",
            "|---|---|",
            f"| params and optimizer state <= 0.55 of PPO's | {'yes' if t['params_and_optimizer_at_most_0.55'] else 'NO'} |",
            f"| final success within 2 points of PPO (gap {t['success_gap_points']:+.1f} points) "
            f"| {'yes' if t['final_success_within_2_points'] else 'NO'} |",
            f"| time to PPO's final success <= 0.6 of PPO's | {'yes' if t['time_to_target_at_most_0.6'] else 'NO'} |",
        ]
    at_start = [a for a in algos if summary[a].get("runs_at_target_before_rl")]
    warm = any(summary[a].get("warm_start_success_mean") is not None for a in algos)
    if at_start:
        lines += [
            "",
            (
                "The warm start alone (behaviour cloning before the first RL step)"
                if warm
                else "The policy before the first RL step (its initialisation: there is no warm start)"
            )
            + " reaches PPO's final success in "
            + ", ".join(f"{summary[a]['runs_at_target_before_rl']}/{len(summary[a]['seeds'])} runs of {a}" for a in at_start)
            + ": there the time to target measures "
            + ("the warm start" if warm else "where training starts")
            + ", not the RL algorithm; compare the update times and the gain over the 'before RL' column instead.",
        ]
    best = summary.get("best_learned_vs_rule_based")
    if best is not None:
        lines += [
            "",
            f"Best learned policy: {best['algo']} at {best['success']:.3f} success, rule_based {best['rule_based_success']:.3f} "
            f"(gap {best['gap']:+.3f}; target >= +{best['target_gap']:.2f}: {'met' if best['met'] else 'NOT met'}).",
        ]
    for key, what in (("best_learned_vs_best_hand_written", "numeric"), ("best_learned_vs_best_text_reading", "text-reading")):
        b = summary.get(key)
        if b is not None:
            lines.append(
                f"Against the best {what} hand-written policy ({b['hand_written']}, {b['hand_written_success']:.3f} success, "
                f"{b['hand_written_return']:+.3f} return): {b['algo']} {b['success_gap']:+.3f} success, "
                f"{b['return_gap']:+.3f} return."
            )
    lines += ["", "Hand-written policies on the same task set (probes: the validity benchmark's short policies; text: reads "
              "`info[\"text\"]`):", "", "| policy | success | return | tokens | calls | latency s |"]  # fmt: skip
    lines.append("|---|---|---|---|---|---|")
    for h in heuristics:
        tag = " (probe, text)" if h.get("reads_text") else " (probe)" if h.get("probe") else ""
        lines.append(
            f"| {h['policy']}{tag} | {h['success_rate']:.3f} | {h['mean_return']:+.3f} | {h['tokens']:.0f} | {h['calls']:.1f} "
            f"| {h['latency_s']:.1f} |"
        )
    return "\n".join(lines)


def plot_curves(runs: dict[str, list[dict[str, Any]]], path: Path, heuristics: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for algo, recs in runs.items():
        for ax, xkey, xlabel in ((axes[0], "env_steps", "env steps"), (axes[1], "train_time_s", "train wall time (s)")):
            n = min(len(r["curve"]) for r in recs)
            ys = np.array([[p["success"] for p in r["curve"][:n]] for r in recs])
            xs = np.median(np.array([[p[xkey] for p in r["curve"][:n]] for r in recs]), axis=0)
            lo, hi = zip(*(mean_ci95(list(ys[:, i]))[1] for i in range(n)), strict=True)
            ax.plot(xs, ys.mean(axis=0), label=algo)
            ax.fill_between(xs, lo, hi, alpha=0.2)
            ax.set_xlabel(xlabel)
    for h in heuristics:
        for ax in axes:
            ax.axhline(h["success_rate"], ls=":", lw=1, color="grey")
            ax.text(ax.get_xlim()[0], h["success_rate"], f" {h['policy']}", fontsize=7, va="bottom", color="grey")
    axes[0].set_ylabel("held-out success rate (mean, 95% CI)")
    axes[0].legend()
    fig.suptitle("EDO-v0: GRPO vs GiGPO vs PPO vs MaskablePPO")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def net_arch_of(cfg: StudyConfig) -> list[int]:
    net_arch = [int(x) for x in cfg.options.net_arch.split(",") if x]
    if not net_arch:
        raise SystemExit("--net-arch must name at least one hidden layer size")
    return net_arch


def eval_every_of(cfg: StudyConfig) -> int:
    return cfg.options.eval_every or max(1, cfg.budget.timesteps // 8)


def tuned_ent_coefs(cfg: StudyConfig) -> dict[str, float]:
    """Per algorithm, the entropy coefficient chosen by ``tune_ent_coef.py`` (empty when ``--ent-coef-from`` is
    unset or ``none``)."""
    source = cfg.options.ent_coef_from
    if not source or str(source).lower() == "none":
        return {}
    path = Path(source)
    if not path.is_absolute() and not path.is_file():  # the default is relative to the repository root
        path = Path(__file__).resolve().parent.parent / path
    if not path.is_file():
        raise SystemExit(
            f"--ent-coef-from: no file {path} (run `make bench-tune` to produce it, or pass --ent-coef-from none "
            "to train with each algorithm's class default ent_coef)"
        )
    best = json.loads(path.read_text())["best"]
    return {algo: float(b["ent_coef"]) for algo, b in best.items() if b is not None}


def points(cfg: StudyConfig) -> dict[str, Point]:
    return {"": Point(env_id=cfg.options.env)}


def spec(cfg: StudyConfig, point: Point, algo: str, seed: int) -> RunSpec:
    """Evaluated at step 0 and every ``eval_every`` steps (the learning curve), on the same held-out tasks for all."""
    _, env_kwargs, setup_overrides = SETUPS[cfg.options.setup]
    overrides: dict[str, Any] = {**setup_overrides, "net_arch": net_arch_of(cfg)}
    if algo in tuned_ent_coefs(cfg):
        overrides["ent_coef"] = tuned_ent_coefs(cfg)[algo]
    return RunSpec(algo=algo, seed=seed, env_id=point.env_id, total_timesteps=cfg.budget.timesteps,
                   eval_every=eval_every_of(cfg), eval_episodes=cfg.budget.eval_episodes, train_overrides=overrides,
                   env_kwargs=dict(env_kwargs))  # fmt: skip


def best_learned_vs_rule_based(summary: dict[str, Any], heuristics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The learned algorithm with the highest mean final success against ``rule_based`` on the same tasks."""
    rule = next((h for h in heuristics if h["policy"] == "rule_based"), None)
    learned = {a: summary[a]["final_success_mean"] for a in ALGOS if a in summary}
    if rule is None or not learned:
        return None
    best = max(learned, key=learned.__getitem__)
    gap = learned[best] - rule["success_rate"]
    return {"algo": best, "success": learned[best], "rule_based_success": rule["success_rate"], "gap": gap,
            "target_gap": RULE_BASED_MARGIN, "met": bool(gap >= RULE_BASED_MARGIN)}  # fmt: skip


def summarise_study(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    by_algo = {a: runs.seeds("", a) for a in cfg.algos}
    by_algo = {a: recs for a, recs in by_algo.items() if recs}
    print(f"heuristics on {cfg.budget.eval_episodes} held-out {cfg.options.env} tasks ...", flush=True)
    heuristics = heuristic_reference(cfg.options.env, cfg.budget.eval_episodes)
    summary = summarise(by_algo)
    summary["best_learned_vs_rule_based"] = best_learned_vs_rule_based(summary, heuristics)
    summary["best_learned_vs_best_hand_written"] = best_learned_vs_best_hand_written(summary, heuristics)
    summary["best_learned_vs_best_text_reading"] = best_learned_vs_best_hand_written(summary, heuristics, reads_text=True)
    settings = {"command": cfg.command, "mode": cfg.tier, "seeds": list(cfg.budget.seeds), "timesteps": cfg.budget.timesteps,
                "eval_every": eval_every_of(cfg), "eval_episodes": cfg.budget.eval_episodes, "net_arch": net_arch_of(cfg),
                "algos": list(cfg.algos), "env": cfg.options.env, "ent_coef_by_algo": tuned_ent_coefs(cfg) or None,
                **setup_settings(cfg.options.setup)}  # fmt: skip
    md = markdown(summary, heuristics, settings, machine_line(machine_info()))
    return {"settings": settings, "summary": summary, "heuristics": heuristics, "runs": by_algo}, md


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    if payload["runs"]:
        plot_curves(payload["runs"], path.with_name(f"{cfg.name}_curves.png"), payload["heuristics"])


STUDY = Study(
    name=NAME,
    doc=__doc__,
    budgets=Tiered(full=Budget(500_000, (0, 1, 2, 3, 4), 200), quick=Budget(40_000, (0, 1), 60), smoke=Budget(300, (0,), 3)),
    algos=Tiered(full=ALGOS, quick=ALGOS, smoke=("grpo", "ppo")),
    options=(
        Option("--eval-every", None, "env steps between held-out evaluations (default: timesteps / 8)", type=int),
        Option("--env", "EDO-v0", "env id"),
        Option("--net-arch", "128,128", "actor hidden sizes, comma-separated (same for all algos)"),
        setup_option("every algorithm"),
        Option(
            "--ent-coef-from",
            None,
            f"an entropy sweep's result ({TUNED_ENT_COEFS}): train each algorithm with its tuned ent_coef "
            "(default: the setup's ent_coef for every algorithm)",
        ),
    ),
    points=points,
    spec=spec,
    summarise=summarise_study,
    plot=plot,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
