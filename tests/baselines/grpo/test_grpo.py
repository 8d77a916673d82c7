"""Tests for the GRPO baseline (baselines/grpo)."""

import copy
import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.evaluation import evaluate_policy as maskable_evaluate_policy
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import is_wrapped, make_vec_env
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
)
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, CombinedExtractor, FlattenExtractor
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from torch import nn

from baselines import GRPO
from baselines.grpo import GroupStartWrapper, RecordedStepsProgressBar
from baselines.grpo.advantages import (
    compute_group_advantages,
    discounted_return_to_go,
    outcome_advantages,
    process_advantages,
    segment_return_to_go,
    success_tied_groups,
    tied_groups,
)
from baselines.grpo.buffers import GroupRolloutBuffer
from baselines.grpo.grpo import grpo_loss
from baselines.grpo.policies import GRPOPolicy, MultiInputGRPOPolicy, categorical_log_prob_entropy
from tests.toy_envs import IllegalActionError, MaskedTaskEnv, NoTaskEnv

th.set_num_threads(1)

SMALL = {"group_size": 4, "groups_per_rollout": 2, "batch_size": 64, "n_epochs": 2}


def toy_vec_env(n_envs: int = 2, seed: int = 0, wrapper_class=None, **env_kwargs):
    return make_vec_env(MaskedTaskEnv, n_envs=n_envs, seed=seed, env_kwargs=env_kwargs, wrapper_class=wrapper_class)


def toy_envs(vec_env) -> list[MaskedTaskEnv]:
    return [e.unwrapped for e in vec_env.envs]


S = 1 / np.sqrt(3)  # sample std (ddof=1) of [1, 0, 0, 1] and of [1, 0, 0]
EPS = 1e-4


# ----------------------------------------------------------------------------- advantages
def test_outcome_advantages_by_hand():
    # returns [1, 0, 0, 1]: mean 0.5, sample std (ddof=1) sqrt(1/3)
    np.testing.assert_allclose(outcome_advantages([1, 0, 0, 1]), np.array([1, -1, -1, 1]) * 0.5 / (S + EPS))
    # Dr. GRPO: no division by std
    np.testing.assert_allclose(outcome_advantages([1, 0, 0, 1], scale_rewards="none"), [0.5, -0.5, -0.5, 0.5])
    # batch scaling: the group's mean, the given batch std
    np.testing.assert_allclose(
        outcome_advantages([3.0, 1.0], scale_rewards="batch", batch_std=2.0), [1 / (2 + EPS), -1 / (2 + EPS)]
    )
    # returns [2, 0, 1]: mean 1, sample std 1
    np.testing.assert_allclose(outcome_advantages([2, 0, 1]), [1 / (1 + EPS), -1 / (1 + EPS), 0.0])
    # tied group -> all zeros
    np.testing.assert_allclose(outcome_advantages([5, 5, 5]), [0, 0, 0])
    with pytest.raises(ValueError, match="scale_rewards"):
        outcome_advantages([1, 0], scale_rewards="std")


def test_std_is_sample_std_and_eps_is_trl():
    """ddof=1 and eps=1e-4 as TRL: two members [1, 0] give +-0.7071, and a near-tie is not blown up to +-1."""
    np.testing.assert_allclose(outcome_advantages([1, 0]), [0.5 / (np.sqrt(0.5) + EPS), -0.5 / (np.sqrt(0.5) + EPS)])
    near_tie = outcome_advantages([1.0, 1.0 + 2e-6])
    assert np.abs(near_tie).max() < 0.02


def test_process_advantages_by_hand():
    # pooled rewards [1, 0, 0]: mean 1/3, sample std sqrt(1/3); normalised 1 -> (2/3)/(S+eps), 0 -> -(1/3)/(S+eps)
    adv = process_advantages([[1, 0], [0]])
    hi, lo = (2 / 3) / (S + EPS), -(1 / 3) / (S + EPS)
    np.testing.assert_allclose(adv[0], [hi + lo, lo], atol=1e-9)
    np.testing.assert_allclose(adv[1], [lo], atol=1e-9)
    # no std division, gamma = 0.5: centred rewards [2/3, -1/3], [-1/3]
    adv = process_advantages([[1, 0], [0]], gamma=0.5, scale_rewards="none")
    np.testing.assert_allclose(adv[0], [2 / 3 - 0.5 / 3, -1 / 3], atol=1e-9)
    np.testing.assert_allclose(adv[1], [-1 / 3], atol=1e-9)
    np.testing.assert_allclose(discounted_return_to_go([1, 2, 3], 0.5), [2.75, 3.5, 3.0])


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_segment_return_to_go_matches_per_episode(gamma):
    rng = np.random.default_rng(0)
    lengths = np.array([3, 1, 5, 2])
    rewards = rng.normal(size=lengths.sum())
    expected = np.concatenate([discounted_return_to_go(r, gamma) for r in np.split(rewards, np.cumsum(lengths)[:-1])])
    np.testing.assert_allclose(segment_return_to_go(rewards, lengths, gamma), expected, atol=1e-12)


def test_tied_groups_dropped():
    tied, fraction = tied_groups([[1, 1, 1], [0, 1, 0], [2, 2, 2], [0, 0, 1]])
    np.testing.assert_array_equal(tied, [True, False, True, False])
    assert fraction == 0.5


def test_compute_group_advantages_flat():
    # group 0: episodes 0 (rewards [1, 0] -> R=1) and 1 ([0] -> R=0); group 1: episodes 2, 3 tie (R=1)
    rewards = np.array([1, 0, 0, 1, 0, 1], dtype=float)
    episode_ids = np.array([0, 0, 1, 2, 2, 3])
    group_ids = np.array([0, 0, 0, 1, 1, 1])
    res = compute_group_advantages(rewards, episode_ids, group_ids)
    a = 0.5 / (np.sqrt(0.5) + EPS)
    np.testing.assert_allclose(res.advantages, [a, a, -a, 0, 0, 0])
    np.testing.assert_array_equal(res.keep, [True, True, True, False, False, False])
    np.testing.assert_allclose(res.episode_returns, [1, 0, 1, 1])
    np.testing.assert_allclose(res.group_return_std, [np.sqrt(0.5), 0.0])
    assert res.dropped_group_fraction == 0.5
    res = compute_group_advantages(rewards, episode_ids, group_ids, filter_zero_std_groups=False)
    assert res.keep.all() and res.dropped_group_fraction == 0.0
    # batch scaling: group means, std of all four returns [1, 0, 1, 1] (ddof=1: 0.5)
    res = compute_group_advantages(rewards, episode_ids, group_ids, scale_rewards="batch")
    np.testing.assert_allclose(res.advantages[:3], np.array([0.5, 0.5, -0.5]) / (0.5 + EPS))
    res = compute_group_advantages(rewards, episode_ids, group_ids, supervision="process", filter_zero_std_groups=False)
    hi, lo = (2 / 3) / (S + EPS), -(1 / 3) / (S + EPS)
    np.testing.assert_allclose(res.advantages[:3], [hi + lo, lo, lo], atol=1e-9)
    # group 1 pooled rewards [1, 0, 1]: mean 2/3, sample std sqrt(1/3)
    np.testing.assert_allclose(res.advantages[3:], [-lo + -hi, -hi, -lo], atol=1e-9)
    # masked (e.g. truncated) episodes are left out of the update but stay in the statistics
    res = compute_group_advantages(rewards, episode_ids, group_ids, exclude_episodes=np.array([False, True, False, False]))
    np.testing.assert_array_equal(res.keep, [True, True, False, False, False, False])
    np.testing.assert_allclose(res.advantages[:2], [a, a])


def test_tie_filter_uses_process_rewards():
    """Equal returns but different step rewards: a process signal, so the group is kept under process supervision."""
    rewards = np.array([1, 0, 0, 1], dtype=float)  # episodes [1, 0] and [0, 1]: both return 1
    episode_ids = np.array([0, 0, 1, 1])
    group_ids = np.zeros(4, dtype=int)
    assert compute_group_advantages(rewards, episode_ids, group_ids, supervision="outcome").dropped_group_fraction == 1.0
    res = compute_group_advantages(rewards, episode_ids, group_ids, supervision="process")
    assert res.dropped_group_fraction == 0.0 and res.keep.all() and np.abs(res.advantages).max() > 0.1


