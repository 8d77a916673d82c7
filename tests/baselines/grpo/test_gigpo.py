"""Tests for GiGPO (baselines/grpo/gigpo.py): anchor-state groups, step-level advantages, the algorithm."""

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

from baselines import GRPO, GiGPO
from baselines.grpo import GroupStartWrapper
from baselines.grpo.gigpo import (
    AnchorGroupRolloutBuffer,
    compute_gigpo_advantages,
    exact_anchor_groups,
    observation_anchor_groups,
    similarity_anchor_groups,
    step_level_advantages,
)
from tests.toy_envs import ChainChoiceEnv, MaskedTaskEnv

th.set_num_threads(1)

EPS = 1e-4
SMALL = {"group_size": 4, "groups_per_rollout": 2, "batch_size": 64, "n_epochs": 2}


def chain_vec_env(n_envs: int = 4, seed: int = 0, **env_kwargs):
    return make_vec_env(ChainChoiceEnv, n_envs=n_envs, seed=seed, env_kwargs=env_kwargs)


class RolloutLog(BaseCallback):
    def _on_training_start(self) -> None:
        self.rollouts = []

    def _on_rollout_end(self) -> None:
        self.rollouts.append(dict(self.logger.name_to_value))

    def _on_step(self) -> bool:
        return True


# ----------------------------------------------------------------------------- anchors
def test_exact_anchor_groups_never_cross_episode_groups():
    np.testing.assert_array_equal(exact_anchor_groups(["a", "b", "a", "a"], np.array([0, 0, 0, 1])), [0, 1, 0, 2])


def test_observation_anchor_groups_by_bytes():
    obs = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    ids = observation_anchor_groups(obs, np.array([0, 0, 0, 1]))
    assert ids[0] == ids[1] and len({ids[0], ids[2], ids[3]}) == 3
    dict_obs = {"a": obs, "b": np.array([[1], [2], [1], [1]], dtype=np.int64)}
    ids = observation_anchor_groups(dict_obs, np.zeros(4, dtype=int))
    assert ids[0] == ids[3] and len({ids[0], ids[1], ids[2]}) == 3


def test_similarity_anchor_groups_by_hand():
    vectors = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    ids = similarity_anchor_groups(vectors, np.array([0, 0, 0, 0, 0, 1]), threshold=0.95)
    assert ids[0] == ids[1] and ids[3] == ids[4]
    assert len({ids[0], ids[2], ids[3], ids[5]}) == 4  # group 1's step never joins group 0's cluster
    with pytest.raises(ValueError):
        similarity_anchor_groups(vectors, np.zeros(6, dtype=int), threshold=0.0)


# ----------------------------------------------------------------------------- advantages
def test_step_level_advantages_by_hand():
    returns, anchors = np.array([2.0, 0.0, 1.0, 5.0]), np.array([0, 0, 1, 2])
    adv, size, _ = step_level_advantages(returns, anchors, scale_rewards="none")
    np.testing.assert_allclose(adv, [1.0, -1.0, 0.0, 0.0])
    np.testing.assert_array_equal(size, [2, 2, 1, 1])
    adv, _, _ = step_level_advantages(returns, anchors, scale_rewards="group")
    np.testing.assert_allclose(adv, [1 / (np.sqrt(2) + EPS), -1 / (np.sqrt(2) + EPS), 0.0, 0.0])


def test_compute_gigpo_advantages_by_hand():
    # one group, two episodes of 2 steps through the same two states; gamma = 0.5
    # episode 0 rewards [1, 0]: returns-to-go [1, 0], R = 1; episode 1 rewards [0, 0]: [0, 0], R = 0
    rewards = np.array([1.0, 0.0, 0.0, 0.0])
    episode_ids, group_ids = np.array([0, 0, 1, 1]), np.zeros(4, dtype=int)
    anchors = np.array([0, 1, 0, 1])
    res = compute_gigpo_advantages(rewards, episode_ids, group_ids, anchors, gamma=0.5, step_advantage_weight=0.5)
    a = 0.5 / (np.sqrt(0.5) + EPS)  # episode level: returns [1, 0]
    np.testing.assert_allclose(res.episode_advantages, [a, a, -a, -a])
    np.testing.assert_allclose(res.step_advantages, [a, 0.0, -a, 0.0])  # anchor 1: returns [0, 0] tie
    np.testing.assert_allclose(res.group.advantages, [1.5 * a, a, -1.5 * a, -a])
    np.testing.assert_array_equal(res.anchor_size, [2, 2, 2, 2])


