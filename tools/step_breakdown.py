"""Where a warm EDO-v0 step's time goes: each part of the env's step, in microseconds per step.

One process, random legal actions (as ``benchmarks/env_throughput.py``), after a ``--warmup`` that fills the memo
caches. Each repeat then runs

1. ``--steps`` uninstrumented steps (EDO-v0's steps/s), then as many CartPole-v1 steps (their ratio, as
   ``env_throughput.py`` measures it). Only the query forward passes are timed in this window (a timer on the embedder's
   ``encode_one``, which runs for a query text no cache held), next to the retrievers' own clock on their index
   searches: their time taken out of the window gives the rest of the step, its "floor" (``rest_us_per_step``), and
   that floor's ratio to CartPole (``rest_over_cartpole``): what the env would reach if no query text were new;
2. ``--steps`` more with a timer around each part of the env, set on this env's instances only: the env's ``reset`` and
   ``step``, and inside them the planner call with its parsing (``_ask_planner``: at reset and on a replan), dispatches,
   verifications and observations; the workers' searches (with the query forward passes of the embedder,
   and the index queries counted); the model calls (the simulated model itself, then the pricing around it).

The env runs on a fresh temporary cache directory prepared as ``edo prepare`` leaves it (``--cache prepared``, the
default: a fresh process embeds every list and the reachable queries and searches them ahead, as
``env_throughput.py``'s cold start does), so each run meets the query texts no cache held as a first run would.
``--cache default`` uses the configured cache directory instead (``$EDO_GYM_CACHE_DIR``, else ``~/.cache/edo_gym``):
there a run also finds the texts earlier runs stored, and the same seeds give the same steps, so repeated runs meet
fewer and fewer of them.

Parts are inclusive (a part's time contains its nested parts') and given per step, with calls per step and time per
call; "harness and wrappers" is the rest of the instrumented time (the random legal draw and Gymnasium's wrappers).
Each timer costs about half a microsecond per call, so the instrumented total is a few microseconds above the
uninstrumented step; the shares are of the instrumented total. Medians over ``--repeats``.

Usage: ``python -m tools.step_breakdown [--steps 20000] [--repeats 5] [--warmup 150000] [--cache prepared]``.
Results: ``tools/results/step_breakdown.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import check_counts, git_revision, machine_info, machine_line, write_results  # noqa: E402
from benchmarks.env_throughput import random_legal_steps, start_time  # noqa: E402

#: (key, what it is, where it is called), in the table's order.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("reset", "`reset`: new task, planner call, first observation", "the harness"),
    ("step", "`step`", "the harness"),
    ("dispatch", "dispatch: a worker runs the current step", "`step`"),
    ("verify", "verification by a worker", "`step`"),
    ("make_plan", "planner call and plan parsing (`_ask_planner`)", "`reset`, replan steps"),
    ("observation", "observation (`_observation`)", "`step`, `reset`"),
    ("search", "worker searches (memo, disk cache, index)", "dispatch, verification"),
    ("forward", "query forward passes of the embedder", "searches"),
    ("call", "model calls: the simulated model plus pricing (`AgentCaller.call`)", "dispatch, verification, planner"),
    ("model", "the simulated model itself (`SimulatedBackend.complete`)", "model calls"),
)


class PartTimers:
    """Timers around the parts of one env (instance attributes only; ``remove`` restores the classes' methods).

    :param forward_only: time the query forward passes only (the embedder's ``encode_one``), nothing else
    """

    def __init__(self, env: Any, forward_only: bool = False) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._patched: list[tuple[Any, str]] = []
        self._replaced: list[tuple[Any, str, Any]] = []
        u = env.unwrapped
        for embedder in {id(e.embedder): e.embedder for e in u.service.encoders}.values():
            self._wrap(embedder, "encode_one", "forward")
        if forward_only:
            return
        for name, key in (("reset", "reset"), ("step", "step"), ("_dispatch", "dispatch"), ("_verify", "verify"),
                          ("_ask_planner", "make_plan"), ("_observation", "observation")):  # fmt: skip
            self._wrap(u, name, key)
        actions = getattr(u, "_actions", None)
        if isinstance(actions, dict):  # the env calls its action methods through a table it built at construction
            self._replaced.append((u, "_actions", actions))
            u._actions = {**actions, "dispatch": u._dispatch, "verify": u._verify}
        for worker in u.workers:
            self._wrap(worker, "search", "search")
        self._wrap(u.caller, "call", "call")
        self._wrap(u.caller.backend, "complete", "model")

    def _wrap(self, obj: Any, name: str, key: str) -> None:
        inner: Callable[..., Any] = getattr(obj, name)
        seconds, calls, clock = self.seconds, self.calls, time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                seconds[key] += clock() - t
                calls[key] += 1

        setattr(obj, name, timed)
        self._patched.append((obj, name))

    def reset_counts(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def remove(self) -> None:
        for obj, name in self._patched:
            delattr(obj, name)
        for obj, name, value in self._replaced:
            setattr(obj, name, value)
        self._patched.clear()
        self._replaced.clear()


def _retrievers(service: Any) -> list[Any]:
    """The service's distinct shard retrievers (workers may share one)."""
    return list({id(r): r for r in service.retrievers}.values())


def _index_queries(service: Any) -> int:
    return sum(r.searches for r in _retrievers(service))


def _index_search_s(service: Any) -> float:
    return sum(r.search_s for r in _retrievers(service))


class ForwardTimer(PartTimers):
    """A timer on the query forward passes only (the embedder's ``encode_one``): the first-seen query texts' cost in an
    otherwise uninstrumented window."""

    def __init__(self, env: Any) -> None:
        super().__init__(env, forward_only=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000, help="steps per window (uninstrumented, then instrumented)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=150_000, help="random legal steps before the first window")
    parser.add_argument(
        "--cache",
        choices=("prepared", "default"),
        default="prepared",
        help="prepared: a fresh temporary cache directory prepared as `edo prepare` leaves it (default); default: the "
        "configured cache directory, with what earlier runs stored",
    )
    parser.add_argument("--out-dir", default=str(RESULTS), help="where to write the results (default: tools/results)")
    args = parser.parse_args()
    check_counts(parser, args, positive=("steps", "repeats"), non_negative=("warmup",))

    if args.cache == "default":
        measure(args)
        return
    with tempfile.TemporaryDirectory() as prepared:
        print("preparing a fresh cache directory (as `edo prepare` leaves it) ...", flush=True)
        start_time(prepared)
        os.environ["EDO_GYM_CACHE_DIR"] = prepared
        measure(args)


def measure(args: argparse.Namespace) -> None:
    """The warm-up, the windows and the results, on the cache directory this process is set to use."""
    import gymnasium as gym

    import edo_gym  # noqa: F401

    edo, cart = gym.make("EDO-v0"), gym.make("CartPole-v1")
    service = edo.unwrapped.service
    rng = np.random.default_rng(0)
    print(f"EDO warm-up: {args.warmup} random legal steps ...", flush=True)
    random_legal_steps(edo, max(args.warmup, 1), rng, masked=True)
    windows: list[dict[str, Any]] = []
    for r in range(args.repeats):
        forward = ForwardTimer(edo)
        queries0, search0 = _index_queries(service), _index_search_s(service)
        try:
            edo_s = random_legal_steps(edo, args.steps, rng, masked=True)
        finally:
            forward.remove()
        new_s = forward.seconds["forward"] + _index_search_s(service) - search0
        first_seen = {
            "forward_passes": forward.calls["forward"],
            "forward_s": forward.seconds["forward"],
            "index_queries": _index_queries(service) - queries0,
            "index_search_s": _index_search_s(service) - search0,
        }
        cart_s = random_legal_steps(cart, args.steps, rng, masked=False)
        timers = PartTimers(edo)
        queries0 = _index_queries(service)
        try:
            total_s = random_legal_steps(edo, args.steps, rng, masked=True)
        finally:
            timers.remove()
        us = {key: 1e6 * timers.seconds[key] / args.steps for key, _, _ in PARTS}
        us["harness"] = 1e6 * total_s / args.steps - us["reset"] - us["step"]
        windows.append({
            "edo_steps_per_s": args.steps / edo_s,
            "cartpole_steps_per_s": args.steps / cart_s,
            "edo_over_cartpole": cart_s / edo_s,
            "uninstrumented_us_per_step": 1e6 * edo_s / args.steps,
            "uninstrumented_first_seen_queries": first_seen,
            "rest_us_per_step": 1e6 * (edo_s - new_s) / args.steps,
            "rest_over_cartpole": cart_s / (edo_s - new_s),
            "instrumented_us_per_step": 1e6 * total_s / args.steps,
            "us_per_step": us,
            "calls_per_step": {key: timers.calls[key] / args.steps for key, _, _ in PARTS},
            "forward_passes": timers.calls["forward"],
            "index_queries": _index_queries(service) - queries0,
        })  # fmt: skip
        w = windows[-1]
        print(
            f"  repeat {r + 1}: EDO {w['edo_steps_per_s']:,.0f} steps/s ({w['uninstrumented_us_per_step']:.1f} us/step; "
            f"{w['instrumented_us_per_step']:.1f} instrumented), CartPole {w['cartpole_steps_per_s']:,.0f} steps/s, "
            f"ratio {w['edo_over_cartpole']:.3f} ({w['rest_over_cartpole']:.3f} without the first-seen queries' "
            f"{first_seen['forward_passes']} forward passes and {first_seen['index_queries']} index queries); instrumented: "
            f"{w['forward_passes']} forward passes, {w['index_queries']} index queries",
            flush=True,
        )

    def med(get: Callable[[dict[str, Any]], float]) -> float:
        return float(np.median([get(w) for w in windows]))

    keys = [key for key, _, _ in PARTS] + ["harness"]
    total = med(lambda w: w["instrumented_us_per_step"])
    parts = {}
    for key in keys:
        us = med(lambda w, k=key: w["us_per_step"][k])
        calls = med(lambda w, k=key: w["calls_per_step"].get(k, 1.0))
        parts[key] = {
            "us_per_step": us,
            "share": us / total,
            "calls_per_step": calls,
            "us_per_call": us / calls if calls else None,
        }
    payload = {
        "settings": vars(args),
        "revision": git_revision(),
        "edo_steps_per_s": med(lambda w: w["edo_steps_per_s"]),
        "cartpole_steps_per_s": med(lambda w: w["cartpole_steps_per_s"]),
        "edo_over_cartpole": med(lambda w: w["edo_over_cartpole"]),
        "uninstrumented_us_per_step": med(lambda w: w["uninstrumented_us_per_step"]),
        "rest_us_per_step": med(lambda w: w["rest_us_per_step"]),
        "rest_over_cartpole": med(lambda w: w["rest_over_cartpole"]),
        "instrumented_us_per_step": total,
        "parts": parts,
        "windows": windows,
    }
    m = machine_info()
    descriptions = {key: (text, inside) for key, text, inside in PARTS}
    descriptions["harness"] = ("harness and wrappers: the random legal draw, Gymnasium's wrappers (the rest)", "")
    lines = [
        "# Where a warm EDO-v0 step's time goes",
        "",
        f"Machine: {machine_line(m)}. Command: `python -m tools.step_breakdown --steps {args.steps} --repeats "
        f"{args.repeats} --warmup {args.warmup} --cache {args.cache}`. Medians over "
        f"{args.repeats} windows of {args.steps:,} random legal steps after a {args.warmup:,}-step warm-up, "
        + (
            "on a fresh cache directory prepared as `edo prepare` leaves it."
            if args.cache == "prepared"
            else "on the configured cache directory (with what earlier runs stored)."
        ),
        "",
        f"Uninstrumented: EDO-v0 {payload['edo_steps_per_s']:,.0f} steps/s ({payload['uninstrumented_us_per_step']:.1f} "
        f"us a step), CartPole-v1 {payload['cartpole_steps_per_s']:,.0f} steps/s, ratio {payload['edo_over_cartpole']:.3f}. "
        f"Instrumented: {total:.1f} us a step (the timers' own cost included). Per window: query forward passes "
        f"{[w['forward_passes'] for w in windows]}, index queries {[w['index_queries'] for w in windows]}.",
        "",
        "Without the query texts no cache held (uninstrumented windows; their forward passes timed on the embedder, their "
        "index searches by the retrievers): forward passes "
        f"{[w['uninstrumented_first_seen_queries']['forward_passes'] for w in windows]} taking "
        f"{[round(1e3 * w['uninstrumented_first_seen_queries']['forward_s']) for w in windows]} ms, index queries "
        f"{[w['uninstrumented_first_seen_queries']['index_queries'] for w in windows]} taking "
        f"{[round(1e3 * w['uninstrumented_first_seen_queries']['index_search_s']) for w in windows]} ms; the rest of the "
        f"step {[round(w['rest_us_per_step'], 1) for w in windows]} us, over CartPole "
        f"{[round(w['rest_over_cartpole'], 3) for w in windows]}: median {payload['rest_us_per_step']:.1f} us a step, "
        f"**{payload['rest_over_cartpole']:.3f}** of CartPole-v1 (what the env would reach if no query text were new).",
        "",
        "| part (times include the parts called inside it) | called in | us per step | share | calls per step | us per call |",
        "|---|---|---|---|---|---|",
    ]
    for key in keys:
        text, inside = descriptions[key]
        p = parts[key]
        per_call = f"{p['us_per_call']:,.1f}" if p["us_per_call"] is not None else "-"
        lines.append(
            f"| {text} | {inside} | {p['us_per_step']:.1f} | {100 * p['share']:.0f}% | {p['calls_per_step']:.3g} | {per_call} |"
        )
    out_dir = Path(args.out_dir) if args.out_dir else None
    json_path, md_path = write_results("step_breakdown", payload, "\n".join(lines), out_dir=out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
