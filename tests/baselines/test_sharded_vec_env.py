"""``ShardedVecEnv``: envs stepped in a few worker processes, a shard each, exactly as the in-process VecEnv steps them."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch as th  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

import edo_gym  # noqa: E402, F401  (registers the ids)
from baselines.cli import main  # noqa: E402
from baselines.grpo.wrappers import GroupStartWrapper  # noqa: E402
from baselines.sharded_vec_env import ShardedVecEnv, shard_bounds  # noqa: E402
from baselines.training import FreshInfoDummyVecEnv, TrainConfig, make_train_env, train  # noqa: E402


def _same(x, y) -> bool:
    """Equal values, recursively (dicts, lists, arrays); Monitor's wall time ``t`` is not compared."""
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(k == "t" or _same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)
    return type(x) is type(y) and (x == y or (x != x and y != y))


def test_shard_bounds():
    assert shard_bounds(16, 2) == [range(0, 8), range(8, 16)]
    assert shard_bounds(5, 2) == [range(0, 3), range(3, 5)]
    assert shard_bounds(3, 3) == [range(0, 1), range(1, 2), range(2, 3)]
    with pytest.raises(ValueError, match=r"n_shards must be between 1 and the number of envs \(3\), got 4"):
        shard_bounds(3, 4)
    with pytest.raises(ValueError, match="n_shards must be between 1"):
        shard_bounds(3, 0)


def test_bad_worker_counts_are_rejected_before_any_process_starts():
    fns = [lambda: gym.make("CartPole-v1")] * 2
    with pytest.raises(ValueError, match=r"n_workers=2 plus the main process gives more shards than there are envs \(2\)"):
        ShardedVecEnv(fns, n_workers=2)
    with pytest.raises(ValueError, match=r"n_workers=3 gives more shards than there are envs \(2\)"):
        ShardedVecEnv(fns, n_workers=3, in_main=False)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="n_workers must be an int >= 1"):
            ShardedVecEnv(fns, n_workers=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="deferred_methods must be a collection of method names"):
        ShardedVecEnv(fns, n_workers=1, deferred_methods="queue_starts")
    with pytest.raises(ValueError, match="in_main must be a bool"):
        ShardedVecEnv(fns, n_workers=1, in_main=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"vec_workers must be None or an int between 1 and n_envs - 1 \(3\)"):
        TrainConfig(vec_env="shards", n_envs=4, vec_workers=4)
    with pytest.raises(ValueError, match="vec_env='shards' needs n_envs >= 2"):
        TrainConfig(vec_env="shards", n_envs=1)
    with pytest.raises(ValueError, match="vec_workers is for vec_env='shards' only"):
        TrainConfig(vec_env="dummy", vec_workers=2)
    with pytest.raises(ValueError, match=r"vec_env must be one of \['dummy', 'subproc', 'shards'\]"):
        TrainConfig(vec_env="threads")


def test_cli_rejects_vec_workers_without_shards(capsys):
    assert main(["train", "--vec-env", "dummy", "--vec-workers", "2", "--timesteps", "10"]) == 2
    assert "vec_workers is for vec_env='shards' only" in capsys.readouterr().err


