"""A hop-count curriculum: train on short tasks first, then widen to the env's whole training split.

A curriculum is a list of stages ``(until, max_hops)``: until the fraction ``until`` of the run's env steps, the
training envs draw only tasks of at most ``max_hops`` hops; after the last stage they draw every task. For example
``((0.2, 2), (0.5, 3))`` on EDO-v0 (2-5 hops): 2-hop tasks for the first 20% of the steps, 2-3 hops up to 50%, then
all of them. Evaluation envs are never filtered. A stage counts a task's hops as ``Task.hops`` does: a support task
with the extra step (4 or 5 hops whatever ``TaskConfig.max_hops`` says, its text hiding two of them) comes only in a
stage of 4 hops or more, or after the last stage.

Two pieces, both usable on their own:

- :class:`HopCurriculumWrapper` wraps one EDO env and restricts the tasks its resets draw (with or without
  ``options={"task_id": k}``, so that GRPO's and GiGPO's task groups follow it too);
- :class:`HopCurriculumCallback` widens the filter of every training env as the run goes on
  (``VecEnv.env_method("set_max_hops", k)``).

``TrainConfig(hop_curriculum=...)`` (``edo train --hop-curriculum 0.2:2,0.5:3``) sets both up.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

#: One stage: (fraction of the run's env steps it lasts until, largest hop count drawn during it).
Stage = tuple[float, int]


def check_curriculum(stages: Any) -> tuple[Stage, ...]:
    """Validate a curriculum and return it as a tuple of ``(until, max_hops)`` pairs.

    :raises ValueError: naming what is wrong: stages must be pairs, ``until`` strictly increasing in (0, 1),
        ``max_hops`` ints >= 1 and strictly increasing
    """
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence) or not stages:
        raise ValueError(f"a hop curriculum must be a non-empty list of (until, max_hops) pairs, got {stages!r}")
    out: list[Stage] = []
    for stage in stages:
        if isinstance(stage, (str, bytes)) or not isinstance(stage, Sequence) or len(stage) != 2:
            raise ValueError(f"each hop-curriculum stage must be an (until, max_hops) pair, got {stage!r}")
        until, max_hops = stage
        if isinstance(until, bool) or not isinstance(until, (int, float)) or not 0 < float(until) < 1:
            raise ValueError(f"a stage's `until` must be a fraction of the run in (0, 1), got {until!r}")
        if isinstance(max_hops, bool) or not isinstance(max_hops, (int, np.integer)) or max_hops < 1:
            raise ValueError(f"a stage's `max_hops` must be an int >= 1, got {max_hops!r}")
        if out and not (float(until) > out[-1][0] and int(max_hops) > out[-1][1]):
            raise ValueError(
                f"hop-curriculum stages must widen: `until` and `max_hops` strictly increasing, got {list(stages)!r}"
            )
        out.append((float(until), int(max_hops)))
    return tuple(out)


def parse_curriculum(text: str) -> tuple[Stage, ...]:
    """Parse ``"0.2:2,0.5:3"`` (the CLI form) into stages, validated by :func:`check_curriculum`."""
    stages: list[tuple[float, int]] = []
    for part in text.split(","):
        until, sep, hops = part.strip().partition(":")
        try:
            if not sep:
                raise ValueError
            stages.append((float(until), int(hops)))
        except ValueError:
            raise ValueError(
                f"a hop curriculum is written UNTIL:MAX_HOPS[,UNTIL:MAX_HOPS...], e.g. 0.2:2,0.5:3; got {text!r}"
            ) from None
    return check_curriculum(stages)


def max_hops_at(stages: Sequence[Stage], fraction: float) -> int | None:
    """The largest hop count drawn at ``fraction`` of the run (``None``: every task)."""
    for until, max_hops in stages:
        if fraction < until:
            return max_hops
    return None


class HopCurriculumWrapper(gym.Wrapper):
    """Restrict the tasks an EDO env's resets draw to those of at most ``max_hops`` hops.

    The wrapped env's tasks are ordered by hop count (then by task index), and the active tasks are a prefix of that
    order. ``num_tasks`` is the number of active tasks, and ``reset(options={"task_id": k})`` starts the ``k``-th of
    them: a task id drawn before the filter widens still names the same task after it (GRPO may start a group's
    members across a widening). A reset without a task id draws one of the active tasks uniformly (seeded by the
    reset's seed). With ``max_hops=None`` every task is active.

    :param env: An EDO env (its unwrapped env has ``pool`` and ``num_tasks``)
    :param max_hops: The initial filter (``None``: every task)
    """

    def __init__(self, env: gym.Env, max_hops: int | None = None):
        super().__init__(env)
        base = env.unwrapped
        pool = getattr(base, "pool", None)
        if pool is None or not hasattr(base, "num_tasks"):
            raise TypeError(f"HopCurriculumWrapper needs an EDO env (with a task pool), got {type(base).__name__}")
        hops = np.array([pool.tasks[int(pool.ids[k])].hops for k in range(int(base.num_tasks))], dtype=int)
        self._order = np.lexsort((np.arange(len(hops)), hops))  # by hop count, then by task index
        self._sorted_hops = hops[self._order]
        self._rng = np.random.default_rng()
        self._max_hops = None if max_hops is None else int(max_hops)
        self._n_active = self._count(max_hops)

    @property
    def hop_counts(self) -> list[int]:
        """The distinct hop counts of the env's tasks (train split)."""
        return sorted({int(h) for h in self._sorted_hops})

    @property
    def max_hops(self) -> int | None:
        """The current filter (``None``: every task)."""
        return self._max_hops

    @property
    def num_tasks(self) -> int:
        """Number of tasks the next resets can draw."""
        return self._n_active

    def set_max_hops(self, max_hops: int | None) -> int:
        """Draw only tasks of at most ``max_hops`` hops from now on (``None``: every task); the filter only widens.

        :return: the number of active tasks
        :raises ValueError: if no task has that few hops, or the filter would narrow
        """
        n = self._count(max_hops)
        if n < self._n_active:
            raise ValueError(f"a hop curriculum only widens: max_hops {self._max_hops} -> {max_hops} would narrow it")
        self._n_active = n
        self._max_hops = None if max_hops is None else int(max_hops)
        return n

    def _count(self, max_hops: int | None) -> int:
        if max_hops is None:
            return len(self._sorted_hops)
        if isinstance(max_hops, bool) or not isinstance(max_hops, (int, np.integer)):
            raise ValueError(f"max_hops must be an int or None, got {max_hops!r}")
        n = int(np.searchsorted(self._sorted_hops, int(max_hops), side="right"))
        if n == 0:
            raise ValueError(f"no task has at most {max_hops} hops; this env's tasks have {self.hop_counts} hops")
        return n

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        options = dict(options) if options else {}
        k = options.get("task_id")
        if k is None:
            k = int(self._rng.integers(self._n_active))
        elif isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or not 0 <= k < self._n_active:
            raise ValueError(f"options['task_id'] must be an int in [0, {self._n_active - 1}] (the active tasks), got {k!r}")
        options["task_id"] = int(self._order[int(k)])
        return self.env.reset(seed=seed, options=options)


class HopCurriculumCallback(BaseCallback):
    """Widen every training env's :class:`HopCurriculumWrapper` filter as the run goes on.

    At the start of each rollout it computes the fraction of the run done (``num_timesteps`` over the steps this
    ``learn`` call was asked for) and calls ``env_method("set_max_hops", k)`` when the stage changes.

    :param stages: The curriculum (see :func:`check_curriculum`)
    :param total_timesteps: The run's env steps (``learn``'s ``total_timesteps``)
    """

    def __init__(self, stages: Sequence[Stage], total_timesteps: int, verbose: int = 0):
        super().__init__(verbose)
        self.stages = check_curriculum(stages)
        self.total_timesteps = int(total_timesteps)
        self._current: int | None | str = "unset"
        #: (env step, max_hops) at every change, for the run's record
        self.history: list[tuple[int, int | None]] = []

    def _apply(self) -> None:
        fraction = self.num_timesteps / max(1, self.total_timesteps)
        max_hops = max_hops_at(self.stages, fraction)
        if max_hops != self._current:
            self.training_env.env_method("set_max_hops", max_hops)
            self._current = max_hops
            self.history.append((int(self.num_timesteps), max_hops))
            if self.verbose:
                print(f"hop curriculum: max_hops={max_hops} from step {self.num_timesteps:,}")

    def _on_training_start(self) -> None:
        self._apply()

    def _on_rollout_start(self) -> None:
        self._apply()

    def _on_step(self) -> bool:
        return True


def curriculum_wrapper(stages: Sequence[Stage]) -> Any:
    """``make_vec_env``'s ``wrapper_class`` for a curriculum run: the wrapper at the first stage's filter (it pickles,
    for subprocess VecEnvs)."""
    return functools.partial(HopCurriculumWrapper, max_hops=check_curriculum(stages)[0][1])
