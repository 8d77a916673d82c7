"""A model saved for the observation without the pointer-free view is refused by a default env, saying why."""

from __future__ import annotations

import gymnasium as gym
import pytest

from baselines.algorithms import load_model
from baselines.evaluation import evaluate_model
from baselines.training.config import TrainConfig, settings_for
from baselines.training.run import make_algo


@pytest.mark.parametrize("algo", ["grpo", "maskable_ppo"])
def test_a_model_saved_without_the_view_fails_to_load_on_a_default_env(tmp_path, algo):
    old_env = gym.make("EDO-v0", focus_view=False)
    try:
        model = make_algo(TrainConfig(algo=algo, batch_size=16, **settings_for(algo, {"n_steps": 16})), old_env)
        model.save(tmp_path / "old.zip")
    finally:
        old_env.close()
    env = gym.make("EDO-v0")
    try:
        with pytest.raises(ValueError, match="without the pointer-free view.*focus_view=False"):
            load_model(tmp_path / "old.zip", env=env)
        loaded = load_model(tmp_path / "old.zip")  # without an env it loads; running it on the default env does not
        with pytest.raises(ValueError, match="cannot run on this env: it was trained on an observation without"):
            evaluate_model(loaded, env, [0])
    finally:
        env.close()
    old_env = gym.make("EDO-v0", focus_view=False)
    try:  # on an env made as it was trained, it runs
        assert evaluate_model(load_model(tmp_path / "old.zip", env=old_env), old_env, [0]).episodes == 1
    finally:
        old_env.close()
