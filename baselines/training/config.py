"""``TrainConfig``: every setting of a training run, validated at construction."""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

#: Algorithms ``train`` knows, by name.
ALGOS: tuple[str, ...] = ("grpo", "gigpo", "ppo", "maskable_ppo")
#: The group-relative algorithms (no critic, groups of episodes).
GROUP_ALGOS: tuple[str, ...] = ("grpo", "gigpo")
VEC_ENV_KINDS: tuple[str, ...] = ("dummy", "subproc")
GROUP_MODES: tuple[str | None, ...] = (None, "seed", "task_id")
SUPERVISIONS: tuple[str, ...] = ("outcome", "process")
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dapo", "dr_grpo")
#: GRPO's ``filter_on`` values (``baselines.grpo.advantages.FILTER_ON``).
FILTER_ON: tuple[str, ...] = ("return", "success")
SCALE_REWARDS: tuple[str | None, ...] = (None, "group", "batch", "none")


@dataclass
class TrainConfig:
    """Everything a training run needs; ``validate()`` (called by ``__post_init__``) raises clear ``ValueError``s.

    The defaults are the tuned ``make train`` run: GRPO (Dr. GRPO advantages, entropy bonus) on EDO-v0,
    300k env steps: 2-7 minutes on 2 CPU cores (750-2,300 steps/s measured, depending on load) plus a few seconds
    of held-out evaluation. With GRPO's standard std normalisation (``normalize_std=True``) training collapsed to
    "submit at once" on EDO-v0 in our runs: in groups where no member succeeds, the return differences are
    only the small cost differences, and dividing by their std turns them into unit-sized advantages that
    reward the cheapest (shortest) episode. Centring only (``normalize_std=False``) keeps them small.
    """

    #: ``"grpo"``, ``"ppo"`` (stock, no masks) or ``"maskable_ppo"`` (sb3-contrib).
    algo: str = "grpo"
    #: Registered env id (``edo_gym.registration.VARIANTS``) or any Gymnasium id.
    env_id: str = "EDO-v0"
    #: Env steps to train on (GRPO finishes the rollout that reaches it, so it overshoots by < one rollout).
    total_timesteps: int = 300_000
    seed: int = 0
    #: Parallel envs of the training VecEnv.
    n_envs: int = 16
    #: Hidden layer sizes of the actor (and, for PPO, of the critic too).
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    #: Adam step size of the RL run: 1e-4 fine-tunes the warm-started policy without undoing it (5e-4 left GRPO below
    #: the cloned policy; benchmarks/study_levers.py).
    learning_rate: float = 1e-4
    ent_coef: float = 0.01
    #: Minibatch size in steps; ``None`` (GRPO only) = the whole rollout as one minibatch.
    batch_size: int | None = 512
    n_epochs: int = 4
    clip_range: float = 0.2
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    # -- GRPO -----------------------------------------------------------------------------------------------------
    group_size: int = 8
    groups_per_rollout: int = 16
    #: ``None`` = ``"task_id"`` when the env exposes ``num_tasks`` (all EDO envs), else ``"seed"``.
    group_mode: str | None = None
    clip_range_high: float | None = None
    #: Divide group-centred returns by the group std (GRPO); False = Dr. GRPO (centring only), see the class doc.
    #: Used when ``scale_rewards`` is None (the CLI's ``--std-normalization`` flags set it).
    normalize_std: bool = False
    #: GRPO's ``scale_rewards`` (``"group"``, ``"batch"``, ``"none"``); None = from ``normalize_std``.
    scale_rewards: str | None = None
    #: GRPO's ``loss_type`` (``"grpo"``, ``"bnpo"``, ``"dapo"``, ``"dr_grpo"``), see ``baselines.grpo.buffers``.
    loss_type: str = "bnpo"
    supervision: str = "outcome"
    kl_coef: float = 0.0
    #: GiGPO: weight of the step-level (anchor-state) advantage.
    step_advantage_weight: float = 1.0
    #: GRPO/GiGPO tie filter: ``"return"`` (returns tie) or ``"success"`` (all members succeeded or all failed, DAPO's
    #: criterion; needs ``info["is_success"]``, which every EDO env reports).
    filter_on: str = "return"
    #: GRPO/GiGPO: DAPO dynamic sampling (draw more groups until ``groups_per_rollout`` are informative, up to 4x).
    dynamic_sampling: bool = False
    #: The policy's features extractor: ``None`` (SB3's default for Dict observations: every key flattened) or
    #: ``"table"`` (:class:`baselines.extractors.EDOTableExtractor`: shared encoders over the rows of the tables).
    features_extractor: str | None = None
    #: A hop-count curriculum (:mod:`baselines.curriculum`): ``[[until, max_hops], ...]``, e.g. ``[[0.2, 2], [0.5, 3]]``
    #: = tasks of at most 2 hops for the first 20% of the env steps, at most 3 up to 50%, then every task. ``None``: no
    #: curriculum (every task from the start).
    hop_curriculum: list[list[float | int]] | None = None
    # -- warm start (baselines.experience) ------------------------------------------------------------------------
    #: Pre-train the policy by behaviour cloning before the RL run: a hand-written policy's name (``HEURISTICS``; its
    #: ``warm_start_episodes`` episodes on the training split are recorded as a Minari dataset, reused while it
    #: matches) or a local Minari dataset id (``namespace/name-vN``, from ``edo record-dataset``). ``None``: no warm start.
    warm_start: str | None = "rule_based"
    warm_start_episodes: int = 2000
    #: Behaviour-cloning passes over the dataset, minibatch size and Adam step size.
    bc_epochs: int = 20
    bc_batch_size: int = 256
    bc_learning_rate: float = 1e-3
    # -- PPO / MaskablePPO ----------------------------------------------------------------------------------------
    #: Steps per env per rollout (PPO rollout = ``n_steps * n_envs`` steps).
    n_steps: int = 256
    gamma: float = 0.99
    gae_lambda: float = 0.95
    vf_coef: float = 0.5
    # -- run ------------------------------------------------------------------------------------------------------
    output_dir: str = "runs"
    #: TensorBoard log dir; ``None`` = no TensorBoard logging.
    tensorboard_log: str | None = None
    #: Held-out (test split) tasks to evaluate on after training; 0 = skip the evaluation.
    eval_episodes: int = 200
    eval_seed: int = 0
    #: Also evaluate the four heuristic policies on the same tasks (the comparison table).
    eval_heuristics: bool = True
    progress_bar: bool = True
    #: ``gc.freeze()`` at the start of training and of each rollout (:class:`~baselines.grpo.callbacks.FreezeGCCallback`):
    #: the garbage collector's full collections then skip what earlier rollouts left (the world, torch, the embedding
    #: model and the envs' growing memo tables). Results are the same either way.
    gc_freeze: bool = True
    verbose: int = 0
    #: ``"dummy"`` (one process: envs share the embedding model), ``"subproc"`` (one process per env, ~5 s each) or
    #: ``"shards"`` (:class:`~baselines.sharded_vec_env.ShardedVecEnv`: a shard of the envs in this process and one in
    #: each of ``vec_workers`` worker processes; the same transitions as ``"dummy"``, so the same training).
    vec_env: str = "dummy"
    #: ``vec_env="shards"``: worker processes besides this one (``None``: the CPU count less one, at least 1).
    vec_workers: int | None = None
    #: torch intra-op threads (``None`` leaves torch's default).
    torch_threads: int | None = 1
    #: torch intra-op threads during each update (the algorithm's ``train()``), set when it starts and restored when
    #: it ends, so the rollout keeps ``torch_threads`` (``None``: ``torch_threads`` throughout). ``make train`` uses 2:
    #: the update's matrix products then run on both cores of a 2-core machine. Results differ from one thread's by
    #: float rounding (torch does not promise the same bits across thread counts); with the same value, runs repeat.
    update_threads: int | None = None
    device: str = "cpu"
    #: Extra keyword arguments for ``gym.make`` of the training env (and of the evaluation env).
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.net_arch, tuple):
            self.net_arch = list(self.net_arch)
        if self.hop_curriculum is not None:
            from baselines.curriculum import check_curriculum

            with contextlib.suppress(ValueError):  # as lists of [until, max_hops] (validate reports a bad value)
                self.hop_curriculum = [[until, hops] for until, hops in check_curriculum(self.hop_curriculum)]
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""

        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(f"TrainConfig: {message}")

        def is_int(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def is_num(value: Any) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool)

        need(self.algo in ALGOS, f"algo must be one of {list(ALGOS)}, got {self.algo!r}")
        need(isinstance(self.env_id, str) and bool(self.env_id), f"env_id must be a non-empty string, got {self.env_id!r}")
        need(
            is_int(self.total_timesteps) and self.total_timesteps >= 1,
            f"total_timesteps must be an int >= 1, got {self.total_timesteps!r}",
        )
        need(is_int(self.seed) and self.seed >= 0, f"seed must be an int >= 0, got {self.seed!r}")
        need(is_int(self.n_envs) and self.n_envs >= 1, f"n_envs must be an int >= 1, got {self.n_envs!r}")
        need(
            isinstance(self.net_arch, list) and all(is_int(h) and h >= 1 for h in self.net_arch),
            f"net_arch must be a list of positive ints (hidden layer sizes), got {self.net_arch!r}",
        )
        need(is_num(self.learning_rate) and self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate!r}")
        need(is_num(self.ent_coef) and self.ent_coef >= 0, f"ent_coef must be >= 0, got {self.ent_coef!r}")
        if self.batch_size is None:
            need(self.algo in GROUP_ALGOS, "batch_size=None (whole rollout) is only supported by grpo and gigpo")
        else:
            need(
                is_int(self.batch_size) and self.batch_size >= 1,
                f"batch_size must be an int >= 1 or None, got {self.batch_size!r}",
            )
        need(is_int(self.n_epochs) and self.n_epochs >= 1, f"n_epochs must be an int >= 1, got {self.n_epochs!r}")
        need(is_num(self.clip_range) and 0 < self.clip_range < 1, f"clip_range must be in (0, 1), got {self.clip_range!r}")
        need(is_num(self.max_grad_norm) and self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm!r}")
        need(
            self.target_kl is None or (is_num(self.target_kl) and self.target_kl > 0),
            f"target_kl must be > 0 or None, got {self.target_kl!r}",
        )
        need(is_int(self.group_size) and self.group_size >= 2, f"group_size must be an int >= 2, got {self.group_size!r}")
        need(
            is_int(self.groups_per_rollout) and self.groups_per_rollout >= 1,
            f"groups_per_rollout must be an int >= 1, got {self.groups_per_rollout!r}",
        )
        need(self.group_mode in GROUP_MODES, f"group_mode must be one of {list(GROUP_MODES)}, got {self.group_mode!r}")
        need(
            self.clip_range_high is None or (is_num(self.clip_range_high) and self.clip_range_high > 0),
            f"clip_range_high must be > 0 or None, got {self.clip_range_high!r}",
        )
        need(self.supervision in SUPERVISIONS, f"supervision must be one of {list(SUPERVISIONS)}, got {self.supervision!r}")
        need(
            self.scale_rewards in SCALE_REWARDS,
            f"scale_rewards must be one of {list(SCALE_REWARDS)}, got {self.scale_rewards!r}",
        )
        need(self.loss_type in LOSS_TYPES, f"loss_type must be one of {list(LOSS_TYPES)}, got {self.loss_type!r}")
        need(self.filter_on in FILTER_ON, f"filter_on must be one of {list(FILTER_ON)}, got {self.filter_on!r}")
        need(isinstance(self.dynamic_sampling, bool), f"dynamic_sampling must be a bool, got {self.dynamic_sampling!r}")
        need(isinstance(self.gc_freeze, bool), f"gc_freeze must be a bool, got {self.gc_freeze!r}")
        need(
            is_num(self.step_advantage_weight) and self.step_advantage_weight >= 0,
            f"step_advantage_weight must be >= 0, got {self.step_advantage_weight!r}",
        )
        need(
            self.algo != "gigpo" or self.supervision == "outcome",
            "gigpo needs supervision='outcome' (its step level replaces process supervision)",
        )
        need(is_num(self.kl_coef) and self.kl_coef >= 0, f"kl_coef must be >= 0, got {self.kl_coef!r}")
        need(is_int(self.n_steps) and self.n_steps >= 1, f"n_steps must be an int >= 1, got {self.n_steps!r}")
        if self.algo not in GROUP_ALGOS and self.batch_size is not None:
            need(self.n_steps * self.n_envs >= 2, "n_steps * n_envs must be >= 2 for PPO")
        need(is_num(self.gamma) and 0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma!r}")
        need(is_num(self.gae_lambda) and 0 <= self.gae_lambda <= 1, f"gae_lambda must be in [0, 1], got {self.gae_lambda!r}")
        need(is_num(self.vf_coef) and self.vf_coef >= 0, f"vf_coef must be >= 0, got {self.vf_coef!r}")
        need(
            isinstance(self.output_dir, (str, os.PathLike)) and str(self.output_dir) != "",
            "output_dir must be a non-empty path",
        )
        need(
            is_int(self.eval_episodes) and self.eval_episodes >= 0,
            f"eval_episodes must be an int >= 0, got {self.eval_episodes!r}",
        )
        need(is_int(self.eval_seed) and self.eval_seed >= 0, f"eval_seed must be an int >= 0, got {self.eval_seed!r}")
        need(self.vec_env in VEC_ENV_KINDS, f"vec_env must be one of {list(VEC_ENV_KINDS)}, got {self.vec_env!r}")
        need(
            self.vec_workers is None or (is_int(self.vec_workers) and 1 <= self.vec_workers < self.n_envs),
            f"vec_workers must be None or an int between 1 and n_envs - 1 ({self.n_envs - 1}): this process steps a "
            f"shard too, got {self.vec_workers!r}",
        )
        need(
            self.vec_env != "shards" or self.n_envs >= 2,
            f"vec_env='shards' needs n_envs >= 2 (a shard here and one in a worker), got n_envs={self.n_envs}",
        )
        need(
            self.vec_workers is None or self.vec_env == "shards",
            f"vec_workers is for vec_env='shards' only, got vec_workers={self.vec_workers!r} with vec_env={self.vec_env!r}",
        )
        need(
            self.torch_threads is None or (is_int(self.torch_threads) and self.torch_threads >= 1),
            f"torch_threads must be an int >= 1 or None, got {self.torch_threads!r}",
        )
        need(
            self.update_threads is None or (is_int(self.update_threads) and self.update_threads >= 1),
            f"update_threads must be an int >= 1 or None, got {self.update_threads!r}",
        )
        need(isinstance(self.env_kwargs, dict), f"env_kwargs must be a dict, got {type(self.env_kwargs).__name__}")
        from baselines.extractors import FEATURES_EXTRACTORS

        need(
            self.features_extractor is None or self.features_extractor in FEATURES_EXTRACTORS,
            f"features_extractor must be None or one of {list(FEATURES_EXTRACTORS)}, got {self.features_extractor!r}",
        )
        if self.hop_curriculum is not None:
            from baselines.curriculum import check_curriculum

            try:
                check_curriculum(self.hop_curriculum)
            except ValueError as e:
                need(False, f"hop_curriculum: {e}")
        need(
            self.warm_start is None or (isinstance(self.warm_start, str) and bool(self.warm_start)),
            f"warm_start must be None, a hand-written policy's name or a Minari dataset id, got {self.warm_start!r}",
        )
        need(
            is_int(self.warm_start_episodes) and self.warm_start_episodes >= 1,
            f"warm_start_episodes must be an int >= 1, got {self.warm_start_episodes!r}",
        )
        need(is_int(self.bc_epochs) and self.bc_epochs >= 1, f"bc_epochs must be an int >= 1, got {self.bc_epochs!r}")
        need(
            is_int(self.bc_batch_size) and self.bc_batch_size >= 1,
            f"bc_batch_size must be an int >= 1, got {self.bc_batch_size!r}",
        )
        need(
            is_num(self.bc_learning_rate) and self.bc_learning_rate > 0,
            f"bc_learning_rate must be > 0, got {self.bc_learning_rate!r}",
        )

    @property
    def model_path(self) -> Path:
        """``output_dir/<algo>_<env>_<seed>.zip``."""
        return Path(self.output_dir) / f"{self.algo}_{self.env_id.replace('/', '_').replace(':', '_')}_{self.seed}.zip"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
