"""Short observation-only probe policies: attempts to beat the learned policy with a few lines of rules.

Each probe exploits one kind of signal a real orchestrator has. If one of them came close to the oracle, the
environment would have a shortcut; ``benchmarks/env_validity.py`` runs them all next to the heuristics.

- ``route_by_label``: each step to the cheapest worker covering its labelled domain, with retrieval; no checks.
- ``verify_and_retry``: route by label, verify every result with another covering worker, roll back and retry on
  another worker when the verifier flags it.
- ``replan_on_suspicion``: route by label, replan when the planner's confidence is low or the plan reads a later step.
- ``largest_model``: everything to the largest model covering the domain (with retrieval).
- ``confidence_gate``: route by label, roll back and retry whenever the answer's confidence is below 0.5.
- ``submit_at_once``: the floor.
"""

from __future__ import annotations

from typing import Any

from baselines.heuristics import HeuristicPolicy, Obs, ObsView, StaticPipeline, SubmitAtOnce, _last_done


class RouteByLabel(HeuristicPolicy):
    name = "route_by_label"

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        if v.current is None:
            return v.submit
        w, retrieve = StaticPipeline.route(v, v.current)
        return v.dispatch(w, retrieve)


class _Retrying(HeuristicPolicy):
    """Shared bookkeeping: which workers tried each step."""

    max_tries = 3

    def reset(self, obs: Obs, info: dict[str, Any]) -> None:
        self.tried: dict[int, list[int]] = {}
        self.checked: dict[int, list[int]] = {}

    def dispatch_next(self, v: ObsView) -> int:
        step = v.current
        assert step is not None
        order = v.covering(step.domain) + [w for w in range(v.n_workers) if w not in v.covering(step.domain)]
        tries = self.tried.setdefault(step.index, [])
        self.checked[step.index] = []
        w = next((w for w in order if w not in tries), order[0])
        tries.append(w)
        return v.dispatch(w, step.label == "lookup" and step.domain in v.shards[w])


class VerifyAndRetry(_Retrying):
    name = "verify_and_retry"

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        last = _last_done(v)
        if last is not None:
            tries = self.tried.get(last.index, [])
            if last.verdict == "flagged" and len(tries) < self.max_tries and v.legal(v.rollback):
                return v.rollback
            if last.verdict == "":
                producer = tries[-1] if tries else -1
                for w in v.covering(last.domain) + [v.largest()]:
                    if w != producer and v.legal(v.verify(w)):
                        return v.verify(w)
        if v.current is None:
            return v.submit
        return self.dispatch_next(v)


class ReplanOnSuspicion(HeuristicPolicy):
    name = "replan_on_suspicion"

    def __init__(self, threshold: float = 0.6) -> None:
        self.threshold = threshold

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        suspicious = v.fallback or any(s.reads_later for s in v.steps) or (v.plan_confidence or 0.0) < self.threshold
        if not v.any_done and v.legal(v.replan) and suspicious:
            return v.replan
        return RouteByLabel().act(obs, info)


class LargestModel(HeuristicPolicy):
    name = "largest_model"

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        if v.current is None:
            return v.submit
        step = v.current
        w = v.largest(v.covering(step.domain))
        return v.dispatch(w, step.label == "lookup" and step.domain in v.shards[w])


class ConfidenceGate(_Retrying):
    name = "confidence_gate"

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        last = _last_done(v)
        doubtful = last is not None and last.confidence is not None and last.confidence < 0.5
        if doubtful and len(self.tried.get(last.index, [])) < self.max_tries and v.legal(v.rollback):
            return v.rollback
        if v.current is None:
            return v.submit
        return self.dispatch_next(v)


PROBES: dict[str, type[HeuristicPolicy]] = {
    "route_by_label": RouteByLabel,
    "verify_and_retry": VerifyAndRetry,
    "replan_on_suspicion": ReplanOnSuspicion,
    "largest_model": LargestModel,
    "confidence_gate": ConfidenceGate,
    "submit_at_once": SubmitAtOnce,
}
