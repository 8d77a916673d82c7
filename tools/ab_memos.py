"""A/B of each in-process memo on the env's step path: warm EDO-v0 with the memo on, and with it disabled, in alternated
rounds of one process.

A memo is disabled inside the measuring process, without editing the library: an ``lru_cache``'d function is replaced,
in every ``edo_gym`` module that holds it, by the function it wraps (``__wrapped__``); a dict memo by a dict that never
stores; an :class:`~edo_gym.retrieval.caches.LRUCache` by a memo that never holds anything; the retrieval service's
piece -> token count memo by ``None`` (the service then counts whole texts, its path for tokenizers whose counts are
not sums of pieces). Each arm is put back exactly as it was.

For each env setting (``--config``: ``default``, EDO-v0 as ``make throughput`` steps it; ``train``, EDO-v0 with
``make train``'s ``text_features``), one process of this checkout's code runs on a temporary cache directory prepared
as ``edo prepare`` leaves it. It warms up with ``--warmup`` random legal steps (all memos on), then
takes each memo in turn:

1. an untimed check: ``--check-steps`` steps from one seed with the memo on (its lookups and hits counted), then the
   same steps with it off; the two trajectories (observations, masks, rewards, ends) must be the same. A memo with no
   lookup in this setting is reported as not reached and not timed;
2. ``--rounds`` rounds in which the two arms take turns (on first in even rounds, off first in odd ones); an arm's turn
   times ``--steps`` EDO-v0 steps, then ``--cartpole-steps`` CartPole-v1 steps, in process CPU time (the machine is
   shared: wall time counts other jobs). Each arm's rate is taken over CartPole's in the same turn, and each round gives
   ``off_over_on``: the memo-off arm's ratio to CartPole over the memo-on arm's. Reported: its median and range.

``off_over_on`` above 0.90 means the memo saves less than a tenth of a warm step's time in that setting.
A memo that sits behind another (reached only when the other misses) is never reached warm on its own, so it is also
measured with the memo in front of it: the groups of :data:`LAYERS` by default, each an A/B with its memos all
disabled at once. Each ``--together NAME ...`` replaces them with a group of one's own (what removing them all would
cost); ``--memos`` with no name leaves out the memos one by one.

Not covered: what is built once per world or setting and then looked up (``World.linker``,
``grading.entity_index``, the planner's compiled readers, the env module's world and task-pool caches), the viewer's
glyph cache (rendering only) and the disk caches (``tools/ab_search_cache.py``, ``benchmarks/env_throughput.py``).

Usage: ``python -m tools.ab_memos [--rounds 5] [--steps 20000] [--warmup 100000] [--config default train]``.
Results: ``tools/results/ab_memos.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "tools" / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import (  # noqa: E402
    check_counts,
    command_line,
    machine_info,
    machine_line,
    versions,
    write_json_atomic,
    write_text_atomic,
)
from benchmarks.train_throughput import prepare_cache  # noqa: E402

#: ``gym.make("EDO-v0", ...)`` kwargs of each setting.
CONFIGS: dict[str, dict[str, Any]] = {"default": {}, "train": {"text_features": True}}
#: Below this median ``off_over_on`` a memo saves at least a tenth of a warm step.
PAYS_BELOW = 0.90


@dataclass(frozen=True)
class Memo:
    """One memo: its name (``module::qualname``), what a hit saves, and how to reach it.

    ``function`` names an ``lru_cache``'d function ``module:attr``; otherwise ``attribute`` names the attribute that holds
    the memo and ``owners`` gives the objects that hold it, from the unwrapped env."""

    name: str
    avoids: str
    function: str | None = None
    attribute: str | None = None
    owners: Callable[[Any], list[Any]] | None = None
    #: How the memo is disabled: ``never_stores`` (a dict that keeps nothing), ``no_lru`` (an LRUCache that holds
    #: nothing) or ``none`` (the attribute set to ``None``).
    off_value: str = "never_stores"

    @property
    def short(self) -> str:
        """The name after ``::`` (what ``--memos`` and ``--together`` take)."""
        return self.name.split("::")[1]


def _retrievers(env: Any) -> list[Any]:
    return list({id(r): r for r in env.service.retrievers}.values())


MEMOS: tuple[Memo, ...] = (
    # the env
    Memo("edo_gym/envs/edo_env.py::_plan_features", "the text and plan-check features of a written plan",
         function="edo_gym.envs.edo_env:_plan_features"),
    Memo("edo_gym/envs/edo_env.py::EDOEnv._mask_memo", "building the action mask from the state it depends on",
         attribute="_mask_memo", owners=lambda env: [env]),
    # the simulated team
    Memo("edo_gym/agents/simulator.py::_MATCHES", "parsing and name-matching a lookup's retrieved documents",
         attribute="_matches", owners=lambda env: [env.backend]),
    Memo("edo_gym/agents/worker.py::AgentCaller._token_counts", "a read of the service's token-count memo",
         attribute="_token_counts", owners=lambda env: [env.caller]),
    Memo("edo_gym/agents/planner.py::plan_schema", "writing the plan schema's JSON text for a planner request",
         function="edo_gym.agents.planner:plan_schema"),
    # the world's language
    Memo("edo_gym/world/text.py::normalize", "the regex clean-up of a text", function="edo_gym.world.text:normalize"),
    Memo("edo_gym/world/text.py::similarity", "a difflib ratio of two names", function="edo_gym.world.text:similarity"),
    Memo("edo_gym/world/language.py::parse_question", "parsing a lookup question",
         function="edo_gym.world.language:parse_question"),
    # retrieval
    Memo("edo_gym/retrieval/caches.py::QueryEncoder.memo", "a query vector read from the run-time disk cache (or embedded)",
         attribute="memo", owners=lambda env: list(env.service.encoders), off_value="no_lru"),
    Memo("edo_gym/retrieval/search.py::ShardRetriever.memo", "a search's results read from the disk cache (or searched)",
         attribute="memo", owners=_retrievers, off_value="no_lru"),
    Memo("edo_gym/retrieval/service.py::RetrievalService.token_memo", "counting a text's tokens by its pieces",
         attribute="token_memo", owners=lambda env: [env.service], off_value="no_lru"),
    Memo("edo_gym/retrieval/service.py::RetrievalService.piece_tokens",
         "whole-text token counts read from the run-time disk cache (or the tokenizer)",
         attribute="piece_tokens", owners=lambda env: [env.service], off_value="none"),
)  # fmt: skip


#: Memos behind another, each group measured at once (the first memo is the one in front): the token counts of a text
#: (the caller's dict, then the service's LRU memo, then the piece counts), and a search (its results, then the query
#: vector).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("AgentCaller._token_counts", "RetrievalService.token_memo"),
    ("AgentCaller._token_counts", "RetrievalService.token_memo", "RetrievalService.piece_tokens"),
    ("ShardRetriever.memo", "QueryEncoder.memo"),
)


class NeverStores(dict):
    """A dict memo that keeps nothing: every lookup misses and the value is computed again."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


