"""Ground truth and grading: what a plan *should* produce, and whether an answer is right.

Nothing here reaches the policy. The environment uses it for the reward (the final answer against the task's
gold answer) and for :meth:`~edo_gym.envs.edo_env.EDOEnv.hidden_state` (per-step truth for the oracle and tests):
a plan is executed on the true facts, step by step, following its dependencies, by parsing each step's
instruction with the world's own language (:mod:`edo_gym.world.language`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edo_gym.world.generator import RELATIONS, World
from edo_gym.world.language import fill, parse_compute, parse_question, parse_reply
from edo_gym.world.tasks import apply_op
from edo_gym.world.text import answers_match, token_f1


@dataclass(frozen=True)
class StepTruth:
    """Hidden truth of one plan step.

    :param kind: ``lookup``, ``merged`` (a two-hop question), ``compute``, ``write`` or ``unknown`` (unparseable).
    :param domain: the document domain the step's facts live in (``""`` when unknown).
    :param relations: relations a lookup asks for.
    :param expected: the answer the step gives when every step before it is right (``""`` when undefined).
    """

    kind: str
    domain: str
    relations: tuple[str, ...]
    expected: str


def execute_plan(world: World, instructions: Sequence[str], deps: Sequence[Sequence[int]]) -> list[StepTruth]:
    """Execute a plan on the true facts. ``instructions`` are templates with 1-based ``{k}`` placeholders."""
    n = len(instructions)
    out: dict[int, StepTruth] = {}

    def run(i: int, depth: int = 0) -> StepTruth:
        if i in out:
            return out[i]
        if depth > n:
            return StepTruth("unknown", "", (), "")
        values = {d + 1: run(d, depth + 1).expected for d in deps[i] if 0 <= d < n and d != i}
        text = fill(instructions[i], values)
        truth = _step_truth(world, text, [values[d + 1] for d in deps[i] if d + 1 in values])
        out[i] = truth
        return truth

    return [run(i) for i in range(n)]


def _step_truth(world: World, text: str, inputs: list[str]) -> StepTruth:
    q = parse_question(text)
    if q is not None:
        relations, subject = q
        value: str = subject
        for rel in relations:
            value = world.facts.get((value, rel), "")
            if not value:
                break
        kind = "lookup" if len(relations) == 1 else "merged"
        return StepTruth(kind, RELATIONS[relations[0]].domain, relations, value)
    c = parse_compute(text)
    if c is not None:
        op, _ = c
        return StepTruth("compute", "sales", (), (apply_op(op, inputs) or "") if inputs and all(inputs) else "")
    r = parse_reply(text)
    if r is not None:
        return StepTruth("write", "policies", (), (apply_op("refund_reply", [r]) or "") if r else "")
    return StepTruth("unknown", "", (), "")


def is_correct(world: World, kind: str, answer: str, expected: str, f1_threshold: float = 0.8) -> bool:
    """Whether ``answer`` is right for a step of ``kind`` whose right answer is ``expected``."""
    if not expected:
        return False
    if kind == "write":
        return token_f1(answer, expected) >= f1_threshold
    return answers_match(answer, expected, world.aliases.get(expected, ()))