def test_tied_returns_still_kept_with_step_signal():
    """Equal episode returns, but a shared state was followed by different discounted returns: not dropped."""
    rewards = np.array([1.0, 0.0, 0.0, 1.0])  # both episodes return 1; with gamma < 1 the earlier reward is worth more
    episode_ids, group_ids, anchors = np.array([0, 0, 1, 1]), np.zeros(4, dtype=int), np.array([0, 1, 0, 1])
    res = compute_gigpo_advantages(rewards, episode_ids, group_ids, anchors, gamma=0.9)
    assert res.group.dropped_group_fraction == 0.0 and res.group.keep.all()
    assert res.group.advantages[0] > 0 > res.group.advantages[2]
    # no anchor repeats: no step signal, the tied group is dropped
    res = compute_gigpo_advantages(rewards, episode_ids, group_ids, np.arange(4), gamma=0.9)
    assert res.group.dropped_group_fraction == 1.0


def test_success_filter_drops_all_fail_groups_at_both_levels():
    """Two failures from a shared start, one cheaper: with the return filter both levels push the cheaper one up;
    with success flags (filter_on="success") the group has no outcome difference and is dropped at both levels."""
    rewards = np.array([-0.1, -0.1, -0.3])  # episode 0: one step; episode 1: two steps, costlier
    episode_ids, group_ids, anchors = np.array([0, 1, 1]), np.zeros(3, dtype=int), np.array([0, 0, 1])
    res = compute_gigpo_advantages(rewards, episode_ids, group_ids, anchors, gamma=0.9)
    assert res.group.keep.all() and res.group.advantages[0] > 0 and res.step_advantages[0] > 0
    res = compute_gigpo_advantages(rewards, episode_ids, group_ids, anchors, gamma=0.9, episode_success=np.zeros(2, bool))
    assert res.group.dropped_group_fraction == 1.0 and not res.group.keep.any() and not res.group.advantages.any()
    res = compute_gigpo_advantages(rewards, episode_ids, group_ids, anchors, gamma=0.9, episode_success=np.array([0, 1], bool))
    assert res.group.keep.all()
    env = ChainChoiceEnv()
    buffer = AnchorGroupRolloutBuffer(env.observation_space, env.action_space, filter_on="success")
    obs = env.observation_space.sample()
    for r in ([-0.1], [-0.1, -0.3]):
        buffer.add_episode(0, [obs] * len(r), [0] * len(r), [0.0] * len(r), r, anchor_keys=["s"] * len(r), success=False)
    assert not buffer.group_is_informative(0)


# ----------------------------------------------------------------------------- algorithm
def test_anchor_keys_come_from_info_of_the_previous_step():
    # noisy observations never repeat, the env's keys do
    model = GiGPO("MlpPolicy", chain_vec_env(noise=0.1), group_mode="task_id", seed=0, **SMALL)
    log = RolloutLog()
    model.learn(1, callback=log)
    buffer = model.rollout_buffer
    assert buffer.anchor_source == "info"
    keys = [k for ep in buffer._episodes for k in ep["anchor_keys"]]
    np.testing.assert_array_equal([int(k.split(":")[1]) for k in keys], buffer.step_indices)  # key before the action
    # all members of a group visit "task:t" for t = 0..7: every anchor group has group_size members
    assert buffer.anchor_repeat_rate == 1.0
    assert np.all(buffer.anchor_size == 4)
    assert log.rollouts[0]["rollout/anchor_repeat_rate"] == 1.0
    assert 0.0 <= log.rollouts[0]["rollout/step_advantage_share"] <= 1.0


def test_anchor_keys_fall_back_to_observations():
    model = GiGPO("MlpPolicy", chain_vec_env(anchor_keys=False), group_mode="task_id", seed=0, **SMALL)
    model.learn(1)
    assert model.rollout_buffer.anchor_source == "observation"
    assert model.rollout_buffer.anchor_repeat_rate == 1.0  # noiseless observations: exact repeats
    model = GiGPO("MlpPolicy", chain_vec_env(anchor_keys=False, noise=0.1), group_mode="task_id", seed=0, **SMALL)
    model.learn(1)
    assert model.rollout_buffer.anchor_repeat_rate == 0.0


