"""The pointer-free view of the observation (``current``, ``last``, ``tried``; ``EDOConfig.focus_view``)."""

from __future__ import annotations

import numpy as np
import pytest

from edo_gym.envs import observation as O


def _dispatch(env, w: int, retrieve: bool) -> int:
    base = env.unwrapped
    return base.action_names.index(f"dispatch({base.config.workers[w].name}, {'retrieval' if retrieve else 'no_retrieval'})")


def test_focus_rows_are_the_marked_rows(make_env):
    env = make_env("EDO-v0")
    rng = np.random.default_rng(0)
    for episode in range(20):
        obs, _ = env.reset(seed=episode)
        while True:
            assert env.observation_space.contains(obs)
            sub = obs["subtasks"]
            marked = np.flatnonzero(sub[:, O.C_CURRENT])
            if len(marked):
                np.testing.assert_array_equal(obs["current"], sub[marked[0]])
            else:
                assert not obs["current"].any()
            base = env.unwrapped
            if base.episode.plan.done_stack:
                np.testing.assert_array_equal(obs["last"], sub[base.episode.plan.done_stack[-1]])
            else:
                assert not obs["last"].any()
            obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            if terminated or truncated:
                break


def test_tried_records_dispatches_verdicts_and_rollbacks(make_env):
    env = make_env("EDO-v0")
    obs, _ = env.reset(seed=3)
    base = env.unwrapped
    assert not obs["tried"].any()
    first = base.episode.plan.current_step
    obs, *_ = env.step(_dispatch(env, 1, retrieve=True))
    if base.episode.plan.results[first] is None:
        pytest.skip("the call failed (a simulated transient error); the rest needs a result")
    # the result moved the pointer on: the current step is new (nothing tried), the last one was written by worker 1
    assert obs["tried"][1, O.T_PRODUCED] == 1.0 and obs["tried"][:, O.T_PRODUCED].sum() == 1.0
    assert base.episode.plan.current_step != first and not obs["tried"][:, : O.T_ABSTAINED + 1].any()
    verifier = 2
    obs, *_ = env.step(base.A_VERIFY + verifier)
    verdict = base.episode.plan.verdict_of[first].get(verifier)
    if verdict is not None:
        column = {"ok": O.T_OK, "flagged": O.T_FLAG, "unsure": O.T_UNSURE}[verdict]
        assert obs["tried"][verifier, column] == 1.0
    obs, *_ = env.step(base.A_ROLLBACK)
    assert base.episode.plan.current_step == first
    # after the rollback the step is current again: its dispatch by worker 1 with retrieval is remembered, the
    # producer and the verdicts are gone with the result
    assert obs["tried"][1, O.T_RETRIEVAL] == pytest.approx(0.25)
    assert obs["tried"][1, O.T_NO_RETRIEVAL] == 0.0
    assert not obs["tried"][:, O.T_PRODUCED :].any()
    np.testing.assert_array_equal(obs["current"], obs["subtasks"][first])


def test_replan_forgets_what_was_tried(make_env):
    env = make_env("EDO-v0")
    obs, _ = env.reset(seed=5)
    base = env.unwrapped
    env.step(_dispatch(env, 0, retrieve=False))
    obs, *_ = env.step(base.A_REPLAN)
    assert not obs["tried"].any()
    assert not obs["last"].any()


def test_focus_view_off_gives_the_earlier_layout(make_env):
    env = make_env("EDO-v0", focus_view=False)
    obs, _ = env.reset(seed=0)
    assert not set(O.FOCUS_KEYS) & set(obs)
    assert O.observation_layout(env.observation_space) == "0.3"
    assert O.observation_layout(make_env("EDO-v0").observation_space) == "0.4"


def test_focus_view_changes_no_trajectory(make_env):
    """The view only adds keys: the same actions give the same rewards and the same other keys."""
    on, off = make_env("EDO-v0"), make_env("EDO-v0", focus_view=False)
    rng = np.random.default_rng(1)
    for episode in range(5):
        a, _ = on.reset(seed=episode)
        b, _ = off.reset(seed=episode)
        while True:
            for key in b:
                np.testing.assert_array_equal(a[key], b[key])
            action = int(rng.choice(np.flatnonzero(a["action_mask"])))
            a, ra, ta, ua, _ = on.step(action)
            b, rb, tb, ub, _ = off.step(action)
            assert (ra, ta, ua) == (rb, tb, ub)
            if ta or ua:
                break


def test_space_mismatch_explains_old_models(make_env):
    new = make_env("EDO-v0").observation_space
    old = make_env("EDO-v0", focus_view=False).observation_space
    assert O.space_mismatch(new, new) is None
    message = O.space_mismatch(old, new)
    assert message is not None and "focus_view=False" in message and "0.3.0" in message
    message = O.space_mismatch(new, old)
    assert message is not None and "focus_view=True" in message