class NoLRU:
    """An :class:`~edo_gym.retrieval.caches.LRUCache` that holds nothing (the same interface and bound)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> None:
        return None

    def put(self, key: Any, value: Any) -> None:
        pass

    def __len__(self) -> int:
        return 0

    def clear(self) -> None:
        pass


class CountingDict(dict):
    """A copy of a dict memo that counts lookups (``get`` and ``[]``) and hits."""

    lookups = 0
    hits = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.lookups += 1
        value = dict.get(self, key, self)
        if value is self:
            return default
        self.hits += 1
        return value

    def __getitem__(self, key: Any) -> Any:
        self.lookups += 1
        value = dict.__getitem__(self, key)
        self.hits += 1
        return value


def _function_sites(target: str) -> tuple[Any, list[tuple[Any, str]]]:
    """The ``lru_cache``'d function ``module:attr`` and every ``(edo_gym module, name)`` bound to it."""
    module, attr = target.split(":")
    function = getattr(importlib.import_module(module), attr)
    sites = [(mod, name) for mod_name, mod in list(sys.modules.items()) if mod_name.split(".")[0] == "edo_gym"
             for name, value in list(vars(mod).items()) if value is function]  # fmt: skip
    return function, sites


def disable(memo: Memo, env: Any) -> Callable[[], None]:
    """Disable ``memo`` for ``env`` (unwrapped); returns what puts it back."""
    if memo.function is not None:
        function, sites = _function_sites(memo.function)
        for mod, name in sites:
            setattr(mod, name, function.__wrapped__)
        return lambda: _set_all([(mod, name, function) for mod, name in sites])
    assert memo.owners is not None and memo.attribute is not None
    saved = [(owner, memo.attribute, getattr(owner, memo.attribute)) for owner in memo.owners(env)]
    for owner, attribute, value in saved:
        setattr(owner, attribute, _off_value(memo.off_value, value))
    return lambda: _set_all(saved)


