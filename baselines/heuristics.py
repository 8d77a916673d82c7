"""Hand-written orchestration policies: the two non-learned schools, a random floor and an oracle ceiling.

- :class:`RandomPolicy`: a uniformly random legal action.
- :class:`StaticPipeline`: a fixed script: route by the planner's type label to a fixed worker
  (lookups -> the researcher with the widest shard, compute -> analyst, write -> writer), always retrieve for
  lookups, retry an abstention up to 3 times, submit when the plan is done.
- :class:`GreedyRouter`: a dynamic LLM-style orchestrator that reads the state (labels, domains, confidences)
  and picks the best-suited worker each step, verifies doubtful results, retries flagged ones on the next
  best worker, and replans suspicious plans. Every decision is charged as an LLM call on the env's ledger
  (``EDOEnv.add_overhead``), because that is what this school costs.
- :class:`OraclePolicy`: sees hidden state (true step types and domains, whether a result is right, whether
  the plan is faithful): an upper bound, not a deployable policy.

All take the *unwrapped* :class:`~edo_gym.envs.edo_env.EDOEnv` and the observation and return an action index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edo_gym.envs.edo_env import EDOEnv


class HeuristicPolicy:
    """Base class: ``reset(env)`` at episode start, ``act(env, obs)`` per step."""

    name = "heuristic"

    def reset(self, env: EDOEnv) -> None:  # noqa: B027 - optional hook
        """Called after ``env.reset()``."""

    def act(self, env: EDOEnv, obs: dict[str, np.ndarray]) -> int:
        raise NotImplementedError

    # helpers shared by the policies
    @staticmethod
    def dispatch_action(env: EDOEnv, worker: int, retrieve: bool) -> int:
        return worker * 2 + int(retrieve) if env.retrieve_flag else worker

    @staticmethod
    def best_worker(env: EDOEnv, kind: str, domain: str, exclude: set[int] = frozenset()) -> int:  # type: ignore[assignment]
        """The worker with the domain in its shard (for lookups) and the best skill for ``kind``."""
        skill_kind = "lookup" if kind == "merged" else kind
        best, best_score = 0, -1.0
        for i, spec in enumerate(env.config.workers):
            if i in exclude:
                continue
            score = spec.skills[skill_kind]
            if skill_kind == "lookup":
                score = score if domain in spec.shard else spec.parametric_knowledge * 0.5
            if score > best_score:
                best, best_score = i, score
        return best


class RandomPolicy(HeuristicPolicy):
    """A uniformly random legal action (seeded)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, env: EDOEnv, obs: dict[str, np.ndarray]) -> int:
        return int(self.rng.choice(np.flatnonzero(obs["action_mask"])))


class StaticPipeline(HeuristicPolicy):
    """A fixed script by type label (see module docstring)."""

    name = "static_pipeline"

    def __init__(self, max_retries: int = 3) -> None:
        self.max_retries = max_retries

    def reset(self, env: EDOEnv) -> None:
        specs = env.config.workers
        # Designed once, by hand: the lookup worker is the one that covers the most domains.
        self.route = {
            "lookup": max(range(len(specs)), key=lambda i: (len(specs[i].shard), specs[i].skills["lookup"])),
            "compute": max(range(len(specs)), key=lambda i: specs[i].skills["compute"]),
            "write": max(range(len(specs)), key=lambda i: specs[i].skills["write"]),
        }
        self.retries = 0

    def act(self, env: EDOEnv, obs: dict[str, np.ndarray]) -> int:
        if env.done_stack:
            last = env.results[env.done_stack[-1]]
            if last is not None and last.abstained and self.retries < self.max_retries:
                self.retries += 1
                return env.A_ROLLBACK
        i = env.current_step
        if i < 0:
            return env.A_SUBMIT
        label = env.plan.steps[i].label
        return self.dispatch_action(env, self.route[label], label == "lookup")