def test_similarity_matching_groups_near_identical_observations():
    env = chain_vec_env(anchor_keys=False, noise=0.01)
    model = GiGPO(
        "MlpPolicy", env, group_mode="task_id", anchor_matching="similarity", similarity_threshold=0.99, seed=0, **SMALL
    )
    model.learn(1)
    assert model.rollout_buffer.anchor_source == "similarity"
    assert model.rollout_buffer.anchor_repeat_rate == 1.0


def test_gigpo_runs_with_masks_dynamic_sampling_and_queued_starts():
    env = make_vec_env(MaskedTaskEnv, n_envs=3, seed=0, wrapper_class=GroupStartWrapper)
    model = GiGPO("MlpPolicy", env, group_mode="task_id", dynamic_sampling=True, seed=0, **SMALL)
    model.learn(300)
    assert sum(e.unwrapped.illegal_actions for e in env.envs) == 0
    assert isinstance(model.rollout_buffer, AnchorGroupRolloutBuffer)
    with pytest.raises(ValueError, match="outcome"):
        GiGPO("MlpPolicy", "CartPole-v1", supervision="process")


def test_save_load(tmp_path):
    model = GiGPO("MlpPolicy", chain_vec_env(), group_mode="task_id", step_advantage_weight=0.5, seed=0, **SMALL)
    model.learn(100)
    model.save(tmp_path / "gigpo.zip")
    loaded = GiGPO.load(tmp_path / "gigpo.zip", env=chain_vec_env())
    assert loaded.step_advantage_weight == 0.5 and loaded.gamma == 0.95 and isinstance(loaded, GRPO)
    obs = np.stack([loaded.observation_space.sample() for _ in range(8)])
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], loaded.predict(obs, deterministic=True)[0])
    loaded.learn(50, reset_num_timesteps=False)


def _accuracy(model, horizon: int = 8, episodes: int = 20) -> float:
    env, correct = ChainChoiceEnv(horizon=horizon, noise=0.1), 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=1000 + i)
        for _ in range(horizon):
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, _, _, _ = env.step(action)
            correct += reward
    return correct / (episodes * horizon)


def test_step_level_credit_learns_faster_than_grpo():
    """
    On a chain where every action is graded on its own, step-level credit beats episode-level credit (3k steps).

    Both levels std-scaled (``scale_rewards="group"``), so that the step-level term weighs as much as the episode
    level; centred only, episode returns (0..8) dwarf step-return differences and GiGPO is about GRPO here.
    """
    accuracy = {}
    for cls in (GRPO, GiGPO):
        scores = []
        for seed in range(2):
            model = cls(
                "MlpPolicy",
                chain_vec_env(seed=seed, noise=0.1),
                group_mode="task_id",
                group_size=4,
                groups_per_rollout=4,
                batch_size=64,
                learning_rate=1e-3,
                scale_rewards="group",
                seed=seed,
            )
            model.learn(3_000)
            scores.append(_accuracy(model))
        accuracy[cls.__name__] = float(np.mean(scores))
    assert accuracy["GiGPO"] > 0.8
    assert accuracy["GiGPO"] > accuracy["GRPO"] + 0.1


def test_edo_anchor_states_come_from_the_observation_without_its_noisy_floats():
    """EDO reports no anchor key: GiGPO groups EDO steps by the observation's anchor view, which leaves out the
    confidences, budget and history (they differ between runs of the same state) and nothing it keeps is hidden."""
    import gymnasium as gym

    import edo_gym  # noqa: F401
    from edo_gym.envs import observation as O

    env = gym.make("EDO-v0")
    assert O.is_edo_observation_space(env.observation_space)
    model = GiGPO("MultiInputPolicy", env, seed=0, group_size=2, groups_per_rollout=2, batch_size=16, n_epochs=1)
    assert model.rollout_buffer.anchor_view is O.anchor_view
    obs, info = env.reset(seed=0)
    assert "anchor_key" not in info
    noisy = {k: v.copy() for k, v in obs.items()}
    noisy["subtasks"][0, O.C_CONF] = 0.37
    noisy["budget"][:] = 0.5
    assert all(np.array_equal(a, b) for a, b in zip(O.anchor_view(obs).values(), O.anchor_view(noisy).values(), strict=True))
    moved = {k: v.copy() for k, v in obs.items()}
    moved["subtasks"][0, O.C_DONE] = 1.0
    assert not np.array_equal(O.anchor_view(obs)["subtasks"], O.anchor_view(moved)["subtasks"])
    model.learn(total_timesteps=64)
    assert model.rollout_buffer.anchor_source == "observation"
    assert model.rollout_buffer.anchor_repeat_rate > 0.0  # group members pass through the same states
