"""GRPO on the EDO envs: runs on every registered id, never takes an illegal action with masks, is about half the
size of PPO for the same actor, and learns on a small variant."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch as th  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

from baselines.evaluation import evaluate_heuristic, evaluate_model, heldout_task_ids, make_eval_env  # noqa: E402
from baselines.grpo import GRPO  # noqa: E402
from baselines.heuristics import make_heuristic  # noqa: E402
from baselines.training import TrainConfig, count_parameters, make_algo, make_train_env  # noqa: E402
from edo_gym.registration import VARIANTS  # noqa: E402

th.set_num_threads(1)

TINY = dict(n_envs=2, group_size=2, groups_per_rollout=2, batch_size=64, n_epochs=1, net_arch=[32, 32], progress_bar=False)


class IllegalActionRecorder(BaseCallback):
    """Counts steps and illegal actions (``info["illegal_action"]``) of every env at every rollout step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.illegal = 0
        self.missing = 0
        self.episode_ends = 0

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            self.steps += 1
            if "illegal_action" not in info:
                self.missing += 1
            elif info["illegal_action"]:
                self.illegal += 1
            if info["episode_stats"]["ended"]:
                self.episode_ends += 1
        return True


@pytest.mark.parametrize("env_id", sorted(VARIANTS))
def test_grpo_runs_on_every_edo_id_without_illegal_actions(env_id):
    cfg = TrainConfig(algo="grpo", env_id=env_id, total_timesteps=50, seed=0, **TINY)
    env = make_train_env(cfg)
    try:
        model = make_algo(cfg, env)
        assert isinstance(model, GRPO)
        assert model.group_mode == "task_id"  # EDO exposes num_tasks
        recorder = IllegalActionRecorder()
        model.learn(total_timesteps=cfg.total_timesteps, callback=recorder)
    finally:
        env.close()
    assert model.num_timesteps >= cfg.total_timesteps
    assert recorder.steps > 0 and recorder.episode_ends > 0
    assert recorder.missing == 0, "EDO step info must carry 'illegal_action'"
    assert recorder.illegal == 0, f"{recorder.illegal} illegal actions in {recorder.steps} masked steps on {env_id}"


def test_grpo_groups_share_the_task():
    """With group_mode='task_id' all members of a group run the same task (same ``task`` observation)."""
    cfg = TrainConfig(
        algo="grpo", env_id="EDO-v0", total_timesteps=1, seed=3, **{**TINY, "group_size": 3, "groups_per_rollout": 3}
    )

    class GroupChecker(BaseCallback):
        """At the end of each rollout, reads the buffer: group id and task features of every stored step."""

        def __init__(self) -> None:
            super().__init__()
            self.groups: dict[int, set[bytes]] = {}
            self.episodes_per_group: dict[int, int] = {}

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            buffer = self.model.rollout_buffer
            for group_id, task in zip(buffer.group_ids, buffer.observations["task"], strict=True):
                self.groups.setdefault(int(group_id), set()).add(np.asarray(task, dtype=np.float32).tobytes())
            for group_id in buffer.episode_group_ids:
                self.episodes_per_group[int(group_id)] = self.episodes_per_group.get(int(group_id), 0) + 1

    env = make_train_env(cfg)
    try:
        model = make_algo(cfg, env)
        checker = GroupChecker()
        model.learn(total_timesteps=1, callback=checker)
    finally:
        env.close()
    assert checker.episodes_per_group == {0: 3, 1: 3, 2: 3}
    assert all(len(tasks) == 1 for tasks in checker.groups.values()), "members of a group saw different tasks"
    assert len(set().union(*checker.groups.values())) > 1, "different groups should (almost surely) get different tasks"


def test_grpo_has_about_half_the_parameters_of_ppo():
    cfg_grpo = TrainConfig(algo="grpo", env_id="EDO-v0", net_arch=[64, 64], n_envs=1, progress_bar=False)
    cfg_ppo = TrainConfig(algo="ppo", env_id="EDO-v0", net_arch=[64, 64], n_envs=1, progress_bar=False)
    cfg_mppo = TrainConfig(algo="maskable_ppo", env_id="EDO-v0", net_arch=[64, 64], n_envs=1, progress_bar=False)
    env = make_train_env(cfg_grpo)
    try:
        n_grpo = count_parameters(make_algo(cfg_grpo, env))
        n_ppo = count_parameters(make_algo(cfg_ppo, env))
        n_mppo = count_parameters(make_algo(cfg_mppo, env))
    finally:
        env.close()
    assert n_ppo == n_mppo
    ratio = n_grpo / n_ppo
    assert 0.4 <= ratio <= 0.6, f"GRPO {n_grpo} vs PPO {n_ppo} parameters: ratio {ratio:.3f}"


@pytest.mark.slow
def test_grpo_learns_on_edo_easy():
    """~40k steps of Dr. GRPO on EDO-Easy-v0 clearly beat a uniformly random legal policy on held-out tasks."""
    env_id = "EDO-Easy-v0"
    cfg = TrainConfig(
        algo="grpo",
        env_id=env_id,
        total_timesteps=40_000,
        seed=0,
        n_envs=16,
        group_size=8,
        groups_per_rollout=16,
        net_arch=[128, 128],
        learning_rate=1e-3,
        ent_coef=0.01,
        normalize_std=False,
        progress_bar=False,
    )
    env = make_train_env(cfg)
    try:
        model = make_algo(cfg, env)
        model.learn(total_timesteps=cfg.total_timesteps)
    finally:
        env.close()
    eval_env = make_eval_env(env_id)
    try:
        ids = heldout_task_ids(eval_env, 100)
        learned = evaluate_model(model, eval_env, ids, seed=0, name="grpo")
        random = evaluate_heuristic(make_heuristic("random"), eval_env, ids, seed=0)
    finally:
        eval_env.close()
    print(f"EDO-Easy-v0 held-out: grpo {learned.success_rate:.2f} / {learned.mean_return:+.3f}, "
          f"random {random.success_rate:.2f} / {random.mean_return:+.3f}")  # fmt: skip
    assert np.isfinite(learned.mean_return)
    assert learned.mean_return > random.mean_return + 0.2, (learned, random)
    assert learned.success_rate > random.success_rate + 0.2, (learned, random)


def test_success_filter_on_edo_drops_exactly_the_groups_without_an_outcome_difference():
    """EDO reports info["is_success"]; with filter_on="success" a group is dropped iff its members all succeeded or
    all failed (whatever their costs), and dynamic sampling counts informative groups by the same test."""
    cfg = TrainConfig(algo="grpo", total_timesteps=200, seed=0, filter_on="success", dynamic_sampling=True, **TINY)
    env = make_train_env(cfg)
    try:
        model = make_algo(cfg, env)
        assert model.filter_on == "success" and model.dynamic_sampling
        model.learn(total_timesteps=cfg.total_timesteps)
    finally:
        env.close()
    buffer = model.rollout_buffer
    success = buffer.episode_success
    groups = buffer.episode_group_ids
    assert success is not None and success.size == buffer.n_episodes > 0
    expected = [len(set(success[groups == g].tolist())) == 1 for g in range(buffer.n_groups)]
    np.testing.assert_array_equal(buffer.group_dropped, expected)
    with pytest.raises(ValueError, match="filter_on must be one of"):
        TrainConfig(filter_on="accuracy")
