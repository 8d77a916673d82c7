"""The shared-row features extractor for EDO's tables."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from baselines.extractors import EDOTableExtractor
from baselines.training.config import TrainConfig, settings_for
from baselines.training.run import make_algo
from edo_gym.envs import observation as O


@pytest.mark.parametrize("algo", ["grpo", "gigpo", "ppo", "maskable_ppo"])
def test_every_algorithm_trains_with_it(algo):
    env = gym.make("EDO-v0")
    try:
        model = make_algo(TrainConfig(algo=algo, features_extractor="table", batch_size=16,
                                      **settings_for(algo, {"n_steps": 16, "group_size": 2, "groups_per_rollout": 2})), env)  # fmt: skip
        assert isinstance(model.policy.features_extractor, EDOTableExtractor)
        before = [p.detach().clone() for p in model.policy.features_extractor.parameters()]
        model.learn(64)
        after = list(model.policy.features_extractor.parameters())
        assert any(not th.equal(a, b) for a, b in zip(after, before, strict=True))  # the encoders are trained
        obs, _ = env.reset(seed=0)
        action, _ = model.predict(obs, deterministic=True)
        assert env.action_space.contains(int(action))
    finally:
        env.close()


def test_rows_are_encoded_alike_and_absent_rows_ignored():
    env = gym.make("EDO-v0")
    try:
        extractor = EDOTableExtractor(env.observation_space, row_dim=8)
        obs, _ = env.reset(seed=0)
        batch = {k: th.as_tensor(v[None]) for k, v in obs.items()}
        features = extractor(batch)
        assert features.shape == (1, extractor.features_dim)
        # permuting the present subtask rows leaves the pooled encoding unchanged; so does changing an absent row
        sub = batch["subtasks"].clone()
        present = np.flatnonzero(sub[0, :, O.C_PRESENT].numpy())
        other = dict(batch, subtasks=sub[:, list(reversed(present)) + [i for i in range(sub.shape[1]) if i not in present]])
        np.testing.assert_allclose(extractor(other)[:, :16].detach(), features[:, :16].detach(), rtol=1e-6)
        absent = [i for i in range(sub.shape[1]) if i not in present]
        if absent:
            changed = sub.clone()
            changed[0, absent[0], : O.C_PRESENT] = 1.0  # labels in a row the plan does not have
            np.testing.assert_allclose(extractor(dict(batch, subtasks=changed))[:, :16].detach(), features[:, :16].detach())
    finally:
        env.close()


def test_it_refuses_other_spaces():
    with pytest.raises(ValueError, match="EDO observation space"):
        EDOTableExtractor(gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (3,))}))
    env = gym.make("EDO-v0")
    try:
        with pytest.raises(ValueError, match="row_dim"):
            EDOTableExtractor(env.observation_space, row_dim=0)
    finally:
        env.close()
