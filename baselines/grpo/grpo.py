"""Group Relative Policy Optimization (GRPO) as a Stable-Baselines3 on-policy algorithm.

Read top to bottom as SB3's ``ppo.py``: the loss (:func:`grpo_loss`), the algorithm's settings and checks
(:class:`GRPO`'s ``__init__``), the collection of one rollout of groups (:meth:`GRPO.collect_rollouts`: which env runs
which episode is :mod:`baselines.grpo.scheduling`'s job, the step loop is :mod:`baselines.grpo.rollout`'s), the
group-relative advantages (:mod:`baselines.grpo.advantages`, computed by the rollout buffer) and the update
(:meth:`GRPO.train`). What GRPO changes in SB3's ``OnPolicyAlgorithm`` besides the algorithm (removed attributes, env
wrapping, the group RNG, saving, the reference policy) is in :mod:`baselines.grpo.base`.
"""

import warnings
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import FloatSchedule
from stable_baselines3.common.vec_env import VecEnv

from baselines.grpo.advantages import DEFAULT_EPS, DEFAULT_STD_TOL, FILTER_ON, SCALE_REWARDS, SUPERVISIONS
from baselines.grpo.base import GroupOnPolicyAlgorithm
from baselines.grpo.buffers import LOSS_TYPES, GroupRolloutBuffer, max_episode_length
from baselines.grpo.policies import CnnPolicy, GRPOPolicy, MlpPolicy, MultiInputPolicy
from baselines.grpo.rollout import resolve_masking, run_episodes
from baselines.grpo.scheduling import GROUP_MODES, GroupScheduler, Member, RolloutState, get_num_tasks, plan_group_members

#: Default ``scale_rewards``: centring only (Dr. GRPO), chosen by measurement (baselines/grpo/NOTES.md)
DEFAULT_SCALE_REWARDS = "none"
#: Largest features tensor (bytes, float32) that ``GRPO.train`` computes once per update (``GRPO._static_features``)
MAX_STATIC_FEATURES_BYTES = 2**28


class GRPOLossTerms(NamedTuple):
    """Terms of the GRPO objective for one minibatch (all scalars, aggregated as the loss type says)."""

    loss: th.Tensor
    policy_loss: th.Tensor
    entropy_loss: th.Tensor
    kl_ref: th.Tensor
    #: Fraction of steps whose ratio is outside the clip interval (None when ``diagnostics=False``)
    clip_fraction: th.Tensor | None
    #: Approximate KL(behaviour || current), ``mean((ratio - 1) - log ratio)`` (SB3 PPO's early-stopping statistic;
    #: None when ``diagnostics=False``)
    approx_kl: th.Tensor | None
    #: ``log_prob - old_log_prob`` per step, detached (for diagnostics computed later)
    log_ratio: th.Tensor


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
    loss_weights: th.Tensor | None = None,
    diagnostics: bool = True,
) -> GRPOLossTerms:
    """
    GRPO loss for a minibatch of steps.

    With ``ratio = exp(log_prob - old_log_prob)`` and ``avg`` the weighted mean ``mean(loss_weights * x)``
    (the plain mean when ``loss_weights`` is None; the weights implement ``loss_type``, see
    :mod:`baselines.grpo.buffers`)::

        policy_loss  = -avg(min(ratio * A, clip(ratio, 1 - clip_range, 1 + clip_range_high) * A))
        entropy_loss = -avg(entropy)
        kl_ref       = avg(r - log(r) - 1),  r = pi_ref / pi_theta = exp(ref_log_prob - log_prob)   (k3 estimator)
        loss         = policy_loss + ent_coef * entropy_loss + kl_coef * kl_ref

    ``kl_ref`` is exactly 0 when the policy equals the reference (r = 1).

    :param log_prob: Log-probability of the actions under the current policy, ``(batch,)``
    :param old_log_prob: Log-probability under the behaviour policy that collected them, ``(batch,)``
    :param advantages: Group-relative advantages, ``(batch,)``
    :param entropy: Entropy of the current action distribution, ``(batch,)``; None uses ``-log_prob`` as estimate
    :param ref_log_prob: Log-probability under the reference policy; None means no KL term (``kl_ref = 0``)
    :param clip_range: Lower clip epsilon (unitless ratio offset): ratio is clipped below at ``1 - clip_range``
    :param clip_range_high: Upper clip epsilon (clip-higher, DAPO); None = ``clip_range`` (symmetric)
    :param ent_coef: Entropy bonus coefficient
    :param kl_coef: Coefficient of the KL penalty to the reference policy
    :param loss_weights: Per-step weights of the loss aggregation, ``(batch,)``; None = all 1 (per-step mean)
    :param diagnostics: Also compute ``clip_fraction`` and ``approx_kl`` (unweighted); ``GRPO.train`` computes them
        once per update from the stored ``log_ratio`` instead
    :return: :class:`GRPOLossTerms`
    """
    high = clip_range if clip_range_high is None else clip_range_high

    def avg(values: th.Tensor) -> th.Tensor:
        return values.mean() if loss_weights is None else (loss_weights * values).mean()

    log_ratio = log_prob - old_log_prob
    ratio = th.exp(log_ratio)
    surrogate_1 = advantages * ratio
    surrogate_2 = advantages * th.clamp(ratio, 1.0 - clip_range, 1.0 + high)
    policy_loss = -avg(th.min(surrogate_1, surrogate_2))
    entropy_loss = -avg(-log_prob if entropy is None else entropy)
    # without an entropy bonus its term stays out of the graph: backward has fewer nodes to visit
    loss = policy_loss + ent_coef * entropy_loss if ent_coef != 0 else policy_loss
    if ref_log_prob is None:
        kl_ref = th.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    else:
        log_r = ref_log_prob - log_prob
        kl_ref = avg(th.exp(log_r) - log_r - 1.0)
        loss = loss + kl_coef * kl_ref
    log_ratio = log_ratio.detach()
    clip_fraction = approx_kl = None
    if diagnostics:
        clip_fraction, approx_kl = ratio_diagnostics(log_ratio, clip_range, high)
    return GRPOLossTerms(loss, policy_loss, entropy_loss, kl_ref, clip_fraction, approx_kl, log_ratio)


