"""Tiny environments used by the GRPO tests."""

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class IllegalActionError(RuntimeError):
    """Raised by :class:`MaskedTaskEnv` in strict mode when a masked-out action is taken."""


class MaskedTaskEnv(gym.Env):
    """
    Small multi-task env with invalid actions, for GRPO tests.

    Task ``k`` in ``range(num_tasks)`` (chosen with ``reset(options={"task_id": k})``, otherwise drawn from
    the env's RNG so that the same reset seed gives the same task). At step ``t`` the correct action is
    ``target = (k + t) % n_actions``; the ``n_illegal`` actions ``(target + 1 + j) % n_actions`` are illegal
    (masked out by :meth:`action_masks`). The correct action gives reward +1 and the episode continues; any
    other legal action gives 0 and terminates the episode. The episode is truncated after ``horizon`` steps.
    An illegal action raises :class:`IllegalActionError` (``strict=True``) or is recorded in
    ``illegal_actions`` and terminates the episode with reward -1.

    Observation: one-hot task, ``t / horizon``; with ``expose_tag`` also ``[env_uid, episode_counter, t]``
    so tests can check episode boundaries. With ``dict_obs`` the observation is
    ``{"state": ..., "tag": [env_uid, episode_counter, t]}``, plus ``"mask"`` (the action mask as 0/1 floats) with
    ``mask_in_obs``. With ``multi_discrete`` the action space is
    ``MultiDiscrete([n_actions, 2])`` (second component free, mask all True).

    Every episode is logged in ``episode_log`` (keys: episode, length, return, task_id, completed).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    _next_uid: ClassVar[int] = 0

    def __init__(
        self,
        num_tasks: int = 3,
        n_actions: int = 4,
        n_illegal: int = 2,
        horizon: int = 6,
        strict: bool = True,
        expose_tag: bool = False,
        dict_obs: bool = False,
        multi_discrete: bool = False,
        mask_in_obs: bool = False,
    ):
        super().__init__()
        assert 0 <= n_illegal < n_actions
        self.num_tasks = num_tasks
        self.n_actions = n_actions
        self.n_illegal = n_illegal
        self.horizon = horizon
        self.strict = strict
        self.expose_tag = expose_tag
        self.dict_obs = dict_obs
        self.multi_discrete = multi_discrete
        self.mask_in_obs = mask_in_obs
        self.uid = MaskedTaskEnv._next_uid
        MaskedTaskEnv._next_uid += 1

        state_dim = num_tasks + 1
        if dict_obs:
            sub_spaces = {
                "state": spaces.Box(0.0, 1.0, (state_dim,), np.float32),
                "tag": spaces.Box(0.0, 1e9, (3,), np.float32),
            }
            if mask_in_obs:
                sub_spaces["mask"] = spaces.Box(0.0, 1.0, (n_actions + (2 if multi_discrete else 0),), np.float32)
            self.observation_space = spaces.Dict(sub_spaces)
        else:
            dim = state_dim + (3 if expose_tag else 0)
            self.observation_space = spaces.Box(0.0, 1e9, (dim,), np.float32)
        if multi_discrete:
            self.action_space = spaces.MultiDiscrete([n_actions, 2])
        else:
            self.action_space = spaces.Discrete(n_actions)

        self.task_id = 0
        self.t = 0
        self.episode_counter = -1
        self.illegal_actions = 0
        self.episode_log: list[dict[str, Any]] = []
        self._return = 0.0
        self._done = True

    def _target(self) -> int:
        return (self.task_id + self.t) % self.n_actions

    def _illegal(self) -> set[int]:
        target = self._target()
        return {(target + 1 + j) % self.n_actions for j in range(self.n_illegal)}

    def action_masks(self) -> np.ndarray:
        mask = np.ones(self.n_actions, dtype=bool)
        mask[list(self._illegal())] = False
        if self.multi_discrete:
            return np.concatenate([mask, np.ones(2, dtype=bool)])
        return mask

    def _obs(self) -> Any:
        state = np.zeros(self.num_tasks + 1, dtype=np.float32)
        state[self.task_id] = 1.0
        state[-1] = self.t / self.horizon
        tag = np.array([self.uid, self.episode_counter, self.t], dtype=np.float32)
        if self.dict_obs:
            if self.mask_in_obs:
                return {"state": state, "tag": tag, "mask": self.action_masks().astype(np.float32)}
            return {"state": state, "tag": tag}
        if self.expose_tag:
            return np.concatenate([state, tag])
        return state

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if not self._done and self.episode_counter >= 0:
            self.episode_log[-1]["completed"] = False
        if options is not None and "task_id" in options:
            self.task_id = int(options["task_id"])
            assert 0 <= self.task_id < self.num_tasks
        else:
            self.task_id = int(self.np_random.integers(self.num_tasks))
        self.t = 0
        self._return = 0.0
        self._done = False
        self.episode_counter += 1
        self.episode_log.append({"episode": self.episode_counter, "length": 0, "task_id": self.task_id, "completed": None})
        self.episode_log[-1]["return"] = 0.0
        return self._obs(), {"task_id": self.task_id, "episode": self.episode_counter}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert not self._done, "step() called on a finished episode"
        a = int(np.asarray(action).reshape(-1)[0])
        if a in self._illegal():
            self.illegal_actions += 1
            if self.strict:
                raise IllegalActionError(f"illegal action {a} at t={self.t} for task {self.task_id}")
            reward, terminated = -1.0, True
        elif a == self._target():
            reward, terminated = 1.0, False
        else:
            reward, terminated = 0.0, True
        self.t += 1
        truncated = not terminated and self.t >= self.horizon
        self._return += reward
        log = self.episode_log[-1]
        log["length"] = self.t
        log["return"] = self._return
        if terminated or truncated:
            self._done = True
            log["completed"] = True
        return self._obs(), reward, terminated, truncated, {"task_id": self.task_id}


class NoTaskEnv(gym.Env):
    """Minimal env without ``num_tasks`` (group_mode='task_id' must refuse it)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(2, dtype=np.float32), 0.0, True, False, {}


