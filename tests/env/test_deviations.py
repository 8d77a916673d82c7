"""Deviations from the script (``edo_gym.deviations``): team draws and drift, each behind its own rate.

Each switch changes nothing when off (the stored trajectory digests of ``test_speed_exactness.py`` cover that), draws
in its documented ranges when on, and reveals nothing for free: the observation carries the public profiles.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from edo_gym import SCRIPTED
from edo_gym.agents.protocol import LLMRequest
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.config import DeviationConfig, EDOConfig, default_workers
from edo_gym.deviations import DriftingBackend, WorkerDownError, draw_drift, draw_team, reformat
from edo_gym.deviations.team import SKILL_CEILING, SKILL_FLOOR
from edo_gym.envs import observation as O


def _random_episode(env, seed: int, rng: np.random.Generator) -> dict:
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        legal = np.flatnonzero(info["action_mask"])
        obs, _, terminated, truncated, info = env.step(int(legal[rng.integers(len(legal))]))
        done = terminated or truncated
    return info


@pytest.mark.parametrize("held_out", [False, True])
def test_team_draws_lie_in_their_range(held_out):
    config = DeviationConfig(team_rate=1.0, team_spread=0.1, team_held_out_spread=0.3)
    team = default_workers()
    rng = np.random.default_rng(0)
    moves = []
    for _ in range(200):
        draw = draw_team(team, config, held_out, rng)
        assert draw.drawn and draw.held_out == held_out
        for public, drawn in zip(team, draw.specs, strict=True):
            assert drawn.name == public.name and drawn.shard == public.shard and drawn.size == public.size
            for key, value in public.skills.items():
                if SKILL_FLOOR < drawn.skills[key] < SKILL_CEILING:  # not clipped
                    moves.append(abs(drawn.skills[key] - value))
            moves.append(abs(drawn.price / public.price - 1.0))
    moves = np.asarray(moves)
    if held_out:
        assert moves.min() >= 0.1 - 1e-9 and moves.max() <= 0.3 + 1e-9
    else:
        assert moves.max() <= 0.1 + 1e-9
    assert moves.std() > 0.01  # drawn, not fixed


def test_held_out_teams_follow_the_test_split():
    kwargs = {"deviations": {"team_rate": 1.0}}
    for split, held_out in (("train", False), ("test", True)):
        env = gym.make("EDO-v0", tasks={"split": split}, **kwargs).unwrapped
        env.reset(seed=3)
        dev = env.hidden_state()["deviations"]
        assert dev["team_drawn"] and dev["team_held_out"] == held_out


def test_at_rate_zero_the_team_is_the_public_one():
    env = gym.make("EDO-v0", **SCRIPTED).unwrapped
    for seed in range(5):
        env.reset(seed=seed)
        dev = env.hidden_state()["deviations"]
        assert not dev["team_drawn"] and dev["drift"] is None
        assert dev["prices"] == {w.name: w.price for w in env.config.workers}
        assert all(not w.unavailable for w in env.workers)


def test_by_default_about_half_the_teams_are_drawn_and_a_quarter_of_the_episodes_drift():
    env = gym.make("EDO-v0").unwrapped
    assert (env.config.deviations.team_rate, env.config.deviations.drift_rate) == (0.5, 0.25)
    drawn = drifts = 0
    n = 200
    for seed in range(n):
        env.reset(seed=seed)
        dev = env.hidden_state()["deviations"]
        drawn += dev["team_drawn"]
        drifts += dev["drift"] is not None
        if not dev["team_drawn"]:
            assert dev["prices"] == {w.name: w.price for w in env.config.workers}
    # binomial: 4 standard deviations either side
    assert abs(drawn / n - 0.5) < 4 * (0.25 / n) ** 0.5 and abs(drifts / n - 0.25) < 4 * (0.1875 / n) ** 0.5


def test_the_observation_shows_the_public_profiles_not_the_draw():
    public = gym.make("EDO-v0").unwrapped
    drawn = gym.make("EDO-v0", deviations={"team_rate": 1.0}).unwrapped
    assert drawn.observation_space == public.observation_space
    obs_public, _ = public.reset(seed=5)
    prices = set()
    for seed in range(5):
        obs, _ = drawn.reset(seed=seed)
        np.testing.assert_array_equal(obs["workers"], obs_public["workers"])  # nothing done yet: the profile alone
        prices.add(tuple(drawn.hidden_state()["deviations"]["prices"].values()))
    assert len(prices) == 5


def test_a_missing_shard_domain_is_never_retrieved():
    env = gym.make("EDO-v0", deviations={"team_rate": 1.0, "shard_drop_rate": 1.0}).unwrapped
    rng = np.random.default_rng(1)
    checked = 0
    for seed in range(15):
        _random_episode(env, seed, rng)
        missing = env.hidden_state()["deviations"]["missing_domains"]
        for worker in env.workers:
            lost = set(missing[worker.spec.name])
            assert bool(lost) == (len(worker.spec.shard) >= 2)
            for event in env.episode.trace:
                if event[0] == "dispatch" and event[2] == worker.index:
                    checked += len(event[3].retrieved)
                    assert not {env.world.documents[d].domain for d in event[3].retrieved} & lost
    assert checked > 0


def test_the_reward_charges_the_drawn_prices():
    env = gym.make("EDO-v0", deviations={"team_rate": 1.0}).unwrapped
    checked = 0
    for seed in range(10):
        env.reset(seed=seed)
        env.step(env.A_VERIFY - 1)  # the first step also charges the planner: skip it (the last worker's dispatch)
        if env.episode.ended or env.episode.plan.current_step < 0:
            continue
        _, _, _, _, info = env.step(0)  # dispatch(worker 0, no retrieval)
        price = env.hidden_state()["deviations"]["prices"][env.config.workers[0].name]
        expected = -env.config.reward.token_weight * price * info["cost"]["tokens"] / 1000.0
        assert info["reward_terms"]["tokens"] == pytest.approx(expected)
        assert price != env.config.workers[0].price
        checked += 1
    assert checked > 0


def test_drift_reformats_a_workers_answers_with_the_same_fact():
    assert reformat("You can request a refund within 14 days.") == "You can request a refund within 336 hours."
    assert reformat("1250") == "1,250,000"
    assert reformat("Mara Quell") == "Quell, Mara"


def _worker_request(env, agent: str) -> LLMRequest:
    env.reset(seed=0)
    step = env.episode.plan.steps[0]
    return LLMRequest(role="worker", agent=agent, system="", task=env.episode.task.text, instruction=step.instruction, seed=7)


def test_the_drifting_backend_changes_only_the_drifted_agents_replies():
    env = gym.make("EDO-v0").unwrapped
    inner = SimulatedBackend(env.world, env.config.workers, env.config.planner, env.pool.tasks)
    drifting = DriftingBackend(inner)
    names = [w.name for w in env.config.workers]
    request = _worker_request(env, names[0])
    other = dataclasses.replace(request, agent=names[1])
    assert drifting.complete(request) == inner.complete(request)  # no drift in force
    drift = draw_drift(names, 40, DeviationConfig(drift_rate=1.0, drift_failure_share=0.0), np.random.default_rng(0))
    assert drift is not None and drift.kind == "format"
    drifting.active = dataclasses.replace(drift, agent=names[0])
    assert drifting.complete(request).text == reformat(inner.complete(request).text)
    assert drifting.complete(other) == inner.complete(other)
    drifting.active = dataclasses.replace(drifting.active, kind="failure")
    with pytest.raises(WorkerDownError):
        drifting.complete(request)


def test_a_failed_worker_after_the_onset_gives_charged_failed_calls():
    env = gym.make("EDO-v0", deviations={"drift_rate": 1.0, "drift_failure_share": 1.0}).unwrapped
    rng = np.random.default_rng(4)
    seen_after = seen_before = 0
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        drift = env.episode.drift
        assert drift is not None and drift.kind == "failure"
        done = False
        while not done:
            legal = np.flatnonzero(info["action_mask"])
            a = int(legal[rng.integers(len(legal))])
            step = env.episode.steps
            obs, _, terminated, truncated, info = env.step(a)
            done = terminated or truncated
            kind, w, _ = env.decode_action(a)
            if kind in ("dispatch", "verify") and w == drift.worker and not info["illegal_action"]:
                if step >= drift.onset:
                    seen_after += 1
                    assert info["call_failed"] and info["cost"]["calls"] >= 1
                else:
                    seen_before += 1
                    assert not info["call_failed"]
    assert seen_after > 0 and seen_before > 0


def test_deviation_rates_are_validated_with_a_clear_error():
    with pytest.raises(ValueError, match="team_rate"):
        EDOConfig.from_kwargs(deviations_team_rate=1.5)
    with pytest.raises(ValueError, match="held-out team draws lie outside"):
        DeviationConfig(team_spread=0.3, team_held_out_spread=0.2)
    with pytest.raises(TypeError, match="DeviationConfig"):
        EDOConfig.from_kwargs(deviations={"bogus": 1})


def test_the_reset_observation_does_not_tell_whether_a_deviation_was_drawn():
    """A leak probe: no classifier on the first observation tells a drawn team or a drift from none (AUC < 0.8)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import cross_val_predict

    env = gym.make("EDO-v0", deviations={"team_rate": 0.5, "drift_rate": 0.5}).unwrapped
    keys = [k for k in env.observation_space.spaces if k != "task"]
    x, team, drift = [], [], []
    for seed in range(400):
        obs, _ = env.reset(seed=seed)
        x.append(np.concatenate([obs[k].ravel() for k in keys]))
        dev = env.hidden_state()["deviations"]
        team.append(dev["team_drawn"])
        drift.append(dev["drift"] is not None)
    x = np.asarray(x)
    for y in (np.asarray(team), np.asarray(drift)):
        assert 0.2 < y.mean() < 0.8
        p = cross_val_predict(LogisticRegression(max_iter=2000), x, y, cv=5, method="predict_proba")[:, 1]
        assert roc_auc_score(y, p) < 0.8
    assert env.observation_space["workers"].shape[1] == O.WORKER_FEATURES
