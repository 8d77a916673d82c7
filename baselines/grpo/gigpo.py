"""
Group-in-Group Policy Optimization (GiGPO): GRPO's episode-level group advantage plus a step-level advantage
from anchor-state groups.

Paper: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
https://arxiv.org/abs/2505.10978 (reference code: verl-agent, ``gigpo/core_gigpo.py``).

The members of a GRPO group start from the same task, so they often pass through the same states. GiGPO groups
the steps of one episode group by the state they were taken in (an *anchor state*), and compares the actions taken
there by the discounted return that followed each of them (paper eq. 5-7)::

    G_t          = sum_{k >= 0} gamma^k r_{t+k}                      (within the step's episode)
    A_step(s_t)  = (G_t - mean_{anchor}(G)) / (scale + eps)          (anchor group of the step; 0 for a singleton)
    A_episode    = (R - mean_group(R)) / (scale + eps)               (GRPO's outcome advantage)
    A            = A_episode + step_advantage_weight * A_step         (eq. 8)

``scale`` follows ``scale_rewards`` (the group's / anchor group's sample std for ``"group"``, the rollout's std of
returns / step returns for ``"batch"``, 1 for ``"none"``). Anchor groups never cross episode groups.

**Anchor states.** The key of the state an action was taken in is the env's ``info["anchor_key"]`` when the env
reports one (any hashable: the key reported at reset for the first action, then the key reported by the previous
step). When a step of the rollout has no key, the whole rollout falls back to the exact bytes of the observation's
*anchor view* (``anchor_view``): for EDO observations :func:`edo_gym.envs.observation.anchor_view` (the task
features, the plan's shape and progress and each step's labels, progress and latest verdict, without the noisy
confidences, budget and history), for any other env the whole observation. Either way the key comes from what the
policy sees: EDO reports no key of its own, so nothing hidden can enter it. ``anchor_matching="similarity"`` instead
clusters observation vectors whose cosine similarity is at least ``similarity_threshold`` (greedy, in step
order, each step joining the first cluster whose first member it matches, as the reference code does for text).
"""

from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.type_aliases import MaybeCallback

from baselines.grpo.advantages import (
    DEFAULT_EPS,
    DEFAULT_STD_TOL,
    SCALE_REWARDS,
    GroupAdvantages,
    compute_group_advantages,
    episode_layout,
    grouped_mean_std,
    sample_std,
    segment_return_to_go,
    success_tied_groups,
)
from baselines.grpo.buffers import GroupRolloutBuffer, concatenate_steps
from baselines.grpo.grpo import GRPO
from baselines.grpo.policies import GRPOPolicy
from baselines.grpo.scheduling import RolloutState
from edo_gym.envs import observation as edo_observation

ANCHOR_MATCHINGS = ("exact", "similarity")


# ---------------------------------------------------------------------------------------------------------- anchors
def exact_anchor_groups(keys: Sequence[Hashable], group_ids: np.ndarray) -> np.ndarray:
    """
    Anchor-state groups by exact key: steps of the same episode group whose keys are equal.

    Worked example: keys ``["a", "b", "a", "a"]`` with group ids ``[0, 0, 0, 1]`` -> anchor ids ``[0, 1, 0, 2]``.

    :param keys: Key of the state of every step (hashable)
    :param group_ids: Episode-group id of every step
    :return: Anchor id of every step, integers ``0..n_anchors-1`` in order of first appearance
    """
    ids: dict[tuple[int, Hashable], int] = {}
    return np.array([ids.setdefault((int(g), k), len(ids)) for g, k in zip(group_ids, keys, strict=True)], dtype=np.int64)


