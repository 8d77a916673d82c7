"""The hop-count curriculum: its wrapper, its callback, and ``TrainConfig.hop_curriculum`` / ``edo train``."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch as th  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

from baselines.cli import build_parser  # noqa: E402
from baselines.curriculum import (  # noqa: E402
    HopCurriculumCallback,
    HopCurriculumWrapper,
    check_curriculum,
    max_hops_at,
    parse_curriculum,
)
from baselines.grpo.wrappers import GroupStartWrapper  # noqa: E402
from baselines.training import TrainConfig, curriculum_callbacks, make_algo, make_train_env, settings_for  # noqa: E402

th.set_num_threads(1)


def _task_hops(env):
    return env.unwrapped.episode.task.hops


@pytest.mark.parametrize(
    "stages, message",
    [
        ([], "non-empty list"),
        ("0.2:2", "non-empty list"),
        ([(0.2,)], "pair"),
        ([(0.0, 2)], "in \\(0, 1\\)"),
        ([(1.0, 2)], "in \\(0, 1\\)"),
        ([(0.2, 0)], "int >= 1"),
        ([(0.2, 2.5)], "int >= 1"),
        ([(0.5, 2), (0.3, 3)], "must widen"),
        ([(0.2, 3), (0.5, 3)], "must widen"),
    ],
)
def test_bad_curricula_are_clear_errors(stages, message):
    with pytest.raises(ValueError, match=message):
        check_curriculum(stages)


def test_parse_and_stages():
    stages = parse_curriculum("0.2:2, 0.5:3")
    assert stages == ((0.2, 2), (0.5, 3))
    assert [max_hops_at(stages, f) for f in (0.0, 0.19, 0.2, 0.49, 0.5, 0.99)] == [2, 2, 3, 3, None, None]
    with pytest.raises(ValueError, match="UNTIL:MAX_HOPS"):
        parse_curriculum("0.2-2")


def test_wrapper_draws_only_short_tasks_and_keeps_task_ids_when_it_widens(make_env):
    env = HopCurriculumWrapper(make_env("EDO-v0"), max_hops=2)
    base = env.unwrapped
    hops = np.array([base.pool.tasks[int(base.pool.ids[k])].hops for k in range(base.num_tasks)])
    # 2-4 hops as drawn, and 4-5 for a support task with the extra step (its hops count the steps its text hides)
    assert env.hop_counts == sorted(set(hops.tolist())) == [2, 3, 4, 5]
    assert env.num_tasks == int((hops <= 2).sum()) < base.num_tasks
    for seed in range(30):  # unseeded draws and task-id starts alike
        env.reset(seed=seed)
        assert _task_hops(env) <= 2
    named = {}
    for k in (0, env.num_tasks // 2, env.num_tasks - 1):
        env.reset(seed=1, options={"task_id": k})
        assert _task_hops(env) <= 2
        named[k] = base.episode.task.task_id
    with pytest.raises(ValueError, match="active tasks"):
        env.reset(options={"task_id": env.num_tasks})
    assert env.set_max_hops(3) == int((hops <= 3).sum())
    for k, task in named.items():  # a task id drawn before the widening names the same task after it
        env.reset(seed=2, options={"task_id": k})
        assert base.episode.task.task_id == task
    seen = set()
    for seed in range(60):
        env.reset(seed=seed)
        seen.add(_task_hops(env))
    assert seen == {2, 3}
    with pytest.raises(ValueError, match="only widens"):
        env.set_max_hops(2)
    assert env.set_max_hops(None) == base.num_tasks
    with pytest.raises(ValueError, match=r"no task has at most 1 hops; this env's tasks have \[2, 3, 4, 5\] hops"):
        HopCurriculumWrapper(make_env("EDO-v0"), max_hops=1)


def test_wrapper_needs_an_edo_env():
    import gymnasium as gym

    with pytest.raises(TypeError, match="needs an EDO env"):
        HopCurriculumWrapper(gym.make("CartPole-v1"))


def test_train_config_and_cli_carry_the_curriculum():
    cfg = TrainConfig(hop_curriculum=((0.25, 2), (0.5, 3)))
    assert cfg.hop_curriculum == [[0.25, 2], [0.5, 3]]
    with pytest.raises(ValueError, match="TrainConfig: hop_curriculum: .*must widen"):
        TrainConfig(hop_curriculum=[[0.5, 3], [0.25, 2]])
    args = build_parser().parse_args(["train", "--hop-curriculum", "0.25:2,0.5:3"])
    assert [list(s) for s in args.hop_curriculum] == [[0.25, 2], [0.5, 3]]
    assert build_parser().parse_args(["train"]).hop_curriculum is None
    assert curriculum_callbacks(TrainConfig()) == []


@pytest.mark.parametrize("algo", ["grpo", "maskable_ppo"])
def test_training_follows_the_curriculum(algo):
    """Every task of the first stage has at most 2 hops; after it, longer tasks come too."""
    shared = {"group_size": 2, "groups_per_rollout": 4, "n_steps": 32}  # each algorithm takes its own
    cfg = TrainConfig(
        algo=algo, total_timesteps=1024, n_envs=4, batch_size=64, warm_start=None, eval_episodes=0, progress_bar=False,
        hop_curriculum=[[0.5, 2]], **settings_for(algo, shared),
    )  # fmt: skip
    env = make_train_env(cfg)
    try:
        wrappers = env.envs[0]
        if algo == "grpo":
            assert isinstance(wrappers, GroupStartWrapper) and isinstance(wrappers.env, HopCurriculumWrapper)
        assert env.get_attr("max_hops") == [2] * 4
        model = make_algo(cfg, env)
        (curriculum,) = curriculum_callbacks(cfg)
        seen: list[tuple[int, int]] = []  # (env step, hops of each env's current task)

        class Watch(BaseCallback):
            def _on_step(self) -> bool:
                seen.extend((self.num_timesteps, e.unwrapped.episode.task.hops) for e in self.training_env.envs)
                return True

        model.learn(cfg.total_timesteps, callback=[curriculum, Watch()])
    finally:
        env.close()
    assert [h for _, h in curriculum.history] == [2, None]
    switch = curriculum.history[1][0]
    assert switch >= cfg.total_timesteps // 2
    assert env.get_attr("max_hops") == [None] * 4
    early = [h for t, h in seen if t < switch]  # the wrapper filters from its first reset on
    late = [h for t, h in seen if t > switch + 100]
    assert early and max(early) <= 2
    assert late and max(late) > 2


def test_callback_without_the_wrapper_fails_loudly():
    cfg = TrainConfig(algo="maskable_ppo", total_timesteps=64, n_envs=2, n_steps=16, batch_size=32, warm_start=None,
                      eval_episodes=0, progress_bar=False)  # fmt: skip
    env = make_train_env(cfg)
    try:
        model = make_algo(cfg, env)
        with pytest.raises(AttributeError, match="set_max_hops"):
            model.learn(64, callback=HopCurriculumCallback([(0.5, 2)], 64))
    finally:
        env.close()