def test_success_filter_drops_all_fail_groups_whose_costs_differ():
    """DAPO filters on accuracy: a group in which every member failed is dropped even though its returns (costs) differ,
    which the return filter keeps; a group with one success is kept; all-success groups are dropped too."""
    np.testing.assert_array_equal(success_tied_groups(np.array([0, 0, 0, 0, 1, 0, 1, 1, 1]), np.repeat([0, 1, 2], 3), 3),
                                  [True, False, True])  # fmt: skip
    # group 0: two failures costing -0.1 and -0.4; group 1: a failure (-0.2) and a success (+0.9)
    rewards = np.array([-0.1, -0.2, -0.2, -0.2, 0.9])
    episode_ids = np.array([0, 1, 1, 2, 3])
    group_ids = np.array([0, 0, 0, 1, 1])
    by_return = compute_group_advantages(rewards, episode_ids, group_ids)
    np.testing.assert_array_equal(by_return.group_dropped, [False, False])
    assert by_return.advantages[0] > 0  # the cheaper failure is pushed up: what the success filter prevents
    by_success = compute_group_advantages(rewards, episode_ids, group_ids, episode_success=np.array([0, 0, 0, 1], bool))
    np.testing.assert_array_equal(by_success.group_dropped, [True, False])
    np.testing.assert_array_equal(by_success.keep, [False, False, False, True, True])
    np.testing.assert_allclose(by_success.advantages[3:], by_return.advantages[3:])
    off = compute_group_advantages(rewards, episode_ids, group_ids, filter_zero_std_groups=False, episode_success=np.zeros(4))
    assert off.keep.all()


def test_buffer_success_filter_needs_and_uses_success_flags():
    env = MaskedTaskEnv()
    obs = env.observation_space.sample()
    with pytest.raises(ValueError, match="Unknown filter_on 'accuracy'"):
        GroupRolloutBuffer(env.observation_space, env.action_space, filter_on="accuracy")
    buffer = GroupRolloutBuffer(env.observation_space, env.action_space, filter_on="success")
    with pytest.raises(ValueError, match=r"needs every episode's success flag.*is_success"):
        buffer.add_episode(0, [obs], [0], [0.0], [1.0])
    for group_id, rewards, success in [(0, [-0.1], False), (0, [-0.5, -0.1], False), (1, [-0.3], False), (1, [1.0], True)]:
        buffer.add_episode(group_id, [obs] * len(rewards), [0] * len(rewards), [0.0] * len(rewards), rewards, success=success)
    assert not buffer.group_is_informative(0) and buffer.group_is_informative(1)
    buffer.compute_advantages()
    np.testing.assert_array_equal(buffer.group_dropped, [True, False])
    assert buffer.n_kept_steps == 2


def test_success_filter_on_an_env_without_is_success_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown filter_on"):
        GRPO("MlpPolicy", "CartPole-v1", filter_on="accuracy")
    model = GRPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), filter_on="success", seed=0, **SMALL)
    with pytest.raises(ValueError, match=r"info\['is_success'\].*filter_on='return'"):
        model.learn(1)


def test_buffer_minibatches():
    env = MaskedTaskEnv(dict_obs=True)
    buffer = GroupRolloutBuffer(env.observation_space, env.action_space, filter_zero_std_groups=True)
    obs = env.observation_space.sample()
    for group_id, rewards in [(0, [1, 1, 0]), (0, [0]), (1, [1]), (1, [0, 1])]:
        n = len(rewards)
        buffer.add_episode(group_id, [obs] * n, [1] * n, [-0.5] * n, rewards, action_masks=[np.ones(4, bool)] * n)
    buffer.compute_advantages()
    assert buffer.n_episodes == 4 and buffer.n_steps == 7 and buffer.n_groups == 2
    # group 1 returns tie (1 and 1): dropped
    assert buffer.dropped_group_fraction == 0.5 and buffer.n_kept_steps == 4
    batches = list(buffer.get(batch_size=3))
    assert [len(b.indices) for b in batches] == [3, 1]
    seen = np.sort(np.concatenate([b.indices for b in batches]))
    np.testing.assert_array_equal(seen, [0, 1, 2, 3])
    b = batches[0]
    assert set(b.observations.keys()) == {"state", "tag"} and b.observations["state"].shape == (3, 4)
    assert b.actions.dtype == th.int64 and b.action_masks.shape == (3, 4)
    np.testing.assert_allclose(np.sort(b.advantages.numpy()), np.sort(buffer.advantages[b.indices]))


def _two_episode_buffer(**kwargs) -> GroupRolloutBuffer:
    env = MaskedTaskEnv()
    buffer = GroupRolloutBuffer(env.observation_space, env.action_space, **kwargs)
    obs = np.zeros(env.observation_space.shape, dtype=np.float32)
    buffer.add_episode(0, [obs], [0], [0.0], [1.0])  # length 1, return 1
    buffer.add_episode(0, [obs] * 3, [0] * 3, [0.0] * 3, [0.0, 0.0, 0.0], truncated=True)  # length 3, return 0
    buffer.compute_advantages()
    return buffer


def test_flat_features_equal_the_combined_extractor_bit_for_bit():
    box = gym.spaces.Box(-1.0, 1.0, (2, 3), dtype=np.float32)
    space = gym.spaces.Dict({"z": box, "a": gym.spaces.Box(0.0, 1.0, (5,), dtype=np.float32)})
    policy = MultiInputGRPOPolicy(space, gym.spaces.Discrete(4), lambda _: 1e-3, net_arch=[8])
    obs = obs_as_tensor({k: np.stack([v.sample() for _ in range(6)]) for k, v in space.spaces.items()}, "cpu")
    flat = policy._flat_features(obs)
    assert flat is not None and th.equal(flat, policy.extract_features(obs, policy.features_extractor))
    assert policy._flat_features({k: v.double() for k, v in obs.items()}) is None  # not float32: the usual path
    other = MultiInputGRPOPolicy(
        gym.spaces.Dict({"d": gym.spaces.Discrete(3), "a": space["a"]}), gym.spaces.Discrete(4), lambda _: 1e-3
    )
    assert other._flat_features({"d": th.zeros(2), "a": th.zeros(2, 5)}) is None  # one-hot preprocessing: not flat


