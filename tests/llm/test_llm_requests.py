"""Requests a real server can serve well: the plan's JSON schema (step k reads only steps 1..k-1) and stop sequences go
to the server, the fallback plan keeps the shape the task's text asks for, worker prompts say what to return, and a
verifier's verdict is read from the start of its reply only."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import edo_gym  # noqa: F401 - registers the ids
from edo_gym.agents.planner import PLAN_FORMAT, PLANNER_SYSTEM, fallback_plan, parse_plan, plan_schema
from edo_gym.agents.protocol import LLMRequest, parse_verdict
from edo_gym.agents.worker import OUTPUT_FORMATS, STOP_AT_NEWLINE, plan_request


# -- the verdict ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("CORRECT", "CORRECT"),
        ("incorrect: I find 1987", "INCORRECT"),
        ("**UNSURE** - nothing to check against", "UNSURE"),
        ("Verdict: CORRECT.", "CORRECT"),
        # an echo of the instruction is no verdict, wherever the verdict words appear after the start
        ("Output format: CORRECT, INCORRECT or UNSURE, then at most one short sentence", None),
        ("The answer under review is CORRECT", None),
        ("I think so. CORRECT", None),
        ("", None),
    ],
)
def test_the_verdict_is_read_from_the_start_of_the_reply_only(reply, verdict):
    assert parse_verdict(reply) == verdict


# -- the plan schema -----------------------------------------------------------------------------------------------------
def _valid(schema: dict, plan: dict) -> bool:
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(schema).is_valid(plan)


def _plan(*inputs: list[int]) -> dict:
    return {"steps": [{"type": "lookup", "domain": "people", "instruction": "x", "inputs": list(i)} for i in inputs]}


def test_the_plan_schema_admits_only_steps_that_read_earlier_steps():
    schema = json.loads(plan_schema(4))
    assert _valid(schema, _plan([], [1], [1, 2], [3]))
    assert not _valid(schema, _plan([1]))  # the first step reads itself
    assert not _valid(schema, _plan([], [2]))  # a self reference
    assert not _valid(schema, _plan([], [3], []))  # a forward reference
    assert not _valid(schema, _plan([], [1, 1]))  # a repeated input
    assert not _valid(schema, _plan(*[[]] * 5))  # more steps than allowed
    assert not _valid(schema, {"steps": []})
    bad_type = _plan([])
    bad_type["steps"][0]["type"] = "search"
    assert not _valid(schema, bad_type)


def test_every_plan_the_simulated_planner_writes_for_its_gold_decomposition_fits_the_schema():
    env = gym.make("EDO-v0")
    base = env.unwrapped
    schema = json.loads(plan_schema(base.config.max_subtasks))
    checked = 0
    for seed in range(40):
        env.reset(seed=seed)
        if base.episode.plan.source != "planner":
            continue
        steps = [
            {"type": s.label, "domain": s.domain_label, "instruction": s.instruction, "inputs": [d + 1 for d in s.deps]}
            for s in base.episode.plan.steps
        ]
        if all(d < k for k, s in enumerate(base.episode.plan.steps) for d in s.deps):  # a reordered plan reads a later step
            assert _valid(schema, {"steps": steps}), steps
            checked += 1
    assert checked >= 30


def test_the_planner_request_carries_the_schema_and_workers_a_stop_at_the_newline():
    request = plan_request("What is the mentor of Ada?", "Decompose the task into steps.", PLAN_FORMAT, 3, PLANNER_SYSTEM,
                           plan_schema(6))  # fmt: skip
    assert request.schema() == json.loads(plan_schema(6)) and request.stop == ()
    from edo_gym.config import EDOConfig
    from tests.reliability_helpers import simulated_backend

    seen: list[LLMRequest] = []
    inner = simulated_backend(EDOConfig())

    class Spy:
        def complete(self, req: LLMRequest):
            seen.append(req)
            return inner.complete(req)

    env = gym.make("EDO-v0", backend=Spy())
    env.reset(seed=0)
    env.step(0)
    env.step(env.unwrapped.A_VERIFY + 1)
    roles = {r.role: r for r in seen}
    assert roles["planner"].json_schema == plan_schema(env.unwrapped.config.max_subtasks)
    assert roles["worker"].stop == STOP_AT_NEWLINE and roles["worker"].output_format in OUTPUT_FORMATS.values()
    assert "verifier" in roles and roles["verifier"].stop == STOP_AT_NEWLINE
    assert roles["verifier"].output_format.startswith("Start the reply with one word")


def test_worker_formats_say_plainly_what_to_return():
    assert "answer only" in OUTPUT_FORMATS["lookup"] and "no explanation" in OUTPUT_FORMATS["lookup"]
    assert "number only" in OUTPUT_FORMATS["compute"] and "digits" in OUTPUT_FORMATS["compute"]
    assert "one sentence" in OUTPUT_FORMATS["write"] and "You can request a refund within" in OUTPUT_FORMATS["write"]
    # an echo of the verifier's format is no verdict
    from edo_gym.agents.worker import VERIFY_FORMAT

    assert parse_verdict(VERIFY_FORMAT) is None and parse_verdict("Output format: " + VERIFY_FORMAT) is None


# -- the fallback plan ---------------------------------------------------------------------------------------------------
#: The texts the fallback reads: the canonical ones (the scripted world's, every split) and the training phrasings (the
#: default pool's training split; the test split's held-out phrasings are known to no rule-based component, by design).
TEXTS = ("canonical", "training phrasings")


def _tasks_by_family(texts: str, n: int = 60) -> dict[str, list]:
    if texts == "canonical":
        pool = gym.make("EDO-v0", **edo_gym.SCRIPTED).unwrapped.pool
        tasks = pool.tasks[:n]
        assert all(c is None for c in pool.compositions[:n])
    else:
        pool = gym.make("EDO-v0").unwrapped.pool
        tasks = [pool.tasks[int(k)] for k in pool.train_ids[:n]]
        assert all(pool.compositions[int(k)] is not None for k in pool.train_ids[:n])
    out: dict[str, list] = {}
    for task in tasks:
        out.setdefault(task.family, []).append(task)
    assert sorted(out) == ["analytics", "multihop", "support"]
    return out


@pytest.mark.parametrize("texts", TEXTS)
def test_the_fallback_plan_keeps_the_shape_of_each_family_from_the_text_alone(texts):
    for family, tasks in _tasks_by_family(texts).items():
        for task in tasks:
            plan = fallback_plan(task.text)
            labels = [s.label for s in plan.steps]
            assert plan.source == "fallback" and plan.confidence is None
            if family == "multihop":  # a question stays a lookup, in the domain of its answer
                assert labels == ["lookup"] and plan.steps[0].instruction == task.text
                assert plan.steps[0].domain_label == task.subtasks[-1].domain
            elif family == "analytics":  # one lookup per named store, then the sum or the maximum over them
                assert labels == ["lookup"] * task.hops + ["compute"]
                assert plan.steps[-1].deps == tuple(range(task.hops))
                assert plan.steps[:-1] == tuple(
                    type(plan.steps[0])("lookup", s.domain, plan.steps[k].instruction, ())
                    for k, s in enumerate(task.subtasks[:-1])
                )
            else:  # a customer's message: a lookup, then a reply written from it
                assert labels == ["lookup", "write"] and plan.steps[1].deps == (0,)


@pytest.mark.parametrize("texts", TEXTS)
def test_the_fallback_for_analytics_is_the_gold_decomposition_and_reads_only_the_text(texts):
    """What the steps mean (hidden) is checked with the grader's own parser; the function is given only the text."""
    from edo_gym.world.language import parse_compute, parse_question

    for task in _tasks_by_family(texts)["analytics"]:
        plan = fallback_plan(task.text)
        for step, gold in zip(plan.steps[:-1], task.subtasks[:-1], strict=True):
            assert parse_question(step.instruction) == ((gold.relation,), gold.literal)
        op, refs = parse_compute(plan.steps[-1].instruction)
        assert op == task.subtasks[-1].op and len(refs) == task.hops


