"""Group Relative Policy Optimization (GRPO) as a Stable-Baselines3 on-policy algorithm."""

import copy
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import FloatSchedule, obs_as_tensor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from baselines.grpo.advantages import DEFAULT_EPS, DEFAULT_STD_TOL
from baselines.grpo.buffers import GroupRolloutBuffer
from baselines.grpo.policies import CnnPolicy, GRPOPolicy, MlpPolicy, MultiInputPolicy

GROUP_MODES = ("seed", "task_id")
SUPERVISIONS = ("outcome", "process")
# Seeds drawn for env resets are in [0, MAX_SEED)
MAX_SEED = 2**31 - 1


def _new_trajectory() -> dict[str, list[Any]]:
    return {"observations": [], "actions": [], "log_probs": [], "rewards": [], "action_masks": []}


class GRPOLossTerms(NamedTuple):
    """Terms of the GRPO objective for one minibatch (all scalars, token-level means)."""

    loss: th.Tensor
    policy_loss: th.Tensor
    entropy_loss: th.Tensor
    kl_ref: th.Tensor
    clip_fraction: th.Tensor


def grpo_loss(
    log_prob: th.Tensor,
    old_log_prob: th.Tensor,
    advantages: th.Tensor,
    entropy: th.Tensor | None = None,
    ref_log_prob: th.Tensor | None = None,
    clip_range: float = 0.2,
    clip_range_high: float | None = None,
    ent_coef: float = 0.0,
    kl_coef: float = 0.0,
) -> GRPOLossTerms:
    """
    GRPO loss for a minibatch of steps, averaged at the token (step) level.

    With ``ratio = exp(log_prob - old_log_prob)``::

        policy_loss  = -mean(min(ratio * A, clip(ratio, 1 - clip_range, 1 + clip_range_high) * A))
        entropy_loss = -mean(entropy)
        kl_ref       = mean(r - log(r) - 1),  r = pi_ref / pi_theta = exp(ref_log_prob - log_prob)   (k3 estimator)
        loss         = policy_loss + ent_coef * entropy_loss + kl_coef * kl_ref

    Every step has the same weight (DAPO token-level averaging), so long episodes are not
    down-weighted as with GRPO's original per-sequence mean. ``kl_ref`` is exactly 0 when the
    policy equals the reference (r = 1).

    :param log_prob: Log-probability of the actions under the current policy, ``(batch,)``
    :param old_log_prob: Log-probability under the behaviour policy that collected them, ``(batch,)``
    :param advantages: Group-relative advantages, ``(batch,)``
    :param entropy: Entropy of the current action distribution, ``(batch,)``; None uses ``-log_prob`` as estimate
    :param ref_log_prob: Log-probability under the reference policy; None means no KL term (``kl_ref = 0``)
    :param clip_range: Lower clip epsilon (unitless ratio offset): ratio is clipped below at ``1 - clip_range``
    :param clip_range_high: Upper clip epsilon (clip-higher, DAPO); None = ``clip_range`` (symmetric)
    :param ent_coef: Entropy bonus coefficient
    :param kl_coef: Coefficient of the KL penalty to the reference policy
    :return: :class:`GRPOLossTerms`; ``clip_fraction`` is the fraction of steps whose ratio is outside the clip interval
    """
    high = clip_range if clip_range_high is None else clip_range_high
    ratio = th.exp(log_prob - old_log_prob)
    surrogate_1 = advantages * ratio
    surrogate_2 = advantages * th.clamp(ratio, 1.0 - clip_range, 1.0 + high)
    policy_loss = -th.min(surrogate_1, surrogate_2).mean()
    if entropy is None:
        entropy_loss = -th.mean(-log_prob)
    else:
        entropy_loss = -th.mean(entropy)
    if ref_log_prob is None:
        kl_ref = th.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    else:
        log_r = ref_log_prob - log_prob
        kl_ref = th.mean(th.exp(log_r) - log_r - 1.0)
    loss = policy_loss + ent_coef * entropy_loss + kl_coef * kl_ref
    with th.no_grad():
        clip_fraction = ((ratio < 1.0 - clip_range) | (ratio > 1.0 + high)).float().mean()
    return GRPOLossTerms(loss, policy_loss, entropy_loss, kl_ref, clip_fraction)