class ChainChoiceEnv(gym.Env):
    """
    Fixed-horizon chain where every action is graded on its own: the env where step-level credit matters (GiGPO).

    Task ``k`` in ``range(num_tasks)`` (``reset(options={"task_id": k})``, otherwise drawn from the env's RNG). At
    step ``t`` the correct action is ``(k + t) % n_actions`` and gives reward 1; any other action gives 0. The episode
    always lasts ``horizon`` steps (truncated). The observation is one-hot task and one-hot ``t``; with ``noise > 0``
    a last entry drawn uniformly from ``[0, noise)`` by the env's RNG makes observations differ between members of a
    task-id group (distinct seeds). ``info["anchor_key"]`` is ``"k:t"`` at reset and after every step, unless
    ``anchor_keys=False``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, num_tasks: int = 2, n_actions: int = 3, horizon: int = 8, noise: float = 0.0, anchor_keys: bool = True):
        super().__init__()
        self.num_tasks = num_tasks
        self.n_actions = n_actions
        self.horizon = horizon
        self.noise = noise
        self.anchor_keys = anchor_keys
        dim = num_tasks + horizon + 1 + (1 if noise > 0 else 0)
        self.observation_space = spaces.Box(0.0, 1.0, (dim,), np.float32)
        self.action_space = spaces.Discrete(n_actions)
        self.task_id = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        obs[self.task_id] = 1.0
        obs[self.num_tasks + self.t] = 1.0
        if self.noise > 0:
            obs[-1] = self.np_random.uniform(0.0, self.noise)
        return obs

    def _info(self) -> dict[str, Any]:
        return {"anchor_key": f"{self.task_id}:{self.t}"} if self.anchor_keys else {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if options is not None and "task_id" in options:
            self.task_id = int(options["task_id"])
        else:
            self.task_id = int(self.np_random.integers(self.num_tasks))
        self.t = 0
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = 1.0 if int(action) == (self.task_id + self.t) % self.n_actions else 0.0
        self.t += 1
        return self._obs(), reward, False, self.t >= self.horizon, self._info()
