"""
Gymnasium wrapper that lets GRPO choose how an env's next episode starts, auto-resets included.

SB3 VecEnvs reset a finished env on their own, without seed or options, inside ``step()``. GRPO needs every
episode to start from its group's task, so without help it must reset a finished env a second time
(``env_method("reset", seed=..., options=...)``). With :class:`GroupStartWrapper` around each env, GRPO queues
the next start of every env ahead of time (``env_method("queue_starts", ...)``, public VecEnv API) and the
VecEnv's own auto-reset (or ``VecEnv.reset()``) starts it: one reset per episode, through any VecEnv and any
VecEnv wrapper (VecNormalize, VecMonitor, ...). GRPO adds the wrapper itself when it builds the VecEnv (an env id
or a ``gym.Env``); for a VecEnv you build, pass ``wrapper_class=GroupStartWrapper`` to ``make_vec_env``.
"""

from collections import deque
from typing import Any

import gymnasium as gym

#: A start: the seed and options of one ``reset`` call.
Start = tuple[int | None, dict[str, Any] | None]


class GroupStartWrapper(gym.Wrapper):
    """
    Reset the wrapped env with queued ``(seed, options)`` starts, first in first out.

    A ``reset`` call while starts are queued uses the oldest one and ignores its own ``seed`` / ``options``
    (a VecEnv's auto-reset passes none; ``DummyVecEnv.reset()`` may pass seeds from ``VecEnv.seed``). With no
    start queued, ``reset`` is the wrapped env's. Nothing else changes: observations, rewards and infos pass through.

    :param env: The env to wrap
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._starts: deque[Start] = deque()

    def queue_starts(self, starts: list[Start]) -> int:
        """
        Append starts to the queue.

        :param starts: ``(seed, options)`` pairs, used by the next resets in order
        :return: Number of starts queued after the call
        """
        for seed, options in starts:
            self._starts.append((None if seed is None else int(seed), None if options is None else dict(options)))
        return len(self._starts)

    def clear_starts(self) -> None:
        """Drop every queued start."""
        self._starts.clear()

    @property
    def n_queued_starts(self) -> int:
        """Number of starts waiting for a reset."""
        return len(self._starts)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self._starts:
            seed, options = self._starts.popleft()
        return self.env.reset(seed=seed, options=options)