@pytest.mark.parametrize("dict_obs", [False, True])
def test_episodes_given_as_step_rows_fill_the_buffer_like_lists(dict_obs):
    """Episodes whose observations and masks are rows of a StepStore (GRPO's collection) give the same buffer as the
    same episodes given as per-step lists, whatever order the rows were appended in."""
    from baselines.grpo.buffers import StepRows, StepStore

    box = gym.spaces.Box(-1.0, 1.0, (2, 3), dtype=np.float32)
    space = gym.spaces.Dict({"b": box, "a": gym.spaces.Discrete(4)}) if dict_obs else box
    rng = np.random.default_rng(0)
    obs_store, mask_store = StepStore(), StepStore()
    lengths = [3, 1, 4, 2]
    rows: list[list[int]] = [[] for _ in lengths]
    per_step: list[list[tuple[object, np.ndarray]]] = [[] for _ in lengths]
    for t in range(max(lengths)):  # vectorized steps: every episode still running records one row
        running = [e for e, n in enumerate(lengths) if t < n]
        batch = {"b": rng.random((len(running), 2, 3), dtype=np.float32), "a": rng.integers(4, size=len(running))}
        masks = rng.random((len(running), 5)) > 0.3
        first = obs_store.append(batch if dict_obs else batch["b"])
        mask_store.append(masks)
        for k, e in enumerate(running):
            rows[e].append(first + k)
            step_obs = {"b": batch["b"][k].copy(), "a": batch["a"][k]} if dict_obs else batch["b"][k].copy()
            per_step[e].append((step_obs, masks[k].copy()))
    buffers = [GroupRolloutBuffer(space, gym.spaces.Discrete(5)) for _ in range(2)]
    for e, n in enumerate(lengths):
        common = dict(group_id=e // 2, actions=[e] * n, log_probs=[-0.5] * n, rewards=[float(e)] * n)
        buffers[0].add_episode(observations=[o for o, _ in per_step[e]], action_masks=[m for _, m in per_step[e]], **common)
        r = np.array(rows[e])
        buffers[1].add_episode(observations=StepRows(obs_store, r), action_masks=StepRows(mask_store, r), **common)
    for buffer in buffers:
        buffer.compute_advantages()
    expected, got = buffers
    if dict_obs:
        assert list(got.observations) == list(space.spaces)  # the space's key order
        for key in space.spaces:
            assert got.observations[key].dtype == expected.observations[key].dtype
            np.testing.assert_array_equal(got.observations[key], expected.observations[key])
    else:
        assert got.observations.dtype == expected.observations.dtype
        np.testing.assert_array_equal(got.observations, expected.observations)
    np.testing.assert_array_equal(got.action_masks, expected.action_masks)
    np.testing.assert_array_equal(got.advantages, expected.advantages)
    with pytest.raises(ValueError, match="one row per step"):
        buffers[1].reset()
        two, one = StepRows(obs_store, np.array([0, 1])), StepRows(mask_store, np.array([0]))
        buffers[1].add_episode(0, two, [0, 0], [0.0, 0.0], [0.0, 0.0], action_masks=one)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_loss_weights_match_trl_aggregation(loss_type):
    """With one minibatch, mean(weights * l) is TRL's aggregation of the per-step terms l."""
    buffer = _two_episode_buffer(loss_type=loss_type, max_episode_steps=10)
    per_step = th.tensor([0.3, -1.0, 2.0, 0.5])  # step 0: episode 0; steps 1-3: episode 1
    data = next(buffer.get(None, shuffle=False))
    weights = data.loss_weights
    loss = per_step.mean() if weights is None else (weights * per_step).mean()
    expected = {
        "grpo": (0.3 + (-1.0 + 2.0 + 0.5) / 3) / 2,  # per-episode mean, then mean over episodes
        "bnpo": per_step.mean().item(),  # per-step mean
        "dapo": per_step.mean().item(),
        "dr_grpo": per_step.sum().item() / (2 * 10),  # constant normaliser: episodes x L_max
    }[loss_type]
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert (weights is None) == (loss_type in ("bnpo", "dapo"))


def test_dr_grpo_needs_a_maximum_episode_length():
    env = MaskedTaskEnv()
    with pytest.raises(ValueError, match="max_episode_steps"):
        GroupRolloutBuffer(env.observation_space, env.action_space, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="time limit"):
        GRPO("MlpPolicy", make_vec_env(NoTaskEnv, n_envs=1), loss_type="dr_grpo")
    assert GRPO("MlpPolicy", "CartPole-v1", loss_type="dr_grpo").rollout_buffer.max_episode_steps == 500
    assert GRPO("MlpPolicy", "CartPole-v1", loss_type="dr_grpo", max_episode_steps=50).rollout_buffer.max_episode_steps == 50


def test_truncated_episodes_masked_but_counted():
    buffer = _two_episode_buffer(mask_truncated_episodes=True)
    np.testing.assert_array_equal(buffer.keep, [True, False, False, False])
    # the truncated episode still sets the group mean: A = (1 - 0.5) / (std + eps)
    assert buffer.advantages[0] == pytest.approx(0.5 / (np.sqrt(0.5) + EPS), rel=1e-6)
    assert _two_episode_buffer().keep.all()


@pytest.mark.parametrize("masked", [False, True])
def test_fast_categorical_matches_maskable_distribution(masked):
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution

    rng = th.Generator().manual_seed(0)
    logits = th.randn(16, 5, generator=rng)
    masks = th.rand(16, 5, generator=rng) > 0.4
    masks[:, 0] = True
    actions = th.where(masks[:, 2], th.full((16,), 2), th.zeros(16, dtype=th.long))
    dist = MaskableCategoricalDistribution(5).proba_distribution(logits)
    if masked:
        dist.apply_masking(masks)
    log_prob, entropy = categorical_log_prob_entropy(logits, actions, masks if masked else None)
    th.testing.assert_close(log_prob, dist.log_prob(actions))
    th.testing.assert_close(entropy, dist.entropy())


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("masks_as_numpy", [False, True])
def test_collection_sampling_is_the_maskable_distribution_bit_for_bit(masked, masks_as_numpy):
    """``sample_masked_categorical`` (the policy's collection fast path) draws the same actions from torch's RNG and
    gives the same log-probabilities, bit for bit, as sb3-contrib's distribution that the policy used before."""
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution

    from baselines.grpo.policies import sample_masked_categorical

    rng = th.Generator().manual_seed(1)
    logits = 3 * th.randn(64, 7, generator=rng)
    masks = th.rand(64, 7, generator=rng) > 0.5
    masks[:, 3] = True
    action_masks = (masks.numpy() if masks_as_numpy else masks) if masked else None
    for seed in range(5):
        th.manual_seed(seed)
        dist = MaskableCategoricalDistribution(7).proba_distribution(logits)
        if masked:
            dist.apply_masking(action_masks)
        expected_actions = dist.get_actions()
        expected_log_prob = dist.log_prob(expected_actions)
        th.manual_seed(seed)
        actions, log_prob = sample_masked_categorical(logits, action_masks)
        assert th.equal(actions, expected_actions)
        assert actions.dtype == expected_actions.dtype and actions.shape == expected_actions.shape
        assert th.equal(log_prob, expected_log_prob)
        after_fast_path = th.rand(3)  # the generator moved on as much as with the distribution
        th.manual_seed(seed)
        dist.sample()
        assert th.equal(after_fast_path, th.rand(3))


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_collection_sampling_with_non_finite_logits_is_multinomials(bad, masked):
    """With a NaN or infinite logit the sampling raises ``th.multinomial``'s error where multinomial raises, and
    otherwise gives its draw and log-probabilities."""
    from baselines.grpo.policies import MASKED_LOGIT, sample_masked_categorical

    def with_multinomial(logits: th.Tensor, masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor]:
        normalised = logits - logits.logsumexp(dim=-1, keepdim=True)
        masked_logits = normalised if masks is None else th.where(th.as_tensor(masks), normalised, MASKED_LOGIT)
        log_p = masked_logits - masked_logits.logsumexp(dim=-1, keepdim=True)
        drawn = th.multinomial(th.softmax(log_p, dim=-1), 1, True)
        return drawn.view(-1), log_p.gather(-1, drawn).view(-1)

    logits = th.randn(8, 5, generator=th.Generator().manual_seed(0))
    logits[3, 2] = bad
    masks = None
    if masked:
        masks = np.ones((8, 5), dtype=bool)
        masks[3, 2] = False
    th.manual_seed(0)
    try:
        expected = with_multinomial(logits, masks)
    except RuntimeError as error:
        assert "probability tensor contains" in str(error)
        with pytest.raises(RuntimeError, match="probability tensor contains"):
            sample_masked_categorical(logits, masks)
        assert bad != float("-inf")  # exp(-inf) = 0 is a valid probability
        return
    th.manual_seed(0)
    actions, log_prob = sample_masked_categorical(logits, masks)
    assert th.equal(actions, expected[0]) and th.equal(log_prob, expected[1])


def test_policy_forward_samples_like_the_distribution_path():
    env = gym.make("CartPole-v1")
    policy = GRPOPolicy(env.observation_space, env.action_space, lambda _: 1e-3, net_arch=[16])
    obs = th.randn(32, 4)
    th.manual_seed(7)
    actions, log_prob = policy(obs)
    th.manual_seed(7)
    dist = policy.get_distribution(obs)
    expected = dist.get_actions()
    assert th.equal(actions, expected)
    assert th.equal(log_prob, dist.log_prob(expected))
    det_actions, _ = policy(obs, deterministic=True)
    assert th.equal(det_actions, policy.get_distribution(obs).get_actions(deterministic=True))


# ----------------------------------------------------------------------------- loss
def test_loss_by_hand():
    ratio = th.tensor([0.7, 1.25, 1.3, 0.7])
    old = th.zeros(4)
    log_prob = th.log(ratio)
    adv = th.tensor([1.0, 1.0, -1.0, -1.0])
    # symmetric clip 0.2: min terms 0.7, 1.2, -1.3, -0.8 -> mean -0.05
    terms = grpo_loss(log_prob, old, adv, clip_range=0.2)
    assert terms.policy_loss.item() == pytest.approx(0.05, abs=1e-6)
    assert terms.clip_fraction.item() == pytest.approx(1.0)
    assert terms.kl_ref.item() == 0.0
    # clip-higher 0.28: min terms 0.7, 1.25, -1.3, -0.8 -> mean -0.0375; 1.25 no longer clipped
    terms = grpo_loss(log_prob, old, adv, clip_range=0.2, clip_range_high=0.28)
    assert terms.policy_loss.item() == pytest.approx(0.0375, abs=1e-6)
    assert terms.clip_fraction.item() == pytest.approx(0.75)
    # entropy + k3 KL: r = pi_ref/pi = 2 on the first step only: k3 = 2 - ln 2 - 1
    entropy = th.tensor([0.5, 0.5, 1.0, 1.0])
    ref = log_prob.clone()
    ref[0] += np.log(2.0)
    terms = grpo_loss(log_prob, old, adv, entropy=entropy, ref_log_prob=ref, clip_range=0.2, ent_coef=0.1, kl_coef=0.5)
    k3 = (1 - np.log(2.0)) / 4
    assert terms.entropy_loss.item() == pytest.approx(-0.75)
    assert terms.kl_ref.item() == pytest.approx(k3, abs=1e-6)
    assert terms.loss.item() == pytest.approx(0.05 - 0.075 + 0.5 * k3, abs=1e-6)
    # KL exactly zero when policy == reference
    assert grpo_loss(log_prob, old, adv, ref_log_prob=log_prob.clone(), kl_coef=1.0).kl_ref.item() == 0.0
    # loss weights: mean(w * term); min terms 0.7, 1.2, -1.3, -0.8 with w = [2, 0, 1, 1] -> -(1.4 + 0 - 1.3 - 0.8) / 4
    terms = grpo_loss(log_prob, old, adv, clip_range=0.2, loss_weights=th.tensor([2.0, 0.0, 1.0, 1.0]))
    assert terms.policy_loss.item() == pytest.approx(0.7 / 4, abs=1e-6)


def test_kl_zero_when_policy_is_reference():
    model = GRPO(
        "MlpPolicy", toy_vec_env(), group_mode="task_id", kl_coef=0.1, group_size=4, n_epochs=1, batch_size=None, seed=0
    )
    assert model.ref_policy is not None
    assert all(not p.requires_grad for p in model.ref_policy.parameters())
    model.learn(1)  # one rollout, a single minibatch: the only KL term is computed before any update
    assert model.logger.name_to_value["train/kl_ref"] == 0.0
    # after the update the policy moved away from the reference
    data = next(model.rollout_buffer.get(None, shuffle=False))
    with th.no_grad():
        lp, _ = model.policy.evaluate_actions(data.observations, data.actions, data.action_masks)
        ref_lp, _ = model.ref_policy.evaluate_actions(data.observations, data.actions, data.action_masks)
    assert not th.allclose(lp, ref_lp)


def test_reference_refresh():
    model = GRPO("MlpPolicy", "CartPole-v1", kl_coef=0.05, ref_update_interval=2, seed=0, **SMALL)
    model.learn(1)  # 1 rollout: reference still the initial policy
    ref = model.ref_policy.state_dict()
    assert any(not th.equal(ref[k], v) for k, v in model.policy.state_dict().items())
    model.learn(1, reset_num_timesteps=False)  # 2nd rollout: refreshed
    ref = model.ref_policy.state_dict()
    assert all(th.equal(ref[k], v) for k, v in model.policy.state_dict().items())


# ----------------------------------------------------------------------------- runs
@pytest.mark.parametrize("supervision", ["outcome", "process"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_run_cartpole(supervision, scale_rewards, loss_type):
    model = GRPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=3, seed=0),
        supervision=supervision,
        scale_rewards=scale_rewards,
        loss_type=loss_type,
        clip_range_high=0.28,
        ent_coef=0.01,
        target_kl=0.05,
        seed=0,
        **SMALL,
    )
    model.learn(300)
    assert model.num_timesteps >= 300
    assert model.rollout_buffer.n_episodes == 8


@pytest.mark.parametrize(
    "env_class",
    [IdentityEnv, IdentityEnvMultiDiscrete, IdentityEnvMultiBinary, IdentityEnvBox],
)
def test_run_action_spaces(env_class):
    env = env_class(ep_length=8) if env_class is IdentityEnvBox else env_class(dim=3, ep_length=8)
    model = GRPO("MlpPolicy", env, seed=0, **SMALL)
    model.learn(64)
    assert model.rollout_buffer.n_steps == 64
    action, _ = model.predict(env.observation_space.sample())
    assert env.action_space.contains(action)


def test_run_cnn():
    env = FakeImageEnv(screen_height=40, screen_width=40, n_channels=1)
    # FakeImageEnv rewards are always 0: all groups tie, keep them to exercise the update
    model = GRPO("CnnPolicy", env, filter_zero_std_groups=False, seed=0, group_size=2, groups_per_rollout=1, batch_size=8)
    model.learn(20)
    assert model.rollout_buffer.dropped_group_fraction == 0.0


def test_run_toy_task_id_masked():
    env = toy_vec_env(n_envs=3)
    model = GRPO("MlpPolicy", env, group_mode="task_id", kl_coef=0.1, seed=0, **SMALL)
    model.learn(200)
    assert sum(e.illegal_actions for e in toy_envs(env)) == 0
    # masks were stored and used
    assert model.rollout_buffer.action_masks is not None


def test_run_dict_obs_and_multidiscrete():
    env = toy_vec_env(n_envs=2, dict_obs=True, multi_discrete=True)
    model = GRPO("MultiInputPolicy", env, group_mode="task_id", seed=0, **SMALL)
    assert isinstance(model.policy, MultiInputGRPOPolicy)
    model.learn(100)
    assert sum(e.illegal_actions for e in toy_envs(env)) == 0
    obs = env.reset()
    actions, _ = model.predict(obs, action_masks=np.stack(env.env_method("action_masks")))
    assert actions.shape == (2, 2)


def test_run_box_actions_with_cut():
    model = GRPO("MlpPolicy", "Pendulum-v1", group_size=2, groups_per_rollout=1, max_episode_steps=20, seed=0)
    model.learn(40)
    buffer = model.rollout_buffer
    np.testing.assert_array_equal(buffer.episode_lengths, [20, 20])
    assert buffer.episode_truncated.all()


def test_invalid_actions():
    # Without masks the toy env sees illegal actions...
    env = toy_vec_env(n_envs=2, strict=False)
    model = GRPO("MlpPolicy", env, group_mode="task_id", use_masking=False, seed=0, **SMALL)
    model.learn(100)
    assert model.rollout_buffer.action_masks is None
    assert sum(e.illegal_actions for e in toy_envs(env)) > 0
    # ... with masks (strict env raises on any illegal action) never, also with evaluation helpers
    env = toy_vec_env(n_envs=2, strict=True)
    model = GRPO("MlpPolicy", env, group_mode="task_id", seed=0, **SMALL)
    model.learn(300)
    eval_env = toy_vec_env(n_envs=1, strict=True, seed=1)
    maskable_evaluate_policy(model, eval_env, n_eval_episodes=5, deterministic=False, warn=False)
    maskable_evaluate_policy(model, eval_env, n_eval_episodes=5, deterministic=True, warn=False)
    assert sum(e.illegal_actions for e in toy_envs(env) + toy_envs(eval_env)) == 0
    # SB3's evaluate_policy (no masks) also works with the model
    evaluate_policy(model, toy_vec_env(n_envs=1, strict=False, seed=2), n_eval_episodes=5, warn=False)
    # and the strict env does catch an unmasked illegal action
    strict_env = MaskedTaskEnv(strict=True)
    strict_env.reset(options={"task_id": 0})
    with pytest.raises(IllegalActionError):
        strict_env.step(1)


def test_task_id_mode_needs_num_tasks():
    with pytest.raises(ValueError, match="num_tasks"):
        GRPO("MlpPolicy", make_vec_env(NoTaskEnv, n_envs=1), group_mode="task_id")
    with pytest.raises(ValueError):
        GRPO("MlpPolicy", "CartPole-v1", group_size=1)
    with pytest.raises(ValueError):
        GRPO("MlpPolicy", "CartPole-v1", supervision="unknown")


# ----------------------------------------------------------------------------- groups and episodes
@pytest.mark.parametrize("wrapper_class", [None, GroupStartWrapper])
@pytest.mark.parametrize("refill_envs", [True, False])
@pytest.mark.parametrize("group_mode", ["task_id", "seed"])
def test_episode_boundaries_and_groups(group_mode, refill_envs, wrapper_class):
    # n_envs=3 does not divide group_size=4: groups span waves / refills, some envs idle at the end
    env = toy_vec_env(n_envs=3, expose_tag=True, wrapper_class=wrapper_class)
    model = GRPO("MlpPolicy", env, group_mode=group_mode, group_size=4, groups_per_rollout=3, seed=1, refill_envs=refill_envs)
    model.learn(1)
    buffer = model.rollout_buffer
    assert buffer.n_episodes == 12 and buffer.n_groups == 3
    assert model.num_timesteps == buffer.n_steps  # only recorded steps are counted
    # only recorded episodes reach the Monitor statistics (not the discarded auto-reset ones)
    assert sorted(info["l"] for info in model.ep_info_buffer) == sorted(buffer.episode_lengths.tolist())
    logs = {(e.uid, rec["episode"]): rec for e in toy_envs(env) for rec in e.episode_log}
    obs = buffer.observations
    seen = set()
    lengths, truncated = buffer.episode_lengths, buffer.episode_truncated
    for ep in range(buffer.n_episodes):
        steps = np.flatnonzero(buffer.episode_ids == ep)
        assert np.all(np.diff(steps) == 1)  # contiguous
        tag = obs[steps, -3:]
        uid, counter = int(tag[0, 0]), int(tag[0, 1])
        assert np.all(tag[:, 0] == uid) and np.all(tag[:, 1] == counter), "steps of two env episodes mixed"
        np.testing.assert_array_equal(tag[:, 2], np.arange(len(steps)))
        np.testing.assert_array_equal(buffer.step_indices[steps], np.arange(len(steps)))
        rec = logs[(uid, counter)]
        assert rec["completed"] and rec["length"] == lengths[ep] == len(steps)
        assert rec["return"] == pytest.approx(buffer.episode_returns[ep])
        assert truncated[ep] == (lengths[ep] == 6 and rec["return"] == 6)
        assert (uid, counter) not in seen
        seen.add((uid, counter))
    # all members of a group share the task (one-hot part of the first observation)
    first = np.array([np.flatnonzero(buffer.episode_ids == ep)[0] for ep in range(buffer.n_episodes)])
    tasks = obs[first, :3].argmax(axis=1)
    for g in range(3):
        assert len(set(tasks[buffer.episode_group_ids == g])) == 1


@pytest.mark.parametrize("wrapper_class", [None, GroupStartWrapper])
@pytest.mark.parametrize("refill_envs", [True, False])
def test_seed_groups_share_start_state(refill_envs, wrapper_class):
    model = GRPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=3, seed=0, wrapper_class=wrapper_class),
        group_size=4,
        groups_per_rollout=3,
        seed=0,
        refill_envs=refill_envs,
    )
    model.learn(1)
    buffer = model.rollout_buffer
    first = np.array([np.flatnonzero(buffer.episode_ids == ep)[0] for ep in range(buffer.n_episodes)])
    starts = buffer.observations[first]
    groups = buffer.episode_group_ids
    for g in range(3):
        assert np.all(starts[groups == g] == starts[groups == g][0])
    assert not np.allclose(starts[groups == 0][0], starts[groups == 1][0])
    # CartPole-v1 truncation at 500 steps would be flagged; here all episodes terminate early
    assert model.num_timesteps == buffer.n_steps


