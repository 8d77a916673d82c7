"""``ShardedVecEnv``: a VecEnv whose envs run in a few worker processes, several envs to a process.

SB3's ``SubprocVecEnv`` starts one process per env: with ``make train``'s 16 envs on a 2-core machine that is 16
processes (each importing torch and building its own retrieval indexes) and 16 pipe round trips per step, for at most
two cores of work. ``ShardedVecEnv`` splits the envs into ``n_workers`` contiguous shards; each worker process steps
its shard in a ``DummyVecEnv`` of the class given (``edo train`` uses its ``FreshInfoDummyVecEnv`` for EDO ids), so a
vector step costs one round trip per worker and the shards step in parallel.

It is exact: every env is built by the same ``env_fn``, seeded and reset as the in-process VecEnv would seed and
reset it, and the worker's VecEnv is that same class, so observations, rewards, dones, infos and ``reset_infos`` are
the in-process VecEnv's, value for value (tested, and a GRPO training on it ends with the same parameters). If the
worker's VecEnv has ``step_some`` (stepping only some envs, with ``hold``), so does this one.

Example::

    from stable_baselines3.common.env_util import make_vec_env
    from baselines.sharded_vec_env import ShardedVecEnv

    venv = make_vec_env("edo_gym:EDO-v0", n_envs=16, seed=0, vec_env_cls=ShardedVecEnv,
                        vec_env_kwargs={"n_workers": 2}, env_kwargs={"render_mode": None})
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections.abc import Callable, Collection, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.common.vec_env.base_vec_env import (
    CloudpickleWrapper,
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

__all__ = ["ShardedVecEnv", "shard_bounds"]


def shard_bounds(n_envs: int, n_workers: int) -> list[range]:
    """The contiguous env indices of each worker: sizes differ by at most one, larger shards first.

    >>> shard_bounds(5, 2)
    [range(0, 3), range(3, 5)]
    """
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    if not 1 <= n_workers <= n_envs:
        raise ValueError(f"n_workers must be between 1 and the number of envs ({n_envs}), got {n_workers}")
    size, extra = divmod(n_envs, n_workers)
    bounds, start = [], 0
    for worker in range(n_workers):
        stop = start + size + (worker < extra)
        bounds.append(range(start, stop))
        start = stop
    return bounds


def _reset_infos_of(vec: VecEnv, indices: Collection[int]) -> dict[int, dict[str, Any]]:
    return {int(i): vec.reset_infos[i] for i in indices}


def _worker(remote: Connection, parent_remote: Connection, payload: CloudpickleWrapper) -> None:
    """A worker's loop: build its shard's VecEnv, then answer commands until ``close`` (or the pipe closes).

    Every reply is ``(True, result)``, or ``(False, traceback text)`` when the command raised.
    """
    parent_remote.close()
    import torch  # one torch thread per worker: several can deadlock in forked workers, and 1 is faster on few cores

    torch.set_num_threads(1)
    env_fns, vec_env_cls = payload.var
    vec: VecEnv | None = None
    while True:
        try:
            cmd, data = remote.recv()
        except (EOFError, KeyboardInterrupt):
            break
        try:
            if cmd == "make":
                vec = vec_env_cls(env_fns)
                result: Any = (vec.observation_space, vec.action_space, hasattr(vec, "step_some"))
            elif cmd in ("step", "step_some"):
                # the reset infos that change: those of envs whose episode ends, and of envs held at their last
                # episode's end (FreshInfoDummyVecEnv), which reset before they step
                held = set(getattr(vec, "_held", ()))
                if cmd == "step":
                    obs, rewards, dones, infos = vec.step(data)  # type: ignore[union-attr]
                else:
                    actions, indices, hold = data
                    obs, rewards, dones, infos = vec.step_some(actions, indices, hold=hold)  # type: ignore[union-attr]
                    held &= set(indices)
                changed = held | {int(i) for i in np.flatnonzero(dones)}
                result = (obs, rewards, dones, infos, _reset_infos_of(vec, changed))  # type: ignore[arg-type]
            elif cmd == "reset":
                seeds, options = data
                vec._seeds, vec._options = list(seeds), [dict(o) for o in options]  # type: ignore[union-attr]
                result = (vec.reset(), list(vec.reset_infos))  # type: ignore[union-attr]
            elif cmd == "env_method":
                name, args, kwargs, indices = data
                result = vec.env_method(name, *args, indices=indices, **kwargs)  # type: ignore[union-attr]
            elif cmd == "get_attr":
                name, indices = data
                result = vec.get_attr(name, indices)  # type: ignore[union-attr]
            elif cmd == "set_attr":
                name, value, indices = data
                result = vec.set_attr(name, value, indices)  # type: ignore[union-attr]
            elif cmd == "env_is_wrapped":
                wrapper_class, indices = data
                result = vec.env_is_wrapped(wrapper_class, indices)  # type: ignore[union-attr]
            elif cmd == "close":
                if vec is not None:
                    vec.close()
                remote.send((True, None))
                break
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except Exception:  # noqa: BLE001 - reported to the main process, which raises it there
            remote.send((False, traceback.format_exc()))
            continue
        remote.send((True, result))
    remote.close()


class ShardedVecEnv(VecEnv):
    """``n_envs`` envs stepped in ``n_workers`` processes, a contiguous shard of envs in each.

    :param env_fns: One function per env that builds it (as for ``DummyVecEnv``/``SubprocVecEnv``); they are sent
        to the workers with cloudpickle.
    :param n_workers: Worker processes, between 1 and ``len(env_fns)`` (default: the machine's CPU count, at most
        ``len(env_fns)``).
    :param start_method: ``multiprocessing`` start method (default: ``"forkserver"`` where available, else
        ``"spawn"``, as ``SubprocVecEnv``). Each worker sets torch to one thread.
    :param vec_env_cls: The VecEnv class each worker steps its shard in (default: ``DummyVecEnv``).
    :raises ValueError: For no envs or ``n_workers`` outside ``[1, len(env_fns)]``.
    :raises RuntimeError: When a worker fails; the message carries the worker's traceback.
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        n_workers: int | None = None,
        start_method: str | None = None,
        vec_env_cls: type[VecEnv] = DummyVecEnv,
    ) -> None:
        n_envs = len(env_fns)
        if n_workers is None:
            n_workers = max(1, min(n_envs, os.cpu_count() or 1))
        if isinstance(n_workers, bool) or not isinstance(n_workers, (int, np.integer)):
            raise ValueError(f"n_workers must be an int, got {n_workers!r}")
        self.shards = shard_bounds(n_envs, int(n_workers))
        self._worker_of = np.concatenate([np.full(len(shard), w) for w, shard in enumerate(self.shards)])
        self._local_of = np.concatenate([np.arange(len(shard)) for shard in self.shards])
        self.closed = False
        self.waiting = False
        if start_method is None:
            start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        pipes = [ctx.Pipe() for _ in self.shards]
        self.remotes: list[Connection] = [remote for remote, _ in pipes]
        self.processes = []
        for (remote, work_remote), shard in zip(pipes, self.shards, strict=True):
            payload = CloudpickleWrapper(([env_fns[i] for i in shard], vec_env_cls))
            process = ctx.Process(target=_worker, args=(work_remote, remote, payload), daemon=True)
            process.start()
            self.processes.append(process)
            work_remote.close()
        for remote in self.remotes:
            remote.send(("make", None))
        made = self._receive_all(range(len(self.remotes)))
        observation_space, action_space, has_step_some = made[0]
        if not isinstance(
            observation_space, (spaces.Dict, spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
        ):
            self.close()
            raise ValueError(f"ShardedVecEnv supports Dict, Box, Discrete, MultiDiscrete and MultiBinary observations, "
                             f"got {type(observation_space).__name__}")  # fmt: skip
        super().__init__(n_envs, observation_space, action_space)
        if has_step_some:
            self.step_some = self._step_some

    # -- plumbing ---------------------------------------------------------------------------------------------------

    def _receive_all(self, workers: Sequence[int]) -> list[Any]:
        replies = [self.remotes[w].recv() for w in workers]  # receive every reply before raising: pipes stay in step
        for w, (ok, result) in zip(workers, replies, strict=True):
            if not ok:
                raise RuntimeError(f"ShardedVecEnv worker {w} (envs {self.shards[w].start}-{self.shards[w].stop - 1}) "
                                   f"failed:\n{result}")  # fmt: skip
        return [result for _, result in replies]

    def _by_worker(self, indices: VecEnvIndices) -> tuple[list[int], dict[int, list[int]]]:
        """The global indices asked for, and per worker (in worker order) their local indices, in the order asked."""
        order = list(self._get_indices(indices))
        local: dict[int, list[int]] = {}
        for i in order:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i} out of range for {self.num_envs} envs")
            local.setdefault(int(self._worker_of[i]), []).append(int(self._local_of[i]))
        return order, dict(sorted(local.items()))

    def _per_env(self, cmd: str, make_data: Callable[[list[int]], Any], indices: VecEnvIndices) -> list[Any]:
        """Run ``cmd`` on the workers holding ``indices``; one result per index, in the order asked."""
        order, local = self._by_worker(indices)
        for w, local_indices in local.items():
            self.remotes[w].send((cmd, make_data(local_indices)))
        results = dict(zip(local, self._receive_all(list(local)), strict=True))
        positions = {w: iter(range(len(idx))) for w, idx in local.items()}
        return [results[int(self._worker_of[i])][next(positions[int(self._worker_of[i])])] for i in order]

    def _concat_obs(self, parts: Sequence[VecEnvObs]) -> VecEnvObs:
        if isinstance(self.observation_space, spaces.Dict):
            return {key: np.concatenate([part[key] for part in parts]) for key in self.observation_space.spaces}  # type: ignore[index]
        return np.concatenate(parts)  # type: ignore[arg-type]

    def _gather_steps(self, replies: list[Any]) -> VecEnvStepReturn:
        obs = self._concat_obs([reply[0] for reply in replies])
        rewards = np.concatenate([reply[1] for reply in replies])
        dones = np.concatenate([reply[2] for reply in replies])
        infos: list[dict[str, Any]] = []
        for shard, reply in zip(self.shards, replies, strict=True):
            infos.extend(reply[3])
            for local, info in reply[4].items():
                self.reset_infos[shard.start + local] = info
        return obs, rewards, dones, infos

    # -- VecEnv API -------------------------------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        for remote, shard in zip(self.remotes, self.shards, strict=True):
            remote.send(("reset", ([self._seeds[i] for i in shard], [self._options[i] for i in shard])))
        replies = self._receive_all(range(len(self.remotes)))
        self.reset_infos = [info for _, infos in replies for info in infos]
        self._reset_seeds()
        self._reset_options()
        return self._concat_obs([obs for obs, _ in replies])

    def step_async(self, actions: np.ndarray) -> None:
        for remote, shard in zip(self.remotes, self.shards, strict=True):
            remote.send(("step", actions[shard.start : shard.stop]))
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        replies = self._receive_all(range(len(self.remotes)))
        self.waiting = False
        return self._gather_steps(replies)

    def _step_some(self, actions: np.ndarray, indices: Sequence[int], hold: Collection[int] = ()) -> VecEnvStepReturn:
        """Step only the envs in ``indices`` (``hold``: envs not auto-reset if their episode ends now), as the workers'
        VecEnv's ``step_some`` does. Published as ``step_some`` only when that VecEnv has it (see
        ``FreshInfoDummyVecEnv.step_some``): GRPO asks with ``getattr(env, "step_some", None)``."""
        indices, hold = [int(i) for i in indices], {int(i) for i in hold}
        for remote, shard in zip(self.remotes, self.shards, strict=True):
            local = [i - shard.start for i in indices if shard.start <= i < shard.stop]
            local_hold = [i - shard.start for i in hold if shard.start <= i < shard.stop]
            remote.send(("step_some", (actions[shard.start : shard.stop], local, local_hold)))
        return self._gather_steps(self._receive_all(range(len(self.remotes))))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        # one call per worker with all its envs: the worker's VecEnv calls them in the order asked within its shard
        return self._per_env("env_method", lambda local: (method_name, method_args, method_kwargs, local), indices)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._per_env("get_attr", lambda local: (attr_name, local), indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._per_env("set_attr", lambda local: (attr_name, value, local), indices)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self._per_env("env_is_wrapped", lambda local: (wrapper_class, local), indices)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.waiting:
            for remote in self.remotes:
                remote.recv()
            self.waiting = False
        for remote in self.remotes:
            try:
                remote.send(("close", None))
                remote.recv()
            except (BrokenPipeError, EOFError, ConnectionResetError):
                pass
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
        for remote in self.remotes:
            remote.close()
