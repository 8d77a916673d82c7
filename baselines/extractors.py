"""A features extractor for EDO's tables: one small encoder shared by the rows of a table.

SB3's ``MultiInputPolicy`` flattens every key of the observation and concatenates them, so the network meets the
subtask table as ``S x 25`` unrelated inputs and has to learn the same thing about a row once per position.
:class:`EDOTableExtractor` encodes each subtask row with one shared MLP and pools the rows (mean and max over the
steps the plan has), and each worker row (its public facts, what it did this episode and, with the pointer-free
view, what it did on the current and last step) with another shared MLP, keeping the workers in order (actions name
them); the other keys are flattened as SB3 does. It works with every algorithm of the project::

    from baselines.extractors import EDOTableExtractor

    policy_kwargs = dict(features_extractor_class=EDOTableExtractor, features_extractor_kwargs=dict(row_dim=32))
    GRPO("MultiInputPolicy", env, policy_kwargs=policy_kwargs)   # or PPO, MaskablePPO, GiGPO

``edo train --features-extractor table`` (``TrainConfig.features_extractor``) does the same.
"""

from __future__ import annotations

import gymnasium as gym
import torch as th
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from edo_gym.envs import observation as O

#: ``TrainConfig.features_extractor`` values: ``None`` (SB3's CombinedExtractor: everything flattened) or these.
FEATURES_EXTRACTORS = ("table",)


class EDOTableExtractor(BaseFeaturesExtractor):
    """Shared row encoders for the ``subtasks`` and ``workers`` tables of an EDO observation (see module docstring).

    :param observation_space: an EDO ``Dict`` observation space (with or without the pointer-free view)
    :param row_dim: width of each row's encoding
    """

    def __init__(self, observation_space: gym.spaces.Dict, row_dim: int = 32) -> None:
        if not O.is_edo_observation_space(observation_space) or "workers" not in observation_space.spaces:
            raise ValueError(
                "EDOTableExtractor needs an EDO observation space (keys task, plan, subtasks, workers, ...), got "
                f"{observation_space}"
            )
        if isinstance(row_dim, bool) or not isinstance(row_dim, int) or row_dim < 1:
            raise ValueError(f"row_dim must be a positive integer, got {row_dim!r}")
        spaces = observation_space.spaces
        n_workers = spaces["workers"].shape[0]
        worker_in = spaces["workers"].shape[1] + (spaces["tried"].shape[1] if "tried" in spaces else 0)
        flat_keys = [k for k in spaces if k not in ("subtasks", "workers", "tried")]
        flat_dim = sum(int(th.tensor(spaces[k].shape).prod()) for k in flat_keys)
        super().__init__(observation_space, features_dim=2 * row_dim + n_workers * row_dim + flat_dim)
        self.flat_keys = flat_keys
        self.has_tried = "tried" in spaces
        self.subtask_encoder = nn.Sequential(nn.Linear(spaces["subtasks"].shape[1], row_dim), nn.ReLU())
        self.worker_encoder = nn.Sequential(nn.Linear(worker_in, row_dim), nn.ReLU())

    def forward(self, observations: dict[str, th.Tensor]) -> th.Tensor:
        sub = observations["subtasks"]
        rows = self.subtask_encoder(sub)  # (batch, S, row_dim)
        present = sub[..., O.C_PRESENT : O.C_PRESENT + 1]  # (batch, S, 1): rows the plan has
        count = present.sum(dim=1).clamp(min=1.0)
        mean = (rows * present).sum(dim=1) / count
        # max over present rows (encodings are >= 0 after the ReLU, so absent rows set to 0 never win wrongly)
        top = (rows * present).max(dim=1).values
        workers = observations["workers"]
        if self.has_tried:
            workers = th.cat([workers, observations["tried"]], dim=-1)
        encoded = self.worker_encoder(workers).flatten(1)
        flat = [observations[k].flatten(1) for k in self.flat_keys]
        return th.cat([mean, top, encoded, *flat], dim=1)