def _off_value(kind: str, memo: Any) -> Any:
    if kind == "never_stores":
        return NeverStores()
    if kind == "no_lru":
        return NoLRU(memo.maxsize)
    return None


def _set_all(bindings: list[tuple[Any, str, Any]]) -> None:
    for owner, name, value in bindings:
        setattr(owner, name, value)


def count_lookups(memo: Memo, env: Any) -> tuple[Callable[[], tuple[int, int]], Callable[[], None]]:
    """Count ``memo``'s lookups and hits from now on: returns ``(read the counts since now, put the memo back)``."""
    if memo.function is not None:
        function, _ = _function_sites(memo.function)
        start = function.cache_info()
        return (lambda: (function.cache_info().hits + function.cache_info().misses - start.hits - start.misses,
                         function.cache_info().hits - start.hits)), lambda: None  # fmt: skip
    assert memo.owners is not None and memo.attribute is not None
    saved = [(owner, memo.attribute, getattr(owner, memo.attribute)) for owner in memo.owners(env)]
    if memo.off_value == "no_lru":
        lrus = [(value, value.hits, value.misses) for _, _, value in saved]
        return (
            lambda: (sum(v.hits + v.misses - h - m for v, h, m in lrus), sum(v.hits - h for v, h, _ in lrus))
        ), lambda: None
    counters = []
    for owner, attribute, value in saved:
        if value is not None:
            counters.append(CountingDict(value))
            setattr(owner, attribute, counters[-1])
    return (lambda: (sum(c.lookups for c in counters), sum(c.hits for c in counters))), lambda: _set_all(saved)


class Stepper:
    """Random legal steps of one env (as ``benchmarks/env_throughput.py``), carried on from window to window."""

    def __init__(self, env: Any, seed: int) -> None:
        self.env = env
        self.rng = np.random.default_rng(seed)
        _, self.info = env.reset(seed=seed)

    def run(self, n: int, digest: Any = None) -> float:
        """Process CPU seconds of ``n`` steps; each step's outcome goes into ``digest`` when given."""
        env, rng, info = self.env, self.rng, self.info
        t0 = time.process_time()
        for _ in range(n):
            legal = np.flatnonzero(info["action_mask"])
            obs, reward, terminated, truncated, info = env.step(int(legal[int(rng.random() * len(legal))]))
            if digest is not None:
                digest.update(repr((reward, terminated, truncated)).encode())
                for key in sorted(obs):
                    digest.update(np.ascontiguousarray(obs[key]).tobytes())
                digest.update(np.ascontiguousarray(info["action_mask"]).tobytes())
            if terminated or truncated:
                obs, info = env.reset()
        self.info = info
        return time.process_time() - t0


def cartpole_seconds(env: Any, n: int, rng: np.random.Generator) -> float:
    """Process CPU seconds of ``n`` random CartPole-v1 steps."""
    env.reset(seed=int(rng.integers(1 << 30)))
    t0 = time.process_time()
    for _ in range(n):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            env.reset()
    return time.process_time() - t0


def same_trajectory(env: Any, memos: list[Memo], steps: int) -> dict[str, Any]:
    """``steps`` steps from one seed with ``memos`` on (lookups counted), then off: whether the trajectories agree."""
    digests = []
    counts = [count_lookups(memo, env) for memo in memos]
    digests.append(hashlib.blake2b(digest_size=16))
    Stepper(env, 2024).run(steps, digests[-1])
    lookups, hits = (sum(read()[i] for read, _ in counts) for i in (0, 1))
    for _, restore in counts:
        restore()
    restores = [disable(memo, env) for memo in memos]
    digests.append(hashlib.blake2b(digest_size=16))
    Stepper(env, 2024).run(steps, digests[-1])
    for restore in restores:
        restore()
    return {"same_trajectory": digests[0].digest() == digests[1].digest(), "lookups_per_step": lookups / steps,
            "hit_rate": hits / lookups if lookups else None}  # fmt: skip