@pytest.mark.parametrize("in_main", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_sharded_edo_envs_step_as_the_in_process_vec_env(small_world_kwargs, in_main):
    """Five EDO envs in two shards (the main process's and a worker's, or two workers') against the same five in one
    process: the same observations, rewards, dones, infos and reset infos step for step, through ``step``,
    ``step_some`` (with ``hold``), ``env_method`` resets, deferred ``queue_starts`` calls and episode ends;
    ``get_attr`` answers in the order asked, and a worker's error comes back with its traceback."""

    def make(cls, **kwargs):
        return make_vec_env("EDO-v0", n_envs=5, seed=3, vec_env_cls=cls, vec_env_kwargs=kwargs or None,
                            env_kwargs={"render_mode": None, **small_world_kwargs}, wrapper_class=GroupStartWrapper)  # fmt: skip

    ref = make(FreshInfoDummyVecEnv)
    venv = make(ShardedVecEnv, n_workers=1 if in_main else 2, in_main=in_main, vec_env_cls=FreshInfoDummyVecEnv,
                deferred_methods=("queue_starts",))  # fmt: skip
    try:
        assert venv.shards == [range(0, 3), range(3, 5)] and callable(getattr(venv, "step_some", None))
        assert len(venv.processes) == (1 if in_main else 2) and (venv.remotes[0] is None) == in_main
        obs, obs_ref = venv.reset(), ref.reset()
        assert _same(dict(obs), dict(obs_ref)) and _same(venv.reset_infos, ref.reset_infos)
        rng = np.random.default_rng(0)
        ends = held = 0
        for t in range(240):
            actions = np.array([rng.choice(np.flatnonzero(m)) if m.any() else 0 for m in obs_ref["action_mask"].astype(bool)])
            if t % 3 == 0:
                indices = sorted(rng.choice(5, size=3, replace=False).tolist())
                out, out_ref = (
                    venv.step_some(actions, indices, hold=indices[:1]),
                    ref.step_some(actions, indices, hold=indices[:1]),
                )
                held += int(out_ref[2][indices[0]])
            else:
                out, out_ref = venv.step(actions), ref.step(actions)
            assert _same(dict(out[0]), dict(out_ref[0])) and all(
                _same(a, b) for a, b in zip(out[1:], out_ref[1:], strict=True)
            ), t
            assert _same(venv.reset_infos, ref.reset_infos), t
            ends += int(out_ref[2].sum())
            obs_ref = out_ref[0]
            if t == 60:  # deferred: no value back, and each env's queued start still applies at its next reset
                starts = [[(11, None), (12, None)]]
                assert venv.env_method("queue_starts", *starts, indices=[1, 4]) == [None, None]
                assert ref.env_method("queue_starts", *starts, indices=[1, 4]) == [2, 2]
            if t == 120:
                assert _same(venv.env_method("reset", seed=7, indices=[3]), ref.env_method("reset", seed=7, indices=[3]))
        assert ends >= 10 and held >= 1  # episode ends, auto-resets and held envs were all exercised
        assert venv.get_attr("num_tasks", [4, 0]) == ref.get_attr("num_tasks", [4, 0])
        assert venv.env_is_wrapped(GroupStartWrapper) == [True] * 5
        with pytest.raises(RuntimeError, match=r"(?s)worker of shard 1 \(envs 3-4\) failed:.*AttributeError.*no_such_method"):
            venv.env_method("no_such_method", indices=[4])
        # an error in the main process's shard is raised as it is; the workers' replies are read all the same
        with pytest.raises(AttributeError if in_main else RuntimeError, match="no_such_method"):
            venv.env_method("no_such_method", indices=[0, 4])
        assert venv.get_attr("num_tasks", [4, 1]) == ref.get_attr("num_tasks", [4, 1])  # the pipes are still in step
    finally:
        venv.close()
        ref.close()
    assert all(not p.is_alive() for p in venv.processes)
    venv.close()  # closing twice is harmless


def test_a_worker_vec_env_without_step_some_gives_a_sharded_env_without_it():
    venv = ShardedVecEnv([lambda: gym.make("CartPole-v1")] * 3, n_workers=2, in_main=False, vec_env_cls=DummyVecEnv)
    try:
        assert getattr(venv, "step_some", None) is None
        venv.seed(1)
        ref = DummyVecEnv([lambda: gym.make("CartPole-v1")] * 3)
        ref.seed(1)
        assert np.array_equal(venv.reset(), ref.reset())
        for _ in range(30):
            out, out_ref = venv.step(np.array([1, 0, 1])), ref.step(np.array([1, 0, 1]))
            assert all(np.array_equal(a, b) for a, b in zip(out[:3], out_ref[:3], strict=True))
    finally:
        venv.close()


@pytest.mark.slow
def test_training_on_shards_gives_the_same_parameters(tmp_path, small_world_kwargs):
    """GRPO through ``edo train``'s code on ``vec_env="shards"`` (the main process and a worker) and on the in-process VecEnv: the same
    parameters to the bit, and the same number of env steps (step_some and hold work through the shards)."""
    kwargs = dict(env_id="EDO-v0", algo="grpo", total_timesteps=1_500, n_envs=4, group_size=4, groups_per_rollout=3,
                  batch_size=64, n_epochs=2, seed=5, eval_episodes=0, progress_bar=False, env_kwargs=small_world_kwargs)  # fmt: skip
    runs = {}
    for kind in ("dummy", "shards"):
        cfg = TrainConfig(vec_env=kind, vec_workers=1 if kind == "shards" else None, output_dir=str(tmp_path / kind), **kwargs)
        if kind == "shards":
            probe = make_train_env(cfg)
            assert isinstance(probe, ShardedVecEnv) and len(probe.shards) == 2
            probe.close()
        model, result = train(cfg)
        runs[kind] = ({k: v.detach().clone() for k, v in model.policy.state_dict().items()}, result)
    (params, result), (params_s, result_s) = runs["dummy"], runs["shards"]
    assert result.num_timesteps == result_s.num_timesteps
    assert result.time_breakdown["env_steps"] == result_s.time_breakdown["env_steps"] == result.num_timesteps
    assert params.keys() == params_s.keys() and all(th.equal(params[k], params_s[k]) for k in params)