@th.no_grad()
def ratio_diagnostics(log_ratio: th.Tensor, clip_range: float, clip_range_high: float) -> tuple[th.Tensor, th.Tensor]:
    """
    PPO's diagnostics of the probability ratios of a set of steps.

    :param log_ratio: ``log pi_theta - log pi_old`` per step
    :param clip_range: Lower clip epsilon
    :param clip_range_high: Upper clip epsilon
    :return: the fraction of steps whose ratio is outside ``[1 - clip_range, 1 + clip_range_high]`` and the
        approximate KL(old || new) ``mean((ratio - 1) - log ratio)``
    """
    ratio = th.exp(log_ratio)
    clip_fraction = ((ratio < 1.0 - clip_range) | (ratio > 1.0 + clip_range_high)).float().mean()
    return clip_fraction, ((ratio - 1.0) - log_ratio).mean()


class GRPO(GroupOnPolicyAlgorithm):
    """
    Group Relative Policy Optimization (GRPO), critic-free PPO-style policy optimization.

    Paper: DeepSeekMath (Shao et al. 2024, https://arxiv.org/abs/2402.03300). Variants named as in TRL's
    ``GRPOTrainer``: ``loss_type`` (DeepSeekMath's per-episode mean, DAPO's per-step mean, Dr. GRPO's constant
    normaliser), ``scale_rewards`` (group std, batch std, none = Dr. GRPO), DAPO's clip-higher (``clip_range_high``)
    and dynamic sampling (``dynamic_sampling``), masking of truncated episodes, a k3 KL penalty to a reference policy.
    Dr. GRPO: Liu et al. 2025, https://arxiv.org/abs/2503.20783; DAPO: Yu et al. 2025, https://arxiv.org/abs/2503.14476.

    One rollout is ``groups_per_rollout`` groups of ``group_size`` complete episodes each, all members of a group
    starting from the same task (``group_mode``; :mod:`baselines.grpo.scheduling` explains which env runs which member
    and how its episode starts). Steps of envs that have no member are never recorded, counted in ``num_timesteps``,
    reported to ``ep_info_buffer`` nor shown to callbacks; callbacks are called once per vectorized step with the
    recorded envs' entries (:mod:`baselines.grpo.rollout` lists ``self.locals``). A truncated episode (time limit, or
    ``max_episode_steps``) is a complete member whose return is the sum of its rewards (no critic to bootstrap from).
    ``n_steps``, ``gae_lambda`` and ``vf_coef`` do not exist (:mod:`baselines.grpo.base`); ``gamma`` only discounts
    the return-to-go of ``supervision="process"``. Measurements behind the defaults: ``baselines/grpo/NOTES.md``.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy) or a ``GRPOPolicy`` subclass
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, it can be a function of the current progress remaining (from 1 to 0,
        never below 0)
    :param group_size: Number of episodes per group (G >= 2) that share a start task
    :param groups_per_rollout: Number of groups per rollout (one policy update phase per rollout); with
        ``dynamic_sampling``, the number of informative groups to reach
    :param batch_size: Minibatch size, in (kept) steps; None = all kept steps of the rollout in one minibatch
    :param n_epochs: Number of passes over the rollout when optimizing the surrogate loss
    :param clip_range: Clipping parameter epsilon_low (ratio clipped below at ``1 - clip_range``),
        it can be a function of the current progress remaining (from 1 to 0)
    :param clip_range_high: Clip-higher epsilon_high (ratio clipped above at ``1 + clip_range_high``, DAPO), float
        or schedule; None (default) = ``clip_range`` (symmetric clipping)
    :param ent_coef: Entropy coefficient for the loss calculation (default 0.01: better than 0 on EDO-v0, as good on
        CartPole-v1)
    :param kl_coef: Coefficient of the KL penalty to a frozen reference policy (k3 estimator ``r - log r - 1`` with
        ``r = pi_ref / pi_theta``). 0.0 (default): no reference policy is kept at all
    :param ref_update_interval: Copy the current policy into the reference every this many rollouts (updates);
        None = the reference is the initial policy forever. Only used when ``kl_coef > 0``
    :param loss_type: How per-step terms are aggregated (see :mod:`baselines.grpo.buffers`): ``"grpo"`` (mean over
        each episode's steps, then over episodes: DeepSeekMath), ``"bnpo"`` / ``"dapo"`` (mean over steps: DAPO; the
        default), ``"dr_grpo"`` (sum over steps / (episodes x maximum episode length): Dr. GRPO; the maximum length
        is ``max_episode_steps``, else the env's time limit)
    :param scale_rewards: What the group-centred rewards are divided by (see :mod:`baselines.grpo.advantages`):
        ``"group"`` (the group's std, GRPO as published and TRL's default), ``"batch"`` (the rollout's std),
        ``"none"`` (no division, Dr. GRPO; the default). Stds are sample stds (ddof=1) plus ``adv_eps``, as in TRL
    :param normalize_std: Deprecated alias: True = ``scale_rewards="group"``, False = ``scale_rewards="none"``
    :param supervision: ``"outcome"`` (episode return, same advantage for all steps of an episode) or
        ``"process"`` (per-step rewards normalised over the group, then return-to-go), see ``advantages.py``
    :param filter_zero_std_groups: Drop tied groups from the update (their values all tie: returns, or step rewards
        under process supervision)
    :param dynamic_sampling: DAPO dynamic sampling: keep drawing groups until ``groups_per_rollout`` informative
        (untied) groups exist or ``max_groups_drawn`` groups were drawn. Needs ``filter_zero_std_groups``
    :param max_groups_drawn: Cap on the groups drawn per rollout with ``dynamic_sampling``; None = 4 x
        ``groups_per_rollout``
    :param std_tol: Tolerance, in reward units, under which a group's std counts as zero (tie)
    :param filter_on: What the tie filter (and dynamic sampling) tests: ``"return"`` (default: returns within
        ``std_tol``; step rewards under process supervision) or ``"success"``: a group is tied when all its members
        succeeded or all failed, DAPO's criterion, read from ``info["is_success"]`` at the end of each episode
        (SB3's convention; an env without it raises ``ValueError``)
    :param adv_eps: Added to the std before dividing (TRL's 1e-4)
    :param mask_truncated_episodes: Leave truncated episodes out of the loss (TRL's ``mask_truncated_completions``);
        they still count in their group's statistics
    :param group_mode: How members of a group share a start: ``"seed"`` (all reset with the group's seed, drawn from
        the group RNG) or ``"task_id"`` (reset with ``options={"task_id": k}``, ``k`` uniform in the env attribute
        ``num_tasks``, and seeds of their own)
    :param use_masking: Invalid action masks: None (default) uses them when the env has ``action_masks()``, True
        requires them (ValueError otherwise), False never uses them. ``learn(use_masking=...)`` overrides it
    :param action_mask_key: With masks on, read them from this key of the Dict observations (nonzero = legal)
        instead of calling every env's ``action_masks()`` at each vectorized step. Only for envs whose observation
        holds the mask of the state it describes, as EDO-v0's ``"action_mask"`` does; checked against
        ``action_masks()`` at the first step of every rollout (``ValueError`` if they differ). None (default):
        ``action_masks()``
    :param refill_envs: Start the next member on an env as soon as its episode ends; False = synchronous waves
    :param max_episode_steps: Optional safety cut, in env steps: an episode still running after this many steps is
        ended by the algorithm and stored as truncated (Monitor does not report it, the env never ended it).
        None (default) relies on the env ending its episodes. Also the ``L_max`` of ``loss_type="dr_grpo"``
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
    #: Whether collection records ``info["anchor_key"]`` per step (GiGPO)
    _records_anchor_keys: ClassVar[bool] = False

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
        ent_coef: float = 0.01,
        kl_coef: float = 0.0,
        ref_update_interval: int | None = None,
        loss_type: str = "bnpo",
        scale_rewards: str = DEFAULT_SCALE_REWARDS,
        normalize_std: bool | None = None,
        supervision: str = "outcome",
        filter_zero_std_groups: bool = True,
        dynamic_sampling: bool = False,
        max_groups_drawn: int | None = None,
        std_tol: float = DEFAULT_STD_TOL,
        filter_on: str = "return",
        adv_eps: float = DEFAULT_EPS,
        mask_truncated_episodes: bool = False,
        group_mode: str = "seed",
        use_masking: bool | None = None,
        action_mask_key: str | None = None,
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
            # OnPolicyAlgorithm's signature needs them; GRPO has no n_steps / GAE / critic: removed below
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
        self._remove_unused_on_policy_attributes()

        if normalize_std is not None:
            mapped = "group" if normalize_std else "none"
            if scale_rewards not in (DEFAULT_SCALE_REWARDS, mapped):
                raise ValueError(f"normalize_std={normalize_std} contradicts scale_rewards={scale_rewards!r}")
            warnings.warn(f"`normalize_std` is deprecated: use scale_rewards={mapped!r}", DeprecationWarning, stacklevel=2)
            scale_rewards = mapped
        if group_size < 2:
            raise ValueError(f"`group_size` must be >= 2 (a group-relative baseline needs 2 members), got {group_size}")
        if groups_per_rollout < 1:
            raise ValueError(f"`groups_per_rollout` must be >= 1, got {groups_per_rollout}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1 or None, got {batch_size}")
        if n_epochs < 1:
            raise ValueError(f"`n_epochs` must be >= 1, got {n_epochs}")
        if group_mode not in GROUP_MODES:
            raise ValueError(f"Unknown group_mode {group_mode!r}, expected one of {GROUP_MODES}")
        if supervision not in SUPERVISIONS:
            raise ValueError(f"Unknown supervision {supervision!r}, expected one of {SUPERVISIONS}")
        if loss_type not in LOSS_TYPES:
            raise ValueError(f"Unknown loss_type {loss_type!r}, expected one of {LOSS_TYPES}")
        if scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"Unknown scale_rewards {scale_rewards!r}, expected one of {SCALE_REWARDS}")
        if kl_coef < 0:
            raise ValueError(f"`kl_coef` must be >= 0, got {kl_coef}")
        if ref_update_interval is not None and ref_update_interval < 1:
            raise ValueError(f"`ref_update_interval` must be >= 1 or None, got {ref_update_interval}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"`max_episode_steps` must be >= 1 or None, got {max_episode_steps}")
        if filter_on not in FILTER_ON:
            raise ValueError(f"Unknown filter_on {filter_on!r}, expected one of {FILTER_ON}")
        if dynamic_sampling and not filter_zero_std_groups:
            raise ValueError("dynamic_sampling=True replaces dropped tied groups: it needs filter_zero_std_groups=True")
        if action_mask_key is not None and not isinstance(action_mask_key, str):
            raise ValueError(f"`action_mask_key` must be an observation key (str) or None, got {action_mask_key!r}")
        if max_groups_drawn is not None and max_groups_drawn < groups_per_rollout:
            raise ValueError(
                f"`max_groups_drawn` must be >= groups_per_rollout ({groups_per_rollout}), got {max_groups_drawn}"
            )

        self.group_size = group_size
        self.groups_per_rollout = groups_per_rollout
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.clip_range = clip_range
        self.clip_range_high = clip_range_high
        self.kl_coef = kl_coef
        self.ref_update_interval = ref_update_interval
        self.loss_type = loss_type
        self.scale_rewards = scale_rewards
        self.supervision = supervision
        self.filter_zero_std_groups = filter_zero_std_groups
        self.dynamic_sampling = dynamic_sampling
        self.max_groups_drawn = max_groups_drawn
        self.std_tol = std_tol
        self.filter_on = filter_on
        self.adv_eps = adv_eps
        self.mask_truncated_episodes = mask_truncated_episodes
        self.group_mode = group_mode
        self.use_masking = use_masking
        self.action_mask_key = action_mask_key
        self.refill_envs = refill_envs
        self.max_episode_steps = max_episode_steps
        self.target_kl = target_kl
        self.ref_policy = None
        self._n_rollouts_trained = 0
        self._group_rng = np.random.default_rng(seed)
        #: Group RNG state restored by ``_setup_model`` after ``load`` (set by ``save``)
        self._group_rng_state: dict[str, Any] | None = None
        #: Running estimate of the fraction of informative groups (dynamic sampling draws target / rate groups)
        self._informative_rate = 1.0
        self._use_masking_now = False

        if self.env is not None and group_mode == "task_id":
            get_num_tasks(self.env)  # fail fast on a misconfigured env

        if _init_setup_model:
            self._setup_model()

    # ------------------------------------------------------------------ setup
    def _setup_model(self) -> None:
        if "normalize_std" in self.__dict__:  # a model saved before scale_rewards existed
            self.scale_rewards = "group" if self.__dict__.pop("normalize_std") else "none"
            if self.use_masking:  # its use_masking=True meant "when the env has masks", now None
                self.use_masking = None
        self._remove_unused_on_policy_attributes()
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        if self._group_rng_state is not None:  # load(): continue the saved group sequence
            self._group_rng.bit_generator.state = self._group_rng_state
            self._group_rng_state = None

        self.policy = self.policy_class(  # type: ignore[assignment]
            self.observation_space,
            self.action_space,
            self.lr_schedule,
            **self.policy_kwargs,
        )
        self.policy = self.policy.to(self.device)
        if not isinstance(self.policy, GRPOPolicy):
            raise TypeError("Policy must subclass GRPOPolicy")

        # dr_grpo reads its maximum episode length from the env: without one (load), the buffer is built by learn()
        if self.env is not None or self.loss_type != "dr_grpo":
            self.rollout_buffer = self._make_rollout_buffer()

        self.ref_policy = None
        if self.kl_coef > 0:
            self._update_reference()

        self.clip_range = FloatSchedule(self.clip_range)
        if self.clip_range_high is not None:
            self.clip_range_high = FloatSchedule(self.clip_range_high)

        self._maybe_recommend_cpu("GRPOPolicy")

    def _rollout_buffer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the rollout buffer (subclasses add theirs)."""
        return dict(
            device=self.device,
            gamma=self.gamma,
            supervision=self.supervision,
            scale_rewards=self.scale_rewards,
            filter_zero_std_groups=self.filter_zero_std_groups,
            std_tol=self.std_tol,
            eps=self.adv_eps,
            loss_type=self.loss_type,
            max_episode_steps=max_episode_length(self.loss_type, self.max_episode_steps, self.env),
            mask_truncated_episodes=self.mask_truncated_episodes,
            filter_on=self.filter_on,
        )

    def _make_rollout_buffer(self) -> GroupRolloutBuffer:
        return GroupRolloutBuffer(self.observation_space, self.action_space, **self._rollout_buffer_kwargs())

    def _plan_group_members(self, env: VecEnv, n_groups: int, first_group_id: int = 0) -> list[Member]:
        """The members of ``n_groups`` new groups, drawn from the group RNG (``scheduling.plan_group_members``)."""
        return plan_group_members(self._group_rng, env, self.group_mode, self.group_size, n_groups, first_group_id)

    # ------------------------------------------------------------------ collection
    def collect_rollouts(  # type: ignore[override]
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: GroupRolloutBuffer,
        n_groups: int | None = None,
    ) -> bool:
        """
        Collect groups of complete episodes with the current policy (see the class docstring; callbacks see the
        recorded envs only) and compute their advantages.

        :param env: The training environment
        :param callback: Callback that will be called at each (vectorized) step
            (and at the beginning and end of the rollout)
        :param rollout_buffer: Buffer to fill with complete episodes
        :param n_groups: Number of groups (informative groups with dynamic sampling); None = ``groups_per_rollout``
        :return: True if the rollout was completed, False if the callback stopped it
        """
        target = self.groups_per_rollout if n_groups is None else n_groups
        cap = target if not self.dynamic_sampling else max(self.max_groups_drawn or 4 * target, target)
        self.policy.set_training_mode(False)
        rollout_buffer.reset()
        scheduler = GroupScheduler(
            env,
            lambda n, first: self._plan_group_members(env, n, first),
            group_size=self.group_size,
            target=target,
            cap=cap,
            refill_envs=self.refill_envs,
            dynamic_sampling=self.dynamic_sampling,
            informative_rate=self._informative_rate,
            is_informative=rollout_buffer.group_is_informative,
            records_anchor_keys=self._records_anchor_keys,
        )
        callback.on_rollout_start()
        completed = run_episodes(self, env, callback, rollout_buffer, scheduler)
        scheduler.close()
        if not completed:
            return False

        rollout_buffer.compute_advantages()
        state = scheduler.state
        if self.dynamic_sampling and state.complete > 0:
            observed = state.informative / state.complete
            self._informative_rate = float(np.clip(0.5 * self._informative_rate + 0.5 * observed, target / cap, 1.0))
        self._record_rollout_stats(rollout_buffer, state)

        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _record_rollout_stats(self, buffer: GroupRolloutBuffer, state: RolloutState) -> None:
        self.logger.record("rollout/groups_drawn", state.claimed)
        self.logger.record("rollout/informative_groups", int((~buffer.group_dropped).sum()))
        self.logger.record("rollout/dropped_group_fraction", buffer.dropped_group_fraction)
        self.logger.record("rollout/group_return_std", float(np.mean(buffer.group_return_std)))
        self.logger.record("rollout/truncated_fraction", float(np.mean(buffer.episode_truncated)))

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
        self.logger.record("train/kept_steps", buffer.n_kept_steps)
        self.logger.record("train/clip_range", clip_range)
        if self.clip_range_high is not None:
            self.logger.record("train/clip_range_high", clip_range_high)

        use_kl = self.kl_coef > 0
        if use_kl and self.ref_policy is None:
            # kl_coef was switched on after construction: the reference is the current policy
            self._update_reference()

        # Per-minibatch values stay tensors until the end: no device sync, and the ratio diagnostics are computed once
        pg_losses, entropy_losses, kl_refs, log_ratios = [], [], [], []
        last_epoch_log_ratios: list[th.Tensor] = []
        loss = None
        if buffer.n_kept_steps > 0:
            # A parameter-free features extractor (flattening, as SB3's CombinedExtractor does for vector inputs) is
            # applied once per update instead of once per minibatch and epoch: same features, one tensor to permute
            features = self._static_features()
            evaluate = self.policy.evaluate_actions if features is None else self.policy.evaluate_features
            if use_kl:
                self._compute_reference_log_probs(features)
            continue_training = True
            parameters = list(self.policy.parameters())
            for epoch in range(self.n_epochs):
                last_epoch_log_ratios = []
                for data in buffer.get(self.batch_size, features=features):
                    log_prob, entropy = evaluate(
                        data.observations,  # type: ignore[arg-type]
                        data.actions,
                        action_masks=data.action_masks,
                    )
                    terms = grpo_loss(
                        log_prob,
                        data.old_log_prob,
                        data.advantages,
                        entropy=entropy,
                        ref_log_prob=data.ref_log_prob if use_kl else None,
                        clip_range=clip_range,
                        clip_range_high=clip_range_high,
                        ent_coef=self.ent_coef,
                        kl_coef=self.kl_coef,
                        loss_weights=data.loss_weights,
                        diagnostics=False,
                    )
                    last_epoch_log_ratios.append(terms.log_ratio)
                    if self.target_kl is not None:
                        # Approximate KL(old || new) for early stopping, as in SB3 PPO
                        approx_kl_div = ratio_diagnostics(terms.log_ratio, clip_range, clip_range_high)[1].item()
                        if approx_kl_div > 1.5 * self.target_kl:
                            continue_training = False
                            if self.verbose >= 1:
                                print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                            break
                    log_ratios.append(terms.log_ratio)
                    pg_losses.append(terms.policy_loss.detach())
                    entropy_losses.append(terms.entropy_loss.detach())
                    kl_refs.append(terms.kl_ref.detach())
                    loss = terms.loss.detach()

                    self.policy.optimizer.zero_grad(set_to_none=True)
                    terms.loss.backward()
                    th.nn.utils.clip_grad_norm_(parameters, self.max_grad_norm)
                    self.policy.optimizer.step()

                self._n_updates += 1
                if not continue_training:
                    break

        self._n_rollouts_trained += 1
        if use_kl and self.ref_update_interval is not None and self._n_rollouts_trained % self.ref_update_interval == 0:
            self._update_reference()

        def _mean(values: list[th.Tensor]) -> float:
            return float(th.stack(values).float().mean().item()) if values else 0.0

        clip_fraction = approx_kl = 0.0
        if log_ratios:
            clip_fraction = ratio_diagnostics(th.cat(log_ratios), clip_range, clip_range_high)[0].item()
        if last_epoch_log_ratios:  # as SB3 PPO: the approximate KL of the last epoch
            approx_kl = ratio_diagnostics(th.cat(last_epoch_log_ratios), clip_range, clip_range_high)[1].item()
        # SB3 PPO's keys (no value loss / explained variance: there is no critic)
        self.logger.record("train/policy_gradient_loss", _mean(pg_losses))
        self.logger.record("train/entropy_loss", _mean(entropy_losses))
        self.logger.record("train/kl_ref", _mean(kl_refs))
        self.logger.record("train/clip_fraction", clip_fraction)
        self.logger.record("train/approx_kl", approx_kl)
        self.logger.record("train/loss", float(loss.item()) if loss is not None else 0.0)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")

    def _static_features(self) -> th.Tensor | None:
        """
        The features of all kept steps, when the policy's features extractor is a fixed function of the observation
        (``GRPOPolicy.has_static_features``) and they take at most ``MAX_STATIC_FEATURES_BYTES``; None otherwise
        (the update then extracts features per minibatch).
        """
        buffer = self.rollout_buffer
        if not self.policy.has_static_features:
            return None
        if buffer.n_kept_steps * self.policy.features_dim * 4 > MAX_STATIC_FEATURES_BYTES:
            return None
        return self.policy.static_features(buffer.kept_observations)

    def learn(  # type: ignore[override]
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "GRPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
        use_masking: bool | None = None,
    ) -> Self:
        """
        Train the policy.

        :param total_timesteps: Number of recorded env steps to train on. Rollouts are whole groups of
            episodes, so training stops at the end of the first rollout that reaches this count (it overshoots;
            the learning-rate and clip-range schedules stay at their final value, progress never goes below 0).
        :param callback: Callback(s) called at every vectorized step with the state of the algorithm
        :param log_interval: Log (dump) every this many rollouts
        :param tb_log_name: The name of the run for TensorBoard logging
        :param reset_num_timesteps: Whether or not to reset the current timestep number (used in logging)
        :param progress_bar: Display a progress bar using tqdm and rich (counting recorded steps)
        :param use_masking: None = the constructor's ``use_masking`` (default: masks when the env has
            ``action_masks()``); True = use masks, ValueError if the env has none; False = never
        :return: the trained model
        """
        iteration = 0
        assert self.env is not None
        self._use_masking_now = resolve_masking(self, self.env, self.use_masking if use_masking is None else use_masking)

        total_timesteps, callback = self._setup_learn(
            total_timesteps,
            callback,
            reset_num_timesteps,
            tb_log_name,
            progress_bar,
        )
        self.rollout_buffer = self._make_rollout_buffer()  # the env may have changed (set_env, load)

        callback.on_training_start(locals(), globals())

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


__all__ = ["GRPO", "GRPOLossTerms", "Member", "grpo_loss", "ratio_diagnostics"]
