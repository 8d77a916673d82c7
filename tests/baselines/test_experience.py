"""Recorded experience: Minari datasets of orchestration episodes and behaviour cloning on them (the warm start)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from baselines.experience import (
    behaviour_clone,
    dataset_exists,
    load_demonstrations,
    record_dataset,
    warm_start,
    warm_start_dataset_id,
)
from baselines.training.config import TrainConfig, settings_for
from baselines.training.run import make_algo


@pytest.fixture
def minari_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def test_record_and_load_round_trip(minari_dir):
    path = record_dataset("edo_test/rule_based-v0", "rule_based", episodes=6, progress=False)
    assert str(minari_dir) in path and dataset_exists("edo_test/rule_based-v0")
    demos = load_demonstrations("edo_test/rule_based-v0")
    env = gym.make("EDO-v0")
    try:
        # the same episodes, replayed: the recorded actions are rule_based's on the recorded observations
        from baselines.heuristics import make_heuristic

        policy = make_heuristic("rule_based")
        k = 0
        for episode in range(6):
            obs, info = env.reset(seed=episode)
            policy.reset(obs, info)
            total = 0.0
            while True:
                for key in obs:
                    np.testing.assert_array_equal(demos.observations[key][k], obs[key])
                action = policy.act(obs, info)
                assert demos.actions[k] == action
                k += 1
                obs, reward, terminated, truncated, info = env.step(action)
                total += reward
                if terminated or truncated:
                    break
            assert demos.episode_returns[episode] == pytest.approx(total)
        assert k == len(demos)
    finally:
        env.close()
    assert "rule_based" in demos.source


def test_oracle_dataset_says_it_read_hidden_state(minari_dir):
    record_dataset("edo_test/oracle-v0", "oracle", episodes=3, progress=False)
    assert "hidden state" in load_demonstrations("edo_test/oracle-v0").source


def test_a_text_reading_probe_is_recorded_on_the_observation_it_does_not_read(minari_dir):
    """plan_check_text reads info["text"]: the recording env offers it; the dataset holds the observation only, and
    its episodes replan more than rule_based's (the probe acts on what it read)."""
    record_dataset("edo_test/text-v0", "plan_check_text", episodes=12, env_kwargs={"text_features": True}, progress=False)
    record_dataset("edo_test/rb-v0", "rule_based", episodes=12, env_kwargs={"text_features": True}, progress=False)
    text, rb = load_demonstrations("edo_test/text-v0"), load_demonstrations("edo_test/rb-v0")
    assert text.source == "plan_check_text"
    assert {"step_text", "plan_text", "current"} <= set(text.observations)
    assert set(text.observations) == set(rb.observations)
    env = gym.make("EDO-v0")
    replan = env.unwrapped.A_REPLAN
    env.close()
    assert (text.actions == replan).sum() > (rb.actions == replan).sum()


def test_record_refuses_bad_input(minari_dir):
    with pytest.raises(ValueError, match="namespace/name-vN"):
        record_dataset("no-version", "rule_based", episodes=1, progress=False)
    with pytest.raises(ValueError, match="no namespace"):
        record_dataset("plain-v0", "rule_based", episodes=1, progress=False)
    with pytest.raises(ValueError, match="policy must be one of"):
        record_dataset("edo_test/x-v0", "no_such_policy", episodes=1, progress=False)
    with pytest.raises(ValueError, match="positive integer"):
        record_dataset("edo_test/x-v0", "rule_based", episodes=0, progress=False)
    record_dataset("edo_test/x-v0", "random", episodes=1, progress=False)
    with pytest.raises(FileExistsError, match="overwrite"):
        record_dataset("edo_test/x-v0", "random", episodes=1, progress=False)
    record_dataset("edo_test/x-v0", "static_pipeline", episodes=2, overwrite=True, progress=False)
    assert len(load_demonstrations("edo_test/x-v0").episode_returns) == 2
    with pytest.raises(FileNotFoundError, match="edo record-dataset"):
        load_demonstrations("edo_test/missing-v0")


