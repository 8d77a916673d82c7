"""Build, train, save and evaluate a model from a :class:`~baselines.training.config.TrainConfig`."""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.vec_env import VecEnv

from baselines.algorithms import GROUP_ALGOS, algo_class, infer_algo, load_model
from baselines.evaluation import (
    EvalResult,
    check_model_env,
    evaluate_heuristic,
    evaluate_model,
    format_table,
    heldout_task_ids,
    make_eval_env,
)
from baselines.experience import demonstrators, reads_text, warm_start
from baselines.grpo.callbacks import FreezeGCCallback, RecordedStepsProgressBar
from baselines.heuristics import HEURISTICS, make_heuristic
from baselines.training.config import TrainConfig
from baselines.training.timing import timed_learning
from baselines.training.vec_env import check_env_id, is_edo_id, make_train_env


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
    #: The behaviour-cloning warm start (:func:`baselines.experience.warm_start`'s summary; empty without one). Its
    #: time is not in ``train_wall_s``.
    warm_start: dict[str, Any] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.num_timesteps / self.train_wall_s if self.train_wall_s > 0 else 0.0

    @property
    def table(self) -> str:
        return format_table(self.results) if self.results else "(no evaluation)"

    @property
    def summary(self) -> str:
        """The ladder in words: the warm start's teacher, its clone before RL and the trained policy, against the best
        hand-written policy that reads only what an orchestrator sees (the oracle excluded); ``""`` without rows."""
        model = self.model_result
        if model is None:
            return ""
        rows = {r.policy: r for r in self.results}
        hand = [r for r in self.results[:-1] if not r.uses_hidden_state and r.policy in demonstrators()]
        parts = []
        teacher = self.config.warm_start
        if teacher in rows:
            parts.append(f"teacher {teacher} {rows[teacher].success_rate:.3f}")
        clone = rows.get(f"clone of {teacher}")
        if clone is not None:
            parts.append(f"clone before RL {clone.success_rate:.3f}")
        parts.append(f"{model.policy} {model.success_rate:.3f}")
        text = f"success on {model.episodes} held-out tasks: " + " -> ".join(parts)
        if hand:
            best = max(hand, key=lambda r: (r.success_rate, r.mean_return))
            text += (
                f"; best hand-written policy {best.policy} {best.success_rate:.3f} (return {best.mean_return:+.3f}); "
                f"{model.policy} {model.success_rate - best.success_rate:+.3f} success, "
                f"{model.mean_return - best.mean_return:+.3f} return"
            )
        return text

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
            "warm_start": dict(self.warm_start),
            "results": [r.as_dict() for r in self.results],
        }


def count_parameters(model: BaseAlgorithm) -> int:
    """Trainable parameters of ``model.policy``."""
    return sum(p.numel() for p in model.policy.parameters() if p.requires_grad)


def make_algo(cfg: TrainConfig, env: VecEnv | gym.Env) -> BaseAlgorithm:
    """Build the (untrained) algorithm of ``cfg`` on ``env`` with ``MultiInputPolicy`` for Dict observations."""
    cls = algo_class(cfg.algo)
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
            action_mask_key="action_mask" if is_edo_id(cfg.env_id) and _has_obs_key(env, "action_mask") else None,
            policy_kwargs=dict(net_arch=list(cfg.net_arch), **_extractor_kwargs(cfg)),
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
        policy_kwargs=dict(net_arch=dict(pi=list(cfg.net_arch), vf=list(cfg.net_arch)), **_extractor_kwargs(cfg)),
        **common,
    )


def _extractor_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    if cfg.features_extractor is None:
        return {}
    from baselines.extractors import EDOTableExtractor

    return {"features_extractor_class": EDOTableExtractor}


def apply_warm_start(model: BaseAlgorithm, cfg: TrainConfig) -> dict[str, Any]:
    """Pre-train ``model``'s policy by behaviour cloning as ``cfg.warm_start`` says (nothing when it is None).

    :return: :func:`baselines.experience.warm_start`'s summary, or an empty dict
    """
    if cfg.warm_start is None:
        return {}
    return warm_start(
        model.policy,
        cfg.warm_start,
        cfg.env_id,
        cfg.env_kwargs,
        episodes=cfg.warm_start_episodes,
        epochs=cfg.bc_epochs,
        batch_size=cfg.bc_batch_size,
        learning_rate=cfg.bc_learning_rate,
        ent_coef=cfg.bc_ent_coef,
        seed=cfg.seed,
        progress=cfg.progress_bar,
    )


