"""
Rollout buffer of complete, variable-length episodes organised in groups (for GRPO).

Unlike SB3's ``RolloutBuffer`` (a fixed ``(n_steps, n_envs)`` grid of transitions that may cut
episodes), this buffer only ever receives **complete episodes** (terminated or truncated by a time
limit), each tagged with the id of the group it belongs to. Episodes are stored flat, one after the
other, so the steps of an episode are contiguous and in time order. Advantages are computed per
group once the rollout is complete (see :mod:`baselines.grpo.advantages`).
"""

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.utils import get_device

from baselines.grpo.advantages import DEFAULT_EPS, DEFAULT_STD_TOL, compute_group_advantages

TensorDict = dict[str, th.Tensor]
Observations = np.ndarray | dict[str, np.ndarray]


class GroupRolloutBufferSamples(NamedTuple):
    """One minibatch of kept steps (steps of dropped groups never appear)."""

    #: Observations, tensor ``(batch, *obs_shape)`` or dict of such tensors
    observations: th.Tensor | TensorDict
    #: Actions, long for discrete spaces, float32 for Box; shape ``(batch, *action_shape)``
    actions: th.Tensor
    #: Log-probability of the actions under the behaviour policy that collected them, ``(batch,)``
    old_log_prob: th.Tensor
    #: Group-relative advantages, ``(batch,)``
    advantages: th.Tensor
    #: Boolean action masks ``(batch, mask_dim)`` or None when masking was not used
    action_masks: th.Tensor | None
    #: Log-probability under the frozen reference policy ``(batch,)`` or None when not computed
    ref_log_prob: th.Tensor | None
    #: Episode id of every step, ``(batch,)``
    episode_ids: th.Tensor
    #: Group id of every step, ``(batch,)``
    group_ids: th.Tensor
    #: Flat buffer index of every step (numpy, for writing back per-step values)
    indices: np.ndarray