def test_refilling_finished_envs_wastes_fewer_vectorized_steps():
    """Refill mode restarts a finished env with the next member at once instead of idling until the wave ends."""

    class CountSteps(BaseCallback):
        def _on_step(self) -> bool:
            return True

    counts = {}
    for refill in (True, False):
        model = GRPO(
            "MlpPolicy",
            make_vec_env("CartPole-v1", n_envs=4, seed=0),
            group_size=4,
            groups_per_rollout=4,
            seed=0,
            refill_envs=refill,
        )
        callback = CountSteps()
        model.learn(1, callback=callback)
        counts[refill] = (callback.n_calls * 4, model.num_timesteps)  # env steps executed, env steps recorded
    executed_refill, recorded_refill = counts[True]
    executed_waves, recorded_waves = counts[False]
    assert executed_refill < executed_waves
    assert executed_refill - recorded_refill < executed_waves - recorded_waves  # less wasted compute


def test_tied_groups_give_no_update():
    # only the correct action is legal: every episode returns `horizon`, all groups tie
    env = toy_vec_env(n_envs=2, n_illegal=3)
    model = GRPO("MlpPolicy", env, group_mode="task_id", seed=0, **SMALL)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(1)
    assert model.rollout_buffer.dropped_group_fraction == 1.0
    assert model.logger.name_to_value["train/kept_steps"] == 0
    assert all(th.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
    assert model.rollout_buffer.episode_truncated.all()


# ----------------------------------------------------------------------------- update: fast path vs plain
class LearnedDictExtractor(BaseFeaturesExtractor):
    """A features extractor with parameters (a linear layer over the flattened inputs): no precomputed features."""

    def __init__(self, observation_space: gym.spaces.Dict, features_dim: int = 8):
        super().__init__(observation_space, features_dim)
        self.flatten = CombinedExtractor(observation_space)
        self.linear = nn.Linear(self.flatten.features_dim, features_dim)

    def forward(self, observations: dict[str, th.Tensor]) -> th.Tensor:
        return th.tanh(self.linear(self.flatten(observations)))


class SubclassedFlattenExtractor(FlattenExtractor):
    """Parameter-free, but not a known type: could do anything in forward, so no precomputed features."""


def test_static_features_only_for_known_parameter_free_extractors():
    dict_env = MaskedTaskEnv(dict_obs=True)
    image_env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1)
    assert GRPO("MlpPolicy", "CartPole-v1").policy.has_static_features
    assert GRPO("MultiInputPolicy", dict_env).policy.has_static_features
    assert not GRPO("CnnPolicy", image_env).policy.has_static_features
    learned = GRPO("MultiInputPolicy", dict_env, policy_kwargs={"features_extractor_class": LearnedDictExtractor})
    assert not learned.policy.has_static_features
    with pytest.raises(ValueError, match="not a fixed function of the observation"):
        learned.policy.static_features(obs_as_tensor(dict_env.observation_space.sample(), "cpu"))
    subclassed = GRPO("MlpPolicy", "CartPole-v1", policy_kwargs={"features_extractor_class": SubclassedFlattenExtractor})
    assert not subclassed.policy.has_static_features


