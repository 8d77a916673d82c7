"""Figures and tables from run records, shared by the studies: statistics over seeds, heuristic references on the
same held-out tasks, and Markdown/plot formatting.

Every figure here accepts missing runs: statistics of no records are ``None`` and print as ``missing``, so that
a partial study (some runs not finished yet) still summarises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.bench_lib import EVAL_SEED, mean_ci95
from benchmarks.common import machine_info, machine_line

#: A learned policy whose mean calls per episode is below this submits (almost) at once: it has collapsed. Since 0.2.0
#: the planner's call at reset is charged to every episode, so submitting at once costs exactly one call.
COLLAPSE_CALLS = 1.5
#: How a missing figure prints.
MISSING = "missing"


def heuristic_results(
    env_id: str, env_kwargs: dict[str, Any], names: Sequence[str], episodes: int
) -> dict[str, dict[str, Any]]:
    """Hand-written policies on the first ``episodes`` held-out tasks of ``env_id`` (the tasks the trained models see):
    heuristics (:data:`baselines.heuristics.HEURISTICS`) and probes (:data:`baselines.probes.PROBES`, and
    :data:`baselines.probes.TEXT_PROBES`, for which the env is made with ``info_text=True``)."""
    from baselines.evaluation import evaluate_heuristic, heldout_task_ids, make_eval_env
    from baselines.heuristics import make_heuristic
    from baselines.probes import PROBES, TEXT_PROBES

    def policy(name: str) -> Any:
        if name in TEXT_PROBES:
            return TEXT_PROBES[name]()
        return PROBES[name]() if name in PROBES else make_heuristic(name)

    info_text = {"info_text": True} if any(n in TEXT_PROBES for n in names) else {}
    env = make_eval_env(env_id, **info_text, **env_kwargs)
    try:
        ids = heldout_task_ids(env, episodes)
        return {n: evaluate_heuristic(policy(n), env, ids, seed=EVAL_SEED).as_dict() for n in names}
    finally:
        env.close()


def seed_stats(values: Sequence[float]) -> dict[str, Any] | None:
    """Mean, 95% Student-t interval over seeds, and the values; None without values."""
    if not values:
        return None
    mean, ci = mean_ci95(list(values))
    return {"mean": mean, "ci95": list(ci), "values": [float(v) for v in values]}


def stat_mean(stats: dict[str, Any] | None) -> float | None:
    """The mean of :func:`seed_stats` (None when missing)."""
    return None if stats is None else stats["mean"]


def summarise_runs(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Figures of one configuration over its seeds (None without records): final held-out success/return (mean, CI),
    cost per episode, train wall time (median) and, for GRPO, the mean per-rollout fractions of dropped (tied-return)
    groups and of groups in which every member failed (no outcome signal left) or succeeded."""
    if not records:
        return None
    finals = [r["final"] for r in records]

    def grpo_mean(key: str) -> float | None:
        per_run = [finite_mean([s.get(key) for s in r["grpo_stats"]]) for r in records if r.get("grpo_stats")]
        return finite_mean(per_run) if per_run else None

    return {
        "seeds": [r["spec"]["seed"] for r in records],
        "success": seed_stats([f["success"] for f in finals]),
        "return": seed_stats([f["return"] for f in finals]),
        "tokens": float(np.mean([f["tokens"] for f in finals])),
        "calls": float(np.mean([f["calls"] for f in finals])),
        "latency_s": float(np.mean([f["latency_s"] for f in finals])),
        "wall_time_s": float(np.median([r["wall_time_s"] for r in records])),
        "env_steps": int(np.median([r["num_timesteps"] for r in records])),
        "collapsed_runs": sum(f["calls"] < COLLAPSE_CALLS for f in finals),
        "dropped_group_fraction": grpo_mean("dropped_group_fraction"),
        "all_fail_group_fraction": grpo_mean("all_fail_fraction"),
        "all_success_group_fraction": grpo_mean("all_success_fraction"),
    }


def success_mean(figures: dict[str, Any] | None) -> float | None:
    """Mean success of :func:`summarise_runs` figures (None when missing)."""
    return None if figures is None else figures["success"]["mean"]


def fmt_frac(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fmt_stats(stats: dict[str, Any] | None, digits: int = 3) -> str:
    """``mean`` or ``mean (lo-hi)`` when there are several seeds; ``missing`` without runs."""
    if stats is None:
        return MISSING
    if len(stats["values"]) < 2:
        return f"{stats['mean']:.{digits}f}"
    lo, hi = stats["ci95"]
    return f"{stats['mean']:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def fmt_figures(figures: dict[str, Any] | None) -> str:
    """Success of :func:`summarise_runs` figures with its CI, flagged when the policy collapsed."""
    if figures is None:
        return MISSING
    return fmt_stats(figures["success"]) + collapsed_note(figures["calls"])


def fmt_eval(result: dict[str, Any]) -> str:
    """An ``EvalResult.as_dict()``'s success rate with its Wilson 95% interval over episodes."""
    lo, hi = result["success_ci95"]
    return f"{result['success_rate']:.3f} ({lo:.2f}-{hi:.2f})"


def fmt_signed(value: float | None, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:+.{digits}f}"


def collapsed_note(calls_per_episode: float) -> str:
    return " (collapsed: submits at once)" if calls_per_episode < COLLAPSE_CALLS else ""


def header(title: str, cmd: str, mode: str, settings_line: str) -> list[str]:
    """The first lines of a study's Markdown: title, machine, command, tier, settings."""
    lines = [f"# {title}", "", f"Machine: {machine_line(machine_info())}. Command: `{cmd}` (mode: {mode}).", "", settings_line]
    if mode == "smoke":
        lines += ["", "**Smoke-test budget: these figures check the plumbing and mean nothing.**"]
    return lines


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finite_mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def difference(a: float | None, b: float | None) -> float | None:
    """``a - b``, None when either is missing."""
    return None if a is None or b is None else a - b


def nan_if_none(values: Sequence[float | None]) -> list[float]:
    """For plotting: missing values as NaN (matplotlib leaves a gap)."""
    return [float("nan") if v is None else float(v) for v in values]