def measure(config: str, memo_names: list[str], together: list[list[str]], args: argparse.Namespace) -> None:
    """The child process: one setting, each memo (then each ``together`` group) in turn; one JSON line each on stdout."""
    import gymnasium as gym

    import edo_gym  # noqa: F401  (registers EDO-v0)

    env = gym.make("EDO-v0", **CONFIGS[config]).unwrapped
    cartpole = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    stepper = Stepper(env, 12345)
    stepper.run(args.warmup)
    by_name = {memo.short: memo for memo in MEMOS}
    groups = [[by_name[name]] for name in memo_names] + [[by_name[name] for name in group] for group in together]
    for group in groups:
        row: dict[str, Any] = {"memo": group[0].name if len(group) == 1 else "together", "config": config,
                               **same_trajectory(env, group, args.check_steps)}  # fmt: skip
        if len(group) > 1:
            row["memos"] = [memo.name for memo in group]
        if not row["lookups_per_step"]:
            row["rounds"] = []
            print(json.dumps(row), flush=True)
            continue
        rounds = []
        for r in range(args.rounds):
            turn: dict[str, Any] = {"first": "on" if r % 2 == 0 else "off"}
            for arm in ("on", "off") if r % 2 == 0 else ("off", "on"):
                restores = [disable(memo, env) for memo in group] if arm == "off" else []
                edo_s = stepper.run(args.steps)
                for restore in restores:
                    restore()
                cart_s = cartpole_seconds(cartpole, args.cartpole_steps, rng)
                turn[arm] = {"edo_cpu_s": edo_s, "cartpole_cpu_s": cart_s, "edo_us_per_step": edo_s / args.steps * 1e6,
                             "edo_over_cartpole": (args.steps / edo_s) / (args.cartpole_steps / cart_s)}  # fmt: skip
            turn["off_over_on"] = turn["off"]["edo_over_cartpole"] / turn["on"]["edo_over_cartpole"]
            rounds.append(turn)
        row["rounds"] = rounds
        print(json.dumps(row), flush=True)


def summarise(row: dict[str, Any]) -> dict[str, Any]:
    """Medians of a memo's rounds: each arm's ratio to CartPole and us per step, and ``off_over_on`` with its range."""
    rounds = row["rounds"]
    if not rounds:
        return {}
    ratios = [t["off_over_on"] for t in rounds]
    out: dict[str, Any] = {"off_over_on": {"median": float(np.median(ratios)), "min": min(ratios), "max": max(ratios)}}
    for arm in ("on", "off"):
        out[arm] = {key: float(np.median([t[arm][key] for t in rounds])) for key in ("edo_over_cartpole", "edo_us_per_step")}
    out["pays"] = out["off_over_on"]["median"] < PAYS_BELOW
    return out