def copy_policy(model: GRPO, policy: GRPOPolicy | None) -> GRPOPolicy | None:
    """A new policy with ``policy``'s parameters and a copy of its optimizer state (deepcopy fails on a policy whose
    MultiDiscrete distribution holds tensors of a past forward)."""
    if policy is None:
        return None
    new = model.policy_class(model.observation_space, model.action_space, model.lr_schedule, **model.policy_kwargs)
    new.load_state_dict(policy.state_dict())
    if policy.optimizer is not None:
        new.optimizer.load_state_dict(copy.deepcopy(policy.optimizer.state_dict()))
    return new


def plain_update(model: GRPO, policy: GRPOPolicy, ref_policy: GRPOPolicy | None) -> None:
    """
    GRPO's update written plainly, the reference for ``GRPO.train``: per minibatch, the numpy observations of the
    rollout are indexed and converted to tensors, the policy builds its (sb3-contrib) action distribution from the
    observations, and the loss is spelled out; torch's RNG draws one permutation per epoch, as ``train()`` does.
    """
    buffer = model.rollout_buffer
    kept = np.flatnonzero(buffer.keep)
    clip_range = model.clip_range(model._current_progress_remaining)

    def rows(array: np.ndarray, positions: np.ndarray) -> th.Tensor:
        return th.as_tensor(array[kept[positions]])

    def observations(positions: np.ndarray) -> th.Tensor | dict[str, th.Tensor]:
        if isinstance(buffer.observations, dict):
            return obs_as_tensor({key: value[kept[positions]] for key, value in buffer.observations.items()}, "cpu")
        return rows(buffer.observations, positions)

    def masks(positions: np.ndarray) -> th.Tensor | None:
        return None if buffer.action_masks is None else rows(buffer.action_masks, positions)

    def avg(values: th.Tensor, positions: np.ndarray) -> th.Tensor:
        return values.mean() if buffer.loss_weights is None else (rows(buffer.loss_weights, positions) * values).mean()

    ref_log_prob = None
    if ref_policy is not None:
        everything = np.arange(kept.size)
        with th.no_grad():
            distribution = ref_policy.get_distribution(observations(everything), masks(everything))
            ref_log_prob = distribution.log_prob(rows(buffer.actions, everything))
    for _ in range(model.n_epochs):
        order = th.randperm(kept.size).numpy()
        for start in range(0, kept.size, model.batch_size):
            positions = order[start : start + model.batch_size]
            distribution = policy.get_distribution(observations(positions), masks(positions))
            actions = rows(buffer.actions, positions)
            log_prob, entropy = distribution.log_prob(actions), distribution.entropy()
            advantages = rows(buffer.advantages, positions)
            ratio = th.exp(log_prob - rows(buffer.log_probs, positions))
            clipped = th.clamp(ratio, 1 - clip_range, 1 + clip_range)
            loss = -avg(th.min(ratio * advantages, clipped * advantages), positions) - model.ent_coef * avg(entropy, positions)
            if ref_log_prob is not None:
                log_r = ref_log_prob[th.as_tensor(positions)] - log_prob
                loss = loss + model.kl_coef * avg(th.exp(log_r) - log_r - 1, positions)
            policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
            policy.optimizer.step()