def test_a_failed_recording_leaves_no_dataset(minari_dir, monkeypatch):
    from baselines import experience

    calls = {"n": 0}
    real = experience._Acting.__call__

    def failing(self, obs, info, env):
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("policy crashed")
        return real(self, obs, info, env)

    monkeypatch.setattr(experience._Acting, "__call__", failing)
    with pytest.raises(RuntimeError, match="policy crashed"):
        record_dataset("edo_test/crash-v0", "rule_based", episodes=4, progress=False)
    assert not dataset_exists("edo_test/crash-v0")


@pytest.mark.parametrize("algo", ["grpo", "maskable_ppo", "ppo"])
def test_behaviour_cloning_fits_the_demonstrations(minari_dir, algo):
    record_dataset("edo_test/static-v0", "static_pipeline", episodes=40, progress=False)
    demos = load_demonstrations("edo_test/static-v0")
    env = gym.make("EDO-v0")
    try:
        model = make_algo(TrainConfig(algo=algo, batch_size=64, **settings_for(algo, {"n_steps": 32})), env)
        first = behaviour_clone(model.policy, demos, epochs=1, batch_size=64, learning_rate=3e-3)
        later = behaviour_clone(model.policy, demos, epochs=40, batch_size=64, learning_rate=3e-3)
        assert later["loss"] < first["loss"]
        assert later["accuracy"] > 0.9  # the static pipeline is a deterministic function of the observation
    finally:
        env.close()


def test_an_entropy_bonus_keeps_the_clone_of_a_fixed_pipeline_exploring(minari_dir):
    """bc_ent_coef: the clone still takes the pipeline's action most often, with more probability left on the others
    than a plain clone leaves (what GRPO needs: episodes of a group that differ); a negative bonus is refused."""
    import torch as th

    record_dataset("edo_test/static-v0", "static_pipeline", episodes=40, progress=False)
    demos = load_demonstrations("edo_test/static-v0")
    env = gym.make("EDO-v0")
    try:
        entropy = {}
        for coef in (0.0, 0.3):
            th.manual_seed(0)
            model = make_algo(TrainConfig(algo="grpo", batch_size=64), env)
            stats = behaviour_clone(model.policy, demos, epochs=30, batch_size=64, learning_rate=3e-3, ent_coef=coef)
            assert stats["accuracy"] > 0.9, (coef, stats)
            obs = {k: th.as_tensor(v) for k, v in demos.observations.items()}
            with th.no_grad():
                dist = model.policy.get_distribution(obs, action_masks=th.as_tensor(demos.action_masks))
                entropy[coef] = float(dist.entropy().mean())
        assert entropy[0.3] > 2 * entropy[0.0], entropy
        with pytest.raises(ValueError, match="ent_coef must be >= 0"):
            behaviour_clone(model.policy, demos, epochs=1, ent_coef=-0.1)
    finally:
        env.close()


def test_cloning_checks_the_observation_layout(minari_dir):
    record_dataset("edo_test/old-v0", "static_pipeline", episodes=2, env_kwargs={"focus_view": False}, progress=False)
    demos = load_demonstrations("edo_test/old-v0")
    env = gym.make("EDO-v0")
    try:
        model = make_algo(TrainConfig(), env)
        with pytest.raises(ValueError, match="focus_view"):
            behaviour_clone(model.policy, demos, epochs=1)
    finally:
        env.close()


def test_warm_start_records_once_and_reuses(minari_dir):
    env = gym.make("EDO-v0")
    try:
        model = make_algo(TrainConfig(), env)
        first = warm_start(model.policy, "static_pipeline", episodes=5, epochs=1)
        again = warm_start(model.policy, "static_pipeline", episodes=5, epochs=1)
        assert first["recorded"] and not again["recorded"] and first["dataset"] == again["dataset"]
        assert first["dataset"] == warm_start_dataset_id("static_pipeline", 5, "EDO-v0", None)
        # another setting of the env is another dataset
        assert warm_start_dataset_id("static_pipeline", 5, "EDO-v0", {"focus_view": False}) != first["dataset"]
        with pytest.raises(ValueError, match="hand-written policy"):
            warm_start(model.policy, "nonsense", epochs=1)
    finally:
        env.close()


