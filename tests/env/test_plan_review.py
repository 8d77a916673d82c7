"""``verify_plan(w)``: a worker critiques the plan as written (``EDOConfig.enable_plan_review``), a paid, fallible call."""

from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401
from baselines.heuristics import ObsView
from edo_gym import SCRIPTED


def test_on_by_default_and_when_off_the_action_space_is_the_scripted_one():
    env = gym.make("EDO-v0").unwrapped
    W = len(env.workers)
    assert env.action_space.n == 4 * W + 3 and "plan_review" in env.observation_space.spaces
    assert [name for name in env.action_names if name.startswith("verify_plan")] == [
        f"verify_plan({w.name})" for w in env.config.workers
    ]
    for off in (gym.make("EDO-v0", **SCRIPTED).unwrapped, gym.make("EDO-v0", enable_plan_review=False).unwrapped):
        assert off.action_space.n == 3 * W + 3 and "plan_review" not in off.observation_space.spaces
        assert not any(name.startswith("verify_plan") for name in off.action_names)
    assert not gym.make("EDO-Small-v0").unwrapped.config.enable_plan_review  # the scripted world of 0.3.0


@pytest.mark.parametrize("decider", ["orchestrator", "worker"])
def test_the_layout_names_and_decodes_the_plan_critiques(decider):
    env = gym.make("EDO-v0", enable_plan_review=True, retrieval_decider=decider).unwrapped
    W = len(env.workers)
    obs, _ = env.reset(seed=0)
    view = ObsView(obs)
    for w in range(W):
        assert env.action_names[env.A_VERIFY_PLAN + w] == f"verify_plan({env.config.workers[w].name})"
        assert env.decode_action(env.A_VERIFY_PLAN + w) == ("verify_plan", w, False)
        assert view.verify_plan(w) == env.A_VERIFY_PLAN + w and view.verify(w) == env.A_VERIFY + w
    assert (view.rollback, view.replan, view.submit) == (env.A_ROLLBACK, env.A_REPLAN, env.A_SUBMIT)
    assert view.retrieve_flag == (decider == "orchestrator")


def test_each_worker_critiques_a_plan_once_and_a_replan_allows_it_again():
    env = gym.make("EDO-v0", enable_plan_review=True).unwrapped
    obs, info = env.reset(seed=1)
    a = env.A_VERIFY_PLAN + 2
    assert info["action_mask"][a] == 1
    obs, _, _, _, info = env.step(a)
    assert info["event"] == "verify_plan" and info["cost"]["calls"] >= 1 and info["reward_terms"]["tokens"] < 0
    assert info["action_mask"][a] == 0 and obs["plan_review"][:3].sum() == 1.0
    assert obs["plan_review"][3] == pytest.approx(1 / len(env.workers))
    obs, _, _, _, info = env.step(env.A_REPLAN)
    assert info["action_mask"][a] == 1 and not obs["plan_review"].any()


def test_a_critique_is_informative_and_fallible():
    """Against the hidden truth (the plan is the task's gold plan, labels included), verdicts are right more often than
    not, and not always: a paid signal, not a free oracle."""
    env = gym.make("EDO-v0", enable_plan_review=True).unwrapped
    rng = np.random.default_rng(0)
    counts = collections.Counter()
    for seed in range(300):
        env.reset(seed=seed)
        hidden = env.hidden_state()
        right = hidden["plan_faithful"] and not any(hidden["label_wrong"])
        env.step(env.A_VERIFY_PLAN + int(rng.integers(len(env.workers))))
        counts[(right, env.episode.plan.reviews[-1])] += 1
    ok_if_right = counts[(True, "ok")] / max(1, counts[(True, "ok")] + counts[(True, "flagged")])
    flagged_if_wrong = counts[(False, "flagged")] / max(1, counts[(False, "flagged")] + counts[(False, "ok")])
    assert 0.55 < ok_if_right < 0.98 and 0.55 < flagged_if_wrong < 0.98, counts


def test_the_critic_is_a_real_request_with_the_plan_as_written():
    env = gym.make("EDO-v0", enable_plan_review=True).unwrapped
    env.reset(seed=3)
    sent = []
    inner = env.caller.backend
    original = inner.complete

    def spy(request):
        sent.append(request)
        return original(request)

    inner.complete = spy
    try:
        env.step(env.A_VERIFY_PLAN)
    finally:
        inner.complete = original
    (request,) = sent
    assert request.role == "plan_verifier" and request.task == env.episode.task.text
    assert all(s.instruction in request.inputs[0] for s in env.episode.plan.steps)