class GRPO(OnPolicyAlgorithm):
    """
    Group Relative Policy Optimization (GRPO), critic-free PPO-style policy optimization.

    Paper: DeepSeekMath (Shao et al. 2024, https://arxiv.org/abs/2402.03300). Options from
    Dr. GRPO (Liu et al. 2025, no std normalisation) and DAPO (Yu et al. 2025, clip-higher,
    token-level loss, dropping groups with tied returns).

    **What a rollout is.** One rollout is ``groups_per_rollout`` groups of ``group_size`` complete
    episodes each (so ``groups_per_rollout * group_size`` episodes, of variable total step count).
    All members of a group start from the same task:

    * ``group_mode="seed"``: all members are reset with the same seed (same start state and same
      env noise stream), so any Gymnasium env whose ``reset(seed=...)`` fixes the start works
      (e.g. CartPole-v1). Group seeds are drawn from the algorithm's RNG.
    * ``group_mode="task_id"``: all members are reset with ``options={"task_id": k}`` and distinct
      fresh seeds; ``k`` is drawn uniformly from ``range(num_tasks)`` where ``num_tasks`` is the
      env attribute ``num_tasks``.

    **How episodes are collected.** SB3 VecEnvs auto-reset finished envs without seed/options, so
    GRPO assigns starts itself. The ``groups_per_rollout * group_size`` (group, member) slots are
    taken in order. The first ``n_envs`` are started together: each env's reset seed is written into
    the VecEnv's per-env seed list (the list ``VecEnv.reset()`` consumes, ``env.unwrapped._seeds``,
    since ``VecEnv.seed(s)`` can only give ``s + env_idx``) and its options through
    ``VecEnv.set_options``; then ``reset()`` is called. With ``refill_envs=True`` (default, on an
    unwrapped DummyVecEnv/SubprocVecEnv), an env whose episode ends is immediately reset with the next
    slot's seed/options through ``env_method("reset", ...)``, so envs only idle at the very end of a
    rollout. Otherwise collection runs in synchronous *waves* of ``n_envs`` slots, each lasting as long
    as its longest episode (finished envs idle, their steps are wasted compute). Either way,
    transitions of an env after its episode ended (the VecEnv's auto-reset episode) are never recorded,
    counted in ``num_timesteps``, nor reported to ``ep_info_buffer``, and members of a group share the
    seed / task wherever they run.

    Time-limit truncation: a truncated episode is a complete group member; its return is the sum
    of its rewards (there is no critic to bootstrap from).

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy) or a ``GRPOPolicy`` subclass
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, it can be a function of the current progress remaining (from 1 to 0)
    :param group_size: Number of episodes per group (G >= 2) that share a start task
    :param groups_per_rollout: Number of groups collected per rollout (one policy update phase per rollout)
    :param batch_size: Minibatch size, in (kept) steps; None = all kept steps of the rollout in one minibatch
    :param n_epochs: Number of passes over the rollout when optimizing the surrogate loss
    :param clip_range: Clipping parameter epsilon_low (ratio clipped below at ``1 - clip_range``),
        it can be a function of the current progress remaining (from 1 to 0)
    :param clip_range_high: Clip-higher epsilon_high (ratio clipped above at ``1 + clip_range_high``), float or
        schedule; None (default) = ``clip_range`` (symmetric clipping)
    :param ent_coef: Entropy coefficient for the loss calculation
    :param kl_coef: Coefficient of the KL penalty to a frozen reference policy (k3 estimator ``r - log r - 1`` with
        ``r = pi_ref / pi_theta``). 0.0 (default): no reference policy is kept at all
    :param ref_update_interval: Copy the current policy into the reference every this many rollouts (updates);
        None = the reference is the initial policy forever. Only used when ``kl_coef > 0``
    :param normalize_std: Divide the group-centred rewards by the group std (GRPO). False = Dr. GRPO (centring only)
    :param supervision: ``"outcome"`` (episode return, same advantage for all steps of an episode) or
        ``"process"`` (per-step rewards normalised over the group, then return-to-go), see ``advantages.py``
    :param filter_zero_std_groups: Drop groups whose returns all tie (std < ``std_tol``) from the update (DAPO)
    :param std_tol: Tolerance, in reward units, under which a group's return std counts as zero
    :param adv_eps: Added to the group std before dividing (avoids division by zero)
    :param group_mode: ``"seed"`` or ``"task_id"``: how members of a group are made to share a start (see above)
    :param use_masking: Use invalid action masks when the env exposes ``action_masks()`` (checked at each rollout)
    :param refill_envs: When an env's episode ends and members of the rollout remain, reset that env at once with
        the next member's seed/options (``env_method("reset", ...)``) instead of letting it idle until the wave's
        longest episode ends. Only on an unwrapped DummyVecEnv/SubprocVecEnv; False = strict synchronous waves
    :param max_episode_steps: Optional safety cut, in env steps: an episode still running after this many steps is
        ended by the algorithm and stored as truncated (Monitor does not report it, the env never ended it).
        None (default) relies on the env ending its episodes
    :param gamma: Discount factor of the return-to-go for process supervision (unitless). Outcome supervision uses
        undiscounted returns
    :param max_grad_norm: The maximum value (L2 norm) for the gradient clipping
    :param target_kl: Limit the approximate KL divergence between the behaviour and current policy: the epoch loop
        stops when it exceeds ``1.5 * target_kl`` (as SB3 PPO). None = no limit
    :param stats_window_size: Window size for the rollout logging, specifying the number of episodes to average
        the reported success rate, mean episode length, and mean reward over
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation
    :param verbose: the verbosity level: 0 no output, 1 info, 2 debug
    :param seed: Seed for the pseudo random generators (torch, numpy, env, and the group seed/task RNG)
    :param device: Device (cpu, cuda, ...) on which the code should be run.
        Setting it to auto, the code will be run on the GPU if possible.
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: GRPOPolicy  # type: ignore[assignment]
    rollout_buffer: GroupRolloutBuffer  # type: ignore[assignment]
    ref_policy: GRPOPolicy | None

    def __init__(
        self,
        policy: str | type[GRPOPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        group_size: int = 8,
        groups_per_rollout: int = 8,
        batch_size: int | None = 256,
        n_epochs: int = 4,
        clip_range: float | Schedule = 0.2,
        clip_range_high: float | Schedule | None = None,
        ent_coef: float = 0.0,
        kl_coef: float = 0.0,
        ref_update_interval: int | None = None,
        normalize_std: bool = True,
        supervision: str = "outcome",
        filter_zero_std_groups: bool = True,
        std_tol: float = DEFAULT_STD_TOL,
        adv_eps: float = DEFAULT_EPS,
        group_mode: str = "seed",
        use_masking: bool = True,
        refill_envs: bool = True,
        max_episode_steps: int | None = None,
        gamma: float = 1.0,
        max_grad_norm: float = 0.5,
        target_kl: float | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ):
        super().__init__(
            policy,  # type: ignore[arg-type]
            env,
            learning_rate=learning_rate,
            # n_steps / gae_lambda / vf_coef are inherited attributes that GRPO does not use:
            # a rollout is defined in episodes (groups_per_rollout * group_size), there is no critic.
            n_steps=1,
            gamma=gamma,
            gae_lambda=1.0,
            ent_coef=ent_coef,
            vf_coef=0.0,
            max_grad_norm=max_grad_norm,
            use_sde=False,
            sde_sample_freq=-1,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
            supported_action_spaces=(spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box),
        )

        if group_size < 2:
            raise ValueError(f"`group_size` must be >= 2 (a group-relative baseline needs 2 members), got {group_size}")
        if groups_per_rollout < 1:
            raise ValueError(f"`groups_per_rollout` must be >= 1, got {groups_per_rollout}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1 or None, got {batch_size}")
        if n_epochs < 1:
            raise ValueError(f"`n_epochs` must be >= 1, got {n_epochs}")
        if group_mode not in GROUP_MODES:
            raise ValueError(f"Unknown group_mode '{group_mode}', expected one of {GROUP_MODES}")
        if supervision not in SUPERVISIONS:
            raise ValueError(f"Unknown supervision '{supervision}', expected one of {SUPERVISIONS}")
        if kl_coef < 0:
            raise ValueError(f"`kl_coef` must be >= 0, got {kl_coef}")
        if ref_update_interval is not None and ref_update_interval < 1:
            raise ValueError(f"`ref_update_interval` must be >= 1 or None, got {ref_update_interval}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"`max_episode_steps` must be >= 1 or None, got {max_episode_steps}")

        self.group_size = group_size
        self.groups_per_rollout = groups_per_rollout
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.clip_range = clip_range
        self.clip_range_high = clip_range_high
        self.kl_coef = kl_coef
        self.ref_update_interval = ref_update_interval
        self.normalize_std = normalize_std
        self.supervision = supervision
        self.filter_zero_std_groups = filter_zero_std_groups
        self.std_tol = std_tol
        self.adv_eps = adv_eps
        self.group_mode = group_mode
        self.use_masking = use_masking
        self.refill_envs = refill_envs
        self.max_episode_steps = max_episode_steps
        self.target_kl = target_kl
        self.ref_policy = None
        self._n_rollouts_trained = 0
        self._group_rng = np.random.default_rng(seed)

        if self.env is not None and group_mode == "task_id":
            # Fail fast on a misconfigured env
            self._get_num_tasks(self.env)

        if _init_setup_model:
            self._setup_model()

    # ------------------------------------------------------------------ setup
    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)

        self.policy = self.policy_class(  # type: ignore[assignment]
            self.observation_space,
            self.action_space,
            self.lr_schedule,
            **self.policy_kwargs,
        )
        self.policy = self.policy.to(self.device)
        if not isinstance(self.policy, GRPOPolicy):
            raise TypeError("Policy must subclass GRPOPolicy")

        self.rollout_buffer = GroupRolloutBuffer(
            self.observation_space,
            self.action_space,
            device=self.device,
            gamma=self.gamma,
            supervision=self.supervision,
            normalize_std=self.normalize_std,
            filter_zero_std_groups=self.filter_zero_std_groups,
            std_tol=self.std_tol,
            eps=self.adv_eps,
        )

        self.ref_policy = None
        if self.kl_coef > 0:
            self._update_reference()

        self.clip_range = FloatSchedule(self.clip_range)
        if self.clip_range_high is not None:
            self.clip_range_high = FloatSchedule(self.clip_range_high)

        self._maybe_recommend_cpu("GRPOPolicy")

    def set_random_seed(self, seed: int | None = None) -> None:
        """
        Set the seed of the pseudo-random generators (python, numpy, pytorch, gym, action_space)
        and of the RNG that draws group seeds / task ids.

        :param seed: Seed; None leaves the global generators untouched and re-seeds the group RNG from entropy
        """
        super().set_random_seed(seed)
        self._group_rng = np.random.default_rng(seed)

    def _update_reference(self) -> None:
        """Make the reference policy a frozen copy of the current policy."""
        if self.ref_policy is None:
            ref_policy = copy.deepcopy(self.policy)
            ref_policy.optimizer = None  # type: ignore[assignment]  # never trained, keep no optimizer
            ref_policy.requires_grad_(False)
            self.ref_policy = ref_policy
        else:
            self.ref_policy.load_state_dict(self.policy.state_dict())
        self.ref_policy.set_training_mode(False)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "ref_policy", "_group_rng"]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts = ["policy", "policy.optimizer"]
        if self.ref_policy is not None:
            state_dicts.append("ref_policy")
        return state_dicts, []

    # ------------------------------------------------------------------ collection
    @staticmethod
    def _get_num_tasks(env: VecEnv) -> int:
        """
        Read the ``num_tasks`` attribute of the (first) env.

        :param env: The VecEnv
        :return: The number of tasks (>= 1)
        """
        if not env.has_attr("num_tasks"):
            raise ValueError(
                "group_mode='task_id' needs an env exposing an integer attribute `num_tasks` "
                "and accepting reset(options={'task_id': k}); use group_mode='seed' otherwise"
            )
        num_tasks = int(env.get_attr("num_tasks", indices=[0])[0])
        if num_tasks < 1:
            raise ValueError(f"env.num_tasks must be >= 1, got {num_tasks}")
        return num_tasks

    def _plan_group_members(self, env: VecEnv, n_groups: int) -> list[tuple[int, int, dict[str, Any]]]:
        """
        Draw the start of every group member of a rollout.

        :param env: The VecEnv (read for ``num_tasks`` in task_id mode)
        :param n_groups: Number of groups
        :return: ``(group_id, reset_seed, reset_options)`` for every member, groups in order
        """
        members: list[tuple[int, int, dict[str, Any]]] = []
        if self.group_mode == "seed":
            for group_id in range(n_groups):
                group_seed = int(self._group_rng.integers(MAX_SEED))
                members += [(group_id, group_seed, {}) for _ in range(self.group_size)]
        else:
            num_tasks = self._get_num_tasks(env)
            task_ids = self._group_rng.integers(num_tasks, size=n_groups)
            for group_id in range(n_groups):
                seeds = self._group_rng.integers(MAX_SEED, size=self.group_size)
                members += [(group_id, int(s), {"task_id": int(task_ids[group_id])}) for s in seeds]
        return members

    def _can_refill(self, env: VecEnv) -> bool:
        """Refill finished envs with the next member only on an unwrapped DummyVecEnv/SubprocVecEnv.

        A per-env ``env_method("reset")`` bypasses VecEnv wrappers (VecNormalize, VecFrameStack, ...), whose
        transformed observations it would not produce; wrapped VecEnvs fall back to synchronous waves.
        """
        return self.refill_envs and isinstance(env, (DummyVecEnv, SubprocVecEnv))

    @staticmethod
    def _set_reset_seeds(env: VecEnv, seeds: list[int | None]) -> None:
        """
        Set one reset seed per env for the next ``env.reset()``.

        ``VecEnv.seed(s)`` would give env ``i`` the seed ``s + i``; GRPO needs arbitrary per-env seeds
        (identical ones for members of a group), so the per-env seed list that DummyVecEnv /
        SubprocVecEnv ``reset()`` consume (and then clear) is written directly on the innermost VecEnv.

        :param env: The (possibly wrapped) VecEnv
        :param seeds: One seed per env
        """
        base_env = env.unwrapped
        if not hasattr(base_env, "_seeds") or len(base_env._seeds) != env.num_envs:
            raise TypeError(
                f"{type(base_env).__name__} does not expose the per-env reset seed list `_seeds` "
                "(as SB3's DummyVecEnv/SubprocVecEnv do); GRPO cannot seed group members"
            )
        base_env._seeds = list(seeds)

    def collect_rollouts(  # type: ignore[override]
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: GroupRolloutBuffer,
        n_groups: int | None = None,
    ) -> bool:
        """
        Collect ``n_groups`` groups of ``group_size`` complete episodes with the current policy
        (see the class docstring) and compute their advantages.

        :param env: The training environment
        :param callback: Callback that will be called at each (vectorized) step
            (and at the beginning and end of the rollout)
        :param rollout_buffer: Buffer to fill with complete episodes
        :param n_groups: Number of groups to collect; None = ``groups_per_rollout``
        :return: True if the rollout was completed, False if the callback stopped it
        """
        n_groups = self.groups_per_rollout if n_groups is None else n_groups
        self.policy.set_training_mode(False)
        rollout_buffer.reset()
        use_masking = self.use_masking and self.policy.supports_masking and is_masking_supported(env)

        callback.on_rollout_start()

        members = self._plan_group_members(env, n_groups)
        n_envs = env.num_envs
        if self._can_refill(env):
            # one wave for the first n_envs members; every env that finishes is re-seeded with the next member
            if not self._collect_wave(env, callback, rollout_buffer, members[:n_envs], use_masking, pending=members[n_envs:]):
                return False
        else:
            for wave_start in range(0, len(members), n_envs):
                if not self._collect_wave(
                    env, callback, rollout_buffer, members[wave_start : wave_start + n_envs], use_masking
                ):
                    return False

        rollout_buffer.compute_advantages()

        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _collect_wave(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: GroupRolloutBuffer,
        wave_members: list[tuple[int, int, dict[str, Any]]],
        use_masking: bool,
        pending: list[tuple[int, int, dict[str, Any]]] | None = None,
    ) -> bool:
        """
        Run one synchronous wave: reset every env with its member's seed/options and step until all
        assigned episodes have ended; store each finished episode in the buffer. With ``pending``
        members, an env whose episode ends is immediately reset (``env_method("reset", seed, options)``)
        with the next pending member instead of idling until the wave's longest episode ends.

        :param env: The training environment
        :param callback: Callback called at each vectorized step
        :param rollout_buffer: Buffer receiving the complete episodes
        :param wave_members: ``(group_id, seed, options)`` for envs ``0..len(wave_members)-1``
            (at most ``n_envs``; remaining envs are stepped but ignored)
        :param use_masking: Whether to query and apply action masks
        :param pending: Members still to run, assigned in order to envs as they finish (refill mode)
        :return: False if the callback asked to stop
        """
        n_envs = env.num_envs
        n_assigned = len(wave_members)
        pending = list(pending or [])
        slot_member = list(wave_members)  # the member each env is running
        # Envs without a member (last wave) get a copy of the last member's start; they are ignored
        padded = wave_members + [wave_members[-1]] * (n_envs - n_assigned)
        self._set_reset_seeds(env, [seed for _, seed, _ in padded])
        env.set_options([dict(options) for _, _, options in padded])
        obs = env.reset()

        active = np.zeros(n_envs, dtype=bool)
        active[:n_assigned] = True
        trajectories: list[dict[str, list[Any]]] = [_new_trajectory() for _ in range(n_assigned)]
        trajectories += [_new_trajectory() for _ in range(n_envs - n_assigned)]
        is_dict_obs = isinstance(obs, dict)
        episode_steps = np.zeros(n_envs, dtype=np.int64)

        while active.any():
            action_masks = get_action_masks(env) if use_masking else None
            with th.no_grad():
                obs_tensor = obs_as_tensor(obs, self.device)  # type: ignore[arg-type]
                actions_tensor, log_probs_tensor = self.policy(obs_tensor, action_masks=action_masks)
            actions = actions_tensor.cpu().numpy()
            log_probs = log_probs_tensor.cpu().numpy()

            clipped_actions = actions
            if isinstance(self.action_space, spaces.Box):
                clipped_actions = np.clip(actions, self.action_space.low, self.action_space.high)

            new_obs, rewards, dones, infos = env.step(clipped_actions)
            episode_steps += 1

            recorded = np.flatnonzero(active)
            self.num_timesteps += len(recorded)

            callback.update_locals(locals())
            if not callback.on_step():
                return False

            self._update_info_buffer([infos[i] for i in recorded], dones[recorded])

            for env_idx in recorded:
                cut = self.max_episode_steps is not None and episode_steps[env_idx] >= self.max_episode_steps
                trajectory = trajectories[env_idx]
                if is_dict_obs:
                    trajectory["observations"].append({key: np.array(value[env_idx]) for key, value in obs.items()})  # type: ignore[union-attr]
                else:
                    trajectory["observations"].append(np.array(obs[env_idx]))  # type: ignore[index]
                trajectory["actions"].append(actions[env_idx])
                trajectory["log_probs"].append(log_probs[env_idx])
                trajectory["rewards"].append(rewards[env_idx])
                if action_masks is not None:
                    trajectory["action_masks"].append(action_masks[env_idx])

                if dones[env_idx] or cut:
                    truncated = bool(infos[env_idx].get("TimeLimit.truncated", False)) or not dones[env_idx]
                    rollout_buffer.add_episode(
                        group_id=slot_member[env_idx][0],
                        observations=trajectory["observations"],
                        actions=trajectory["actions"],
                        log_probs=trajectory["log_probs"],
                        rewards=trajectory["rewards"],
                        action_masks=trajectory["action_masks"] if action_masks is not None else None,
                        truncated=truncated,
                    )
                    if pending:
                        member = pending.pop(0)
                        slot_member[env_idx] = member
                        reset_obs, _ = env.env_method("reset", seed=member[1], options=dict(member[2]), indices=[env_idx])[0]
                        if is_dict_obs:
                            for key in new_obs:  # type: ignore[union-attr]
                                new_obs[key][env_idx] = reset_obs[key]  # type: ignore[index]
                        else:
                            new_obs[env_idx] = reset_obs  # type: ignore[index]
                        trajectories[env_idx] = _new_trajectory()
                        episode_steps[env_idx] = 0
                    else:
                        active[env_idx] = False

            obs = new_obs

        self._last_obs = obs  # type: ignore[assignment]
        self._last_episode_starts = np.ones((n_envs,), dtype=bool)
        return True

    # ------------------------------------------------------------------ training
    def train(self) -> None:
        """Update the policy using the groups in the rollout buffer."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        clip_range_high = (
            clip_range if self.clip_range_high is None else self.clip_range_high(self._current_progress_remaining)  # type: ignore[operator]
        )
        buffer = self.rollout_buffer

        self.logger.record("train/group_return_std", float(np.mean(buffer.group_return_std)))
        self.logger.record("train/dropped_group_fraction", buffer.dropped_group_fraction)
        self.logger.record("train/kept_steps", buffer.n_kept_steps)
        self.logger.record("train/clip_range", clip_range)
        if self.clip_range_high is not None:
            self.logger.record("train/clip_range_high", clip_range_high)

        use_kl = self.kl_coef > 0
        if use_kl and self.ref_policy is None:
            # kl_coef was switched on after construction: the reference is the current policy
            self._update_reference()

        pg_losses, entropy_losses, kl_refs, clip_fractions, approx_kl_divs, losses = [], [], [], [], [], []

        if buffer.n_kept_steps > 0:
            if use_kl:
                self._compute_reference_log_probs()
            continue_training = True
            for epoch in range(self.n_epochs):
                approx_kl_divs = []
                for rollout_data in buffer.get(self.batch_size):
                    log_prob, entropy = self.policy.evaluate_actions(
                        rollout_data.observations,  # type: ignore[arg-type]
                        rollout_data.actions,
                        action_masks=rollout_data.action_masks,
                    )
                    terms = grpo_loss(
                        log_prob,
                        rollout_data.old_log_prob,
                        rollout_data.advantages,
                        entropy=entropy,
                        ref_log_prob=rollout_data.ref_log_prob if use_kl else None,
                        clip_range=clip_range,
                        clip_range_high=clip_range_high,
                        ent_coef=self.ent_coef,
                        kl_coef=self.kl_coef,
                    )
                    pg_losses.append(terms.policy_loss.item())
                    entropy_losses.append(terms.entropy_loss.item())
                    kl_refs.append(terms.kl_ref.item())
                    clip_fractions.append(terms.clip_fraction.item())
                    losses.append(terms.loss.item())

                    # Approximate KL(old || new) for early stopping, as in SB3 PPO
                    with th.no_grad():
                        log_ratio = log_prob - rollout_data.old_log_prob
                        approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                        approx_kl_divs.append(approx_kl_div)

                    if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                        continue_training = False
                        if self.verbose >= 1:
                            print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                        break

                    self.policy.optimizer.zero_grad()
                    terms.loss.backward()
                    th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                    self.policy.optimizer.step()

                self._n_updates += 1
                if not continue_training:
                    break

        self._n_rollouts_trained += 1
        if use_kl and self.ref_update_interval is not None and self._n_rollouts_trained % self.ref_update_interval == 0:
            self._update_reference()

        def _mean(values: list) -> float:
            return float(np.mean(values)) if len(values) > 0 else 0.0

        self.logger.record("train/policy_loss", _mean(pg_losses))
        self.logger.record("train/entropy_loss", _mean(entropy_losses))
        self.logger.record("train/kl_ref", _mean(kl_refs))
        self.logger.record("train/clip_fraction", _mean(clip_fractions))
        self.logger.record("train/approx_kl", _mean(approx_kl_divs))
        self.logger.record("train/loss", losses[-1] if losses else 0.0)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")

    def _compute_reference_log_probs(self) -> None:
        """Store the reference policy's log-probabilities of all kept actions in the buffer."""
        assert self.ref_policy is not None
        self.ref_policy.set_training_mode(False)
        chunk = self.batch_size if self.batch_size is not None else None
        with th.no_grad():
            for data in self.rollout_buffer.get(chunk, shuffle=False):
                ref_log_prob, _ = self.ref_policy.evaluate_actions(
                    data.observations,  # type: ignore[arg-type]
                    data.actions,
                    action_masks=data.action_masks,
                )
                self.rollout_buffer.set_ref_log_probs(data.indices, ref_log_prob)

    # ------------------------------------------------------------------ API
    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """
        Get the policy action from an observation.

        :param observation: the input observation
        :param state: The last hidden states (unused, no recurrence)
        :param episode_start: The last episode starts (unused, no recurrence)
        :param deterministic: Whether or not to return deterministic actions.
        :param action_masks: Action masks to apply to the action distribution (True = allowed)
        :return: the model's action and the next hidden state (unchanged)
        """
        return self.policy.predict(observation, state, episode_start, deterministic, action_masks=action_masks)

    def learn(  # type: ignore[override]
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "GRPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> Self:
        """
        Train the policy.

        :param total_timesteps: Number of recorded env steps to train on. Rollouts are whole groups of
            episodes, so training stops at the end of the first rollout that reaches this count (it overshoots).
        :param callback: Callback(s) called at every vectorized step with the state of the algorithm
        :param log_interval: Log (dump) every this many rollouts
        :param tb_log_name: The name of the run for TensorBoard logging
        :param reset_num_timesteps: Whether or not to reset the current timestep number (used in logging)
        :param progress_bar: Display a progress bar using tqdm and rich (it advances by ``n_envs`` per vectorized
            step, including the ignored steps of finished envs, so it runs ahead of ``num_timesteps``)
        :return: the trained model
        """
        iteration = 0

        total_timesteps, callback = self._setup_learn(
            total_timesteps,
            callback,
            reset_num_timesteps,
            tb_log_name,
            progress_bar,
        )

        callback.on_training_start(locals(), globals())

        assert self.env is not None

        while self.num_timesteps < total_timesteps:
            continue_training = self.collect_rollouts(self.env, callback, self.rollout_buffer, self.groups_per_rollout)

            if not continue_training:
                break

            iteration += 1
            self._update_current_progress_remaining(self.num_timesteps, total_timesteps)

            if log_interval is not None and iteration % log_interval == 0:
                assert self.ep_info_buffer is not None
                self.dump_logs(iteration)

            self.train()

        callback.on_training_end()

        return self