def _markdown(rows: list[dict[str, Any]], command: str, machine: str, load: float) -> list[str]:
    md = [
        "# A/B: each in-process memo of the env's step path, on / disabled (warm EDO-v0 steps)",
        "",
        f"Machine: {machine}. Command: `{command}`. Load average at start {load:.1f}.",
        "",
        "One process per setting (`default`: EDO-v0; `train`: with `make train`'s `text_features`), on "
        "a cache directory prepared as `edo prepare` leaves it, warmed up with all memos on. Per memo: the memo on and "
        "disabled in alternated rounds (process CPU time); each arm's steps/s over CartPole-v1's in the same turn; "
        "off / on is the disabled arm's ratio over the memo-on arm's in the same round (median, and range over the "
        f"rounds). Below {PAYS_BELOW:.2f} the memo saves at least a tenth of a warm step. The trajectory check runs "
        "the same steps with the memo on and off and compares them.",
        "",
        "| memo | setting | lookups / step | hit rate | same trajectory | on / CartPole | off / CartPole | "
        "off / on, median (range) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        s = row["summary"]
        name = row["memo"] if row["memo"] != "together" else "together: " + ", ".join(m.split("::")[1] for m in row["memos"])
        hit = f"{row['hit_rate']:.3f}" if row["hit_rate"] is not None else "-"
        if not s:
            md.append(f"| `{name}` | {row['config']} | 0 | - | {row['same_trajectory']} | not reached | | |")
            continue
        r = s["off_over_on"]
        md.append(f"| `{name}` | {row['config']} | {row['lookups_per_step']:.2f} | {hit} | {row['same_trajectory']} | "
                  f"{s['on']['edo_over_cartpole']:.3f} | {s['off']['edo_over_cartpole']:.3f} | "
                  f"{'**' if s['pays'] else ''}{r['median']:.3f}{'**' if s['pays'] else ''} "
                  f"({r['min']:.3f}-{r['max']:.3f}) |")  # fmt: skip
    return md


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds per memo (default: 5)")
    parser.add_argument("--steps", type=int, default=20_000, help="EDO-v0 steps per arm and round (default: 20000)")
    parser.add_argument("--cartpole-steps", type=int, default=50_000, help="CartPole-v1 steps after each EDO window")
    parser.add_argument("--warmup", type=int, default=100_000, help="warm-up steps per setting, all memos on")
    parser.add_argument("--check-steps", type=int, default=2_000, help="steps of each memo's trajectory check")
    parser.add_argument("--config", nargs="+", choices=sorted(CONFIGS), default=["default", "train"])
    parser.add_argument("--memos", nargs="*", metavar="NAME", help="memos to measure one by one (default: all), by the "
                        "name after '::' (plan_tables, EDOEnv._mask_memo, ...)")  # fmt: skip
    parser.add_argument("--together", nargs="+", action="append", metavar="NAME",
                        help="also disable these all at once (repeatable: one A/B per group; default: the groups of "
                        "LAYERS)")  # fmt: skip
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.together is None:
        args.together = [list(group) for group in LAYERS]
    check_counts(parser, args, positive=("rounds", "steps", "cartpole_steps", "check_steps"), non_negative=("warmup",))
    known = [memo.short for memo in MEMOS]
    for name in [*(args.memos or []), *(name for group in args.together for name in group)]:
        if name not in known:
            parser.error(f"unknown memo {name!r}; known: {known}")
    memo_names = known if args.memos is None else args.memos
    if args.child:
        measure(args.child, memo_names, args.together, args)
        return 0

    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    load = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="edo_ab_memos_") as tmp:
        print("preparing a cache directory (as `edo prepare` leaves it) ...", flush=True)
        prepare_cache(Path(tmp))
        for config in args.config:
            child = [sys.executable, "-m", "tools.ab_memos", "--child", config, *_child_args(args, memo_names)]
            env = dict(
                os.environ, EDO_GYM_CACHE_DIR=tmp, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(REPO), *pythonpath])
            )
            with subprocess.Popen(child, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True) as proc:
                assert proc.stdout is not None
                for line in proc.stdout:
                    row = json.loads(line)
                    row["summary"] = summarise(row)
                    rows.append(row)
                    s = row["summary"]
                    print(f"{config}: {row['memo']}: {row['lookups_per_step']:.2f} lookups/step, same trajectory "
                          f"{row['same_trajectory']}" + (f", off/on {s['off_over_on']['median']:.3f} "
                          f"({s['off_over_on']['min']:.3f}-{s['off_over_on']['max']:.3f})" if s else ""), flush=True)  # fmt: skip
            if proc.returncode != 0:
                raise SystemExit(f"the {config} process exited with {proc.returncode}; its stderr is above")
    command = command_line()
    machine = machine_info()
    record = {"command": command, "machine": machine, "versions": versions(), "load_average_at_start": load,
              "settings": {k: v for k, v in vars(args).items() if k not in ("out_dir", "child")},
              "configs": {c: CONFIGS[c] for c in args.config}, "pays_below": PAYS_BELOW,
              "avoids": {memo.name: memo.avoids for memo in MEMOS}, "results": rows}  # fmt: skip
    md = _markdown(rows, command, machine_line(machine), load)
    write_json_atomic(args.out_dir / "ab_memos.json", record)
    write_text_atomic(args.out_dir / "ab_memos.md", "\n".join(md))
    print("\n".join(md))
    print(f"wrote {args.out_dir / 'ab_memos.json'} and {args.out_dir / 'ab_memos.md'}")
    return 0


def _child_args(args: argparse.Namespace, memo_names: list[str]) -> list[str]:
    out = [f"--rounds={args.rounds}", f"--steps={args.steps}", f"--cartpole-steps={args.cartpole_steps}",
           f"--warmup={args.warmup}", f"--check-steps={args.check_steps}", "--memos", *memo_names]  # fmt: skip
    return out + [arg for group in args.together for arg in ("--together", *group)]


if __name__ == "__main__":
    raise SystemExit(main())