def test_text_of_no_known_shape_falls_back_to_one_step():
    assert [s.label for s in fallback_plan("Which river is the longest?").steps] == ["lookup"]
    assert [s.label for s in fallback_plan("Summarise the quarter.").steps] == ["write"]


def test_a_plan_with_a_forward_reference_still_parses_as_before():
    """The schema constrains what a server writes; parse_plan's own rules (what the simulator's corrupted plans rely
    on) are unchanged."""
    text = json.dumps(_plan([2], []))
    assert [s.deps for s in parse_plan(text, 6)] == [(1,), ()]


def test_parse_plan_memo_gives_the_same_steps_and_the_same_error_each_time():
    """parse_plan is memoised by its text: a reply parsed again gives equal steps, and a broken reply raises its
    PlanError (same message) on every call, not only the first."""
    from edo_gym.agents.planner import PlanError, plan_to_json

    text = plan_to_json(
        [{"type": "lookup", "domain": "orders", "instruction": "What is the status of order 7?", "inputs": []}]
    )
    first = parse_plan(text, 8)
    assert parse_plan(text, 8) == first and first[0].instruction == "What is the status of order 7?"
    for _ in range(2):
        with pytest.raises(PlanError, match="a plan must have 1 to 0 steps"):
            parse_plan(text, 0)
        with pytest.raises(PlanError, match="no JSON object"):
            parse_plan("no plan here", 8)
