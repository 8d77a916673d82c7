"""
Group-relative advantage estimators used by GRPO (pure numpy, no torch).

Notation: a rollout holds groups of episodes that start from the same task; ``R_i`` is the
undiscounted return (sum of rewards) of episode ``i``; ``mean_g`` / ``std_g`` are statistics over the
members of its group.

**Outcome supervision** (DeepSeekMath, Shao et al. 2024, https://arxiv.org/abs/2402.03300, section 4.1.2):
every step of episode ``i`` gets ``A_i = (R_i - mean_g(R)) / (scale + eps)``.

**Process supervision** (DeepSeekMath section 4.1.3): every step reward ``r_{i,t}`` is normalised with the
mean of all step rewards of the group (all steps of all members pooled), ``r~ = (r - mean_g(r)) / (scale + eps)``,
and a step's advantage is the return-to-go of the normalised rewards inside its own episode,
``A_{i,t} = sum_{t' >= t} gamma^(t' - t) r~_{i,t'}``.

**Scaling** (``scale_rewards``, named as in TRL's ``GRPOTrainer``):

* ``"group"``: ``scale`` = the group's std (GRPO as published);
* ``"batch"``: ``scale`` = the std over the whole rollout (all episodes, or all steps under process supervision);
  the mean stays the group's (TRL; "LitePPO", Liu et al. 2025, https://arxiv.org/abs/2508.08221);
* ``"none"``: no division, centring only (Dr. GRPO, Liu et al. 2025, https://arxiv.org/abs/2503.20783: the std
  division over-weights groups whose members are nearly tied, too easy or too hard).

Standard deviations are **sample** standard deviations (``ddof=1``, :data:`STD_DDOF`) and ``eps`` defaults to
``1e-4`` (:data:`DEFAULT_EPS`), both as in TRL (``torch.std`` is unbiased by default; ``advantages / (std + 1e-4)``).
We chose TRL's convention so that a TRL user's numbers carry over, and because the larger ``eps`` keeps a group
whose returns differ by float noise (std ~ 1e-6) from being blown up to unit-size advantages (with ``eps = 1e-8``
a near-tie became +-1). A group of ``G`` members with one success has ``A = (1 - 1/G) / std`` for the success,
``std = sqrt(1/G)`` (ddof=1, G=2: ``std = 0.707``, ``A = +-0.707``).

**Tied groups** (DAPO, Yu et al. 2025, https://arxiv.org/abs/2503.14476, "dynamic sampling"): a group whose values
all tie carries no signal and can be dropped. The tested values are what the advantage is computed from: the
episode returns under outcome supervision, the pooled step rewards under process supervision (a group whose
members have equal returns but different per-step rewards still carries a process signal). A group is tied when
the std of these values is below ``std_tol`` (:data:`DEFAULT_STD_TOL`, reward units).
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

#: Added to the std before dividing (TRL's value).
DEFAULT_EPS = 1e-4
#: Tolerance (reward units) under which the std of a group's values counts as zero ("all tied").
DEFAULT_STD_TOL = 1e-6
#: Delta degrees of freedom of every std in this module (sample std, as ``torch.std`` in TRL).
STD_DDOF = 1
SUPERVISIONS = ("outcome", "process")
SCALE_REWARDS = ("group", "batch", "none")
#: What the tie filter tests (see :func:`success_tied_groups`): ``"return"`` (episode returns, or step rewards under
#: process supervision, tie within ``std_tol``) or ``"success"`` (every member succeeded or every member failed:
#: DAPO's filter on accuracy).
FILTER_ON = ("return", "success")


def _check(supervision: str | None = None, scale_rewards: str | None = None) -> None:
    if supervision is not None and supervision not in SUPERVISIONS:
        raise ValueError(f"Unknown supervision {supervision!r}, expected one of {SUPERVISIONS}")
    if scale_rewards is not None and scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"Unknown scale_rewards {scale_rewards!r}, expected one of {SCALE_REWARDS}")


def sample_std(values: Sequence[float] | np.ndarray) -> float:
    """
    Sample standard deviation (``ddof=1``); 0 for fewer than 2 values.

    :param values: 1D values
    :return: The std, in the unit of ``values``
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    return float(values.std(ddof=STD_DDOF)) if values.size > 1 else 0.0