@pytest.mark.parametrize(
    "setting",
    [
        {"env_kwargs": {"dict_obs": True}, "kl_coef": 0.1, "loss_type": "grpo"},
        {"env_kwargs": {"dict_obs": True}, "kl_coef": 0.0, "loss_type": "bnpo"},
        {"env_kwargs": {}, "kl_coef": 0.1, "loss_type": "bnpo"},
        {"env_kwargs": {"dict_obs": True, "multi_discrete": True}, "kl_coef": 0.1, "loss_type": "dr_grpo"},
        {"env_kwargs": {"dict_obs": True}, "kl_coef": 0.1, "loss_type": "grpo", "extractor": LearnedDictExtractor},
    ],
    ids=["dict-kl-grpo", "dict-bnpo", "box-kl-bnpo", "multidiscrete-kl-dr_grpo", "learned-extractor"],
)
def test_update_matches_plain_update(setting, monkeypatch):
    """``GRPO.train`` (features extracted once, fast masked categorical) gives the plain update's parameters."""
    env_kwargs = setting["env_kwargs"]
    policy_kwargs = {"net_arch": [16, 16]}
    if "extractor" in setting:
        policy_kwargs["features_extractor_class"] = setting["extractor"]
    model = GRPO(
        "MultiInputPolicy" if env_kwargs.get("dict_obs") else "MlpPolicy",
        toy_vec_env(n_envs=3, **env_kwargs),
        group_mode="task_id",
        group_size=4,
        groups_per_rollout=4,
        batch_size=7,  # a last minibatch of another size
        n_epochs=3,
        learning_rate=3e-3,
        ent_coef=0.01,
        kl_coef=setting["kl_coef"],
        loss_type=setting["loss_type"],
        max_episode_steps=6,
        seed=0,
        policy_kwargs=policy_kwargs,
    )
    model.learn(1)  # one rollout and one update: Adam has state, the policy differs from the reference
    assert model.rollout_buffer.n_kept_steps > 20 and model.rollout_buffer.action_masks is not None
    policy, ref_policy = copy_policy(model, model.policy), copy_policy(model, model.ref_policy)
    before = _params(model)

    static = "extractor" not in setting
    assert model.policy.has_static_features == static
    if static:  # the update never extracts features per minibatch

        def no_per_minibatch_extraction(*args: object, **kwargs: object) -> None:
            raise AssertionError("evaluate_actions called although the features were extracted once")

        monkeypatch.setattr(model.policy, "evaluate_actions", no_per_minibatch_extraction)
        if model.ref_policy is not None:
            monkeypatch.setattr(model.ref_policy, "evaluate_actions", no_per_minibatch_extraction)
    th.manual_seed(7)
    model.train()
    th.manual_seed(7)
    plain_update(model, policy, ref_policy)

    after = _params(model)
    assert all(not th.equal(a, b) for a, b in zip(before, after, strict=True))
    for fast, plain in zip(after, policy.parameters(), strict=True):
        th.testing.assert_close(fast, plain.detach(), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- size
def _adam_state_numel(optimizer: th.optim.Optimizer) -> int:
    return sum(v.numel() for state in optimizer.state.values() for v in state.values() if th.is_tensor(v) and v.dim() > 0)


def test_no_value_network_and_half_parameters():
    net_arch = [64, 64]
    grpo = GRPO("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": net_arch}, seed=0, **SMALL)
    ppo = PPO("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": net_arch}, n_steps=64, batch_size=64, n_epochs=1, seed=0)
    names = [name for name, _ in grpo.policy.named_parameters()]
    assert not any("value" in n or "vf" in n or "critic" in n for n in names)
    assert not hasattr(grpo.policy, "value_net")
    n_grpo = sum(p.numel() for p in grpo.policy.parameters() if p.requires_grad)
    n_ppo = sum(p.numel() for p in ppo.policy.parameters() if p.requires_grad)
    assert n_grpo == (4 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2)
    assert 0.4 < n_grpo / n_ppo < 0.6
    grpo.learn(1)
    ppo.learn(64)
    state_grpo, state_ppo = _adam_state_numel(grpo.policy.optimizer), _adam_state_numel(ppo.policy.optimizer)
    assert state_grpo == 2 * n_grpo and state_ppo == 2 * n_ppo
    assert 0.4 < state_grpo / state_ppo < 0.6


# ----------------------------------------------------------------------------- determinism and save / load
def _params(model) -> list[th.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "toy"])
def test_deterministic(env_id):
    results = []
    for _ in range(2):
        if env_id == "toy":
            model = GRPO("MlpPolicy", toy_vec_env(n_envs=2), group_mode="task_id", seed=3, kl_coef=0.1, **SMALL)
        else:
            model = GRPO("MlpPolicy", env_id, seed=3, **SMALL)
        model.learn(150)
        results.append((_params(model), model.num_timesteps))
    assert results[0][1] == results[1][1]
    assert all(th.equal(a, b) for a, b in zip(results[0][0], results[1][0], strict=True))


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_save_load(tmp_path, kl_coef):
    env = toy_vec_env(n_envs=2)
    model = GRPO("MlpPolicy", env, group_mode="task_id", kl_coef=kl_coef, ref_update_interval=None, seed=0, **SMALL)
    model.learn(100)
    obs = np.stack([model.observation_space.sample() for _ in range(16)])
    masks = np.ones((16, 4), dtype=bool)
    masks[:, 0] = False
    actions, _ = model.predict(obs, deterministic=True, action_masks=masks)
    with th.no_grad():
        dist = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0])
        probs = dist.distribution.probs.clone()

    model.save(tmp_path / "grpo.zip")
    loaded = GRPO.load(tmp_path / "grpo.zip", env=toy_vec_env(n_envs=2))
    new_actions, _ = loaded.predict(obs, deterministic=True, action_masks=masks)
    np.testing.assert_array_equal(actions, new_actions)
    assert np.all(new_actions != 0)
    with th.no_grad():
        new_probs = loaded.policy.get_distribution(loaded.policy.obs_to_tensor(obs)[0]).distribution.probs
    assert th.equal(probs, new_probs)
    assert all(th.equal(a, b) for a, b in zip(_params(model), _params(loaded), strict=True))
    if kl_coef > 0:
        assert loaded.ref_policy is not None
        ref_a, ref_b = model.ref_policy.state_dict(), loaded.ref_policy.state_dict()
        assert all(th.equal(ref_a[k], ref_b[k]) for k in ref_a)
        # the reference is the initial policy, not the trained one
        assert any(not th.equal(ref_b[k], v) for k, v in loaded.policy.state_dict().items())
    else:
        assert loaded.ref_policy is None
    # policy alone save / load and continued training
    model.policy.save(tmp_path / "policy.pth")
    policy = GRPOPolicy.load(tmp_path / "policy.pth")
    np.testing.assert_array_equal(policy.predict(obs, deterministic=True, action_masks=masks)[0], actions)
    loaded.learn(50, reset_num_timesteps=False)


# ----------------------------------------------------------------------------- API
def test_callback_progress_bar_and_evaluate():
    class StopAfter(BaseCallback):
        def _on_step(self) -> bool:
            return self.n_calls < 10

    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, **SMALL)
    model.learn(10_000, callback=StopAfter())
    assert model.num_timesteps == 10
    model.learn(100, progress_bar=True)
    mean, _ = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=2, seed=5), n_eval_episodes=4)
    assert mean > 0


def test_learn_cartpole():
    """GRPO clearly beats the random policy on CartPole after ~40k steps (about 4 s)."""
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=100)
    model = GRPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=0), seed=0, group_size=8, groups_per_rollout=4)
    random_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=False)
    model.learn(40_000)
    trained_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=False)
    assert random_return < 40
    assert trained_return > 100 and trained_return > 3 * random_return


