"""Train GRPO / PPO / MaskablePPO on an EDO env, save the model and evaluate it next to the heuristics.

Typical use::

    from baselines.training import TrainConfig, train

    model, result = train(TrainConfig(algo="grpo", env_id="EDO-v0", total_timesteps=200_000))
    print(result.table)

or from the shell: ``edo train --algo grpo --timesteps 200000`` and ``edo evaluate runs/grpo_EDO-v0_0.zip``.

Every algorithm gets the same actor ``net_arch`` (PPO/MaskablePPO get an equally sized critic,
``net_arch=dict(pi=net_arch, vf=net_arch)``; GRPO and GiGPO have no critic). Stock PPO is trained without action
masks: the env penalises illegal actions (``illegal_action_penalty``) and ignores them. MaskablePPO, GRPO and GiGPO
use the env's ``action_masks()``. GRPO/GiGPO group episodes by task (``group_mode="task_id"``) on envs that expose
``num_tasks``, by reset seed otherwise; their training envs are wrapped in ``GroupStartWrapper`` so that every
episode starts with one reset.

The held-out evaluation runs the trained model (deterministic actions) and the four heuristic policies on the
same first ``eval_episodes`` tasks of the env's ``test`` split with the same per-episode seeds
(:mod:`baselines.evaluation`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import time
import zipfile
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch as th  # noqa: E402
from stable_baselines3.common.base_class import BaseAlgorithm  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback, CallbackList  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv  # noqa: E402
from stable_baselines3.common.vec_env.util import dict_to_obs  # noqa: E402

from baselines.evaluation import (  # noqa: E402
    EvalResult,
    evaluate_heuristic,
    evaluate_model,
    format_table,
    heldout_task_ids,
    make_eval_env,
)
from baselines.grpo.callbacks import FreezeGCCallback, RecordedStepsProgressBar  # noqa: E402
from baselines.grpo.wrappers import GroupStartWrapper  # noqa: E402
from baselines.heuristics import HEURISTICS, make_heuristic  # noqa: E402
from baselines.sharded_vec_env import ShardedVecEnv  # noqa: E402
from edo_gym.retrieval.embedder import scoped_torch_threads  # noqa: E402

#: Algorithms ``train`` knows, by name.
ALGOS: tuple[str, ...] = ("grpo", "gigpo", "ppo", "maskable_ppo")
#: The group-relative algorithms (no critic, groups of episodes).
GROUP_ALGOS: tuple[str, ...] = ("grpo", "gigpo")
VEC_ENV_KINDS: tuple[str, ...] = ("dummy", "subproc", "shards")
GROUP_MODES: tuple[str | None, ...] = (None, "seed", "task_id")
SUPERVISIONS: tuple[str, ...] = ("outcome", "process")
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dapo", "dr_grpo")
#: GRPO's ``filter_on`` values (``baselines.grpo.advantages.FILTER_ON``).
FILTER_ON: tuple[str, ...] = ("return", "success")
SCALE_REWARDS: tuple[str | None, ...] = (None, "group", "batch", "none")


def _algo_class(algo: str) -> type[BaseAlgorithm]:
    if algo == "grpo":
        from baselines.grpo import GRPO

        return GRPO
    if algo == "gigpo":
        from baselines.grpo import GiGPO

        return GiGPO
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO
    if algo == "maskable_ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    raise ValueError(f"unknown algo {algo!r}; choose from {list(ALGOS)}")


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
    learning_rate: float = 5e-4
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

    @property
    def model_path(self) -> Path:
        """``output_dir/<algo>_<env>_<seed>.zip``."""
        return Path(self.output_dir) / f"{self.algo}_{self.env_id.replace('/', '_').replace(':', '_')}_{self.seed}.zip"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass
class TimeBreakdown:
    """Where the wall time of ``model.learn`` went, in seconds, measured by :func:`timed_learning`.

    ``env_s``: every call into the training VecEnv (``step_async``/``step_wait``, ``reset``, ``env_method``: env steps,
    resets, action masks unless the algorithm reads them off the observations, queued starts); ``policy_s``: the
    policy's forward passes that pick actions in rollouts (``forward``, or GRPO's ``sample_from_numpy``);
    ``update_s``: the algorithm's ``train()`` (the gradient update); ``rollout_other_s``: the rest of the rollouts
    (buffers, advantages, callbacks); ``other_s``: the rest of ``learn`` (set-up, logging). ``env_steps``: the env steps
    taken in rollouts, recorded or not: on a VecEnv without ``step_some``, GRPO and GiGPO step every env, also those left
    idle at the end of a rollout while its last episodes finish, so they can take more than ``num_timesteps``.
    ``query_embeds`` / ``query_embed_s``: query texts the envs' retrieval embedded with the model (in no cache yet) and
    the seconds those forward passes took; ``index_searches`` / ``index_search_s``: the index queries made for queries
    whose results no cache held. Both are within ``env_s`` (and ``other_s`` for an env's first reset); counted on
    envs stepped in this process (a subprocess VecEnv's are not seen: 0).
    """

    total_s: float = 0.0
    #: CPU seconds of this process during ``learn`` (a subprocess VecEnv's workers not included): unlike wall time,
    #: hardly changed by other jobs on the machine
    process_cpu_s: float = 0.0
    env_s: float = 0.0
    policy_s: float = 0.0
    update_s: float = 0.0
    rollout_s: float = 0.0
    env_steps: int = 0
    gc_s: float = 0.0
    gc_collections: int = 0
    query_embeds: int = 0
    query_embed_s: float = 0.0
    index_searches: int = 0
    index_search_s: float = 0.0

    @property
    def rollout_other_s(self) -> float:
        return max(0.0, self.rollout_s - self.env_s - self.policy_s)

    @property
    def other_s(self) -> float:
        return max(0.0, self.total_s - self.rollout_s - self.update_s)

    def as_dict(self) -> dict[str, float]:
        return {
            "total_s": self.total_s,
            "process_cpu_s": self.process_cpu_s,
            "env_s": self.env_s,
            "policy_inference_s": self.policy_s,
            "update_s": self.update_s,
            "rollout_other_s": self.rollout_other_s,
            "other_s": self.other_s,
            "env_steps": self.env_steps,
            "gc_s": self.gc_s,
            "gc_collections": self.gc_collections,
            "query_embeds": self.query_embeds,
            "query_embed_s": self.query_embed_s,
            "index_searches": self.index_searches,
            "index_search_s": self.index_search_s,
        }

    def summary(self) -> str:
        """One line: each part in seconds and as a share of the total (see :func:`format_time_breakdown`)."""
        return format_time_breakdown(self.as_dict())


def format_time_breakdown(breakdown: dict[str, float]) -> str:
    """One line from :meth:`TimeBreakdown.as_dict` (as stored in ``TrainResult.time_breakdown``)."""
    names = {
        "env_s": "env stepping",
        "policy_inference_s": "policy inference",
        "update_s": "update",
        "rollout_other_s": "other rollout work",
        "other_s": "set-up and logging",
    }
    total = breakdown.get("total_s") or 1.0
    line = ", ".join(f"{name} {breakdown[key]:.1f} s ({100 * breakdown[key] / total:.0f}%)" for key, name in names.items())
    if "process_cpu_s" in breakdown:
        line += f"; {breakdown['process_cpu_s']:.1f} CPU s in this process"
    if breakdown.get("gc_collections"):
        line += f"; garbage collector pauses {breakdown['gc_s']:.1f} s (within the parts above)"
    if breakdown.get("query_embeds") or breakdown.get("index_searches"):
        line += (
            f"; retrieval met {breakdown.get('query_embeds', 0):,} query texts no cache held: embedding them took "
            f"{breakdown.get('query_embed_s', 0.0):.1f} s and {breakdown.get('index_searches', 0):,} index searches "
            f"{breakdown.get('index_search_s', 0.0):.1f} s (within env stepping)"
        )
    return line


def _retrieval_counters(env: VecEnv) -> tuple[float, float, float, float]:
    """``(query texts embedded, their seconds, index searches, their seconds)`` summed over the retrieval services of
    the envs this process steps (each service once: the envs of one config share theirs); zeros for other VecEnvs."""
    services: dict[int, Any] = {}
    for sub_env in getattr(env, "envs", None) or ():
        service = getattr(getattr(sub_env, "unwrapped", None), "service", None)
        if service is not None:
            services[id(service)] = service
    totals = [0.0, 0.0, 0.0, 0.0]
    for service in services.values():
        for encoder in getattr(service, "encoders", ()):
            totals[0] += getattr(encoder, "model_calls", 0)
            totals[1] += getattr(encoder, "model_s", 0.0)
        for retriever in getattr(service, "retrievers", ()):
            totals[2] += getattr(retriever, "searches", 0)
            totals[3] += getattr(retriever, "search_s", 0.0)
    return totals[0], totals[1], totals[2], totals[3]


#: marks "no instance attribute of that name" in :func:`timed_learning`'s list of what it patched
_ABSENT = object()


@contextlib.contextmanager
def timed_learning(model: BaseAlgorithm, env: VecEnv) -> Iterator[TimeBreakdown]:
    """Time ``model.learn`` inside this block by part (see :class:`TimeBreakdown`).

    Wraps, on these instances only and until the block ends, the VecEnv's entry points, the policy's ``forward`` (and
    ``sample_from_numpy``, GRPO's collection path), and
    the algorithm's ``collect_rollouts`` and ``train``, and adds a ``gc.callbacks`` entry that times the garbage
    collector's pauses; nothing else changes (the VecEnv is not wrapped, so algorithms that check
    ``env.unwrapped is env`` behave as without timing).
    """
    times = TimeBreakdown()
    #: (instance, name, its own attribute before the patch or _ABSENT): restored when the block ends
    patched: list[tuple[Any, str, Any]] = []

    def wrap(
        obj: Any, name: str, field_name: str, only_in_rollout: bool = False, env_steps: Callable[..., int] | None = None
    ) -> None:
        """Time ``obj.name`` into ``field_name``; ``env_steps(*args)``: the env steps that call takes, if it steps."""
        inner = getattr(obj, name)

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if only_in_rollout and not in_rollout[0]:
                return inner(*args, **kwargs)
            if env_steps is not None:
                times.env_steps += env_steps(*args)
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                setattr(times, field_name, getattr(times, field_name) + time.perf_counter() - t)

        patched.append((obj, name, vars(obj).get(name, _ABSENT)))
        setattr(obj, name, timed)

    in_rollout = [False]
    collect = model.collect_rollouts

    def collect_rollouts(*args: Any, **kwargs: Any) -> Any:
        in_rollout[0] = True
        t = time.perf_counter()
        try:
            return collect(*args, **kwargs)
        finally:
            in_rollout[0] = False
            times.rollout_s += time.perf_counter() - t

    for name in ("step_async", "reset", "env_method"):
        wrap(env, name, "env_s", only_in_rollout=True)
    # every env takes a step in step_wait, recorded or not; step_some (if the VecEnv has it) steps the envs it names
    wrap(env, "step_wait", "env_s", only_in_rollout=True, env_steps=lambda: env.num_envs)
    if hasattr(env, "step_some"):
        wrap(env, "step_some", "env_s", only_in_rollout=True, env_steps=lambda actions, indices, **_: len(indices))
    wrap(model.policy, "forward", "policy_s", only_in_rollout=True)
    if hasattr(model.policy, "sample_from_numpy"):  # GRPO's collection path from numpy observations
        wrap(model.policy, "sample_from_numpy", "policy_s", only_in_rollout=True)
    wrap(model, "train", "update_s")
    patched.append((model, "collect_rollouts", vars(model).get("collect_rollouts", _ABSENT)))
    model.collect_rollouts = collect_rollouts  # type: ignore[method-assign]
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            times.gc_s += time.perf_counter() - gc_start[0]
            times.gc_collections += 1

    gc.callbacks.append(on_gc)
    retrieval0 = _retrieval_counters(env)
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        yield times
    finally:
        times.total_s = time.perf_counter() - t0
        times.process_cpu_s = time.process_time() - cpu0
        retrieval1 = _retrieval_counters(env)
        times.query_embeds, times.index_searches = (int(retrieval1[i] - retrieval0[i]) for i in (0, 2))
        times.query_embed_s, times.index_search_s = (float(retrieval1[i] - retrieval0[i]) for i in (1, 3))
        gc.callbacks.remove(on_gc)
        for obj, name, before in reversed(patched):  # instance attributes only: the class methods show through again
            if before is _ABSENT:
                with contextlib.suppress(AttributeError):
                    delattr(obj, name)
            else:  # an instance's own attribute (e.g. ShardedVecEnv's step_some) is put back
                setattr(obj, name, before)


@contextlib.contextmanager
def threads_in_update(model: BaseAlgorithm, threads: int | None) -> Iterator[None]:
    """Run each of ``model``'s updates (``model.train()``) under ``threads`` torch intra-op threads, restoring the count
    it found after each (``None``: change nothing). Wraps ``train`` on this instance only, until the block ends."""
    if threads is None:
        yield
        return
    before = vars(model).get("train", _ABSENT)
    update = model.train

    @functools.wraps(update)
    def train_with_threads(*args: Any, **kwargs: Any) -> Any:
        with scoped_torch_threads(threads):
            return update(*args, **kwargs)

    model.train = train_with_threads  # type: ignore[method-assign]
    try:
        yield
    finally:
        if before is _ABSENT:
            del model.train
        else:
            model.train = before  # type: ignore[method-assign]


@dataclass
class TrainResult:
    """What ``train`` did: where the model is, how long it took, and the held-out evaluation table."""

    config: TrainConfig
    model_path: Path
    #: Env steps actually trained on (GRPO overshoots ``total_timesteps`` by < one rollout).
    num_timesteps: int
    train_wall_s: float
    eval_wall_s: float
    #: Trainable parameters of the policy (GRPO: actor only; PPO: actor and critic).
    n_params: int
    #: Heuristic rows (if evaluated) then the model's row; empty when ``eval_episodes == 0``.
    results: list[EvalResult] = field(default_factory=list)
    #: Where ``train_wall_s`` went (:meth:`TimeBreakdown.as_dict`): env stepping, policy inference, update, other.
    time_breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.num_timesteps / self.train_wall_s if self.train_wall_s > 0 else 0.0

    @property
    def table(self) -> str:
        return format_table(self.results) if self.results else "(no evaluation)"

    @property
    def model_result(self) -> EvalResult | None:
        """The trained model's row of the evaluation (``None`` if not evaluated)."""
        return self.results[-1] if self.results else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_dict(),
            "model_path": str(self.model_path),
            "num_timesteps": self.num_timesteps,
            "train_wall_s": self.train_wall_s,
            "steps_per_s": self.steps_per_s,
            "eval_wall_s": self.eval_wall_s,
            "n_params": self.n_params,
            "time_breakdown": dict(self.time_breakdown),
            "results": [r.as_dict() for r in self.results],
        }


def count_parameters(model: BaseAlgorithm) -> int:
    """Trainable parameters of ``model.policy``."""
    return sum(p.numel() for p in model.policy.parameters() if p.requires_grad)


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (listing the EDO ids) if ``env_id`` is not a registered Gymnasium id."""
    _ensure_registered(env_id)


def _ensure_registered(env_id: str) -> None:
    import edo_gym  # noqa: F401 - registers the EDO ids

    if env_id not in gym.registry and ":" not in env_id:
        raise ValueError(f"unknown env id {env_id!r}; registered EDO ids: {sorted(_edo_ids())}")


def _edo_ids() -> list[str]:
    from edo_gym.registration import VARIANTS

    return list(VARIANTS)


class FreshInfoDummyVecEnv(DummyVecEnv):
    """``DummyVecEnv`` whose ``step_wait`` returns the step's info dicts as the envs made them, not a deep copy, and
    that can step some of its envs only (:meth:`step_some`).

    ``DummyVecEnv`` deep-copies the list of infos on every step (in case an env reuses or later changes an info it
    returned). An EDO env builds every info, and every value in it, anew on each step and never touches it again
    (nor do ``Monitor`` and ``GroupStartWrapper``), so the copy changes nothing but costs time (16 nested dicts per
    step with 16 envs; ``make train`` measured 3,100-3,133 steps/s without it, 2,728-3,001 with it, runs alternated
    on one machine). Observations, rewards, dones and infos are the same as
    ``DummyVecEnv``'s (tested); ``make_train_env`` uses it for EDO ids only.
    """

    #: Methods whose ``env_method`` call does exactly what ``DummyVecEnv.env_method`` does (call each target env's
    #: ``get_wrapper_attr(name)``): GRPO and GiGPO call the wrappers' ``queue_starts`` directly, once per episode.
    direct_env_methods: tuple[str, ...] = ("queue_starts",)
    #: ``step``, ``step_some`` and ``reset`` hand out new observation arrays (copies of the buffers) and never write into
    #: them again: GRPO and GiGPO store a step's observations as handed out, without a copy of their own.
    fresh_observations: bool = True

    def __init__(self, env_fns: list[Callable[[], gym.Env]]):
        super().__init__(env_fns)
        #: envs whose episode ended in ``step_some(..., hold=...)`` without the auto-reset (see there)
        self._held: set[int] = set()
        #: per env, ``(key, the env's row of the key's observation buffer)``: ``_save_obs`` assigns into the row views
        #: (DummyVecEnv's ``buf_obs[key][env_idx] = obs[key]`` without the dict lookup and the row indexing each step:
        #: 0.66 against 1.05 us for EDO's 7 keys). None when a buffer has no row view (a scalar per env, or no keys)
        self._obs_rows: list[list[tuple[Any, np.ndarray]]] | None = None
        if self.keys and all(key is not None and self.buf_obs[key].ndim >= 2 for key in self.keys):
            self._obs_rows = [[(key, self.buf_obs[key][i]) for key in self.keys] for i in range(self.num_envs)]
        #: object arrays in the buffers (their deep copy also copies their elements: ``_obs_from_buf`` keeps it)
        self._object_obs = any(value.dtype == object for value in self.buf_obs.values())

    def _save_obs(self, env_idx: int, obs: Any) -> None:
        rows = self._obs_rows
        if rows is None:
            super()._save_obs(env_idx, obs)
            return
        for key, row in rows[env_idx]:
            row[...] = obs[key]  # the same assignment as buf_obs[key][env_idx] = obs[key] (broadcasting, casting)

    def _step_one(self, env_idx: int, action: Any, hold: bool = False) -> None:
        """DummyVecEnv's step of env ``env_idx`` (stable-baselines3 2.x), its auto-reset included unless ``hold``, into
        the buffers."""
        env = self.envs[env_idx]
        if env_idx in self._held:  # an env held at its episode's end, stepped again: start an episode first
            self._held.discard(env_idx)
            _, self.reset_infos[env_idx] = env.reset()
        obs, self.buf_rews[env_idx], terminated, truncated, self.buf_infos[env_idx] = env.step(action)
        self.buf_dones[env_idx] = terminated or truncated
        self.buf_infos[env_idx]["TimeLimit.truncated"] = truncated and not terminated
        if self.buf_dones[env_idx]:
            self.buf_infos[env_idx]["terminal_observation"] = obs
            if hold:
                self._held.add(env_idx)
                self.reset_infos[env_idx] = {}
            else:
                obs, self.reset_infos[env_idx] = env.reset()
        self._save_obs(env_idx, obs)

    def step_wait(self) -> Any:
        # DummyVecEnv.step_wait (stable-baselines3 2.x) without the final deepcopy of the infos
        for env_idx in range(self.num_envs):
            self._step_one(env_idx, self.actions[env_idx])
        return self._obs_from_buf(), np.copy(self.buf_rews), np.copy(self.buf_dones), list(self.buf_infos)

    def step_some(self, actions: np.ndarray, indices: Sequence[int], hold: Collection[int] = ()) -> Any:
        """Step only the envs in ``indices`` (env ``i`` with ``actions[i]``; an env that ends is reset as ``step``
        does); the others do not move: their observation row keeps its value, and they return reward 0, done False
        and an empty info.

        GRPO and GiGPO use it for the envs left idle at the end of a rollout, whose steps are never recorded: every
        episode they record starts with a seeded reset, and an EDO episode started with a seed does not depend on what
        the env did before (tested: the same training with and without it gives the same parameters).

        :param hold: Envs (of ``indices``) whose auto-reset is skipped if their episode ends now: their observation row
            shows the terminal observation and their ``reset_infos`` entry is empty. Such an env starts an episode (an
            unseeded reset) before its next step, unless ``reset`` or ``env_method("reset", ...)`` starts one first.
            GRPO holds the envs with no start queued: the auto-reset's episode would never be recorded.
        """
        hold = set(hold)
        rewards = np.zeros(self.num_envs, dtype=self.buf_rews.dtype)
        dones = np.zeros(self.num_envs, dtype=bool)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        stepped = list(indices)
        for env_idx in stepped:
            self._step_one(env_idx, actions[env_idx], hold=env_idx in hold)
            infos[env_idx] = self.buf_infos[env_idx]
        # each stepped env's reward and done, copied from the buffers in one take (the same values)
        rewards[stepped] = self.buf_rews[stepped]
        dones[stepped] = self.buf_dones[stepped]
        return self._obs_from_buf(), rewards, dones, infos

    def reset(self) -> Any:
        self._held.clear()
        return super().reset()

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        if method_name == "reset":  # an env reset this way is no longer held
            self._held.difference_update(self._get_indices(indices))
        return super().env_method(method_name, *method_args, indices=indices, **method_kwargs)

    def _obs_from_buf(self) -> Any:
        # DummyVecEnv's deepcopy of the dict of observation buffers, as one copy per array (the same arrays, values and
        # dict type; object arrays, whose deep copy also copies their elements, keep the deepcopy)
        if self._object_obs:
            return super()._obs_from_buf()
        return dict_to_obs(
            self.observation_space, type(self.buf_obs)((key, value.copy()) for key, value in self.buf_obs.items())
        )


def _is_edo_id(env_id: str) -> bool:
    return env_id.split(":", 1)[-1] in _edo_ids()


def make_train_env(cfg: TrainConfig) -> VecEnv:
    """The training VecEnv: ``cfg.n_envs`` copies of ``cfg.env_id`` (train split), each wrapped in ``Monitor``.

    ``vec_env="dummy"`` on an EDO id gives a :class:`FreshInfoDummyVecEnv` (no deep copy of the infos per step);
    ``vec_env="shards"`` a :class:`~baselines.sharded_vec_env.ShardedVecEnv` whose workers step their shards in that
    same class.
    """
    _ensure_registered(cfg.env_id)
    in_process: type[VecEnv] = FreshInfoDummyVecEnv if _is_edo_id(cfg.env_id) else DummyVecEnv
    vec_env_kwargs: dict[str, Any] | None = None
    if cfg.vec_env == "dummy":
        vec_cls: type[VecEnv] = in_process
    elif cfg.vec_env == "shards":
        # GRPO/GiGPO queue each episode's next start with an env_method call whose value they do not read: it rides
        # along with the worker's next command instead of costing a round trip of its own
        deferred = ("queue_starts",) if cfg.algo in GROUP_ALGOS else ()
        vec_cls = ShardedVecEnv
        vec_env_kwargs = {"n_workers": cfg.vec_workers, "vec_env_cls": in_process, "deferred_methods": deferred}
    else:
        vec_cls = SubprocVecEnv
    # make_vec_env would ask for render_mode="rgb_array", which EDO does not support
    env_kwargs = {"render_mode": None, **cfg.env_kwargs}
    # GRPO/GiGPO queue each episode's start in the env, so that the VecEnv's auto-reset is its only reset
    wrapper_class = GroupStartWrapper if cfg.algo in GROUP_ALGOS else None
    return make_vec_env(
        cfg.env_id,
        n_envs=cfg.n_envs,
        seed=cfg.seed,
        vec_env_cls=vec_cls,
        vec_env_kwargs=vec_env_kwargs,
        env_kwargs=env_kwargs,
        wrapper_class=wrapper_class,
    )


def make_algo(cfg: TrainConfig, env: VecEnv | gym.Env) -> BaseAlgorithm:
    """Build the (untrained) algorithm of ``cfg`` on ``env`` with ``MultiInputPolicy`` for Dict observations."""
    cls = _algo_class(cfg.algo)
    policy = "MultiInputPolicy" if isinstance(env.observation_space, gym.spaces.Dict) else "MlpPolicy"
    common: dict[str, Any] = dict(
        learning_rate=cfg.learning_rate,
        n_epochs=cfg.n_epochs,
        ent_coef=cfg.ent_coef,
        max_grad_norm=cfg.max_grad_norm,
        target_kl=cfg.target_kl,
        tensorboard_log=cfg.tensorboard_log,
        verbose=cfg.verbose,
        seed=cfg.seed,
        device=cfg.device,
    )
    if cfg.algo in GROUP_ALGOS:
        group_mode = cfg.group_mode
        if group_mode is None:
            group_mode = "task_id" if _has_num_tasks(env) else "seed"
        if cfg.algo == "gigpo":
            common["step_advantage_weight"] = cfg.step_advantage_weight
        return cls(
            policy,
            env,
            group_size=cfg.group_size,
            groups_per_rollout=cfg.groups_per_rollout,
            batch_size=cfg.batch_size,
            clip_range=cfg.clip_range,
            clip_range_high=cfg.clip_range_high,
            kl_coef=cfg.kl_coef,
            loss_type=cfg.loss_type,
            filter_on=cfg.filter_on,
            dynamic_sampling=cfg.dynamic_sampling,
            scale_rewards=cfg.scale_rewards or ("group" if cfg.normalize_std else "none"),
            supervision=cfg.supervision,
            group_mode=group_mode,
            # EDO's observations carry the action mask: read it there, not through 16 env_method calls per step
            action_mask_key="action_mask" if _is_edo_id(cfg.env_id) and _has_obs_key(env, "action_mask") else None,
            policy_kwargs=dict(net_arch=list(cfg.net_arch)),
            **common,
        )
    n_envs = env.num_envs if isinstance(env, VecEnv) else 1
    batch_size = min(cfg.batch_size or 64, cfg.n_steps * n_envs)
    return cls(
        policy,
        env,
        n_steps=cfg.n_steps,
        batch_size=batch_size,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        clip_range=cfg.clip_range,
        vf_coef=cfg.vf_coef,
        policy_kwargs=dict(net_arch=dict(pi=list(cfg.net_arch), vf=list(cfg.net_arch))),
        **common,
    )


def _has_obs_key(env: VecEnv | gym.Env, key: str) -> bool:
    space = env.observation_space
    return isinstance(space, gym.spaces.Dict) and key in space.spaces


def _has_num_tasks(env: VecEnv | gym.Env) -> bool:
    if isinstance(env, VecEnv):
        return bool(env.has_attr("num_tasks"))
    return hasattr(env.unwrapped, "num_tasks")


def evaluate_with_heuristics(
    model: Any,
    env_id: str,
    episodes: int = 200,
    seed: int = 0,
    name: str = "model",
    heuristics: bool = True,
    progress: bool = False,
    env_kwargs: dict[str, Any] | None = None,
) -> list[EvalResult]:
    """Evaluate ``model`` (and the four heuristics) on the first ``episodes`` held-out tasks of ``env_id``.

    :return: one ``EvalResult`` per heuristic (``HEURISTICS`` order) then the model's, last
    """
    _ensure_registered(env_id)
    env = make_eval_env(env_id, **(env_kwargs or {}))
    try:
        task_ids = heldout_task_ids(env, episodes)
        results = []
        if heuristics:
            for heuristic in HEURISTICS:
                results.append(evaluate_heuristic(make_heuristic(heuristic), env, task_ids, seed=seed, progress=progress))
        results.append(evaluate_model(model, env, task_ids, seed=seed, name=name, progress=progress))
    finally:
        env.close()
    return results


def train(cfg: TrainConfig) -> tuple[BaseAlgorithm, TrainResult]:
    """Train ``cfg.algo`` on ``cfg.env_id``, save it to ``cfg.model_path`` (plus a ``.json`` summary) and evaluate it.

    :return: the trained model and a :class:`TrainResult` (``result.table`` is the comparison table)
    """
    cfg.validate()
    if cfg.torch_threads is not None:
        th.set_num_threads(cfg.torch_threads)
    env = make_train_env(cfg)
    try:
        model = make_algo(cfg, env)
        t0 = time.perf_counter()
        # progress_bar: SB3's bar, counting recorded steps (see RecordedStepsProgressBar)
        callbacks: list[BaseCallback] = [RecordedStepsProgressBar()] if cfg.progress_bar else []
        if cfg.gc_freeze:
            callbacks.append(FreezeGCCallback())
        try:
            with timed_learning(model, env) as times, threads_in_update(model, cfg.update_threads):
                model.learn(
                    total_timesteps=cfg.total_timesteps,
                    callback=CallbackList(callbacks) if callbacks else None,
                    tb_log_name=f"{cfg.algo}_{cfg.env_id}",
                )
        finally:
            if cfg.gc_freeze:
                gc.unfreeze()  # also if learn raised (the callback's training end did not run)
        train_wall_s = time.perf_counter() - t0
    finally:
        env.close()
    path = cfg.model_path
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)

    results: list[EvalResult] = []
    t1 = time.perf_counter()
    if cfg.eval_episodes > 0:
        results = evaluate_with_heuristics(
            model,
            cfg.env_id,
            cfg.eval_episodes,
            seed=cfg.eval_seed,
            name=cfg.algo,
            heuristics=cfg.eval_heuristics,
            progress=cfg.progress_bar,
            env_kwargs=cfg.env_kwargs,
        )
    eval_wall_s = time.perf_counter() - t1
    result = TrainResult(
        config=cfg,
        model_path=path,
        num_timesteps=int(model.num_timesteps),
        train_wall_s=train_wall_s,
        eval_wall_s=eval_wall_s,
        n_params=count_parameters(model),
        results=results,
        time_breakdown=times.as_dict(),
    )
    path.with_suffix(".json").write_text(json.dumps(result.as_dict(), indent=2, default=str))
    return model, result


def infer_algo(path: str | os.PathLike) -> str:
    """The algo name (``ALGOS``) of a model saved by SB3 (``model.save``), read from the zip's ``data`` entry."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved model at {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data").decode("utf-8"))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a model saved by Stable-Baselines3 ({exc}); pass algo= explicitly") from exc
    if "group_size" in data and "groups_per_rollout" in data:
        return "gigpo" if "step_advantage_weight" in data else "grpo"
    policy_module = str(data.get("policy_class", {}).get("__module__", ""))
    if policy_module.startswith("sb3_contrib.common.maskable"):
        return "maskable_ppo"
    if policy_module.startswith("stable_baselines3") and "n_steps" in data and "clip_range" in data:
        return "ppo"
    raise ValueError(f"cannot tell which algorithm saved {path} (policy module {policy_module!r}); pass algo= explicitly")


def load_model(path: str | os.PathLike, algo: str | None = None, device: str = "cpu") -> BaseAlgorithm:
    """Load a saved model; ``algo=None`` infers the class from the zip (:func:`infer_algo`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved model at {path}")
    if algo is None:
        algo = infer_algo(path)
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; choose from {list(ALGOS)}")
    return _algo_class(algo).load(path, device=device)


def evaluate_saved(
    path: str | os.PathLike,
    env_id: str = "EDO-v0",
    episodes: int = 200,
    seed: int = 0,
    algo: str | None = None,
    heuristics: bool = True,
    progress: bool = False,
    env_kwargs: dict[str, Any] | None = None,
) -> list[EvalResult]:
    """Load the model at ``path`` and evaluate it next to the heuristics on held-out tasks (see :func:`train`).

    :return: heuristic rows (``HEURISTICS`` order) then the model's row; ``format_table`` prints them
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    algo = algo or infer_algo(path)
    model = load_model(path, algo)
    return evaluate_with_heuristics(
        model, env_id, episodes, seed, name=algo, heuristics=heuristics, progress=progress, env_kwargs=env_kwargs
    )


__all__ = [
    "ALGOS",
    "RecordedStepsProgressBar",
    "TrainConfig",
    "check_env_id",
    "TrainResult",
    "count_parameters",
    "evaluate_saved",
    "evaluate_with_heuristics",
    "infer_algo",
    "load_model",
    "make_algo",
    "make_train_env",
    "train",
]
