"""Tests of baselines.grpo.scheduling: which env runs which group member, and how its episode starts."""

from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from baselines.grpo import GroupStartWrapper
from baselines.grpo.scheduling import GroupScheduler, Member, idle_envs_can_wait, plan_group_members, start_mode
from baselines.training import FreshInfoDummyVecEnv


def cartpole_vec_env(n_envs: int, group_start: bool, cls: type = DummyVecEnv):
    def make() -> gym.Env:
        env = gym.make("CartPole-v1")
        return GroupStartWrapper(env) if group_start else env

    return cls([make for _ in range(n_envs)])


def run_rollout(scheduler: GroupScheduler, seed: int = 0) -> list[tuple[int, Member, np.ndarray, int]]:
    """Drive ``scheduler`` as GRPO's collection loop does, with random actions: ``(env, member, first observation,
    length)`` of every episode run for a member, in the order they ended."""
    rng = np.random.default_rng(seed)
    env = scheduler.env
    episodes = []
    starts: dict[int, tuple[np.ndarray, int]] = {}
    obs = scheduler.start(np.zeros((env.num_envs, 4), dtype=np.float32))
    while True:
        running, obs = scheduler.next_wave(obs)
        if not running:
            return episodes
        for i, slot in enumerate(scheduler.slots):
            if slot.member is not None and slot.steps == 0:
                starts[i] = (np.array(obs[i]), 0)
        new_obs, _, dones, _ = scheduler.step(rng.integers(2, size=env.num_envs))
        for i, slot in enumerate(scheduler.slots):
            if slot.member is None:
                scheduler.idle_env_stepped(i, bool(dones[i]))
                continue
            slot.steps += 1
            if dones[i]:
                episodes.append((i, slot.member, starts[i][0], slot.steps))
                scheduler.episode_ended(i, True, new_obs)
        obs = scheduler.refill(new_obs)


def make_scheduler(env, n_groups: int = 3, group_size: int = 4, refill_envs: bool = True) -> GroupScheduler:
    rng = np.random.default_rng(0)
    return GroupScheduler(
        env,
        lambda n, first: plan_group_members(rng, env, "seed", group_size, n, first),
        group_size=group_size,
        target=n_groups,
        cap=n_groups,
        refill_envs=refill_envs,
        dynamic_sampling=False,
        informative_rate=1.0,
        is_informative=lambda group_id: True,
    )


def test_plan_group_members_share_the_start_within_a_group():
    env = cartpole_vec_env(1, group_start=False)
    members = plan_group_members(np.random.default_rng(0), env, "seed", 3, 2, first_group_id=5)
    assert [m.group_id for m in members] == [5, 5, 5, 6, 6, 6]
    assert len({m.seed for m in members[:3]}) == 1 and members[0].seed != members[3].seed
    assert all(m.options == {} for m in members)
    with pytest.raises(ValueError, match="num_tasks"):  # CartPole has no tasks
        plan_group_members(np.random.default_rng(0), env, "task_id", 3, 1)


@pytest.mark.parametrize("group_start", [True, False], ids=["queued", "direct"])
@pytest.mark.parametrize("refill_envs", [True, False], ids=["refill", "waves"])
def test_every_member_runs_once_from_its_groups_start(group_start, refill_envs):
    env = cartpole_vec_env(3, group_start=group_start)
    scheduler = make_scheduler(env, refill_envs=refill_envs)
    assert scheduler.mode == ("queue" if group_start else "direct")
    episodes = run_rollout(scheduler)
    scheduler.close()
    assert len(episodes) == 12 and Counter(m.group_id for _, m, _, _ in episodes) == {0: 4, 1: 4, 2: 4}
    assert scheduler.state.complete == 3 and scheduler.state.finished_members == [4, 4, 4]
    for group_id in range(3):  # CartPole's start state is a function of the reset seed: one per group
        firsts = [first for _, m, first, _ in episodes if m.group_id == group_id]
        assert all(np.array_equal(firsts[0], first) for first in firsts)
    assert not np.array_equal(
        episodes[0][2], next(first for _, m, first, _ in episodes if m.group_id != episodes[0][1].group_id)
    )
    if group_start:
        assert env.get_attr("n_queued_starts") == [0, 0, 0]  # close() dropped what no member used


def test_synchronous_waves_start_members_only_when_every_env_is_idle():
    env = cartpole_vec_env(3, group_start=True)
    scheduler = make_scheduler(env, n_groups=2, group_size=3, refill_envs=False)
    episodes = run_rollout(scheduler)
    waves = [episodes[:3], episodes[3:]]
    # the first wave is group 0 on the three envs, the second group 1: no env started a fourth member while another
    # still ran (with refilling, the env whose episode ends first would start group 1 at once)
    assert [sorted(i for i, _, _, _ in wave) for wave in waves] == [[0, 1, 2], [0, 1, 2]]
    assert [{m.group_id for _, m, _, _ in wave} for wave in waves] == [{0}, {1}]


def test_idle_envs_wait_only_on_a_vec_env_that_can_step_some_envs():
    fresh = cartpole_vec_env(2, group_start=True, cls=FreshInfoDummyVecEnv)
    assert idle_envs_can_wait(fresh)
    assert not idle_envs_can_wait(cartpole_vec_env(2, group_start=True))
    assert not idle_envs_can_wait(VecMonitor(fresh))  # behind a VecEnvWrapper every env steps
    scheduler = make_scheduler(fresh)
    assert len(run_rollout(scheduler)) == 12


def test_a_vec_env_wrapper_without_group_starts_is_refused():
    with pytest.raises(TypeError, match="GroupStartWrapper"):
        start_mode(VecMonitor(cartpole_vec_env(2, group_start=False)))