# ----------------------------------------------------------------------------- SB3 integration: masks, VecEnvs, callbacks, logging
class ListVecEnv(VecEnv):
    """A VecEnv written from scratch, as a user would: no per-env seed list, auto-reset without seed like SB3's."""

    def __init__(self, env_fns):
        self.envs = [fn() for fn in env_fns]
        super().__init__(len(self.envs), self.envs[0].observation_space, self.envs[0].action_space)
        del self._seeds, self._options  # reset() below never reads them

    def _targets(self, indices):
        return [self.envs[i] for i in self._get_indices(indices)]

    def reset(self):
        observations = []
        for i, env in enumerate(self.envs):
            obs, self.reset_infos[i] = env.reset()
            observations.append(obs)
        return np.stack(observations)

    def step_async(self, actions):
        self._actions = actions

    def step_wait(self):
        observations, rewards, dones, infos = [], [], [], []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(self._actions[i])
            info["TimeLimit.truncated"] = truncated and not terminated
            if terminated or truncated:
                info["terminal_observation"] = obs
                obs, self.reset_infos[i] = env.reset()
            observations.append(obs)
            rewards.append(reward)
            dones.append(terminated or truncated)
            infos.append(info)
        return np.stack(observations), np.array(rewards, dtype=np.float32), np.array(dones), infos

    def close(self):
        pass

    def get_attr(self, attr_name, indices=None):
        return [env.get_wrapper_attr(attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name, value, indices=None):
        for env in self._targets(indices):
            setattr(env, attr_name, value)

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
        return [env.get_wrapper_attr(method_name)(*method_args, **method_kwargs) for env in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [is_wrapped(env, wrapper_class) for env in self._targets(indices)]


class RolloutLog(BaseCallback):
    """Keeps the logger values recorded during each rollout (they are dumped before ``learn`` returns)."""

    def _on_training_start(self) -> None:
        self.rollouts = []

    def _on_rollout_end(self) -> None:
        self.rollouts.append(dict(self.logger.name_to_value))

    def _on_step(self) -> bool:
        return True


def _first_steps(buffer: GroupRolloutBuffer) -> np.ndarray:
    return np.array([np.flatnonzero(buffer.episode_ids == ep)[0] for ep in range(buffer.n_episodes)])


def test_progress_remaining_is_clamped_at_zero():
    """A rollout of whole groups overshoots total_timesteps; linear schedules must stop at 0, not go negative."""
    model = GRPO("MlpPolicy", "CartPole-v1", learning_rate=lambda p: 1e-3 * p, clip_range=lambda p: 0.2 * p, seed=0, **SMALL)
    model.learn(10)  # one rollout of 8 episodes is far more than 10 steps
    assert model.num_timesteps > 10
    assert model._current_progress_remaining == 0.0
    assert model.logger.name_to_value["train/learning_rate"] == 0.0
    assert model.logger.name_to_value["train/clip_range"] == 0.0
    assert all(group["lr"] >= 0.0 for group in model.policy.optimizer.param_groups)


def test_use_masking_none_true_false():
    env = toy_vec_env(n_envs=2, strict=False)
    model = GRPO("MlpPolicy", env, group_mode="task_id", seed=0, **SMALL)
    model.learn(50)  # None: the env has action_masks()
    assert model.rollout_buffer.action_masks is not None
    assert sum(e.illegal_actions for e in toy_envs(env)) == 0
    model.learn(100, use_masking=False)  # False: never
    assert model.rollout_buffer.action_masks is None
    assert sum(e.illegal_actions for e in toy_envs(env)) > 0
    model.learn(50, use_masking=True)
    assert model.rollout_buffer.action_masks is not None

    cartpole = GRPO("MlpPolicy", "CartPole-v1", seed=0, **SMALL)
    cartpole.learn(50)  # None: CartPole has no masks, train without
    assert cartpole.rollout_buffer.action_masks is None
    with pytest.raises(ValueError, match="action_masks"):
        cartpole.learn(50, use_masking=True)
    with pytest.raises(ValueError, match="action_masks"):
        GRPO("MlpPolicy", "CartPole-v1", use_masking=True, **SMALL).learn(50)


@pytest.mark.parametrize("multi_discrete", [False, True])
def test_masks_read_from_the_observation_train_the_same_parameters(multi_discrete, monkeypatch):
    """``action_mask_key``: the masks come from the observations (no ``action_masks()`` call per vectorized step, one
    check per rollout), and training is the same to the bit as with the envs' own masks."""
    from baselines.grpo import rollout as rollout_module

    calls = {"n": 0}
    own_masks = rollout_module.get_action_masks

    def counted(env):
        calls["n"] += 1
        return own_masks(env)

    monkeypatch.setattr(rollout_module, "get_action_masks", counted)

    def run(key):
        monkeypatch.setattr(MaskedTaskEnv, "_next_uid", 0)  # the same env ids (the "tag" observation) in both runs
        env = toy_vec_env(n_envs=3, dict_obs=True, mask_in_obs=True, multi_discrete=multi_discrete)
        model = GRPO("MultiInputPolicy", env, group_mode="task_id", seed=3, action_mask_key=key, **SMALL)
        calls["n"] = 0
        model.learn(300)
        assert model.rollout_buffer.action_masks is not None and sum(e.illegal_actions for e in toy_envs(env)) == 0
        return {k: v.clone() for k, v in model.policy.state_dict().items()}, model, calls["n"]

    params_key, model_key, calls_key = run("mask")
    params_own, model_own, calls_own = run(None)
    assert model_key.num_timesteps == model_own.num_timesteps
    assert all(th.equal(params_key[k], params_own[k]) for k in params_own)
    rollouts = model_key._n_rollouts_trained
    assert calls_key == rollouts < calls_own  # one check per rollout, against one call per vectorized step


def test_action_mask_key_bad_input(monkeypatch):
    with pytest.raises(ValueError, match="action_mask_key"):
        GRPO("MultiInputPolicy", toy_vec_env(dict_obs=True), action_mask_key=3, **SMALL)
    # not a key of the observations, or not one value per action: at learn, with masks on
    env = toy_vec_env(dict_obs=True, strict=False)
    model = GRPO("MultiInputPolicy", env, action_mask_key="nope", group_mode="task_id", **SMALL)
    with pytest.raises(ValueError, match=r"not a key of the observation space \(its keys: \['state', 'tag'\]\)"):
        model.learn(50)
    model.learn(50, use_masking=False)  # no masks: nothing to read
    model = GRPO("MultiInputPolicy", toy_vec_env(dict_obs=True), action_mask_key="tag", group_mode="task_id", **SMALL)
    with pytest.raises(ValueError, match=r"shape \(3,\), but a mask of this action space has 4 values"):
        model.learn(50)
    model = GRPO("MlpPolicy", toy_vec_env(), action_mask_key="mask", group_mode="task_id", **SMALL)
    with pytest.raises(ValueError, match="a Box, not a Dict"):
        model.learn(50)
    # the right shape, but not the current mask: found at the rollout's first step. Env 0's tag [uid 0, episode, t 0]
    # has at most one nonzero value while every mask here allows two actions, so the two always differ (with a larger
    # uid the tag could equal the mask of some task drawn, and training would go on with wrong masks)
    monkeypatch.setattr(MaskedTaskEnv, "_next_uid", 0)
    env = toy_vec_env(dict_obs=True, n_actions=3, n_illegal=1)
    model = GRPO("MultiInputPolicy", env, action_mask_key="tag", group_mode="task_id", **SMALL)
    with pytest.raises(ValueError, match=r"masks in the observations differ from the envs' action_masks\(\)"):
        model.learn(50)


def test_sample_from_numpy_is_forward_bit_for_bit():
    """The collection path from numpy observations draws the same actions and log-probabilities as ``forward``."""
    env = toy_vec_env(n_envs=4, dict_obs=True, mask_in_obs=True)
    model = GRPO("MultiInputPolicy", env, seed=0, **SMALL)
    obs = env.reset()
    masks = obs["mask"].astype(bool)
    for seed in range(3):
        th.manual_seed(seed)
        with th.inference_mode():
            actions, log_probs = model.policy.sample_from_numpy(obs, masks)
        after = th.rand(2)
        th.manual_seed(seed)
        with th.inference_mode():
            expected_actions, expected_log_probs = model.policy(obs_as_tensor(obs, model.device), action_masks=masks)
        assert th.equal(actions, expected_actions) and th.equal(log_probs, expected_log_probs)
        assert th.equal(after, th.rand(2))

    # a hook on a layer (or a global one) is honoured: the layers are then called as modules, as forward does
    def shift(module, inputs, output):
        return output + 1.0 if isinstance(output, th.Tensor) else None  # (a global hook also sees the policy's tuple)

    for register in (model.policy.actor_net[0].register_forward_hook, th.nn.modules.module.register_module_forward_hook):
        handle = register(shift)
        try:
            th.manual_seed(7)
            with th.inference_mode():
                hooked = model.policy.sample_from_numpy(obs, masks)
            th.manual_seed(7)
            with th.inference_mode():
                expected = model.policy(obs_as_tensor(obs, model.device), action_masks=masks)
            assert th.equal(hooked[1], expected[1]) and th.equal(hooked[0], expected[0])
        finally:
            handle.remove()
    th.manual_seed(7)
    with th.inference_mode():
        assert not th.equal(model.policy.sample_from_numpy(obs, masks)[1], hooked[1])  # the hook did change the logits
    # not applicable: None, and the caller uses forward
    assert model.policy.sample_from_numpy({k: v.astype(np.float64) for k, v in obs.items()}) is None
    box = GRPO("MlpPolicy", toy_vec_env(), seed=0, **SMALL)
    assert box.policy.sample_from_numpy({"state": np.zeros((2, 4), np.float32)}) is None
    model.policy.to("meta")  # not on the CPU (a device with no data: nothing may run there)
    assert model.policy.sample_from_numpy(obs, masks) is None


@pytest.mark.parametrize("wrapped", [False, True])
def test_any_vec_env_seed_groups(wrapped):
    """Group starts go through public VecEnv API: a VecEnv without a per-env seed list still gets seed groups."""

    def make():
        env = Monitor(gym.make("CartPole-v1"))
        return GroupStartWrapper(env) if wrapped else env

    env = ListVecEnv([make] * 3)
    assert not hasattr(env, "_seeds")
    model = GRPO("MlpPolicy", env, group_size=4, groups_per_rollout=3, seed=0)
    model.learn(1)
    buffer = model.rollout_buffer
    starts, groups = buffer.observations[_first_steps(buffer)], buffer.episode_group_ids
    assert buffer.n_episodes == 12
    for g in range(3):
        assert np.all(starts[groups == g] == starts[groups == g][0])
    assert not np.allclose(starts[groups == 0][0], starts[groups == 1][0])


def test_vec_env_wrappers_need_group_start_wrapper():
    """A direct per-env reset would bypass a VecEnvWrapper: refused unless the envs queue their starts."""
    plain = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0), norm_reward=False, training=False)
    with pytest.raises(TypeError, match="GroupStartWrapper"):
        GRPO("MlpPolicy", plain, **SMALL).learn(1)
    env = VecNormalize(
        make_vec_env("CartPole-v1", n_envs=3, seed=0, wrapper_class=GroupStartWrapper), norm_reward=False, training=False
    )
    model = GRPO("MlpPolicy", env, group_size=4, groups_per_rollout=3, seed=0, max_episode_steps=15)
    model.learn(1)
    buffer = model.rollout_buffer
    starts, groups = buffer.observations[_first_steps(buffer)], buffer.episode_group_ids
    assert buffer.n_episodes == 12
    for g in range(3):
        assert np.all(starts[groups == g] == starts[groups == g][0])