class GroupRolloutBuffer:
    """
    Buffer of complete episodes grouped for group-relative advantage estimation.

    Usage: ``reset()``, then ``add_episode(...)`` once per finished episode (any order, any length),
    then ``compute_advantages()``, then iterate over ``get(batch_size)``.

    :param observation_space: Observation space (``Dict`` observations are supported)
    :param action_space: Action space
    :param device: PyTorch device of the yielded tensors
    :param gamma: Discount factor of the return-to-go used by process supervision (unitless)
    :param supervision: ``"outcome"`` (one advantage per episode) or ``"process"`` (per-step rewards)
    :param normalize_std: Divide by the group std (False = Dr. GRPO, centring only)
    :param filter_zero_std_groups: Drop groups whose returns all tie (DAPO dynamic sampling)
    :param std_tol: Std tolerance (reward units) under which a group's returns count as tied
    :param eps: Added to the group std before dividing
    """

    observations: Observations
    actions: np.ndarray
    log_probs: np.ndarray
    rewards: np.ndarray
    action_masks: np.ndarray | None
    episode_ids: np.ndarray
    group_ids: np.ndarray
    step_indices: np.ndarray
    advantages: np.ndarray
    keep: np.ndarray
    ref_log_probs: np.ndarray | None

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gamma: float = 1.0,
        supervision: str = "outcome",
        normalize_std: bool = True,
        filter_zero_std_groups: bool = True,
        std_tol: float = DEFAULT_STD_TOL,
        eps: float = DEFAULT_EPS,
    ):
        if supervision not in ("outcome", "process"):
            raise ValueError(f"Unknown supervision '{supervision}', expected 'outcome' or 'process'")
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = get_device(device)
        self.gamma = gamma
        self.supervision = supervision
        self.normalize_std = normalize_std
        self.filter_zero_std_groups = filter_zero_std_groups
        self.std_tol = std_tol
        self.eps = eps
        self.reset()

    # ------------------------------------------------------------------ filling
    def reset(self) -> None:
        """Remove all episodes."""
        self._episodes: list[dict[str, Any]] = []
        self.finalized = False
        self.ref_log_probs = None
        self.dropped_group_fraction = 0.0
        self.group_return_std = np.zeros(0)
        self.group_dropped = np.zeros(0, dtype=bool)
        self.episode_returns = np.zeros(0)

    def _stack_observations(self, observations: Sequence[Any] | Observations) -> Observations:
        if isinstance(self.observation_space, spaces.Dict):
            if isinstance(observations, dict):
                return {key: np.array(value) for key, value in observations.items()}
            return {key: np.stack([np.asarray(obs[key]) for obs in observations]) for key in self.observation_space.spaces}
        return np.stack([np.asarray(obs) for obs in observations])  # type: ignore[union-attr]

    def add_episode(
        self,
        group_id: int,
        observations: Sequence[Any] | Observations,
        actions: Sequence[Any] | np.ndarray,
        log_probs: Sequence[float] | np.ndarray,
        rewards: Sequence[float] | np.ndarray,
        action_masks: Sequence[np.ndarray] | np.ndarray | None = None,
        truncated: bool = False,
    ) -> int:
        """
        Add one complete episode.

        :param group_id: Id of the group this episode belongs to (integers ``0..n_groups-1`` over the rollout)
        :param observations: Per-step observations (list of arrays/dicts, or stacked array / dict of arrays), length T
        :param actions: Per-step actions taken, length T
        :param log_probs: Log-probability of each action under the behaviour policy, length T
        :param rewards: Per-step rewards, length T
        :param action_masks: Per-step boolean masks used when sampling (None if masking was not used)
        :param truncated: Whether the episode ended by truncation (time limit) rather than termination.
            A truncated episode is still a complete group member: its return is the sum of its rewards.
        :return: The id of the episode (its insertion rank)
        """
        if self.finalized:
            raise RuntimeError("Cannot add episodes after compute_advantages(); call reset() first")
        rewards_arr = np.asarray(rewards, dtype=np.float32).reshape(-1)
        length = rewards_arr.size
        if length == 0:
            raise ValueError("An episode must contain at least one step")
        obs = self._stack_observations(observations)
        actions_arr = np.asarray(actions)
        if isinstance(self.action_space, spaces.Box):
            actions_arr = actions_arr.astype(np.float32)
        else:
            actions_arr = actions_arr.astype(np.int64)
        actions_arr = actions_arr.reshape((length, *self.action_space.shape))  # type: ignore[misc]
        log_probs_arr = np.asarray(log_probs, dtype=np.float32).reshape(-1)
        masks_arr = None if action_masks is None else np.asarray(action_masks, dtype=bool).reshape(length, -1)
        obs_lengths = [v.shape[0] for v in obs.values()] if isinstance(obs, dict) else [obs.shape[0]]
        if any(n != length for n in obs_lengths) or log_probs_arr.size != length:
            raise ValueError("observations, actions, log_probs and rewards must have the same length")
        if self._episodes and (self._episodes[0]["action_masks"] is None) != (masks_arr is None):
            raise ValueError("Either all episodes or none must have action masks")
        self._episodes.append(
            {
                "group_id": int(group_id),
                "observations": obs,
                "actions": actions_arr,
                "log_probs": log_probs_arr,
                "rewards": rewards_arr,
                "action_masks": masks_arr,
                "truncated": bool(truncated),
            }
        )
        return len(self._episodes) - 1

    # ------------------------------------------------------------------ stats
    @property
    def n_episodes(self) -> int:
        """Number of episodes stored."""
        return len(self._episodes)

    @property
    def n_groups(self) -> int:
        """Number of groups (``max group id + 1``)."""
        return 1 + max((ep["group_id"] for ep in self._episodes), default=-1)

    @property
    def n_steps(self) -> int:
        """Total number of stored steps (kept or not)."""
        return int(sum(ep["rewards"].size for ep in self._episodes))

    @property
    def n_kept_steps(self) -> int:
        """Number of steps that take part in the update (0 before :meth:`compute_advantages`)."""
        return int(self.keep.sum()) if self.finalized else 0

    @property
    def episode_lengths(self) -> np.ndarray:
        """Length (number of steps) of every episode, by episode id."""
        return np.array([ep["rewards"].size for ep in self._episodes], dtype=np.int64)

    @property
    def episode_truncated(self) -> np.ndarray:
        """Whether every episode was truncated, by episode id."""
        return np.array([ep["truncated"] for ep in self._episodes], dtype=bool)

    @property
    def episode_group_ids(self) -> np.ndarray:
        """Group id of every episode, by episode id."""
        return np.array([ep["group_id"] for ep in self._episodes], dtype=np.int64)

    # ------------------------------------------------------------------ advantages
    def compute_advantages(self) -> None:
        """
        Concatenate the episodes into flat arrays and compute the group-relative advantages.

        Fills ``advantages`` and ``keep`` (per step), ``episode_returns``, ``group_return_std``,
        ``group_dropped`` and ``dropped_group_fraction``.
        """
        if self.n_episodes == 0:
            raise RuntimeError("The buffer is empty")
        episodes = self._episodes
        if isinstance(self.observation_space, spaces.Dict):
            self.observations = {
                key: np.concatenate([ep["observations"][key] for ep in episodes]) for key in self.observation_space.spaces
            }
        else:
            self.observations = np.concatenate([ep["observations"] for ep in episodes])
        self.actions = np.concatenate([ep["actions"] for ep in episodes])
        self.log_probs = np.concatenate([ep["log_probs"] for ep in episodes])
        self.rewards = np.concatenate([ep["rewards"] for ep in episodes])
        self.action_masks = (
            None if episodes[0]["action_masks"] is None else np.concatenate([ep["action_masks"] for ep in episodes])
        )
        lengths = self.episode_lengths
        self.episode_ids = np.repeat(np.arange(len(episodes)), lengths)
        self.group_ids = np.repeat(self.episode_group_ids, lengths)
        self.step_indices = np.concatenate([np.arange(n) for n in lengths])

        result = compute_group_advantages(
            self.rewards,
            self.episode_ids,
            self.group_ids,
            supervision=self.supervision,
            gamma=self.gamma,
            normalize_std=self.normalize_std,
            filter_zero_std_groups=self.filter_zero_std_groups,
            std_tol=self.std_tol,
            eps=self.eps,
        )
        self.advantages = result.advantages.astype(np.float32)
        self.keep = result.keep
        self.episode_returns = result.episode_returns
        self.group_return_std = result.group_return_std
        self.group_dropped = result.group_dropped
        self.dropped_group_fraction = result.dropped_group_fraction
        self.ref_log_probs = None
        self.finalized = True

    def set_ref_log_probs(self, indices: np.ndarray, values: np.ndarray | th.Tensor) -> None:
        """
        Store log-probabilities of the actions under the reference policy.

        :param indices: Flat step indices (as yielded in ``GroupRolloutBufferSamples.indices``)
        :param values: Reference log-probabilities for these steps
        """
        if self.ref_log_probs is None:
            self.ref_log_probs = np.zeros(self.n_steps, dtype=np.float32)
        if isinstance(values, th.Tensor):
            values = values.detach().cpu().numpy()
        self.ref_log_probs[indices] = np.asarray(values, dtype=np.float32).reshape(-1)

    # ------------------------------------------------------------------ sampling
    def to_torch(self, array: np.ndarray) -> th.Tensor:
        """
        Convert a numpy array to a PyTorch tensor on the buffer's device (no copy when possible).

        :param array: Numpy array
        :return: Tensor
        """
        return th.as_tensor(array, device=self.device)

    def get(self, batch_size: int | None = None, shuffle: bool = True) -> Generator[GroupRolloutBufferSamples, None, None]:
        """
        Iterate over minibatches of the kept steps (one full pass).

        :param batch_size: Number of steps per minibatch; None = all kept steps in a single minibatch.
            The last minibatch may be smaller.
        :param shuffle: Shuffle the steps (with numpy's global RNG, seeded by SB3's ``set_random_seed``)
        :return: Generator of :class:`GroupRolloutBufferSamples`
        """
        if not self.finalized:
            raise RuntimeError("Call compute_advantages() before get()")
        indices = np.flatnonzero(self.keep)
        if shuffle:
            indices = np.random.permutation(indices)
        total = indices.size
        if batch_size is None or batch_size <= 0:
            batch_size = max(total, 1)
        start = 0
        while start < total:
            yield self._get_samples(indices[start : start + batch_size])
            start += batch_size

    def _get_samples(self, batch_inds: np.ndarray) -> GroupRolloutBufferSamples:
        if isinstance(self.observations, dict):
            observations: th.Tensor | TensorDict = {
                key: self.to_torch(obs[batch_inds]) for key, obs in self.observations.items()
            }
        else:
            observations = self.to_torch(self.observations[batch_inds])
        return GroupRolloutBufferSamples(
            observations=observations,
            actions=self.to_torch(self.actions[batch_inds]),
            old_log_prob=self.to_torch(self.log_probs[batch_inds]),
            advantages=self.to_torch(self.advantages[batch_inds]),
            action_masks=None if self.action_masks is None else self.to_torch(self.action_masks[batch_inds]),
            ref_log_prob=None if self.ref_log_probs is None else self.to_torch(self.ref_log_probs[batch_inds]),
            episode_ids=self.to_torch(self.episode_ids[batch_inds]),
            group_ids=self.to_torch(self.group_ids[batch_inds]),
            indices=batch_inds,
        )