class GreedyRouter(HeuristicPolicy):
    """Dynamic LLM-style routing, charged per decision (see module docstring).

    :param router_tokens: tokens one routing decision costs (reading the state, writing the choice).
    :param router_latency_s: simulated latency of one routing decision, seconds.
    :param verify_below: verify results whose confidence is below this.
    """

    name = "greedy_router"

    def __init__(
        self, router_tokens: int = 150, router_latency_s: float = 0.6, verify_below: float = 0.65, max_retries: int = 2
    ) -> None:
        self.router_tokens = router_tokens
        self.router_latency_s = router_latency_s
        self.verify_below = verify_below
        self.max_retries = max_retries

    def reset(self, env: EDOEnv) -> None:
        self.tried: dict[int, set[int]] = {}

    def act(self, env: EDOEnv, obs: dict[str, np.ndarray]) -> int:
        env.add_overhead(tokens=self.router_tokens, calls=1, latency_s=self.router_latency_s)
        mask = obs["action_mask"]
        plan = env.plan
        # A plan whose length does not match the task, whose order breaks dependencies, or that the planner
        # itself doubts, is redone while replans last.
        if mask[env.A_REPLAN] and not env.done_stack:
            expected_len = env.task.hops + 1 if env.task.family != "multihop" else env.task.hops
            broken_order = any(d >= i for i, s in enumerate(plan.steps) for d in s.deps)
            if len(plan.steps) != expected_len or broken_order or plan.confidence < 0.6:
                self.tried = {}
                return env.A_REPLAN
        if env.done_stack:
            j = env.done_stack[-1]
            rec = env.results[j]
            assert rec is not None
            if env.verified[j] == 2 or rec.abstained:
                if len(self.tried.get(j, ())) <= self.max_retries and mask[env.A_ROLLBACK]:
                    return env.A_ROLLBACK
            elif env.verified[j] == 0 and rec.confidence < self.verify_below and mask[env.A_VERIFY]:
                return env.A_VERIFY
        i = env.current_step
        if i < 0:
            return env.A_SUBMIT
        step = plan.steps[i]
        tried = self.tried.setdefault(i, set())
        w = self.best_worker(env, step.label, step.domain_label, exclude=tried if len(tried) < len(env.workers) else set())
        tried.add(w)
        return self.dispatch_action(env, w, step.label == "lookup" and step.domain_label in env.config.workers[w].shard)


class OraclePolicy(HeuristicPolicy):
    """Upper bound that reads ``env.hidden_state()`` (see module docstring)."""

    name = "oracle"

    def __init__(self, max_retries: int = 3) -> None:
        self.max_retries = max_retries

    def reset(self, env: EDOEnv) -> None:
        self.tries: dict[int, int] = {}

    def act(self, env: EDOEnv, obs: dict[str, np.ndarray]) -> int:
        mask = obs["action_mask"]
        if not env.plan.is_faithful and mask[env.A_REPLAN]:
            self.tries = {}
            return env.A_REPLAN
        if env.done_stack:
            j = env.done_stack[-1]
            rec = env.results[j]
            if rec is not None and not rec.correct and self.tries.get(j, 0) <= self.max_retries:
                return env.A_ROLLBACK
        i = env.current_step
        if i < 0:
            return env.A_SUBMIT
        step = env.plan.steps[i]
        n = self.tries.get(i, 0)
        self.tries[i] = n + 1
        w = self.best_worker(env, step.kind, step.domain)
        retrieve = step.kind in ("lookup", "merged") and step.domain in env.config.workers[w].shard
        if n >= 2 and step.kind in ("lookup", "merged"):
            # the same query retrieves the same documents: after two misses, try the best parametric memory
            w = max(range(len(env.workers)), key=lambda k: env.config.workers[k].parametric_knowledge)
            retrieve = False
        return self.dispatch_action(env, w, retrieve)


HEURISTICS: dict[str, type[HeuristicPolicy]] = {
    "random": RandomPolicy,
    "static_pipeline": StaticPipeline,
    "greedy_router": GreedyRouter,
    "oracle": OraclePolicy,
}


def make_heuristic(name: str, **kwargs: Any) -> HeuristicPolicy:
    """A heuristic policy by name (one of ``HEURISTICS``)."""
    if name not in HEURISTICS:
        raise ValueError(f"unknown heuristic policy {name!r}; choose from {sorted(HEURISTICS)}")
    return HEURISTICS[name](**kwargs)
