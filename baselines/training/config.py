"""``TrainConfig``: every setting of a training run, validated at construction.

Each field is declared with :func:`setting`, whose ``metadata`` is what ``edo train``'s flag for it is generated from
(:mod:`baselines.cli`): its help text, its ``--help`` group, its choices and, where the annotation does not say enough,
how its value is written on the command line. A new field is a new flag, with nothing to copy by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from baselines.algorithms import ALGOS, GROUP_ALGOS
from baselines.extractors import FEATURES_EXTRACTORS

VEC_ENV_KINDS: tuple[str, ...] = ("dummy", "subproc")
GROUP_MODES: tuple[str | None, ...] = (None, "seed", "task_id")
SUPERVISIONS: tuple[str, ...] = ("outcome", "process")
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dapo", "dr_grpo")
#: GRPO's ``filter_on`` values (``baselines.grpo.advantages.FILTER_ON``).
FILTER_ON: tuple[str, ...] = ("return", "success")
SCALE_REWARDS: tuple[str | None, ...] = (None, "group", "batch", "none")
#: ``features_extractor`` values: ``None`` (SB3's flattening) or a name of ``baselines.extractors.FEATURES_EXTRACTORS``.
FEATURES_EXTRACTOR_CHOICES: tuple[str | None, ...] = (None, *FEATURES_EXTRACTORS)

#: ``edo train --help``'s groups, in this order: a setting that one algorithm family alone reads is in that family's.
GROUP_ENV = "env"
GROUP_TRAINING = "training (every algorithm)"
GROUP_GRPO = "GRPO and GiGPO (group-relative, no critic)"
GROUP_GIGPO = "GiGPO only"
GROUP_PPO = "PPO and MaskablePPO"
GROUP_WARM_START = "warm start (behaviour cloning before the RL run; every algorithm)"
GROUP_EVAL = "held-out evaluation after training"
GROUP_RUN = "output and speed"
SETTING_GROUPS: tuple[str, ...] = (
    GROUP_ENV,
    GROUP_TRAINING,
    GROUP_GRPO,
    GROUP_GIGPO,
    GROUP_PPO,
    GROUP_WARM_START,
    GROUP_EVAL,
    GROUP_RUN,
)


#: The algorithms the settings of an algorithm-specific group apply to (the other groups apply to every algorithm).
GROUP_APPLIES_TO: dict[str, tuple[str, ...]] = {
    GROUP_GRPO: GROUP_ALGOS,
    GROUP_GIGPO: ("gigpo",),
    GROUP_PPO: ("ppo", "maskable_ppo"),
}


def applies_to(name: str) -> tuple[str, ...]:
    """The algorithms ``TrainConfig``'s setting ``name`` applies to (``ALGOS`` for most)."""
    f = {f.name: f for f in fields(TrainConfig)}.get(name)
    if f is None:
        raise ValueError(f"TrainConfig has no setting {name!r}")
    return GROUP_APPLIES_TO.get(f.metadata.get("group", GROUP_TRAINING), ALGOS)


