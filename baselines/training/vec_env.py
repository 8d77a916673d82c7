"""The training VecEnv (:func:`make_train_env`) and the in-process VecEnv it uses for EDO ids
(:class:`FreshInfoDummyVecEnv`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from baselines.grpo.wrappers import GroupStartWrapper
from baselines.training.config import GROUP_ALGOS, TrainConfig


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (listing the EDO ids) if ``env_id`` is not a registered Gymnasium id."""
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
    (nor do ``Monitor`` and ``GroupStartWrapper``), so the copy changes nothing but costs time: 16 nested dicts per
    step with 16 envs (``docs/performance.md``, "GRPO fast paths", gives the figure). Observations, rewards, dones and
    infos are the same as ``DummyVecEnv``'s (tested); ``make_train_env`` uses it for EDO ids only.

    :meth:`step_some` is the partial step that :func:`~baselines.grpo.scheduling.idle_envs_can_wait` looks for.
    """

    def __init__(self, env_fns: list[Callable[[], gym.Env]]):
        super().__init__(env_fns)
        #: envs whose episode ended in ``step_some(..., hold=...)`` without the auto-reset (see there)
        self._held: set[int] = set()

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


class Wrappers:
    """Apply several wrappers in order (innermost first), as one ``make_vec_env`` ``wrapper_class``; it pickles if they
    do (subprocess VecEnvs)."""

    def __init__(self, *wrappers: Callable[[gym.Env], gym.Env]):
        self.wrappers = wrappers

    def __call__(self, env: gym.Env) -> gym.Env:
        for wrap in self.wrappers:
            env = wrap(env)
        return env


def is_edo_id(env_id: str) -> bool:
    """Whether ``env_id`` (with or without a ``module:`` prefix) is one of the EDO ids."""
    return env_id.split(":", 1)[-1] in _edo_ids()


def make_train_env(cfg: TrainConfig) -> VecEnv:
    """The training VecEnv: ``cfg.n_envs`` copies of ``cfg.env_id`` (train split), each wrapped in ``Monitor``.

    ``vec_env="dummy"`` on an EDO id gives a :class:`FreshInfoDummyVecEnv` (no deep copy of the infos per step).
    """
    check_env_id(cfg.env_id)
    in_process: type[VecEnv] = FreshInfoDummyVecEnv if is_edo_id(cfg.env_id) else DummyVecEnv
    vec_cls: type[VecEnv] = in_process if cfg.vec_env == "dummy" else SubprocVecEnv
    # make_vec_env would ask for render_mode="rgb_array", which EDO does not support
    env_kwargs = {"render_mode": None, **cfg.env_kwargs}
    # GRPO/GiGPO queue each episode's start in the env, so that the VecEnv's auto-reset is its only reset
    wrapper_class: Callable[[gym.Env], gym.Env] | None = GroupStartWrapper if cfg.algo in GROUP_ALGOS else None
    if cfg.hop_curriculum is not None:  # the curriculum's filter sits under GroupStartWrapper: group starts pass it
        from baselines.curriculum import curriculum_wrapper

        wrapper_class = Wrappers(curriculum_wrapper(cfg.hop_curriculum), *([wrapper_class] if wrapper_class else []))
    return make_vec_env(
        cfg.env_id,
        n_envs=cfg.n_envs,
        seed=cfg.seed,
        vec_env_cls=vec_cls,
        env_kwargs=env_kwargs,
        wrapper_class=wrapper_class,
    )
