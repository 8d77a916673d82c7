"""Evaluate any orchestration policy on a fixed, held-out EDO task set and print one comparable table.

Every policy (heuristic or trained SB3 model) is run on the same task ids of the ``test`` split with the same
per-episode seeds, so the rows of the table differ only by the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from baselines.heuristics import HeuristicPolicy
from edo_gym.envs.edo_env import EDOEnv
from edo_gym.envs.observation import space_mismatch

#: A policy as the harness calls it: ``act(obs, info) -> action``; it never receives the env.
ActFn = Callable[[dict[str, np.ndarray], dict[str, Any]], int]


@dataclass
class EvalResult:
    """Means over the evaluated episodes. ``tokens``/``calls``/``latency_s`` are per episode."""

    policy: str
    episodes: int
    success_rate: float
    mean_return: float
    tokens: float
    calls: float
    latency_s: float
    success_by_family: dict[str, float] = field(default_factory=dict)
    success_ci95: tuple[float, float] = (0.0, 0.0)
    return_ci95: tuple[float, float] = (0.0, 0.0)
    budget_hit_rate: float = 0.0
    uses_hidden_state: bool = False
    #: language-model calls that failed over all episodes (charged and counted as failures of their steps); calls to a
    #: worker that the episode's drift stopped are not counted (``episode_stats["worker_down_calls"]``)
    failed_calls: int = 0
    #: Per episode, in task order: success (0/1) and return (for paired comparisons; not in ``as_dict``).
    episode_success: list[float] = field(default_factory=list, repr=False)
    episode_returns: list[float] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["episode_success"], out["episode_returns"]
        return out


def make_eval_env(env_id: str = "EDO-v0", **kwargs: Any) -> gym.Env:
    """The held-out (``test`` split) version of ``env_id``."""
    import edo_gym  # noqa: F401 - registers the ids

    return gym.make(env_id, tasks_split="test", **kwargs)


def heldout_task_ids(env: gym.Env, n: int | None = None) -> list[int]:
    """The first ``n`` task ids of an env's task list (all when ``n`` is None)."""
    total = int(env.unwrapped.num_tasks)  # type: ignore[attr-defined]
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return list(range(total if n is None else min(n, total)))