def test_refilled_envs_reset_once():
    """With queued starts the VecEnv's auto-reset is the member's only reset: no empty episode between two members."""
    env = toy_vec_env(n_envs=2, expose_tag=True, wrapper_class=GroupStartWrapper)
    model = GRPO("MlpPolicy", env, group_mode="task_id", group_size=4, groups_per_rollout=3, seed=0)
    model.learn(1)
    buffer = model.rollout_buffer
    tags = buffer.observations[_first_steps(buffer), -3:].astype(int)
    for toy in toy_envs(env):
        counters = np.sort(tags[tags[:, 0] == toy.uid, 1])
        assert counters.size >= 4
        np.testing.assert_array_equal(np.diff(counters), 1)  # consecutive env episodes: nothing reset in between
    # direct resets (no wrapper) waste the auto-reset: each refill shows an empty episode before the member
    env = toy_vec_env(n_envs=2, expose_tag=True)
    GRPO("MlpPolicy", env, group_mode="task_id", group_size=4, groups_per_rollout=3, seed=0).learn(1)
    assert any(rec["length"] == 0 for toy in toy_envs(env) for rec in toy.episode_log[2:])


def test_group_rng_saved_and_restored(tmp_path):
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, **SMALL)
    model.learn(100)
    model.save(tmp_path / "grpo.zip")
    loaded = GRPO.load(tmp_path / "grpo.zip", env=make_vec_env("CartPole-v1", n_envs=1))
    continuing = model._plan_group_members(model.env, 3)
    resumed = loaded._plan_group_members(loaded.env, 3)
    replayed = GRPO("MlpPolicy", "CartPole-v1", seed=0, **SMALL)._plan_group_members(model.env, 3)
    assert resumed == continuing
    assert resumed != replayed


def test_callbacks_see_only_recorded_steps():
    class Count(BaseCallback):
        def _on_training_start(self) -> None:
            self.steps, self.episodes, self.lengths = 0, 0, []

        def _on_step(self) -> bool:
            infos, dones = self.locals["infos"], self.locals["dones"]
            assert len(infos) == len(dones) == len(self.locals["rewards"]) == len(self.locals["env_indices"])
            self.steps += len(infos)
            self.episodes += int(np.sum(dones))
            self.lengths += [info["episode"]["l"] for info in infos if "episode" in info]
            return True

    # 6 members on 4 envs: envs idle (and keep playing unrecorded episodes) at the end of the rollout
    model = GRPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=0), group_size=3, groups_per_rollout=2, seed=0)
    callback = Count()
    model.learn(1, callback=callback)
    buffer = model.rollout_buffer
    assert callback.steps == model.num_timesteps == buffer.n_steps
    assert callback.episodes == buffer.n_episodes == 6
    assert sorted(callback.lengths) == sorted(buffer.episode_lengths.tolist())
    # learn(progress_bar=True) counts recorded steps too
    bars = [c for c in model._init_callback(None, progress_bar=True).callbacks if isinstance(c, RecordedStepsProgressBar)]
    assert len(bars) == 1


def test_logger_uses_sb3_keys():
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, **SMALL)
    log = RolloutLog()
    model.learn(1, callback=log)
    keys = model.logger.name_to_value
    for key in (
        "train/policy_gradient_loss",
        "train/entropy_loss",
        "train/approx_kl",
        "train/clip_fraction",
        "train/loss",
        "train/learning_rate",
        "train/clip_range",
        "train/n_updates",
    ):
        assert key in keys, key
    assert "train/policy_loss" not in keys and "train/value_loss" not in keys
    assert {"rollout/groups_drawn", "rollout/dropped_group_fraction"} <= set(log.rollouts[0])


def test_no_unused_hyperparameters_saved(tmp_path):
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, **SMALL)
    model.learn(1)
    model.save(tmp_path / "grpo.zip")
    with zipfile.ZipFile(tmp_path / "grpo.zip") as archive:
        data = json.loads(archive.read("data").decode("utf-8"))
    for name in ("n_steps", "gae_lambda", "vf_coef", "rollout_buffer_class", "rollout_buffer_kwargs"):
        assert name not in data and not hasattr(model, name)
    assert {"group_size", "loss_type", "scale_rewards", "_group_rng_state"} <= set(data)
    assert not hasattr(GRPO.load(tmp_path / "grpo.zip"), "n_steps")


@pytest.mark.parametrize("wrapper_class", [None, GroupStartWrapper])
def test_dynamic_sampling_draws_until_informative(wrapper_class):
    # one step per episode, two legal actions: a group of 2 ties half of the time
    env = toy_vec_env(n_envs=4, horizon=1, wrapper_class=wrapper_class)
    model = GRPO("MlpPolicy", env, group_mode="task_id", group_size=2, groups_per_rollout=4, dynamic_sampling=True, seed=0)
    log = RolloutLog()
    model.learn(1, callback=log)
    stats, buffer = log.rollouts[0], model.rollout_buffer
    assert stats["rollout/informative_groups"] >= 4
    assert 4 < stats["rollout/groups_drawn"] <= 16  # cap: 4 x groups_per_rollout
    assert buffer.n_groups == stats["rollout/groups_drawn"] and buffer.n_episodes == 2 * buffer.n_groups
    assert int((~buffer.group_dropped).sum()) == stats["rollout/informative_groups"]
    # the cap holds when no group can be informative (only the correct action is legal)
    env = toy_vec_env(n_envs=4, horizon=1, n_illegal=3, wrapper_class=wrapper_class)
    model = GRPO(
        "MlpPolicy", env, group_mode="task_id", group_size=2, groups_per_rollout=4, dynamic_sampling=True, max_groups_drawn=7
    )
    model.learn(1, callback=log)
    assert log.rollouts[0]["rollout/groups_drawn"] == 7 and log.rollouts[0]["rollout/informative_groups"] == 0
    # without dynamic sampling: exactly groups_per_rollout groups
    model = GRPO("MlpPolicy", toy_vec_env(n_envs=4, horizon=1), group_mode="task_id", group_size=2, groups_per_rollout=4)
    model.learn(1, callback=log)
    assert log.rollouts[0]["rollout/groups_drawn"] == 4
    with pytest.raises(ValueError, match="filter_zero_std_groups"):
        GRPO("MlpPolicy", "CartPole-v1", dynamic_sampling=True, filter_zero_std_groups=False)


def test_mask_truncated_episodes_in_training():
    env = toy_vec_env(n_envs=2, horizon=2)
    model = GRPO(
        "MlpPolicy", env, group_mode="task_id", mask_truncated_episodes=True, filter_zero_std_groups=False, seed=0, **SMALL
    )
    model.learn(1)
    buffer = model.rollout_buffer
    truncated_steps = buffer.episode_truncated[buffer.episode_ids]
    assert truncated_steps.any() and not truncated_steps.all()
    np.testing.assert_array_equal(buffer.keep, ~truncated_steps)
    assert model.logger.name_to_value["train/kept_steps"] == int((~truncated_steps).sum())


def test_normalize_std_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="scale_rewards='none'"):
        model = GRPO("MlpPolicy", "CartPole-v1", normalize_std=False)
    assert model.scale_rewards == "none" and model.rollout_buffer.scale_rewards == "none"
    with pytest.raises(ValueError, match="contradicts"):
        GRPO("MlpPolicy", "CartPole-v1", normalize_std=True, scale_rewards="batch")
    with pytest.raises(ValueError, match="loss_type"):
        GRPO("MlpPolicy", "CartPole-v1", loss_type="sum")


def test_queued_starts_in_subprocesses():
    from stable_baselines3.common.vec_env import SubprocVecEnv

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SubprocVecEnv, wrapper_class=GroupStartWrapper)
    try:
        model = GRPO("MlpPolicy", env, group_size=3, groups_per_rollout=3, seed=0)
        model.learn(1)
        buffer = model.rollout_buffer
        starts, groups = buffer.observations[_first_steps(buffer)], buffer.episode_group_ids
        assert buffer.n_episodes == 9 and model.num_timesteps == buffer.n_steps
        for g in range(3):
            assert np.all(starts[groups == g] == starts[groups == g][0])
    finally:
        env.close()
