"""Short observation-only probe policies: attempts to beat the learned policy with a few lines of rules.

Each probe exploits one kind of signal a real orchestrator has. If one of them came close to the oracle, the
environment would have a shortcut; ``benchmarks/env_validity.py`` runs them all next to the heuristics.

- ``route_by_label``: each step to the cheapest worker covering its labelled domain, with retrieval; no checks.
- ``verify_and_retry``: route by label, verify every result with another covering worker, roll back and retry on
  another worker when the verifier flags it.
- ``replan_on_suspicion``: route by label, replan when the planner's confidence is low or the plan reads a later step.
- ``largest_model``: everything to the largest model covering the domain (with retrieval).
- ``confidence_gate``: route by label, roll back and retry whenever the answer's confidence is below 0.5.
- ``cheapest_no_checks``: every step to the cheapest worker, no retrieval, no checks.
- ``submit_at_once``: the floor.

Text-reading probes (:data:`TEXT_PROBES`, on an env made with ``info_text=True``):

- ``plan_check_text``: rebuilds from the task text the plan a careful planner writes and replans until the written
  plan matches it, then executes like ``rule_based``.
"""

from __future__ import annotations

import re
from typing import Any

from baselines.heuristics import HeuristicPolicy, Obs, ObsView, RuleBased, StaticPipeline, SubmitAtOnce, last_done
from edo_gym.agents.planner import rule_plan
from edo_gym.world.grading import amounts, durations


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
        last = last_done(v)
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
        last = last_done(v)
        doubtful = last is not None and last.confidence is not None and last.confidence < 0.5
        if doubtful and len(self.tried.get(last.index, [])) < self.max_tries and v.legal(v.rollback):
            return v.rollback
        if v.current is None:
            return v.submit
        return self.dispatch_next(v)


class CheapestNoChecks(HeuristicPolicy):
    """Every step to the cheapest worker, without retrieval, verification or retries: the cost floor of a team that
    answers at all (a grader that passed phrasing would make it look good)."""

    name = "cheapest_no_checks"

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        return v.submit if v.current is None else v.dispatch(v.cheapest(), False)


PROBES: dict[str, type[HeuristicPolicy]] = {
    "route_by_label": RouteByLabel,
    "verify_and_retry": VerifyAndRetry,
    "replan_on_suspicion": ReplanOnSuspicion,
    "largest_model": LargestModel,
    "confidence_gate": ConfidenceGate,
    "cheapest_no_checks": CheapestNoChecks,
    "submit_at_once": SubmitAtOnce,
}


# -- a text-reading probe ---------------------------------------------------------------------------------------------
_PLAN_LINE = re.compile(r"^[> ] (\d+)\. \[(\w+)/(\w+)\] (.*?)(?: \(uses steps \[([\d, ]*)\]\))?(?: \(current\))?$")
#: One plan step as written: label, domain label, instruction, 0-based inputs.
WrittenStep = tuple[str, str, str, tuple[int, ...]]


def plan_from_text(text: str) -> tuple[str, list[WrittenStep]]:
    """The task and the plan as written, read from an orchestrator prompt (``info["text"]`` with ``info_text=True``)."""
    task = ""
    steps: list[WrittenStep] = []
    in_plan = False
    for line in text.splitlines():
        if line.startswith("Task: "):
            task = line.removeprefix("Task: ")
        elif line.startswith("Plan:"):
            in_plan = True
        elif in_plan:
            m = _PLAN_LINE.match(line)
            if m is None:
                break
            deps = tuple(int(d) - 1 for d in m.group(5).split(",")) if m.group(5) else ()
            steps.append((m.group(2), m.group(3), m.group(4), deps))
    return task, steps


def expected_plan(task: str) -> list[WrittenStep] | None:
    """The plan a careful planner writes for ``task``, in the world's language (``None`` for a task it cannot read).

    It is :func:`~edo_gym.agents.planner.rule_plan`'s: read from the task text with the phrasings a team knows from
    its training tasks (the canonical ones and the training phrasings of :mod:`edo_gym.world.phrasing`), never the
    held-out ones: the question each step asks, its document domain, the steps it reads."""
    plan = rule_plan(task)
    if plan is None:
        return None
    return [(s.label, s.domain_label, s.instruction, s.deps) for s in plan.steps]


_RESULT_LINE = re.compile(r"^- step (\d+) by [^:]+: (['\"])(.*)\2(?: \(confidence [\d.]+\))?(?:; verified: .*)?$")


def answers_from_text(text: str) -> dict[int, str]:
    """The answers given so far, by 0-based step, as an orchestrator prompt shows them."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = _RESULT_LINE.match(line)
        if m:
            out[int(m.group(1)) - 1] = m.group(3)
    return out


def consistent(step: WrittenStep, answer: str, inputs: list[str]) -> bool:
    """Whether a compute or write step's answer agrees with its inputs as written (a reply must state the window it
    was given; a sum or maximum must be the sum or maximum of the figures); other steps are not checked."""
    label, _, instruction, _ = step
    if label == "write" and inputs:
        return bool(durations(answer)) and durations(answer) == durations(inputs[0])
    if label == "compute" and inputs:
        figures = [amounts(x) for x in inputs]
        if any(len(f) != 1 for f in figures):
            return True  # an input it cannot read: nothing to check against
        values = [next(iter(f)) for f in figures]
        expected = sum(values) if "the sum" in instruction else max(values)
        return amounts(answer) == {round(expected, 6)}
    return True


class PlanCheckText(RuleBased):
    """``rule_based`` execution after checking the plan *text* against the task text (a text-reading probe).

    It reads ``info["text"]`` (the env must be made with ``info_text=True``), rebuilds from the task text the plan a
    careful planner would write (:func:`expected_plan`), and replans while the written plan differs from it: a dropped
    or merged hop, a reordered step, a wrong relation, entity or operator, a wrong type or domain label. It also reads
    the answers: a reply that states another window than the one it was given, or a sum or maximum that is not the sum
    or maximum of its figures, is rolled back and retried. This is what an LLM orchestrator that reads its prompt
    carefully can do; no hidden state is read.
    """

    name = "plan_check_text"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(replan_below=0.0, **kwargs)

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        if "text" not in info:
            raise ValueError("plan_check_text reads info['text']: make the env with info_text=True")
        v = ObsView(obs)
        if not v.any_done and v.legal(v.replan):
            task, written = plan_from_text(info["text"])
            expected = expected_plan(task)
            if expected is not None and written != expected:
                self.tried, self.verifiers = {}, {}
                return v.replan
        last = last_done(v)
        if last is not None and v.legal(v.rollback) and len(self.tried.get(last.index, [])) < self.max_tries:
            _, written = plan_from_text(info["text"])
            answers = answers_from_text(info["text"])
            if last.index < len(written) and last.index in answers:
                step = written[last.index]
                inputs = [answers.get(d, "") for d in step[3]]
                if not consistent(step, answers[last.index], inputs):
                    return v.rollback
        return super().act(obs, info)


#: Probes that read ``info["text"]`` (run them on an env made with ``info_text=True``).
TEXT_PROBES: dict[str, type[HeuristicPolicy]] = {"plan_check_text": PlanCheckText}
