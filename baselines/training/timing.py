"""Where the wall time of ``model.learn`` goes (:func:`timed_learning`)."""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv


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


def retrieval_counters(env: VecEnv) -> tuple[float, float, float, float]:
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
    retrieval0 = retrieval_counters(env)
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        yield times
    finally:
        times.total_s = time.perf_counter() - t0
        times.process_cpu_s = time.process_time() - cpu0
        retrieval1 = retrieval_counters(env)
        times.query_embeds, times.index_searches = (int(retrieval1[i] - retrieval0[i]) for i in (0, 2))
        times.query_embed_s, times.index_search_s = (float(retrieval1[i] - retrieval0[i]) for i in (1, 3))
        gc.callbacks.remove(on_gc)
        for obj, name, before in reversed(patched):  # instance attributes only: the class methods show through again
            if before is _ABSENT:
                with contextlib.suppress(AttributeError):
                    delattr(obj, name)
            else:  # an instance's own attribute is put back
                setattr(obj, name, before)