def wilson_ci(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (float(max(0.0, centre - half)), float(min(1.0, centre + half)))


def mean_ci(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Normal-approximation 95% interval of a mean (``(mean, mean)`` for fewer than two values)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        m = float(x.mean()) if len(x) else 0.0
        return (m, m)
    half = z * float(x.std(ddof=1)) / np.sqrt(len(x))
    return (float(x.mean() - half), float(x.mean() + half))


def run_episodes(
    env: gym.Env, act: ActFn, task_ids: Sequence[int], seed: int = 0, name: str = "policy",
    reset_hook: Callable[[dict[str, np.ndarray], dict[str, Any]], None] | None = None, progress: bool = False,
    decision_cost: tuple[int, int, float] | Callable[[], tuple[int, int, float]] = (0, 0, 0.0),
    uses_hidden_state: bool = False,
) -> EvalResult:  # fmt: skip
    """Run one episode per task id (seed ``seed + k`` for the k-th) and average the outcomes.

    ``act(obs, info)`` and ``reset_hook(obs, info)`` see only what the env returns. ``decision_cost``
    (``tokens, calls, latency_s``, or a function giving it, read after each ``act``) is charged on every step with the
    env's public ``charge`` (a policy that is itself an LLM pays for its decisions). ``uses_hidden_state`` only labels
    the result.
    """
    base: EDOEnv = env.unwrapped  # type: ignore[assignment]
    successes, returns, tokens, calls, latency, budget_hits = [], [], [], [], [], []
    failed_calls = 0
    by_family: dict[str, list[float]] = {}
    cost_of = decision_cost if callable(decision_cost) else (lambda: decision_cost)
    for k, task_id in enumerate(tqdm(task_ids, desc=f"eval {name}", disable=not progress, leave=False)):
        obs, info = env.reset(seed=seed + k, options={"task_id": int(task_id)})
        if reset_hook is not None:
            reset_hook(obs, info)
        total = 0.0
        while True:
            action = act(obs, info)
            cost = cost_of()
            if any(cost):
                base.charge(*cost)
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        stats = info["episode_stats"]
        successes.append(float(stats["success"]))
        returns.append(total)
        tokens.append(stats["tokens"])
        calls.append(stats["calls"])
        latency.append(stats["latency_s"])
        budget_hits.append(float(stats.get("budget_exhausted", False)))
        # backend faults only: a worker that a drift stopped is part of the task distribution, not a broken row
        failed_calls += int(stats.get("failed_calls", 0)) - int(stats.get("worker_down_calls", 0))
        by_family.setdefault(stats["family"], []).append(float(stats["success"]))
    n = len(successes)
    return EvalResult(
        policy=name,
        episodes=n,
        success_rate=float(np.mean(successes)),
        mean_return=float(np.mean(returns)),
        tokens=float(np.mean(tokens)),
        calls=float(np.mean(calls)),
        latency_s=float(np.mean(latency)),
        success_by_family={f: float(np.mean(v)) for f, v in sorted(by_family.items())},
        success_ci95=wilson_ci(int(sum(successes)), n),
        return_ci95=mean_ci(returns),
        budget_hit_rate=float(np.mean(budget_hits)),
        uses_hidden_state=uses_hidden_state,
        failed_calls=failed_calls,
        episode_success=successes,
        episode_returns=returns,
    )


def evaluate_heuristic(
    policy: HeuristicPolicy, env: gym.Env, task_ids: Sequence[int], seed: int = 0, progress: bool = False
) -> EvalResult:
    """Evaluate a :class:`~baselines.heuristics.HeuristicPolicy` (the oracle gets ``hidden_state()``, no other does)."""
    if policy.uses_hidden_state:
        base: EDOEnv = env.unwrapped  # type: ignore[assignment]

        def act(obs: dict[str, np.ndarray], info: dict[str, Any]) -> int:
            return policy.act_hidden(obs, info, base.hidden_state())  # type: ignore[attr-defined]

    else:
        act = policy.act
    return run_episodes(
        env, act, task_ids, seed, policy.name, reset_hook=policy.reset, progress=progress,
        decision_cost=lambda: policy.decision_cost, uses_hidden_state=policy.uses_hidden_state,
    )  # fmt: skip


def check_model_env(model: Any, env: gym.Env, name: str = "model") -> None:
    """Raise a ``ValueError`` that says why, when ``model`` (anything with an ``observation_space``) was built for
    other observations than ``env``'s (a model saved before the pointer-free view, an env made without it, ...)."""
    space = getattr(model, "observation_space", None)
    if space is None:
        return
    problem = space_mismatch(space, env.observation_space)
    if problem is not None:
        raise ValueError(f"{name} cannot run on this env: {problem}")


def evaluate_model(model: Any, env: gym.Env, task_ids: Sequence[int], seed: int = 0, name: str = "model",
                   deterministic: bool = True, progress: bool = False) -> EvalResult:  # fmt: skip
    """Evaluate an SB3-style model (``predict(obs, deterministic=..., action_masks=...)``); masks are passed when accepted."""
    import inspect

    check_model_env(model, env, name)
    accepts_masks = "action_masks" in inspect.signature(model.predict).parameters

    def act(obs: dict[str, np.ndarray], info: dict[str, Any]) -> int:
        if accepts_masks:
            action, _ = model.predict(obs, deterministic=deterministic, action_masks=obs["action_mask"] > 0)
        else:
            action, _ = model.predict(obs, deterministic=deterministic)
        return int(np.asarray(action).reshape(()))

    return run_episodes(env, act, task_ids, seed, name, progress=progress)


def format_table(results: Sequence[EvalResult]) -> str:
    """A Markdown table: success rate (95% CI), mean return, tokens, calls and simulated latency per episode; with a
    ``failed calls`` column, and a note under the table, when a language-model call failed in any row."""
    failures = any(r.failed_calls for r in results)
    header = "| policy | success rate (95% CI) | mean return (95% CI) | tokens/ep | calls/ep | latency s/ep |"
    lines = [header + (" failed calls |" if failures else ""), "|---|---|---|---|---|---|" + ("---|" if failures else "")]
    for r in results:
        lo, hi = r.success_ci95
        rlo, rhi = r.return_ci95
        lines.append(
            f"| {r.policy}{' (!)' if r.failed_calls else ''} | {r.success_rate:.3f} ({lo:.2f}-{hi:.2f}) "
            f"| {r.mean_return:+.3f} ({rlo:+.2f} to {rhi:+.2f}) | {r.tokens:.0f} | {r.calls:.1f} | {r.latency_s:.1f} |"
            + (f" {r.failed_calls} |" if failures else "")
        )
    if failures:
        lines.append(
            "\n(!) language-model calls failed in these rows; each failed call counts as a failure of its step, so these "
            "rows measure the failures as much as the policy."
        )
    from baselines.probes import TEXT_PROBES

    hidden = [r.policy for r in results if r.uses_hidden_state]
    text = [r.policy for r in results if r.policy in TEXT_PROBES]
    notes = []
    if hidden:
        notes.append(f"{', '.join(hidden)}: reads hidden state (an upper bound, not a deployable policy)")
    if text:
        notes.append(f"{', '.join(text)}: reads the task and plan text (info['text'])")
    if notes:
        lines.append("\n" + "; ".join(notes) + "; the others see only the observation.")
    return "\n".join(lines)
