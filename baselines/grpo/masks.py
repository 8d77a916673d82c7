"""Checks of invalid-action masks read off a Dict observation key (``GRPO(action_mask_key=...)``) instead of the envs'
``action_masks()`` (sb3-contrib's convention: nonzero = legal)."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces


def check_action_mask_key(key: str, observation_space: spaces.Space, action_space: spaces.Space) -> None:
    """
    Raise ``ValueError`` unless ``key`` names a key of the Dict ``observation_space`` with one mask value per action
    (sb3-contrib's mask sizes: one value per action, per sub-action, or two per binary action).

    :param key: The observation key that holds the action mask
    :param observation_space: The algorithm's observation space
    :param action_space: The algorithm's action space
    """
    if not isinstance(observation_space, spaces.Dict) or key not in observation_space.spaces:
        keys = sorted(observation_space.spaces) if isinstance(observation_space, spaces.Dict) else None
        raise ValueError(
            f"action_mask_key={key!r} is not a key of the observation space"
            + (f" (its keys: {keys})" if keys is not None else f" (a {type(observation_space).__name__}, not a Dict)")
            + "; pass action_mask_key=None to call the envs' action_masks()"
        )
    sub_space = observation_space.spaces[key]
    n_mask = None
    if isinstance(action_space, spaces.Discrete):
        n_mask = int(action_space.n)
    elif isinstance(action_space, spaces.MultiDiscrete):
        n_mask = int(sum(action_space.nvec))
    elif isinstance(action_space, spaces.MultiBinary):
        n_mask = 2 * int(np.prod(action_space.shape))
    if sub_space.shape is None or int(np.prod(sub_space.shape)) != n_mask:
        raise ValueError(
            f"action_mask_key={key!r}: that observation has shape {sub_space.shape}, but a mask of this action space "
            f"has {n_mask} values"
        )


def check_observed_masks(observed: np.ndarray, own: np.ndarray, key: str) -> None:
    """
    Raise ``ValueError`` if the masks read off the observations differ from the envs' own ``action_masks()``.

    :param observed: Masks read off observation key ``key``, ``(n_envs, mask size)``, bool
    :param own: The envs' ``action_masks()`` (any shape with as many values)
    :param key: The observation key, for the message
    """
    own = np.asarray(own, dtype=bool).reshape(observed.shape)
    if not np.array_equal(observed, own):
        rows = np.flatnonzero((observed != own).any(axis=1)).tolist()
        raise ValueError(
            f"action_mask_key={key!r}: the masks in the observations differ from the envs' action_masks() "
            f"(envs {rows}); that key does not hold the current action mask: pass action_mask_key=None"
        )


__all__ = ["check_action_mask_key", "check_observed_masks"]
