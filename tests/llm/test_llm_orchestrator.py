"""The LLM orchestrator's text interface: ``obs_to_text`` shows what an orchestrator may know, ``action_parser``
reads exactly one legal action back out of a model's reply, and anything else parses to ``None``."""

from __future__ import annotations

import pytest

from edo_gym.llm.orchestrator import ROUTER_SYSTEM, OrchestratorView, action_parser, obs_to_text, router_request

NAMES = [
    "dispatch(w0)",
    "dispatch(w0, retrieve)",
    "dispatch(w1)",
    "dispatch(w1, retrieve)",
    "verify",
    "rollback",
    "replan",
    "submit",
]
MASK = [True, True, True, True, True, False, True, True]  # rollback illegal


def _view(**overrides) -> OrchestratorView:
    kwargs = dict(
        task="Which city does the CEO of Acme live in?",
        plan=["Find the CEO of Acme.", "Find the city where that person lives."],
        action_names=NAMES,
        action_mask=MASK,
        current_step=1,
        results=["step 1 by w0 (retrieved): Alice Smith", "verify by w1: CORRECT"],
        budget={"tokens": 812, "calls": 3, "latency_s": 4.25},
        history=["dispatch(w0, retrieve)", "verify"],
    )
    kwargs.update(overrides)
    return OrchestratorView(**kwargs)


def test_obs_to_text_shows_task_plan_results_budget_and_only_legal_actions():
    text = obs_to_text(_view())
    assert text.startswith("Task: Which city does the CEO of Acme live in?")
    assert "  1. Find the CEO of Acme." in text
    assert "> 2. Find the city where that person lives. (current)" in text
    assert "- step 1 by w0 (retrieved): Alice Smith" in text
    assert "Budget used: tokens 812, calls 3, latency_s 4.25" in text
    assert "Recent actions: dispatch(w0, retrieve), verify" in text
    legal = text.split("Legal actions:\n", 1)[1]
    assert "- submit" in legal and "- verify" in legal
    assert "rollback" not in legal


def test_obs_to_text_without_results_or_plan_says_so():
    text = obs_to_text(_view(plan=[], current_step=None, results=(), history=(), budget={}))
    assert "(no plan)" in text and "(none yet)" in text
    assert "Budget used" not in text and "Recent actions" not in text


def test_view_rejects_a_mask_of_the_wrong_length():
    with pytest.raises(ValueError, match="action_mask has 2 entries"):
        _view(action_mask=[True, False])


def test_router_request_is_a_router_call_with_the_state_and_seed():
    request = router_request(_view(), seed=7)
    assert (request.role, request.agent, request.system, request.seed) == ("router", "router", ROUTER_SYSTEM, 7)
    assert request.task == "Which city does the CEO of Acme live in?"
    assert "Legal actions:" in request.instruction and "- submit" in request.instruction
    assert "Task:" not in request.instruction  # the task is its own field, not repeated
    assert request.documents == () and request.answer == ""


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("submit", "submit"),
        ("Submit.", "submit"),
        ("  VERIFY  ", "verify"),
        ("dispatch(w1, retrieve)", "dispatch(w1, retrieve)"),
        ("Dispatch (W1, Retrieve)!", "dispatch(w1, retrieve)"),
        ("dispatch(w1)", "dispatch(w1)"),
        ("I think the best next step is to replan, since the plan looks wrong.", "replan"),
        ("The answer looks complete and verified.\nAction: submit", "submit"),
        ("Both verify and submit are possible.\nAction: verify", "verify"),
    ],
)
def test_action_parser_reads_one_action_from_chatty_replies(reply, expected):
    assert action_parser(reply, NAMES, MASK) == NAMES.index(expected)


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I am not sure what to do.",
        "dispatch",  # no complete name
        "verify or submit",  # two actions
        "rollback",  # illegal now
        "Action: rollback",  # illegal, even when marked
        "submitted",  # not a whole word
    ],
)
def test_action_parser_gives_none_for_invalid_replies(reply):
    assert action_parser(reply, NAMES, MASK) is None


def test_action_parser_without_mask_accepts_any_named_action():
    assert action_parser("rollback", NAMES) == NAMES.index("rollback")


def test_action_parser_rejects_non_text():
    assert action_parser(None, NAMES) is None  # type: ignore[arg-type]


def test_action_parser_rejects_names_that_collide_after_normalisation():
    with pytest.raises(ValueError, match="distinct"):
        action_parser("submit", ["submit", "SUBMIT!"])