def curriculum_callbacks(cfg: TrainConfig) -> list[BaseCallback]:
    """The callback that widens ``cfg.hop_curriculum``'s filter during ``learn`` (none without a curriculum); the
    training env must come from :func:`make_train_env` with the same ``cfg``."""
    if cfg.hop_curriculum is None:
        return []
    from baselines.curriculum import HopCurriculumCallback

    return [HopCurriculumCallback(cfg.hop_curriculum, cfg.total_timesteps)]


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
    extra_policies: Sequence[str] = (),
) -> list[EvalResult]:
    """Evaluate ``model`` (and the heuristics) on the first ``episodes`` held-out tasks of ``env_id``.

    :param extra_policies: other hand-written policies to evaluate beside them (names of
        :func:`baselines.experience.demonstrators`, e.g. the one a warm start cloned); a text-reading one runs on an
        env made with ``info_text=True``, on the same tasks
    :return: one ``EvalResult`` per heuristic (``HEURISTICS`` order), then per extra policy, then the model's, last
    """
    known = demonstrators()
    unknown = [p for p in extra_policies if p not in known]
    if unknown:
        raise ValueError(f"extra_policies {unknown} are not hand-written policies; choose from {sorted(known)}")
    check_env_id(env_id)
    env = make_eval_env(env_id, **(env_kwargs or {}))
    try:
        check_model_env(model, env, name)  # a model made for other observations fails here, before any episode
        task_ids = heldout_task_ids(env, episodes)
        results = []
        if heuristics:
            for heuristic in HEURISTICS:
                results.append(evaluate_heuristic(make_heuristic(heuristic), env, task_ids, seed=seed, progress=progress))
        for policy in extra_policies:
            if reads_text(policy):
                text_env = make_eval_env(env_id, **{**(env_kwargs or {}), "info_text": True})
                try:
                    results.append(evaluate_heuristic(known[policy](), text_env, task_ids, seed=seed, progress=progress))
                finally:
                    text_env.close()
            else:
                results.append(evaluate_heuristic(known[policy](), env, task_ids, seed=seed, progress=progress))
        results.append(evaluate_model(model, env, task_ids, seed=seed, name=name, progress=progress))
    finally:
        env.close()
    return results


def warm_start_teacher(cfg: TrainConfig) -> tuple[str, ...]:
    """The hand-written policy a warm start clones when it is not one of ``HEURISTICS`` (evaluated beside them)."""
    source = cfg.warm_start
    return (source,) if source is not None and source not in HEURISTICS and source in demonstrators() else ()


def comparison_policies(cfg: TrainConfig) -> tuple[str, ...]:
    """The hand-written policies evaluated beside ``HEURISTICS``: ``cfg.compare_with``, then the warm start's teacher
    when it is neither a heuristic nor among them."""
    names = tuple(name for name in cfg.compare_with if name not in HEURISTICS)
    return names + tuple(t for t in warm_start_teacher(cfg) if t not in names)


def evaluate_clone(model: BaseAlgorithm, cfg: TrainConfig) -> EvalResult | None:
    """The warm-started policy before any RL, on the held-out tasks the trained one is evaluated on (the ladder's
    middle row, named ``clone of <source>``); ``None`` when ``cfg.eval_clone`` is off or nothing is evaluated."""
    if not cfg.eval_clone or cfg.eval_episodes <= 0:
        return None
    env = make_eval_env(cfg.env_id, **(cfg.env_kwargs or {}))
    try:
        task_ids = heldout_task_ids(env, cfg.eval_episodes)
        name = f"clone of {cfg.warm_start}"
        return evaluate_model(model, env, task_ids, seed=cfg.eval_seed, name=name, progress=cfg.progress_bar)
    finally:
        env.close()


def train(cfg: TrainConfig) -> tuple[BaseAlgorithm, TrainResult]:
    """Train ``cfg.algo`` on ``cfg.env_id``, save it to ``cfg.model_path`` (plus a ``.json`` summary) and evaluate it.

    :return: the trained model and a :class:`TrainResult` (``result.table`` is the comparison table)
    """
    cfg.validate()
    if cfg.torch_threads is not None:
        th.set_num_threads(cfg.torch_threads)
    env = make_train_env(cfg)
    warm: dict[str, Any] = {}
    clone_row: EvalResult | None = None
    try:
        model = make_algo(cfg, env)
        warm = apply_warm_start(model, cfg)
        clone_row = evaluate_clone(model, cfg) if warm else None
        t0 = time.perf_counter()
        # progress_bar: SB3's bar, counting recorded steps (see RecordedStepsProgressBar)
        callbacks: list[BaseCallback] = [RecordedStepsProgressBar()] if cfg.progress_bar else []
        if cfg.gc_freeze:
            callbacks.append(FreezeGCCallback())
        callbacks += curriculum_callbacks(cfg)
        try:
            with timed_learning(model, env) as times:
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
            extra_policies=comparison_policies(cfg) if cfg.eval_heuristics else (),
        )
        if clone_row is not None:  # the ladder: ..., the teacher, its clone before RL, the trained policy
            results.insert(len(results) - 1, clone_row)
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
        warm_start=warm,
    )
    path.with_suffix(".json").write_text(json.dumps(result.as_dict(), indent=2, default=str))
    return model, result


def saved_config(path: str | os.PathLike) -> dict[str, Any] | None:
    """The settings (``TrainConfig.as_dict()``) of the run that saved the model at ``path``, from the summary
    :func:`train` writes beside it (``path`` with ``.json``); ``None`` when there is no such file.

    :raises ValueError: when that file is there but is not such a summary (no ``config`` with an ``env_id``)
    """
    summary = Path(path).with_suffix(".json")
    if not summary.is_file():
        return None
    try:
        data = json.loads(summary.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{summary}, beside the model, cannot be read as JSON ({exc})") from exc
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict) or not isinstance(config.get("env_id"), str):
        raise ValueError(
            f"{summary}, beside the model, is not the summary edo train saves (no config with an env_id): move it away "
            "to give the settings by flags"
        )
    return config


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
