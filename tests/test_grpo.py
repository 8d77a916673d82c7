"""Tests for the GRPO baseline (baselines/grpo)."""

import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.evaluation import evaluate_policy as maskable_evaluate_policy
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
)
from stable_baselines3.common.evaluation import evaluate_policy

from baselines import GRPO
from baselines.grpo.advantages import (
    compute_group_advantages,
    discounted_return_to_go,
    outcome_advantages,
    process_advantages,
    tied_groups,
)
from baselines.grpo.buffers import GroupRolloutBuffer
from baselines.grpo.grpo import grpo_loss
from baselines.grpo.policies import GRPOPolicy, MultiInputGRPOPolicy

try:
    from tests.toy_envs import IllegalActionError, MaskedTaskEnv, NoTaskEnv
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from toy_envs import IllegalActionError, MaskedTaskEnv, NoTaskEnv  # type: ignore[no-redef]

th.set_num_threads(1)

SMALL = {"group_size": 4, "groups_per_rollout": 2, "batch_size": 64, "n_epochs": 2}


def toy_vec_env(n_envs: int = 2, seed: int = 0, **env_kwargs):
    return make_vec_env(MaskedTaskEnv, n_envs=n_envs, seed=seed, env_kwargs=env_kwargs)


def toy_envs(vec_env) -> list[MaskedTaskEnv]:
    return [e.unwrapped for e in vec_env.envs]


# ----------------------------------------------------------------------------- advantages
def test_outcome_advantages_by_hand():
    np.testing.assert_allclose(outcome_advantages([1, 0, 0, 1]), [1, -1, -1, 1], atol=1e-6)
    # Dr. GRPO: no division by std
    np.testing.assert_allclose(outcome_advantages([1, 0, 0, 1], normalize_std=False), [0.5, -0.5, -0.5, 0.5])
    # returns [3, 1]: mean 2, population std 1
    np.testing.assert_allclose(outcome_advantages([3.0, 1.0]), [1.0, -1.0], atol=1e-6)
    # returns [2, 0, 1]: mean 1, population std sqrt(2/3)
    np.testing.assert_allclose(outcome_advantages([2, 0, 1]), [np.sqrt(1.5), -np.sqrt(1.5), 0.0], atol=1e-6)
    # tied group -> all zeros (eps avoids division by zero)
    np.testing.assert_allclose(outcome_advantages([5, 5, 5]), [0, 0, 0])


def test_process_advantages_by_hand():
    # pooled rewards [1, 0, 0]: mean 1/3, population std sqrt(2)/3
    # normalised: 1 -> sqrt(2), 0 -> -1/sqrt(2); return-to-go with gamma = 1
    adv = process_advantages([[1, 0], [0]])
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(adv[0], [np.sqrt(2) - s, -s], atol=1e-6)
    np.testing.assert_allclose(adv[1], [-s], atol=1e-6)
    # no std division, gamma = 0.5: centred rewards [2/3, -1/3], [-1/3]
    adv = process_advantages([[1, 0], [0]], gamma=0.5, normalize_std=False)
    np.testing.assert_allclose(adv[0], [2 / 3 - 0.5 / 3, -1 / 3], atol=1e-9)
    np.testing.assert_allclose(adv[1], [-1 / 3], atol=1e-9)
    np.testing.assert_allclose(discounted_return_to_go([1, 2, 3], 0.5), [2.75, 3.5, 3.0])


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
    np.testing.assert_allclose(res.advantages, [1, 1, -1, 0, 0, 0], atol=1e-6)
    np.testing.assert_array_equal(res.keep, [True, True, True, False, False, False])
    np.testing.assert_allclose(res.episode_returns, [1, 0, 1, 1])
    np.testing.assert_allclose(res.group_return_std, [0.5, 0.0])
    assert res.dropped_group_fraction == 0.5
    res = compute_group_advantages(rewards, episode_ids, group_ids, filter_zero_std_groups=False)
    assert res.keep.all() and res.dropped_group_fraction == 0.0
    res = compute_group_advantages(rewards, episode_ids, group_ids, supervision="process", filter_zero_std_groups=False)
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(res.advantages[:3], [np.sqrt(2) - s, -s, -s], atol=1e-6)
    # group 1 pooled rewards [1, 0, 1]: mean 2/3, std sqrt(2)/3 -> 1 -> 1/sqrt(2), 0 -> -sqrt(2)
    np.testing.assert_allclose(res.advantages[3:], [s - np.sqrt(2), -np.sqrt(2), s], atol=1e-6)


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
@pytest.mark.parametrize("normalize_std", [True, False])
def test_run_cartpole(supervision, normalize_std):
    model = GRPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=3, seed=0),
        supervision=supervision,
        normalize_std=normalize_std,
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
    assert model.logger.name_to_value["train/dropped_group_fraction"] == 0.0


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
@pytest.mark.parametrize("refill_envs", [True, False])
@pytest.mark.parametrize("group_mode", ["task_id", "seed"])
def test_episode_boundaries_and_groups(group_mode, refill_envs):
    # n_envs=3 does not divide group_size=4: groups span waves / refills, some envs idle at the end
    env = toy_vec_env(n_envs=3, expose_tag=True)
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


@pytest.mark.parametrize("refill_envs", [True, False])
def test_seed_groups_share_start_state(refill_envs):
    model = GRPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=3, seed=0),
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
    assert model.logger.name_to_value["train/dropped_group_fraction"] == 1.0
    assert all(th.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
    assert model.rollout_buffer.episode_truncated.all()


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
