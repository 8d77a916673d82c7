"""``ShardedVecEnv``: a VecEnv whose envs are split into shards stepped in parallel, one in this process and one in
each of a few worker processes.

SB3's ``SubprocVecEnv`` starts one process per env: with ``make train``'s 16 envs on a 2-core machine that is 16
processes (each importing torch and building its own retrieval indexes) and 16 pipe round trips per step, while the
main process waits. ``ShardedVecEnv`` splits the envs into contiguous shards: the main process steps the first shard
itself while each worker steps another, each shard in a ``DummyVecEnv`` of the class given (``edo train`` uses its
``FreshInfoDummyVecEnv`` for EDO ids). A vector step costs one pipe round trip per worker.

It is exact: every env is built by the same ``env_fn``, seeded and reset as the in-process VecEnv would seed and
reset it, and each shard's VecEnv is that same class, so observations, rewards, dones, infos and ``reset_infos`` are
the in-process VecEnv's, value for value (tested, and a GRPO training on it ends with the same parameters). If the
shards' VecEnv has ``step_some`` (stepping only some envs, with ``hold``), so does this one.

Example::

    from stable_baselines3.common.env_util import make_vec_env
    from baselines.sharded_vec_env import ShardedVecEnv

    venv = make_vec_env("edo_gym:EDO-v0", n_envs=16, seed=0, vec_env_cls=ShardedVecEnv,
                        vec_env_kwargs={"n_workers": 1}, env_kwargs={"render_mode": None})
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


def shard_bounds(n_envs: int, n_shards: int) -> list[range]:
    """The contiguous env indices of each shard: sizes differ by at most one, larger shards first.

    >>> shard_bounds(5, 2)
    [range(0, 3), range(3, 5)]
    """
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    if not 1 <= n_shards <= n_envs:
        raise ValueError(f"n_shards must be between 1 and the number of envs ({n_envs}), got {n_shards}")
    size, extra = divmod(n_envs, n_shards)
    bounds, start = [], 0
    for shard in range(n_shards):
        stop = start + size + (shard < extra)
        bounds.append(range(start, stop))
        start = stop
    return bounds


def _reset_infos_of(vec: VecEnv, indices: Collection[int]) -> dict[int, dict[str, Any]]:
    return {int(i): vec.reset_infos[i] for i in indices}


def _run(vec: VecEnv, cmd: str, data: Any) -> Any:
    """Run one command on a shard's VecEnv (in a worker, or the main process's own shard); its result."""
    if cmd in ("step", "step_some"):
        # the reset infos that change: those of envs whose episode ends, and of envs held at their last episode's end
        # (FreshInfoDummyVecEnv), which reset before they step
        held = set(getattr(vec, "_held", ()))
        if cmd == "step":
            obs, rewards, dones, infos = vec.step(data)
        else:
            actions, indices, hold = data
            obs, rewards, dones, infos = vec.step_some(actions, indices, hold=hold)  # type: ignore[attr-defined]
            held &= set(indices)
        changed = held | {int(i) for i in np.flatnonzero(dones)}
        return obs, rewards, dones, infos, _reset_infos_of(vec, changed)
    if cmd == "reset":
        seeds, options = data
        vec._seeds, vec._options = list(seeds), [dict(o) for o in options]  # SB3's per-env seeds/options of the next reset
        return vec.reset(), list(vec.reset_infos)
    if cmd == "env_method":
        name, args, kwargs, indices = data
        return vec.env_method(name, *args, indices=indices, **kwargs)
    if cmd == "get_attr":
        name, indices = data
        return vec.get_attr(name, indices)
    if cmd == "set_attr":
        name, value, indices = data
        return vec.set_attr(name, value, indices)
    if cmd == "env_is_wrapped":
        wrapper_class, indices = data
        return vec.env_is_wrapped(wrapper_class, indices)
    raise ValueError(f"unknown command {cmd!r}")


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
            elif cmd == "close":
                if vec is not None:
                    vec.close()
                remote.send((True, None))
                break
            elif cmd == "batch":  # deferred env_method calls, then the command they rode along with
                deferred, (cmd, data) = data
                for call in deferred:
                    _run(vec, *call)  # type: ignore[arg-type]
                result = _run(vec, cmd, data)  # type: ignore[arg-type]
            else:
                result = _run(vec, cmd, data)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - reported to the main process, which raises it there
            remote.send((False, traceback.format_exc()))
            continue
        remote.send((True, result))
    remote.close()


class ShardedVecEnv(VecEnv):
    """``n_envs`` envs split into contiguous shards, stepped in parallel: one shard in this process (``in_main``) and
    one in each of ``n_workers`` worker processes.

    A vector step sends each worker its shard's actions, steps the main process's own shard meanwhile, then gathers
    the workers' replies: one pipe round trip per worker, and no core left waiting in the main process.

    :param env_fns: One function per env that builds it (as for ``DummyVecEnv``/``SubprocVecEnv``); the workers'
        are sent to them with cloudpickle.
    :param n_workers: Worker processes, >= 1 (default: the machine's CPU count, less one for the main process's own
        shard, at least 1); there are ``n_workers + in_main`` shards, at most one per env.
    :param in_main: Step the first shard in this process (default) instead of leaving it to wait for the workers.
    :param start_method: ``multiprocessing`` start method (default: ``"forkserver"`` where available, else
        ``"spawn"``, as ``SubprocVecEnv``). Each worker sets torch to one thread.
    :param vec_env_cls: The VecEnv class each shard is stepped in (default: ``DummyVecEnv``).
    :param deferred_methods: Names of env methods whose ``env_method`` calls need not wait for a worker: their return
        values are dropped (``env_method`` returns ``None`` per env) and a worker's calls are sent with its next
        command and run before it, in the order made. ``edo train`` defers GRPO's ``queue_starts``, one call per
        episode, which would otherwise cost a pipe round trip each. Calls for the main process's shard run at once.
    :raises ValueError: For no envs, or ``n_workers`` that is not an int >= 1 or gives more shards than envs.
    :raises RuntimeError: When a worker fails; the message carries the worker's traceback. An error in the main
        process's shard is raised as it is, after the workers' replies are read.
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        n_workers: int | None = None,
        in_main: bool = True,
        start_method: str | None = None,
        vec_env_cls: type[VecEnv] = DummyVecEnv,
        deferred_methods: Collection[str] = (),
    ) -> None:
        n_envs = len(env_fns)
        if isinstance(deferred_methods, str) or not all(isinstance(name, str) for name in deferred_methods):
            raise ValueError(f"deferred_methods must be a collection of method names, got {deferred_methods!r}")
        self.deferred_methods = frozenset(deferred_methods)
        #: per worker shard, the deferred env_method calls not sent yet
        self._deferred: dict[int, list[tuple[str, Any]]] = {}
        if n_envs < 1:
            raise ValueError("ShardedVecEnv needs at least one env")
        if not isinstance(in_main, bool):
            raise ValueError(f"in_main must be a bool, got {in_main!r}")
        if n_workers is None:
            n_workers = max(1, min(n_envs - in_main, (os.cpu_count() or 1) - in_main))
        if isinstance(n_workers, bool) or not isinstance(n_workers, (int, np.integer)) or n_workers < 1:
            raise ValueError(f"n_workers must be an int >= 1, got {n_workers!r}")
        if n_workers + in_main > n_envs:
            raise ValueError(f"n_workers={n_workers}{' plus the main process' if in_main else ''} gives more shards than "
                             f"there are envs ({n_envs})")  # fmt: skip
        self.shards = shard_bounds(n_envs, int(n_workers) + in_main)
        self._worker_of = np.concatenate([np.full(len(shard), w) for w, shard in enumerate(self.shards)])
        self._local_of = np.concatenate([np.arange(len(shard)) for shard in self.shards])
        self.closed = False
        self.waiting = False
        self._local: VecEnv | None = None
        #: one entry per shard: its worker's pipe, or None for the main process's own shard
        self.remotes: list[Connection | None] = []
        self.processes = []
        if start_method is None:
            start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        for w, shard in enumerate(self.shards):
            if in_main and w == 0:
                self.remotes.append(None)
                continue
            remote, work_remote = ctx.Pipe()
            payload = CloudpickleWrapper(([env_fns[i] for i in shard], vec_env_cls))
            process = ctx.Process(target=_worker, args=(work_remote, remote, payload), daemon=True)
            process.start()
            self.processes.append(process)
            work_remote.close()
            self.remotes.append(remote)
        for remote in self.remotes:
            if remote is not None:
                remote.send(("make", None))
        made = []
        try:
            if in_main:  # built while the workers build theirs
                self._local = vec_env_cls([env_fns[i] for i in self.shards[0]])
                made.append((self._local.observation_space, self._local.action_space, hasattr(self._local, "step_some")))
            made += self._receive([w for w, remote in enumerate(self.remotes) if remote is not None])
        except BaseException:
            self.close()
            raise
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

    def _receive(self, workers: Sequence[int]) -> list[Any]:
        """The replies of ``workers`` (remote shards), in that order; every reply is read before an error is raised, so
        the pipes stay in step."""
        return self._check(workers, [self.remotes[w].recv() for w in workers])  # type: ignore[union-attr]

    def _check(self, workers: Sequence[int], replies: list[tuple[bool, Any]]) -> list[Any]:
        for w, (ok, result) in zip(workers, replies, strict=True):
            if not ok:
                shard = self.shards[w]
                raise RuntimeError(
                    f"ShardedVecEnv worker of shard {w} (envs {shard.start}-{shard.stop - 1}) failed:\n{result}"
                )
        return [result for _, result in replies]

    def _send(self, requests: dict[int, tuple[str, Any]]) -> None:
        for w, request in requests.items():
            if self.remotes[w] is not None:
                deferred = self._deferred.pop(w, None)
                self.remotes[w].send(("batch", (deferred, request)) if deferred else request)  # type: ignore[union-attr]

    def _finish(self, requests: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        """Run the main process's request (if any) and read the workers' replies to ``requests`` (already sent)."""
        results: dict[int, Any] = {}
        error: BaseException | None = None
        if self._local is not None and 0 in requests:
            try:
                results[0] = _run(self._local, *requests[0])
            except Exception as exc:  # noqa: BLE001 - raised below, once the workers' replies are read
                error = exc
        remote = [w for w in requests if self.remotes[w] is not None]
        replies = [self.remotes[w].recv() for w in remote]  # type: ignore[union-attr]
        if error is not None:
            raise error
        results.update(zip(remote, self._check(remote, replies), strict=True))
        return dict(sorted(results.items()))

    def _call(self, requests: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        self._send(requests)
        return self._finish(requests)

    def _all(self, make_request: Callable[[range], tuple[str, Any]]) -> dict[int, tuple[str, Any]]:
        return {w: make_request(shard) for w, shard in enumerate(self.shards)}

    def _by_shard(self, indices: VecEnvIndices) -> tuple[list[int], dict[int, list[int]]]:
        """The env indices asked for, in order, and per shard their indices within it, in the order asked."""
        order = list(self._get_indices(indices))
        by_shard: dict[int, list[int]] = {}
        for i in order:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i} out of range for {self.num_envs} envs")
            by_shard.setdefault(int(self._worker_of[i]), []).append(int(self._local_of[i]))
        return order, by_shard

    def _per_env(self, cmd: str, make_data: Callable[[list[int]], Any], indices: VecEnvIndices) -> list[Any]:
        """Run ``cmd`` on the shards holding ``indices``; one result per index, in the order asked."""
        order, local = self._by_shard(indices)
        results = self._call({w: (cmd, make_data(idx)) for w, idx in local.items()})
        positions = {w: iter(range(len(idx))) for w, idx in local.items()}
        return [results[int(self._worker_of[i])][next(positions[int(self._worker_of[i])])] for i in order]

    def _concat_obs(self, parts: Sequence[VecEnvObs]) -> VecEnvObs:
        if isinstance(self.observation_space, spaces.Dict):
            return {key: np.concatenate([part[key] for part in parts]) for key in self.observation_space.spaces}  # type: ignore[index]
        return np.concatenate(parts)  # type: ignore[arg-type]

    def _gather_steps(self, results: dict[int, Any]) -> VecEnvStepReturn:
        replies = [results[w] for w in range(len(self.shards))]
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
        results = self._call(
            self._all(lambda shard: ("reset", ([self._seeds[i] for i in shard], [self._options[i] for i in shard])))
        )
        self.reset_infos = [info for w in range(len(self.shards)) for info in results[w][1]]
        self._reset_seeds()
        self._reset_options()
        return self._concat_obs([results[w][0] for w in range(len(self.shards))])

    def step_async(self, actions: np.ndarray) -> None:
        self._pending = self._all(lambda shard: ("step", actions[shard.start : shard.stop]))
        self._send(self._pending)  # the workers start now; the main process's shard steps in step_wait
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        self.waiting = False
        return self._gather_steps(self._finish(self._pending))

    def _step_some(self, actions: np.ndarray, indices: Sequence[int], hold: Collection[int] = ()) -> VecEnvStepReturn:
        """Step only the envs in ``indices`` (``hold``: envs not auto-reset if their episode ends now), as the shards'
        VecEnv's ``step_some`` does. Published as ``step_some`` only when that VecEnv has it (see
        ``FreshInfoDummyVecEnv.step_some``): GRPO looks for it with ``baselines.grpo.scheduling.idle_envs_can_wait``."""
        indices, hold = [int(i) for i in indices], {int(i) for i in hold}

        def request(shard: range) -> tuple[str, Any]:
            local = [i - shard.start for i in indices if shard.start <= i < shard.stop]
            local_hold = [i - shard.start for i in hold if shard.start <= i < shard.stop]
            return "step_some", (actions[shard.start : shard.stop], local, local_hold)

        return self._gather_steps(self._call(self._all(request)))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        if method_name in self.deferred_methods:
            order, by_shard = self._by_shard(indices)
            for w, local in by_shard.items():
                call = ("env_method", (method_name, method_args, method_kwargs, local))
                if self.remotes[w] is None:
                    _run(self._local, *call)  # type: ignore[arg-type]
                else:
                    self._deferred.setdefault(w, []).append(call)
            return [None] * len(order)
        # one call per shard with all its envs: its VecEnv calls them in the order asked within the shard
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
        self._deferred.clear()
        remotes = [remote for remote in self.remotes if remote is not None]
        if self.waiting:
            for remote in remotes:
                remote.recv()
            self.waiting = False
        for remote in remotes:
            try:
                remote.send(("close", None))
                remote.recv()
            except (BrokenPipeError, EOFError, ConnectionResetError):
                pass
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
        for remote in remotes:
            remote.close()
        if self._local is not None:
            self._local.close()