def observation_rows(observations: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
    """
    Every step's observation as one row of bytes (Dict observations: the keys' bytes in sorted key order).

    :param observations: Stacked observations ``(n_steps, ...)`` or a dict of them
    :return: ``uint8`` array ``(n_steps, n_bytes)``
    """
    parts = observations if isinstance(observations, dict) else {"": observations}
    n = next(iter(parts.values())).shape[0]
    rows = [np.ascontiguousarray(parts[key]).reshape(n, -1).view(np.uint8).reshape(n, -1) for key in sorted(parts)]
    return np.concatenate(rows, axis=1)


def observation_anchor_groups(observations: np.ndarray | dict[str, np.ndarray], group_ids: np.ndarray) -> np.ndarray:
    """
    Anchor-state groups by exact observation: steps of the same episode group with byte-identical observations.

    :param observations: Stacked observations ``(n_steps, ...)`` or a dict of them
    :param group_ids: Episode-group id of every step
    :return: Anchor id of every step
    """
    group_bytes = np.ascontiguousarray(np.asarray(group_ids, dtype=np.int64)).view(np.uint8).reshape(len(group_ids), -1)
    rows = np.concatenate([group_bytes, observation_rows(observations)], axis=1)
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def observation_vectors(observations: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
    """
    Every step's observation flattened to a float vector (Dict observations: keys concatenated in sorted order).

    :param observations: Stacked observations ``(n_steps, ...)`` or a dict of them
    :return: ``float64`` array ``(n_steps, dim)``
    """
    parts = observations if isinstance(observations, dict) else {"": observations}
    n = next(iter(parts.values())).shape[0]
    return np.concatenate([np.asarray(parts[key], dtype=np.float64).reshape(n, -1) for key in sorted(parts)], axis=1)


def similarity_anchor_groups(vectors: np.ndarray, group_ids: np.ndarray, threshold: float = 0.95) -> np.ndarray:
    """
    Anchor-state groups by cosine similarity of observation vectors, within each episode group.

    Greedy, in step order: a step joins the first cluster whose first member has cosine similarity
    ``>= threshold`` with it, else starts a new cluster. Zero vectors match only zero vectors.

    Worked example: vectors ``[[1, 0], [0.99, 0.1], [0, 1]]`` in one group with threshold 0.95 -> ``[0, 0, 1]``
    (cosine of the first two is 0.995).

    :param vectors: Observation vectors ``(n_steps, dim)``
    :param group_ids: Episode-group id of every step
    :param threshold: Minimum cosine similarity, in ``(0, 1]``
    :return: Anchor id of every step
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    unit = np.divide(vectors, norms[:, None], out=np.zeros_like(vectors), where=norms[:, None] > 0)
    anchor_ids = np.empty(len(vectors), dtype=np.int64)
    next_id = 0
    for g in np.unique(group_ids):
        steps = np.flatnonzero(group_ids == g)
        reps: list[int] = []  # first step of every cluster of this group
        rep_ids: list[int] = []
        for s in steps:
            match = -1
            if reps:
                if norms[s] > 0:
                    sims = unit[reps] @ unit[s]
                    hits = np.flatnonzero((sims >= threshold - 1e-12) & (norms[reps] > 0))
                else:
                    hits = np.flatnonzero(norms[reps] == 0)
                if hits.size:
                    match = rep_ids[hits[0]]
            if match < 0:
                match = next_id
                next_id += 1
                reps.append(s)
                rep_ids.append(match)
            anchor_ids[s] = match
    return anchor_ids


# ---------------------------------------------------------------------------------------------------------- advantages
def step_level_advantages(
    step_returns: np.ndarray, anchor_ids: np.ndarray, scale_rewards: str = "group", eps: float = DEFAULT_EPS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    GiGPO's step-level advantage (paper eq. 7): each step's discounted return relative to its anchor group.

    ``A_step = (G_t - mean_anchor(G)) / (scale + eps)``; 0 for a step whose anchor group has one member.

    Worked example: returns ``[2, 0, 1, 5]`` with anchors ``[0, 0, 1, 2]`` and ``scale_rewards="none"``
    -> ``[1, -1, 0, 0]``; with ``"group"`` (sample std of ``[2, 0]`` = 1.4142) -> ``[0.7071, -0.7071, 0, 0]``.

    :param step_returns: Discounted return that followed every step, ``(n_steps,)``
    :param anchor_ids: Anchor id of every step (``0..n_anchors-1``)
    :param scale_rewards: ``"group"`` (the anchor group's sample std), ``"batch"`` (the std of all step returns)
        or ``"none"``
    :param eps: Added to the std before dividing
    :return: ``(advantages, anchor_size, anchor_std)`` per step: the advantage, the size of the step's anchor group
        and the sample std of its returns
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"Unknown scale_rewards {scale_rewards!r}, expected one of {SCALE_REWARDS}")
    step_returns = np.asarray(step_returns, dtype=np.float64)
    n_anchors = int(anchor_ids.max()) + 1 if anchor_ids.size else 0
    means, stds, counts = grouped_mean_std(step_returns, anchor_ids, n_anchors)
    if scale_rewards == "group":
        scale = stds[anchor_ids] + eps
    elif scale_rewards == "batch":
        scale = sample_std(step_returns) + eps
    else:
        scale = 1.0
    size = counts[anchor_ids]
    advantages = np.where(size > 1, (step_returns - means[anchor_ids]) / scale, 0.0)
    return advantages, size.astype(np.int64), stds[anchor_ids]


class GiGPOAdvantages(NamedTuple):
    """Result of :func:`compute_gigpo_advantages`."""

    #: Episode-level + weighted step-level advantages, and the rest of GRPO's result
    group: GroupAdvantages
    #: Episode-level part of every step's advantage
    episode_advantages: np.ndarray
    #: Step-level part (before weighting)
    step_advantages: np.ndarray
    #: Size of every step's anchor group
    anchor_size: np.ndarray


def compute_gigpo_advantages(
    rewards: np.ndarray,
    episode_ids: np.ndarray,
    group_ids: np.ndarray,
    anchor_ids: np.ndarray,
    gamma: float = 0.95,
    step_advantage_weight: float = 1.0,
    scale_rewards: str = "group",
    filter_zero_std_groups: bool = True,
    std_tol: float = DEFAULT_STD_TOL,
    eps: float = DEFAULT_EPS,
    exclude_episodes: np.ndarray | None = None,
    episode_success: np.ndarray | None = None,
) -> GiGPOAdvantages:
    """
    GiGPO advantages for a whole rollout (flat per-step arrays, layout of :func:`compute_group_advantages`).

    A group is dropped as tied (``filter_zero_std_groups``) only when its episode returns tie **and** every anchor
    group in it has tied step returns: either level alone still gives a learning signal.

    :param rewards: Step rewards, ``(n_steps,)``
    :param episode_ids: Episode id of every step
    :param group_ids: Episode-group id of every step
    :param anchor_ids: Anchor-state group of every step (never shared across episode groups)
    :param gamma: Discount factor of the step-level returns (unitless)
    :param step_advantage_weight: Weight ``w`` of the step-level advantage
    :param scale_rewards: ``"group"``, ``"batch"`` or ``"none"`` (both levels)
    :param filter_zero_std_groups: Drop groups without any signal
    :param std_tol: Tie tolerance, in reward units
    :param eps: Added to the std before dividing
    :param exclude_episodes: Optional boolean mask over episodes left out of the update (still in the statistics)
    :param episode_success: Optional success flag per episode; when given, the filter drops every group whose members
        all succeeded or all failed, at both levels (a group without an outcome difference only ranks costs, and so
        do its anchor groups)
    :return: A :class:`GiGPOAdvantages`
    """
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    episode_ids = np.asarray(episode_ids, dtype=np.int64).reshape(-1)
    group_ids = np.asarray(group_ids, dtype=np.int64).reshape(-1)
    anchor_ids = np.asarray(anchor_ids, dtype=np.int64).reshape(-1)
    episode = compute_group_advantages(
        rewards, episode_ids, group_ids, "outcome", scale_rewards=scale_rewards, filter_zero_std_groups=False, eps=eps
    )
    lengths, _, _, n_groups = episode_layout(episode_ids, group_ids)
    step_returns = segment_return_to_go(rewards, lengths, gamma)
    step_adv, anchor_size, anchor_std = step_level_advantages(step_returns, anchor_ids, scale_rewards, eps)

    if filter_zero_std_groups and episode_success is not None:
        dropped = success_tied_groups(episode_success, episode_layout(episode_ids, group_ids)[1], n_groups)
    elif filter_zero_std_groups:
        step_signal = np.zeros(n_groups, dtype=bool)
        np.logical_or.at(step_signal, group_ids, (anchor_size > 1) & (anchor_std >= std_tol))
        dropped = (episode.group_return_std < std_tol) & ~step_signal
    else:
        dropped = np.zeros(n_groups, dtype=bool)
    keep = ~dropped[group_ids]
    if exclude_episodes is not None:
        keep &= ~np.asarray(exclude_episodes, dtype=bool)[episode_ids]
    combined = np.where(keep, episode.advantages + step_advantage_weight * step_adv, 0.0)
    group = GroupAdvantages(combined, keep, episode.episode_returns, episode.group_return_std, dropped, float(dropped.mean()))
    return GiGPOAdvantages(group, episode.advantages, step_adv, anchor_size)


# ---------------------------------------------------------------------------------------------------------- buffer
class AnchorGroupRolloutBuffer(GroupRolloutBuffer):
    """
    :class:`GroupRolloutBuffer` whose advantages are GiGPO's (episode level + step level from anchor states).

    :param observation_space: Observation space
    :param action_space: Action space
    :param step_advantage_weight: Weight of the step-level advantage
    :param anchor_matching: ``"exact"`` (``info["anchor_key"]``, else the bytes of the observation's anchor view) or
        ``"similarity"``
    :param similarity_threshold: Cosine similarity threshold of ``"similarity"``
    :param anchor_view: Function from stacked observations to the part that identifies a state (``None``: the whole
        observation)
    :param kwargs: :class:`GroupRolloutBuffer`'s other arguments (``gamma`` discounts the step-level returns;
        ``supervision`` must be ``"outcome"``)
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        step_advantage_weight: float = 1.0,
        anchor_matching: str = "exact",
        similarity_threshold: float = 0.95,
        anchor_view: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ):
        if anchor_matching not in ANCHOR_MATCHINGS:
            raise ValueError(f"Unknown anchor_matching {anchor_matching!r}, expected one of {ANCHOR_MATCHINGS}")
        if kwargs.get("supervision", "outcome") != "outcome":
            raise ValueError("GiGPO's episode level uses episode returns: supervision must be 'outcome'")
        self.step_advantage_weight = step_advantage_weight
        self.anchor_matching = anchor_matching
        self.similarity_threshold = similarity_threshold
        self.anchor_view = anchor_view
        super().__init__(observation_space, action_space, **kwargs)

    def reset(self) -> None:
        super().reset()
        self.anchor_ids = np.zeros(0, dtype=np.int64)
        self.anchor_size = np.zeros(0, dtype=np.int64)
        self.step_level_advantages = np.zeros(0)
        self.episode_level_advantages = np.zeros(0)
        #: Where the anchor keys came from: "info", "observation" or "similarity"
        self.anchor_source = ""

    @property
    def anchor_repeat_rate(self) -> float:
        """Share of the rollout's steps whose anchor group has at least 2 members (0 before advantages)."""
        return float(np.mean(self.anchor_size > 1)) if self.anchor_size.size else 0.0

    def _anchor_ids(self, episode_ids: list[int], observations: Any, group_ids: np.ndarray) -> tuple[np.ndarray, str]:
        """Anchor ids of the steps of the given episodes (stored in order), and the key source used."""
        if self.anchor_matching == "similarity":
            return similarity_anchor_groups(
                observation_vectors(observations), group_ids, self.similarity_threshold
            ), "similarity"
        keys = [ep["anchor_keys"] for ep in (self._episodes[e] for e in episode_ids)]
        if all(k is not None and all(key is not None for key in k) for k in keys):
            return exact_anchor_groups([key for k in keys for key in k], group_ids), "info"
        view = observations if self.anchor_view is None else self.anchor_view(observations)
        return observation_anchor_groups(view, group_ids), "observation"

    def _compute_group_advantages(self) -> GroupAdvantages:
        self.anchor_ids, self.anchor_source = self._anchor_ids(list(range(self.n_episodes)), self.observations, self.group_ids)
        result = compute_gigpo_advantages(
            self.rewards,
            self.episode_ids,
            self.group_ids,
            self.anchor_ids,
            gamma=self.gamma,
            step_advantage_weight=self.step_advantage_weight,
            scale_rewards=self.scale_rewards,
            filter_zero_std_groups=self.filter_zero_std_groups,
            std_tol=self.std_tol,
            eps=self.eps,
            exclude_episodes=self.episode_truncated if self.mask_truncated_episodes else None,
            episode_success=self.episode_success,
        )
        self.anchor_size = result.anchor_size
        self.step_level_advantages = result.step_advantages
        self.episode_level_advantages = result.episode_advantages
        return result.group

    def group_is_informative(self, group_id: int) -> bool:
        if super().group_is_informative(group_id):
            return True
        if self.filter_on == "success":
            return False  # no outcome difference: neither level is kept
        episode_ids = self._group_episodes.get(int(group_id), [])
        if not episode_ids:
            return False
        episodes = [self._episodes[e] for e in episode_ids]
        lengths = np.array([ep["rewards"].size for ep in episodes])
        rewards = np.concatenate([ep["rewards"] for ep in episodes]).astype(np.float64)
        observations: Any = concatenate_steps([ep["observations"] for ep in episodes])
        if isinstance(self.observation_space, spaces.Dict):
            observations = {k: observations[k] for k in self.observation_space.spaces}
        anchors, _ = self._anchor_ids(episode_ids, observations, np.zeros(lengths.sum(), dtype=np.int64))
        _, size, std = step_level_advantages(segment_return_to_go(rewards, lengths, self.gamma), anchors, "none")
        return bool(np.any((size > 1) & (std >= self.std_tol)))


# ---------------------------------------------------------------------------------------------------------- algorithm
class GiGPO(GRPO):
    """
    Group-in-Group Policy Optimization (GiGPO, Feng et al. 2025, https://arxiv.org/abs/2505.10978).

    GRPO (same collection of groups of episodes, same clipped loss, same options) whose advantage adds a step-level
    term from anchor-state groups; see :mod:`baselines.grpo.gigpo` for the formulas and how states are matched.
    Logs ``rollout/anchor_repeat_rate`` (share of steps whose anchor group has >= 2 members: below a few percent,
    GiGPO is GRPO) and ``rollout/step_advantage_share``.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy) or a ``GRPOPolicy`` subclass
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param step_advantage_weight: Weight ``w`` of the step-level advantage (``A = A_episode + w * A_step``, paper's
        default 1)
    :param gamma: Discount factor of the step-level returns (unitless, paper's default 0.95)
    :param anchor_matching: ``"exact"``: the env's ``info["anchor_key"]`` (falling back to the bytes of the
        observation's anchor view when a step lacks one); ``"similarity"``: observation vectors with cosine similarity
        >= ``similarity_threshold``
    :param similarity_threshold: Threshold of ``anchor_matching="similarity"``, in ``(0, 1]``
    :param anchor_view: Function from stacked observations to the part of them that identifies a state, for exact
        matching without ``info["anchor_key"]``; ``None`` (default): :func:`edo_gym.envs.observation.anchor_view` for
        EDO observation spaces, the whole observation otherwise
    :param kwargs: Every other :class:`~baselines.grpo.grpo.GRPO` argument (``supervision`` must be ``"outcome"``)
    """

    _records_anchor_keys: ClassVar[bool] = True
    rollout_buffer: AnchorGroupRolloutBuffer  # type: ignore[assignment]

    def __init__(
        self,
        policy: str | type[GRPOPolicy],
        env: Any,
        step_advantage_weight: float = 1.0,
        gamma: float = 0.95,
        anchor_matching: str = "exact",
        similarity_threshold: float = 0.95,
        anchor_view: Callable[[Any], Any] | None = None,
        _init_setup_model: bool = True,
        **kwargs: Any,
    ):
        if anchor_matching not in ANCHOR_MATCHINGS:
            raise ValueError(f"Unknown anchor_matching {anchor_matching!r}, expected one of {ANCHOR_MATCHINGS}")
        if not 0.0 < similarity_threshold <= 1.0:
            raise ValueError(f"similarity_threshold must be in (0, 1], got {similarity_threshold}")
        if kwargs.get("supervision", "outcome") != "outcome":
            raise ValueError("GiGPO's episode level uses episode returns: supervision must be 'outcome'")
        self.step_advantage_weight = step_advantage_weight
        self.anchor_matching = anchor_matching
        self.similarity_threshold = similarity_threshold
        self.anchor_view = anchor_view
        super().__init__(policy, env, gamma=gamma, _init_setup_model=_init_setup_model, **kwargs)

    def _make_rollout_buffer(self) -> AnchorGroupRolloutBuffer:
        return AnchorGroupRolloutBuffer(
            self.observation_space,
            self.action_space,
            step_advantage_weight=self.step_advantage_weight,
            anchor_matching=self.anchor_matching,
            similarity_threshold=self.similarity_threshold,
            anchor_view=self._anchor_view(),
            **self._rollout_buffer_kwargs(),
        )

    def _anchor_view(self) -> Callable[[Any], Any] | None:
        """The anchor view exact matching uses: the one given, else EDO's for an EDO observation space, else none."""
        if self.anchor_view is not None:
            return self.anchor_view
        return edo_observation.anchor_view if edo_observation.is_edo_observation_space(self.observation_space) else None

    def _record_rollout_stats(self, buffer: GroupRolloutBuffer, state: RolloutState) -> None:
        super()._record_rollout_stats(buffer, state)
        assert isinstance(buffer, AnchorGroupRolloutBuffer)
        self.logger.record("rollout/anchor_repeat_rate", buffer.anchor_repeat_rate)
        kept = buffer.keep
        if kept.any():
            step = np.abs(self.step_advantage_weight * buffer.step_level_advantages[kept])
            episode = np.abs(buffer.episode_level_advantages[kept])
            self.logger.record("rollout/step_advantage_share", float(step.sum() / max(step.sum() + episode.sum(), 1e-12)))

    def learn(  # type: ignore[override]
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "GiGPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
        use_masking: bool | None = None,
    ) -> Self:
        """Train the policy: :meth:`GRPO.learn` (the TensorBoard run is named ``GiGPO`` by default)."""
        return super().learn(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar, use_masking
        )


__all__ = [
    "AnchorGroupRolloutBuffer",
    "GiGPO",
    "GiGPOAdvantages",
    "compute_gigpo_advantages",
    "exact_anchor_groups",
    "observation_anchor_groups",
    "similarity_anchor_groups",
    "step_level_advantages",
]