def grouped_mean_std(values: np.ndarray, ids: np.ndarray, n_ids: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Mean, sample std (``ddof=1``; 0 for groups of one) and size of the values of every id, vectorised.

    Worked example: values ``[1, 0, 0, 1, 5]`` with ids ``[0, 0, 1, 1, 2]`` give means ``[0.5, 0.5, 5]``,
    stds ``[0.7071, 0.7071, 0]`` and counts ``[2, 2, 1]``.

    :param values: Values, shape ``(n,)``
    :param ids: Integer id in ``range(n_ids)`` of every value, shape ``(n,)``
    :param n_ids: Number of ids
    :return: ``(mean, std, count)``, each of shape ``(n_ids,)`` (mean 0 for an empty id)
    """
    counts = np.bincount(ids, minlength=n_ids).astype(np.float64)
    sums = np.bincount(ids, weights=values, minlength=n_ids)
    means = np.divide(sums, counts, out=np.zeros(n_ids), where=counts > 0)
    sq = np.bincount(ids, weights=(values - means[ids]) ** 2, minlength=n_ids)
    stds = np.sqrt(np.divide(sq, counts - STD_DDOF, out=np.zeros(n_ids), where=counts > STD_DDOF))
    return means, stds, counts


def outcome_advantages(
    returns: Sequence[float] | np.ndarray,
    scale_rewards: str = "group",
    eps: float = DEFAULT_EPS,
    batch_std: float | None = None,
) -> np.ndarray:
    """
    Outcome-supervision advantages of ONE group (one value per episode).

    ``A_i = (R_i - mean(R)) / (std(R) + eps)`` with the sample std (ddof=1); ``scale_rewards="none"`` drops the
    division, ``"batch"`` divides by ``batch_std`` instead of the group's std.

    Worked example: returns ``[1, 0, 0, 1]`` have mean 0.5 and sample std ``sqrt(1/3) = 0.5774``, so
    ``A = [0.5, -0.5, -0.5, 0.5] / (0.5774 + 1e-4) = [0.866, -0.866, -0.866, 0.866]``; with ``"none"``
    (Dr. GRPO) ``A = [0.5, -0.5, -0.5, 0.5]``.

    :param returns: Episode returns of the group members (undiscounted sum of rewards), shape ``(G,)``
    :param scale_rewards: ``"group"``, ``"batch"`` or ``"none"`` (see the module docstring)
    :param eps: Added to the std before dividing
    :param batch_std: The std of the whole rollout's returns; required with ``scale_rewards="batch"``
    :return: Advantage of each episode, shape ``(G,)``, float64
    """
    _check(scale_rewards=scale_rewards)
    returns = np.asarray(returns, dtype=np.float64)
    if returns.ndim != 1 or returns.size == 0:
        raise ValueError(f"`returns` must be a non-empty 1D array, got shape {returns.shape}")
    centered = returns - returns.mean()
    if scale_rewards == "none":
        return centered
    if scale_rewards == "batch":
        if batch_std is None:
            raise ValueError("scale_rewards='batch' needs `batch_std`")
        return centered / (batch_std + eps)
    return centered / (sample_std(returns) + eps)


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
    if gamma == 1.0:
        return np.cumsum(rewards[::-1])[::-1].copy()
    out = np.empty_like(rewards)
    running = 0.0
    for t in range(rewards.size - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def segment_return_to_go(rewards: np.ndarray, lengths: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """
    Return-to-go of many episodes stored one after the other (flat, each in time order).

    :param rewards: Flat step rewards, shape ``(sum(lengths),)``
    :param lengths: Length of every episode, in steps
    :param gamma: Discount factor (unitless)
    :return: Return-to-go of every step, float64, same layout as ``rewards``
    """
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if gamma == 1.0:
        # reverse cumulative sum within each episode: (sum up to the episode's last step) - (sum before the step)
        cumsum = np.cumsum(rewards)
        return np.repeat(cumsum[np.cumsum(lengths) - 1], lengths) - (cumsum - rewards)
    out = np.empty_like(rewards)
    start = 0
    for n in lengths:
        out[start : start + n] = discounted_return_to_go(rewards[start : start + n], gamma)
        start += n
    return out


def process_advantages(
    rewards: Sequence[Sequence[float] | np.ndarray],
    gamma: float = 1.0,
    scale_rewards: str = "group",
    eps: float = DEFAULT_EPS,
    batch_std: float | None = None,
) -> list[np.ndarray]:
    """
    Process-supervision advantages of ONE group (one value per step).

    Every step reward is normalised with the mean of all step rewards of the group and the scale chosen by
    ``scale_rewards`` (the pooled steps' sample std for ``"group"``), then the advantage of step ``t`` of
    episode ``i`` is the return-to-go ``sum_{t' >= t} gamma^(t'-t) r~_{i,t'}`` inside episode ``i``.

    Worked example: episodes ``[[1, 0], [0]]``. Pooled rewards ``[1, 0, 0]``: mean ``1/3``, sample std
    ``sqrt(1/3) = 0.5774``, so ``r~(1) = (2/3) / 0.5775 = 1.1545`` and ``r~(0) = -0.5772``. With ``gamma=1``
    the advantages are ``[[0.5772, -0.5772], [-0.5772]]``.

    :param rewards: Per-episode step rewards of the group members (variable lengths, each non-empty)
    :param gamma: Discount factor (unitless, in ``[0, 1]``) of the return-to-go
    :param scale_rewards: ``"group"``, ``"batch"`` or ``"none"``
    :param eps: Added to the std before dividing
    :param batch_std: The std of all step rewards of the rollout; required with ``scale_rewards="batch"``
    :return: List of per-step advantages, one float64 array per episode
    """
    _check(scale_rewards=scale_rewards)
    episodes = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rewards]
    if len(episodes) == 0 or any(ep.size == 0 for ep in episodes):
        raise ValueError("`rewards` must contain at least one episode and every episode at least one step")
    pooled = np.concatenate(episodes)
    if scale_rewards == "none":
        scale = 1.0
    elif scale_rewards == "batch":
        if batch_std is None:
            raise ValueError("scale_rewards='batch' needs `batch_std`")
        scale = batch_std + eps
    else:
        scale = sample_std(pooled) + eps
    mean = pooled.mean()
    return [discounted_return_to_go((ep - mean) / scale, gamma) for ep in episodes]


def tied_groups(
    group_values: Sequence[Sequence[float] | np.ndarray], tol: float = DEFAULT_STD_TOL
) -> tuple[np.ndarray, float]:
    """
    DAPO dynamic-sampling filter: find the groups whose values all tie.

    A group is *tied* when the std of its values (episode returns under outcome supervision, pooled step rewards
    under process supervision) is ``< tol``. Tied groups are dropped from the update: their steps get no gradient
    (neither policy-gradient, entropy nor KL term) and do not count in the loss normaliser.

    Worked example: groups ``[[1, 1, 1], [0, 1, 0], [2, 2, 2], [0, 0, 1]]`` -> tied mask
    ``[True, False, True, False]`` and dropped fraction ``2 / 4 = 0.5``.

    :param group_values: The values of every group
    :param tol: Std tolerance (same unit as the values) under which a group is considered tied
    :return: Boolean mask (True = tied / dropped) with one entry per group, and the fraction of dropped groups
    """
    stds = np.array([sample_std(v) for v in group_values], dtype=np.float64)
    tied = stds < tol
    fraction = float(tied.mean()) if tied.size > 0 else 0.0
    return tied, fraction


class GroupAdvantages(NamedTuple):
    """Result of :func:`compute_group_advantages` (per-step arrays are aligned with the input steps)."""

    #: Advantage of every step, float64, shape ``(n_steps,)`` (0 for steps of dropped groups)
    advantages: np.ndarray
    #: Whether each step is used for the update (False for steps of dropped groups and masked episodes)
    keep: np.ndarray
    #: Return (undiscounted sum of rewards) of every episode, indexed by episode id
    episode_returns: np.ndarray
    #: Sample std of the returns of every group, indexed by group id
    group_return_std: np.ndarray
    #: Whether each group was dropped (tied), indexed by group id
    group_dropped: np.ndarray
    #: Fraction of groups dropped, in ``[0, 1]``
    dropped_group_fraction: float


def success_tied_groups(episode_success: np.ndarray, episode_group: np.ndarray, n_groups: int) -> np.ndarray:
    """
    Groups whose members all succeeded or all failed (DAPO's dynamic-sampling criterion: accuracy 0 or 1).

    With a reward that adds costs to the outcome (EDO: success minus tokens, calls, latency), returns almost never
    tie, so a return-tie filter keeps groups in which every member failed; their group-relative advantage then only
    ranks costs, which pushes the policy towards the cheapest failure. This filter drops them.

    Worked example: successes ``[[0, 0, 0], [0, 1, 0], [1, 1, 1]]`` -> tied ``[True, False, True]``.

    :param episode_success: Whether each episode succeeded, indexed by episode id
    :param episode_group: Group id of every episode
    :param n_groups: Number of groups
    :return: Boolean mask (True = tied / dropped), one entry per group
    """
    success = np.asarray(episode_success, dtype=np.float64).reshape(-1)
    wins = np.bincount(episode_group, weights=success, minlength=n_groups)
    sizes = np.bincount(episode_group, minlength=n_groups)
    return (wins == 0) | (wins == sizes)


def episode_layout(episode_ids: np.ndarray, group_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """
    Length and group of every episode of a flat rollout.

    :param episode_ids: Episode id of every step (contiguous episodes, ids ``0..n_episodes-1``)
    :param group_ids: Group id of every step
    :return: ``(lengths, episode_group, n_episodes, n_groups)``
    """
    n_episodes = int(episode_ids.max()) + 1
    n_groups = int(group_ids.max()) + 1
    lengths = np.bincount(episode_ids, minlength=n_episodes)
    episode_group = np.zeros(n_episodes, dtype=np.int64)
    episode_group[episode_ids] = group_ids
    return lengths, episode_group, n_episodes, n_groups


def group_value_std(
    rewards: np.ndarray, episode_ids: np.ndarray, group_ids: np.ndarray, supervision: str = "outcome"
) -> np.ndarray:
    """
    Std of the values the tie filter tests, per group: episode returns (outcome) or pooled step rewards (process).

    :param rewards: Step rewards, shape ``(n_steps,)``
    :param episode_ids: Episode id of every step
    :param group_ids: Group id of every step
    :param supervision: ``"outcome"`` or ``"process"``
    :return: Sample std of every group, shape ``(n_groups,)``
    """
    _check(supervision=supervision)
    rewards = np.asarray(rewards, dtype=np.float64)
    _, episode_group, n_episodes, n_groups = episode_layout(episode_ids, group_ids)
    if supervision == "process":
        return grouped_mean_std(rewards, group_ids, n_groups)[1]
    returns = np.bincount(episode_ids, weights=rewards, minlength=n_episodes)
    return grouped_mean_std(returns, episode_group, n_groups)[1]


def compute_group_advantages(
    rewards: np.ndarray,
    episode_ids: np.ndarray,
    group_ids: np.ndarray,
    supervision: str = "outcome",
    gamma: float = 1.0,
    scale_rewards: str = "group",
    filter_zero_std_groups: bool = True,
    std_tol: float = DEFAULT_STD_TOL,
    eps: float = DEFAULT_EPS,
    exclude_episodes: np.ndarray | None = None,
    episode_success: np.ndarray | None = None,
) -> GroupAdvantages:
    """
    Advantages for a whole rollout given as flat per-step arrays (vectorised over groups).

    Episode ids and group ids must be integers in ``range(n_episodes)`` / ``range(n_groups)``; the steps of one
    episode must be stored contiguously and in time order, and all steps of an episode must share one group id.
    This is the layout produced by :class:`baselines.grpo.buffers.GroupRolloutBuffer`.

    :param rewards: Step rewards, shape ``(n_steps,)``
    :param episode_ids: Episode id of every step, shape ``(n_steps,)``
    :param group_ids: Group id of every step, shape ``(n_steps,)``
    :param supervision: ``"outcome"`` or ``"process"`` (see the module docstring)
    :param gamma: Discount factor for process supervision (outcome supervision uses the undiscounted return)
    :param scale_rewards: ``"group"``, ``"batch"`` or ``"none"``
    :param filter_zero_std_groups: Drop tied groups (see :func:`tied_groups`)
    :param std_tol: Tie tolerance, in reward units
    :param eps: Added to the std before dividing
    :param exclude_episodes: Optional boolean mask over episodes whose steps are left out of the update (e.g.
        truncated episodes); they still count in the group statistics, as TRL's ``mask_truncated_completions``
    :param episode_success: Optional success flag of every episode (indexed by episode id); when given, the tie filter
        drops the groups whose members all succeeded or all failed (:func:`success_tied_groups`) instead of testing
        ``std_tol``
    :return: A :class:`GroupAdvantages` tuple
    """
    _check(supervision, scale_rewards)
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    episode_ids = np.asarray(episode_ids, dtype=np.int64).reshape(-1)
    group_ids = np.asarray(group_ids, dtype=np.int64).reshape(-1)
    if not (rewards.shape == episode_ids.shape == group_ids.shape):
        raise ValueError("`rewards`, `episode_ids` and `group_ids` must have the same length")
    if rewards.size == 0:
        empty = np.zeros(0)
        return GroupAdvantages(empty, np.zeros(0, dtype=bool), empty, empty, np.zeros(0, dtype=bool), 0.0)

    lengths, episode_group, n_episodes, n_groups = episode_layout(episode_ids, group_ids)
    episode_returns = np.bincount(episode_ids, weights=rewards, minlength=n_episodes)
    return_mean, return_std, _ = grouped_mean_std(episode_returns, episode_group, n_groups)

    if supervision == "outcome":
        if scale_rewards == "group":
            scale = return_std[episode_group] + eps
        elif scale_rewards == "batch":
            scale = sample_std(episode_returns) + eps
        else:
            scale = 1.0
        advantages = ((episode_returns - return_mean[episode_group]) / scale)[episode_ids]
        tie_std = return_std
    else:
        step_mean, step_std, _ = grouped_mean_std(rewards, group_ids, n_groups)
        if scale_rewards == "group":
            scale = step_std[group_ids] + eps
        elif scale_rewards == "batch":
            scale = sample_std(rewards) + eps
        else:
            scale = 1.0
        normalised = (rewards - step_mean[group_ids]) / scale
        advantages = segment_return_to_go(normalised, lengths, gamma)
        tie_std = step_std

    if filter_zero_std_groups and episode_success is not None:
        dropped = success_tied_groups(episode_success, episode_group, n_groups)
    elif filter_zero_std_groups:
        dropped = tie_std < std_tol
    else:
        dropped = np.zeros(n_groups, dtype=bool)
    fraction = float(dropped.mean())
    keep = ~dropped[group_ids]
    if exclude_episodes is not None:
        keep &= ~np.asarray(exclude_episodes, dtype=bool)[episode_ids]
    advantages = np.where(keep, advantages, 0.0)
    return GroupAdvantages(advantages, keep, episode_returns, return_std, dropped, fraction)