def test_a_dataset_id_follows_the_settings_an_id_is_registered_with(monkeypatch):
    """A registered id whose settings change (a new release of a tier) names another dataset; EDO-v0, registered
    without settings, keeps the digest it had before registered settings were part of it (under 0.3.0, whose pinned
    id is checked too), and a new version names another dataset (its episodes were recorded on other dynamics)."""
    import copy

    import edo_gym.envs.edo_env as edo_env
    from edo_gym import SCRIPTED

    small = warm_start_dataset_id("rule_based", 20, "EDO-Small-v0", None)
    spec = copy.deepcopy(gym.spec("EDO-Small-v0"))
    spec.kwargs = {**spec.kwargs, "retrieval_identifier_match": not spec.kwargs["retrieval_identifier_match"]}
    monkeypatch.setitem(gym.registry, "EDO-Small-v0", spec)
    assert warm_start_dataset_id("rule_based", 20, "EDO-Small-v0", None) != small
    current = warm_start_dataset_id("static_pipeline", 2000, "EDO-v0", None)
    assert current == "edo_gym/EDO_v0_static_pipeline_2000_9fb1ffb2b8-v0"
    # the 0.3.0 dynamics asked for by keyword are another setting, not the 0.3.0 dataset
    assert warm_start_dataset_id("static_pipeline", 2000, "EDO-v0", SCRIPTED) != current
    monkeypatch.setattr(edo_env, "ENV_VERSION", "0.3.0")
    assert (
        warm_start_dataset_id("static_pipeline", 2000, "EDO-v0", None) == "edo_gym/EDO_v0_static_pipeline_2000_abd750b7d6-v0"
    )


def _warm_start_in_a_process(minari_path: str) -> bool:
    import os

    os.environ["MINARI_DATASETS_PATH"] = minari_path
    import torch

    torch.set_num_threads(1)
    env = gym.make("EDO-v0")
    try:
        model = make_algo(TrainConfig(), env)
        return bool(warm_start(model.policy, "static_pipeline", episodes=20, epochs=1)["recorded"])
    finally:
        env.close()


def test_concurrent_warm_starts_record_the_dataset_once(minari_dir):
    """Parallel runs that warm-start from the same teacher: one records, the others wait and load (before, the second
    process failed with "already exists", or deleted the first one's dataset)."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(2) as pool:
        recorded = pool.map(_warm_start_in_a_process, [str(minari_dir)] * 2)
    assert sorted(recorded) == [False, True]
    assert dataset_exists(warm_start_dataset_id("static_pipeline", 20, "EDO-v0", None))


def test_train_from_a_text_reading_teacher_tables_the_teacher(minari_dir, tmp_path):
    """edo train --text-features --warm-start plan_check_text: the probe it cloned is evaluated beside the heuristics
    on the same tasks (on an env that offers the text), between them and its clone before RL, then the trained policy."""
    from baselines.training import train

    cfg = TrainConfig(algo="grpo", total_timesteps=256, n_envs=2, group_size=2, groups_per_rollout=2, batch_size=64,
                      n_epochs=1, eval_episodes=4, warm_start="plan_check_text", warm_start_episodes=4, bc_epochs=1,
                      env_kwargs={"text_features": True}, output_dir=str(tmp_path), progress_bar=False)  # fmt: skip
    _, result = train(cfg)
    names = [r.policy for r in result.results]
    assert names[-3:] == ["plan_check_text", "clone of plan_check_text", "grpo"] and "rule_based" in names
    assert "plan_check_text: reads the task and plan text" in result.table
    with pytest.raises(ValueError, match="not hand-written policies"):
        from baselines.training.run import evaluate_with_heuristics

        evaluate_with_heuristics(None, "EDO-v0", 1, extra_policies=("nonsense",))
