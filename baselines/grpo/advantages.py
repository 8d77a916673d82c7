"""
Group-relative advantage estimators used by GRPO (pure numpy, no torch).

All standard deviations in this module are **population** standard deviations (``ddof=0``,
i.e. ``np.std`` default): for a group ``x_1..x_G`` it is ``sqrt(mean((x - mean(x))**2))``.
This matches the reference GRPO implementations that normalise by the group statistics
computed over the ``G`` sampled completions.

Two supervision modes are provided (DeepSeekMath, Shao et al. 2024, section 4.1):

* **outcome supervision**: every step of episode ``i`` of a group receives the same advantage
  ``A_i = (R_i - mean(R)) / (std(R) + eps)`` where ``R_i`` is the undiscounted return
  (sum of rewards) of episode ``i`` and the statistics are over the group's episodes.
  With ``normalize_std=False`` (Dr. GRPO, Liu et al. 2025) the division is dropped:
  ``A_i = R_i - mean(R)``.
* **process supervision**: every step reward ``r_{i,t}`` is normalised with the mean/std over
  *all step rewards of the group* (all steps of all episodes pooled), then the advantage of a step
  is the (optionally discounted) return-to-go of the normalised rewards within its own episode:
  ``A_{i,t} = sum_{t' >= t} gamma^(t' - t) * r~_{i,t'}``.

DAPO-style dynamic sampling (Yu et al. 2025) drops groups whose returns all tie
(``std(R) < tol``): such a group carries no learning signal under outcome supervision.
The tie test always uses the undiscounted episode returns, in both supervision modes.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

#: Default epsilon added to the group std before dividing.
DEFAULT_EPS = 1e-8
#: Default tolerance under which a group's return std counts as "all tied".
DEFAULT_STD_TOL = 1e-6


def outcome_advantages(
    returns: Sequence[float] | np.ndarray, normalize_std: bool = True, eps: float = DEFAULT_EPS
) -> np.ndarray:
    """
    Outcome-supervision advantages of ONE group (one value per episode).

    ``A_i = (R_i - mean(R)) / (std(R) + eps)``, population std (ddof=0).

    Worked example: returns ``[1, 0, 0, 1]`` have mean 0.5 and population std 0.5, so
    ``A = [0.5, -0.5, -0.5, 0.5] / 0.5 = [1, -1, -1, 1]`` (up to ``eps``).
    With ``normalize_std=False`` (Dr. GRPO) the result is ``[0.5, -0.5, -0.5, 0.5]``.

    :param returns: Episode returns of the group members (undiscounted sum of rewards), shape ``(G,)``
    :param normalize_std: Divide by the group std (GRPO). If False, only subtract the mean (Dr. GRPO).
    :param eps: Added to the std before dividing, avoids division by zero for tied groups
    :return: Advantage of each episode, shape ``(G,)``, dtype float64
    """
    returns = np.asarray(returns, dtype=np.float64)
    if returns.ndim != 1 or returns.size == 0:
        raise ValueError(f"`returns` must be a non-empty 1D array, got shape {returns.shape}")
    centered = returns - returns.mean()
    if normalize_std:
        return centered / (returns.std() + eps)
    return centered


def process_advantages(
    rewards: Sequence[Sequence[float] | np.ndarray],
    gamma: float = 1.0,
    normalize_std: bool = True,
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """
    Process-supervision advantages of ONE group (one value per step).

    First every step reward is normalised with the statistics of all step rewards of the group
    (``r~ = (r - mean) / (std + eps)``, population std over the pooled steps; without the division
    when ``normalize_std=False``), then the advantage of step ``t`` of episode ``i`` is the
    return-to-go ``sum_{t' >= t} gamma^(t'-t) r~_{i,t'}`` inside episode ``i``.

    Worked example: episodes ``[[1, 0], [0]]``. Pooled rewards ``[1, 0, 0]``: mean ``1/3``,
    population std ``sqrt(2)/3 ~ 0.4714``, so ``r~(1) = sqrt(2) ~ 1.4142`` and
    ``r~(0) = -1/sqrt(2) ~ -0.7071``. With ``gamma=1`` the advantages are
    ``[[1.4142 - 0.7071, -0.7071], [-0.7071]] = [[0.7071, -0.7071], [-0.7071]]``.

    :param rewards: Per-episode step rewards of the group members (variable lengths, each non-empty)
    :param gamma: Discount factor (unitless, in ``[0, 1]``) of the return-to-go
    :param normalize_std: Divide the centred rewards by the group std (False: only centre them)
    :param eps: Added to the std before dividing
    :return: List of per-step advantages, one float64 array per episode
    """
    episodes = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rewards]
    if len(episodes) == 0 or any(ep.size == 0 for ep in episodes):
        raise ValueError("`rewards` must contain at least one episode and every episode at least one step")
    pooled = np.concatenate(episodes)
    mean = pooled.mean()
    scale = pooled.std() + eps if normalize_std else 1.0
    return [discounted_return_to_go((ep - mean) / scale, gamma) for ep in episodes]


def discounted_return_to_go(rewards: Sequence[float] | np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """
    Return-to-go of a single episode: ``G_t = sum_{t' >= t} gamma^(t'-t) r_t'``.

    Worked example: rewards ``[1, 2, 3]`` with ``gamma=0.5`` give ``[1 + 0.5*2 + 0.25*3, 2 + 0.5*3, 3]
    = [2.75, 3.5, 3]``.

    :param rewards: Step rewards of one episode
    :param gamma: Discount factor (unitless)
    :return: Return-to-go of every step, float64
    """
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    out = np.zeros_like(rewards)
    running = 0.0
    for t in range(rewards.size - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def tied_groups(
    group_returns: Sequence[Sequence[float] | np.ndarray], tol: float = DEFAULT_STD_TOL
) -> tuple[np.ndarray, float]:
    """
    DAPO dynamic-sampling filter: find the groups whose returns all tie.

    A group is *tied* when the population std of its returns is ``< tol`` (e.g. all members
    succeeded or all failed). Tied groups are dropped from the update: their steps get no gradient
    (neither policy-gradient, entropy nor KL term) and they do not count in the token-level average.

    Worked example: groups ``[[1, 1, 1], [0, 1, 0], [2, 2, 2], [0, 0, 1]]`` -> tied mask
    ``[True, False, True, False]`` and dropped fraction ``2 / 4 = 0.5``.

    :param group_returns: Episode returns for each group
    :param tol: Std tolerance (same unit as the rewards) under which a group is considered tied
    :return: Boolean mask (True = tied / dropped) with one entry per group, and the fraction of dropped groups
    """
    arrays = [np.asarray(r, dtype=np.float64).reshape(-1) for r in group_returns]
    # An empty group has no signal at all: treat it as tied
    stds = np.array([a.std() if a.size > 0 else 0.0 for a in arrays], dtype=np.float64)
    tied = stds < tol
    fraction = float(tied.mean()) if tied.size > 0 else 0.0
    return tied, fraction


class GroupAdvantages(NamedTuple):
    """Result of :func:`compute_group_advantages` (per-step arrays are aligned with the input steps)."""

    #: Advantage of every step, float64, shape ``(n_steps,)`` (0 for steps of dropped groups)
    advantages: np.ndarray
    #: Whether each step is used for the update (False for steps of dropped groups), shape ``(n_steps,)``
    keep: np.ndarray
    #: Return (undiscounted sum of rewards) of every episode, indexed by episode id
    episode_returns: np.ndarray
    #: Population std of the returns of every group, indexed by group id
    group_return_std: np.ndarray
    #: Whether each group was dropped (tied), indexed by group id
    group_dropped: np.ndarray
    #: Fraction of groups dropped, in ``[0, 1]``
    dropped_group_fraction: float


def compute_group_advantages(
    rewards: np.ndarray,
    episode_ids: np.ndarray,
    group_ids: np.ndarray,
    supervision: str = "outcome",
    gamma: float = 1.0,
    normalize_std: bool = True,
    filter_zero_std_groups: bool = True,
    std_tol: float = DEFAULT_STD_TOL,
    eps: float = DEFAULT_EPS,
) -> GroupAdvantages:
    """
    Advantages for a whole rollout given as flat per-step arrays.

    Episode ids and group ids must be integers in ``range(n_episodes)`` / ``range(n_groups)``;
    the steps of one episode must be stored contiguously and in time order, and all steps of an
    episode must share one group id. This is the layout produced by
    :class:`baselines.grpo.buffers.GroupRolloutBuffer`.

    :param rewards: Step rewards, shape ``(n_steps,)``
    :param episode_ids: Episode id of every step, shape ``(n_steps,)``
    :param group_ids: Group id of every step, shape ``(n_steps,)``
    :param supervision: ``"outcome"`` (:func:`outcome_advantages`) or ``"process"`` (:func:`process_advantages`)
    :param gamma: Discount factor for process supervision (ignored by outcome supervision, whose return is undiscounted)
    :param normalize_std: Divide by the group std (False = Dr. GRPO style, centring only)
    :param filter_zero_std_groups: Drop groups whose returns tie (std < ``std_tol``), see :func:`tied_groups`
    :param std_tol: Tie tolerance, in reward units
    :param eps: Added to the std before dividing
    :return: A :class:`GroupAdvantages` tuple
    """
    if supervision not in ("outcome", "process"):
        raise ValueError(f"Unknown supervision '{supervision}', expected 'outcome' or 'process'")
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    episode_ids = np.asarray(episode_ids, dtype=np.int64).reshape(-1)
    group_ids = np.asarray(group_ids, dtype=np.int64).reshape(-1)
    if not (rewards.shape == episode_ids.shape == group_ids.shape):
        raise ValueError("`rewards`, `episode_ids` and `group_ids` must have the same length")
    n_steps = rewards.size
    if n_steps == 0:
        empty = np.zeros(0)
        return GroupAdvantages(empty, np.zeros(0, dtype=bool), empty, empty, np.zeros(0, dtype=bool), 0.0)

    n_episodes = int(episode_ids.max()) + 1
    n_groups = int(group_ids.max()) + 1
    episode_returns = np.bincount(episode_ids, weights=rewards, minlength=n_episodes)
    # Group of each episode (first step of the episode)
    episode_group = np.full(n_episodes, -1, dtype=np.int64)
    episode_group[episode_ids] = group_ids
    steps_of_episode = [np.flatnonzero(episode_ids == e) for e in range(n_episodes)]

    advantages = np.zeros(n_steps, dtype=np.float64)
    group_std = np.zeros(n_groups, dtype=np.float64)
    group_returns = []
    for g in range(n_groups):
        members = np.flatnonzero(episode_group == g)
        returns = episode_returns[members]
        group_returns.append(returns)
        if members.size == 0:
            continue
        group_std[g] = returns.std()
        if supervision == "outcome":
            adv = outcome_advantages(returns, normalize_std=normalize_std, eps=eps)
            for e, a in zip(members, adv, strict=True):
                advantages[steps_of_episode[e]] = a
        else:
            adv_list = process_advantages(
                [rewards[steps_of_episode[e]] for e in members], gamma=gamma, normalize_std=normalize_std, eps=eps
            )
            for e, a in zip(members, adv_list, strict=True):
                advantages[steps_of_episode[e]] = a

    if filter_zero_std_groups:
        dropped, fraction = tied_groups(group_returns, tol=std_tol)
    else:
        dropped, fraction = np.zeros(n_groups, dtype=bool), 0.0
    keep = ~dropped[group_ids]
    advantages[~keep] = 0.0
    return GroupAdvantages(advantages, keep, episode_returns, group_std, dropped, fraction)