def settings_for(algo: str, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (``TrainConfig`` keyword arguments shared by several algorithms, as a study's) without those that do
    not apply to ``algo`` (a GRPO-only one for PPO, say), which ``TrainConfig`` would refuse."""
    return {name: value for name, value in settings.items() if algo in applies_to(name)}


def setting(
    default: Any = MISSING,
    *,
    help: str,
    group: str = GROUP_TRAINING,
    factory: Callable[[], Any] | None = None,
    choices: Sequence[Any] | None = None,
    none: Sequence[str] = ("none",),
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
) -> Any:
    """A ``TrainConfig`` field (``dataclasses.field``) with what its ``edo train`` flag is generated from in ``metadata``.

    :param help: what the setting does, with its units (the flag's help text)
    :param group: its ``edo train --help`` group (one of :data:`SETTING_GROUPS`)
    :param factory: a ``default_factory`` for a mutable default, instead of ``default``
    :param choices: the allowed values (``None`` among them where the field may be ``None``)
    :param none: the words that stand for ``None`` on the command line, for a field that may be ``None``
    :param parse: how the flag's text becomes the value (raising ``ValueError``), where the annotation does not say
    :param metavar: the value's name in ``--help``
    """
    if group not in SETTING_GROUPS:
        raise ValueError(f"setting group {group!r} is not one of {list(SETTING_GROUPS)}")
    metadata = {"help": help, "group": group, "choices": None if choices is None else tuple(choices), "none": tuple(none),
                "parse": parse, "metavar": metavar}  # fmt: skip
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _parse_hop_curriculum(text: str) -> list[list[float | int]]:
    from baselines.curriculum import parse_curriculum

    return [list(stage) for stage in parse_curriculum(text)]


def _parse_env_kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"must be a JSON object like '{{\"plan_check\": true}}' ({exc.msg}), got {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object like '{{\"plan_check\": true}}', got {text!r}")
    return value


@dataclass
class TrainConfig:
    """Everything a training run needs; ``validate()`` (called by ``__post_init__``) raises clear ``ValueError``s.

    The defaults are the tuned ``make train`` run: GRPO (Dr. GRPO advantages, entropy bonus) on EDO-v0,
    300k env steps: 2-7 minutes on 2 CPU cores (750-2,300 steps/s measured, depending on load) plus a few seconds
    of held-out evaluation. With GRPO's standard std normalisation (``normalize_std=True``) training collapsed to
    "submit at once" on EDO-v0: in groups where no member succeeds, the return differences are
    only the small cost differences, and dividing by their std turns them into unit-sized advantages that
    reward the cheapest (shortest) episode. Centring only (``normalize_std=False``) keeps them small.

    Each field's ``metadata["help"]`` says what it does; ``edo train --help`` lists them all by group.
    """

    algo: str = setting("grpo", choices=ALGOS,
                        help="algorithm: grpo, gigpo (GRPO with step-level advantages), ppo (stock, no action masks) or "
                        "maskable_ppo (sb3-contrib)")  # fmt: skip
    env_id: str = setting("EDO-v0", group=GROUP_ENV,
                          help="registered env id (edo_gym.registration.VARIANTS) or any Gymnasium id")  # fmt: skip
    total_timesteps: int = setting(300_000,
                                   help="env steps to train on (GRPO and GiGPO finish the rollout that reaches it, so "
                                   "they overshoot by less than one rollout)")  # fmt: skip
    seed: int = setting(0, help="training seed (also in the saved model's file name)")
    n_envs: int = setting(16, help="parallel envs of the training VecEnv")
    net_arch: list[int] = setting(factory=lambda: [128, 128], metavar="SIZES",
                                  help="hidden layer sizes of the actor (and, for PPO, of the critic too), comma-separated, "
                                  "e.g. 64,64; none: a linear policy")  # fmt: skip
    learning_rate: float = setting(1e-4,
                                   help="Adam step size of the RL run: 1e-4 fine-tunes the warm-started policy without "
                                   "undoing it (5e-4 left GRPO below the cloned policy; benchmarks/study_levers.py)")  # fmt: skip
    ent_coef: float = setting(0.01, help="entropy bonus coefficient")
    batch_size: int | None = setting(512, none=("none", "all"),
                                     help="minibatch size in steps; all (GRPO and GiGPO only): the whole rollout as one "
                                     "minibatch")  # fmt: skip
    n_epochs: int = setting(4, help="passes over each rollout")
    clip_range: float = setting(0.2, help="PPO-style ratio clipping: the policy ratio is clipped to [1 - clip, 1 + clip]")
    max_grad_norm: float = setting(0.5, help="gradient clipping: the largest global gradient norm of an update")
    target_kl: float | None = setting(None,
                                      help="stop an update's epochs early once the approximate KL to the rollout policy "
                                      "exceeds it; none: never")  # fmt: skip
    # -- GRPO / GiGPO -------------------------------------------------------------------------------------------------
    group_size: int = setting(8, group=GROUP_GRPO, help="episodes per group (>= 2), all of one task or reset seed")
    groups_per_rollout: int = setting(16, group=GROUP_GRPO, help="groups per rollout (and per update)")
    group_mode: str | None = setting(None, group=GROUP_GRPO, choices=GROUP_MODES, none=("auto", "none"),
                                     help="what a group shares: task_id (the same task), seed (the same reset seed) or "
                                     "auto: task_id when the env exposes num_tasks (every EDO env), else seed")  # fmt: skip
    clip_range_high: float | None = setting(None, group=GROUP_GRPO,
                                            help="upper clip of the policy ratio, 1 + clip_range_high (DAPO's "
                                            "clip-higher); none: clip_range on both sides")  # fmt: skip
    normalize_std: bool = setting(False, group=GROUP_GRPO,
                                  help="divide group-centred returns by the group's return std (standard GRPO); off: "
                                  "centring only (Dr. GRPO), see TrainConfig's doc; used when --scale-rewards is auto")  # fmt: skip
    scale_rewards: str | None = setting(None, group=GROUP_GRPO, choices=SCALE_REWARDS, none=("auto",),
                                        help="advantage scaling (TRL's scale_rewards): group (the group's std), batch "
                                        "(the rollout's std) or none (Dr. GRPO); auto: from --normalize-std")  # fmt: skip
    loss_type: str = setting("bnpo", group=GROUP_GRPO, choices=LOSS_TYPES,
                             help="loss aggregation (TRL's loss_type), see baselines.grpo.buffers")  # fmt: skip
    supervision: str = setting("outcome", group=GROUP_GRPO, choices=SUPERVISIONS,
                               help="outcome (one advantage per episode, from its return) or process (per-step "
                               "advantages from the step rewards; GRPO only)")  # fmt: skip
    kl_coef: float = setting(0.0, group=GROUP_GRPO,
                             help="weight of the KL penalty to the rollout policy in the loss; 0: none")  # fmt: skip
    step_advantage_weight: float = setting(1.0, group=GROUP_GIGPO,
                                           help="weight of the step-level (anchor-state) advantage")  # fmt: skip
    filter_on: str = setting("return", group=GROUP_GRPO, choices=FILTER_ON,
                             help="tie filter: groups whose returns tie, or (success) whose members all succeeded or all "
                             "failed, DAPO's criterion (needs info['is_success'], which every EDO env reports)")  # fmt: skip
    dynamic_sampling: bool = setting(False, group=GROUP_GRPO,
                                     help="DAPO dynamic sampling: draw more groups until groups_per_rollout are "
                                     "informative, up to 4x")  # fmt: skip
    features_extractor: str | None = setting(None, choices=FEATURES_EXTRACTOR_CHOICES, none=("flat", "none"),
                                             help="the policy's features extractor: flat (SB3's default for Dict "
                                             "observations: every key flattened) or table (baselines.extractors."
                                             "EDOTableExtractor: shared encoders over the rows of the subtask and "
                                             "worker tables)")  # fmt: skip
    hop_curriculum: list[list[float | int]] | None = setting(
        None,
        parse=_parse_hop_curriculum,
        metavar="UNTIL:MAX_HOPS[,...]",
        help="a hop-count curriculum (baselines.curriculum): e.g. 0.2:2,0.5:3 = tasks of at most 2 hops for the first "
        "20% of the env steps, at most 3 up to 50%, then every task; none: every task from the start",
    )
    # -- warm start (baselines.experience) ----------------------------------------------------------------------------
    warm_start: str | None = setting(
        "static_pipeline",
        group=GROUP_WARM_START,
        help="pre-train the policy by behaviour cloning before the RL run: a hand-written policy or probe (its "
        "default, static_pipeline, stands for the logs a team running a fixed pipeline already has; "
        "warm_start_episodes episodes on the training split are recorded once as a Minari dataset, reused while they "
        "match; a probe it cloned gets its row in the table) or a local Minari dataset id (namespace/name-vN, from "
        "edo record-dataset); none: train from scratch",
    )
    warm_start_episodes: int = setting(2000, group=GROUP_WARM_START,
                                       help="episodes recorded for a hand-written --warm-start")  # fmt: skip
    bc_epochs: int = setting(20, group=GROUP_WARM_START, help="behaviour-cloning passes over the dataset")
    bc_batch_size: int = setting(256, group=GROUP_WARM_START, help="behaviour-cloning minibatch size in steps")
    bc_learning_rate: float = setting(1e-3, group=GROUP_WARM_START, help="behaviour-cloning Adam step size")
    bc_ent_coef: float = setting(0.0, group=GROUP_WARM_START,
                                 help="entropy bonus of behaviour cloning: keeps probability on actions the teacher "
                                 "never took, so that RL can compare episodes that differ")  # fmt: skip
    # -- PPO / MaskablePPO --------------------------------------------------------------------------------------------
    n_steps: int = setting(256, group=GROUP_PPO, help="steps per env per rollout (a rollout is n_steps * n_envs steps)")
    gamma: float = setting(0.99, group=GROUP_PPO, help="discount factor of the returns and GAE")
    gae_lambda: float = setting(0.95, group=GROUP_PPO, help="GAE's lambda (bias-variance trade-off of the advantages)")
    vf_coef: float = setting(0.5, group=GROUP_PPO, help="weight of the value (critic) loss")
    # -- run ----------------------------------------------------------------------------------------------------------
    output_dir: str = setting("runs", group=GROUP_RUN, help="where <algo>_<env>_<seed>.zip and its .json go")
    tensorboard_log: str | None = setting(None, group=GROUP_RUN, help="TensorBoard log dir; none: no TensorBoard logging")
    eval_episodes: int = setting(200, group=GROUP_EVAL,
                                 help="held-out (test split) tasks to evaluate on after training; 0: skip the evaluation")  # fmt: skip
    eval_seed: int = setting(0, group=GROUP_EVAL, help="evaluation seed")
    eval_heuristics: bool = setting(True, group=GROUP_EVAL,
                                    help="also evaluate the hand-written policies on the same tasks (the comparison "
                                    "table)")  # fmt: skip
    compare_with: list[str] = setting(
        factory=lambda: ["plan_check_text"],
        metavar="NAMES",
        group=GROUP_EVAL,
        help="hand-written probes evaluated beside the heuristics when eval_heuristics is on (names of "
        "baselines.experience.demonstrators(); plan_check_text, the text reader, is the strongest on EDO-v0); none: "
        "the heuristics only",
    )
    eval_clone: bool = setting(True, group=GROUP_EVAL,
                               help="with a warm start, also evaluate the cloned policy before RL on the same tasks (the "
                               "ladder: teacher, clone, trained)")  # fmt: skip
    progress_bar: bool = setting(True, group=GROUP_RUN, help="progress bars")
    gc_freeze: bool = setting(True, group=GROUP_RUN,
                              help="gc.freeze() at the start of training and of each rollout (FreezeGCCallback): the "
                              "garbage collector's full collections then skip what earlier rollouts left (the world, "
                              "torch, the embedding model and the envs' memo tables); the same results either way")  # fmt: skip
    verbose: int = setting(0, group=GROUP_RUN, choices=(0, 1, 2), help="SB3 log verbosity")
    vec_env: str = setting("dummy", group=GROUP_RUN, choices=VEC_ENV_KINDS,
                           help="training VecEnv: dummy (one process: the envs share the embedding model) or subproc "
                           "(SB3's SubprocVecEnv: one process per env, ~5 s each to start)")  # fmt: skip
    torch_threads: int | None = setting(1, group=GROUP_RUN,
                                        help="torch intra-op threads of the training process (torch does not promise "
                                        "bit-identical results across thread counts); none: torch's default")  # fmt: skip
    device: str = setting("cpu", group=GROUP_RUN, help="torch device of the policy (cpu, cuda, ...)")
    env_kwargs: dict[str, Any] = setting(
        group=GROUP_ENV,
        factory=dict,
        parse=_parse_env_kwargs,
        metavar="JSON",
        help="extra keyword arguments of gym.make for the training env and the evaluation env, a JSON object; "
        "--text-features, --plan-check and --retrieval-encoder add theirs to it (a model is evaluated with the same)",
    )

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
        # a setting of another algorithm's group, changed from its default, would be ignored: refused instead
        for f in fields(self):
            algos = GROUP_APPLIES_TO.get(f.metadata.get("group", GROUP_TRAINING))
            if algos is not None and self.algo not in algos:
                default = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
                need(
                    getattr(self, f.name) == default,
                    f"{f.name}={getattr(self, f.name)!r} applies to {' and '.join(algos)} only, not to algo {self.algo!r} "
                    f"(leave it at its default, {default!r}; settings_for(algo, ...) drops such settings from shared ones)",
                )
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
            self.torch_threads is None or (is_int(self.torch_threads) and self.torch_threads >= 1),
            f"torch_threads must be an int >= 1 or None, got {self.torch_threads!r}",
        )
        need(isinstance(self.env_kwargs, dict), f"env_kwargs must be a dict, got {type(self.env_kwargs).__name__}")
        need(
            self.features_extractor in FEATURES_EXTRACTOR_CHOICES,
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
        if isinstance(self.compare_with, tuple):
            self.compare_with = list(self.compare_with)
        need(isinstance(self.compare_with, list), f"compare_with must be a list of policy names, got {self.compare_with!r}")
        from baselines.experience import demonstrators

        known = demonstrators()
        unknown = [name for name in self.compare_with if name not in known]
        need(not unknown, f"compare_with names {unknown}, which are not hand-written policies; choose from {sorted(known)}")
        need(
            isinstance(self.bc_ent_coef, (int, float)) and not isinstance(self.bc_ent_coef, bool) and self.bc_ent_coef >= 0,
            f"bc_ent_coef must be a number >= 0, got {self.bc_ent_coef!r}",
        )
        need(isinstance(self.eval_clone, bool), f"eval_clone must be a bool, got {self.eval_clone!r}")
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
