"""EDO-v0 throughput and start-up benchmark.

Measures, in one run on this machine:

- steps/s of ``gym.make("EDO-v0")`` with random legal actions in one process, after a warm-up that fills the
  memoisation caches (the real embedder and chromadb stay in the loop: any query no process met before is embedded
  and searched for real, and the number of such calls in the timed window is reported), next to
  ``gym.make("CartPole-v1")`` with random actions, and their ratio (medians over repeats);
- cold start (a fresh process with an empty embedding cache, ``--cold-repeats`` times, each in an empty directory of
  its own, median reported: ``gym.make`` + ``reset``, which embed the corpus and,
  with the default ``retrieval.lazy_embeddings``, only the task batch of the task drawn; the canonical queries and
  the other task texts are embedded when first used) and, in the same process right after, the time to embed the
  rest at once (``complete_cache_s``: what the lazy start leaves for later), then to embed the world's reachable
  non-canonical queries ahead of use into the run-time disk cache (``reachable_queries_s``) and to search them in
  each worker's shard, storing the results there too (``reachable_searches_s``); ``edo prepare`` does all of it;
  ``--no-reachable`` skips the last two), then a warm start (a fresh process with the cache present);
- the first steps of a fresh process with the disk cache present (``--first-steps``, default 50,000): its mean
  steps/s over them, with no warm-up (memo caches empty: every query string is searched and embedded for real
  unless the run-time disk cache holds its result and vector from an earlier process or from the reachable queries
  prepared ahead), next to CartPole-v1's rate measured in
  that same process right after (``first_50k_over_cartpole``, median over ``--first-repeats`` processes with seeds
  0, 1, ..., run one after the other on one cache directory: process k finds the run-time cache entries of
  processes 0..k-1, none of its own seed);
- a newcomer's first steps (``--newcomer-repeats``, default 3, each in a new empty cache directory of its own): the
  first ``--first-steps`` random legal steps of a new process over CartPole-v1's rate in that process, (a) after
  exactly what the install does to the cache (``make install``, and every make target that installs, runs
  ``edo prepare`` once: here ``python -m edo_gym.cli prepare`` in a process of its own on the empty directory;
  ``first_50k_after_install_over_cartpole``) and (b) on the empty directory with nothing prepared (a ``pip install``
  without ``edo prepare``; ``first_50k_empty_cache_over_cartpole``, whose make + reset is a cold start);
- retrieval latency p50/p99: memoised hits, uncached searches whose query vector is known, fully uncached queries
  that also run the embedder, and search results read from the run-time disk cache (``retrieval.search_cache``).

The warm (steady-state) process uses the same cache directory after them. EDO-v0's rates are also given in steps per CPU second of its process (``edo_steps_per_cpu_s``,
``first_steps.edo_steps_per_cpu_s``, ``first_50k_over_warm_cpu``): under varying load they move far less
than wall-time rates.

Usage: ``python -m benchmarks.env_throughput [--steps 20000] [--repeats 5] [--warmup 150000] [--first-steps 50000]
[--first-repeats 3] [--newcomer-repeats 3]``.
Results: ``benchmarks/results/env_throughput.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import machine_info, machine_line, median_iqr, write_results

#: The k of recall@k (:func:`shard_recall`).
KS = (1, 3, 5)

_START_SNIPPET = """
import json, time
t0 = time.perf_counter()
import gymnasium as gym, edo_gym
t1 = time.perf_counter()
env = gym.make("EDO-v0", **{kwargs})
env.reset(seed=0)
t2 = time.perf_counter()
service = env.unwrapped.service
built = {lazy.kind: lazy.batches_built for lazy in service._lazy.values()}
if {only_start}:
    print(json.dumps({"import_s": t1 - t0, "make_reset_s": t2 - t1, "lazy_batches_built": built}))
    raise SystemExit(0)
service.complete_all()
t3 = time.perf_counter()
reachable_n = service.embed_reachable_queries() if {reachable} else 0
t4 = time.perf_counter()
searched_n = service.search_reachable_queries([w.spec.top_k for w in env.unwrapped.workers]) if {reachable} else 0
t5 = time.perf_counter()
pieces_n = service.store_piece_counts() if {reachable} else 0
t6 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "make_reset_s": t2 - t1, "complete_cache_s": t3 - t2, "lazy_batches_built": built,
                  "reachable_queries_s": t4 - t3, "reachable_queries_embedded": reachable_n,
                  "reachable_searches_s": t5 - t4, "reachable_searches": searched_n,
                  "piece_counts_s": t6 - t5, "pieces_counted": pieces_n}))
"""


def start_time(
    cache_dir: str, env_kwargs: dict | None = None, reachable: bool = True, only_start: bool = False
) -> dict[str, float]:
    """Run a fresh interpreter that imports edo_gym and makes + resets EDO-v0 with ``cache_dir``, then (unless
    ``only_start``) completes the embedding lists and (``reachable``) embeds and searches the reachable queries ahead
    of use, as ``edo prepare`` does; wall times of each part."""
    env = dict(os.environ, EDO_GYM_CACHE_DIR=cache_dir, HF_HUB_OFFLINE="1")
    t0 = time.perf_counter()
    code = (
        _START_SNIPPET.replace("{kwargs}", repr(env_kwargs or {}))
        .replace("{reachable}", repr(bool(reachable)))
        .replace("{only_start}", repr(bool(only_start)))
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    total = time.perf_counter() - t0
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = total
    return result


_FIRST_STEPS_SNIPPET = """
import json, time
import numpy as np
t0 = time.perf_counter()
import gymnasium as gym, edo_gym
from benchmarks.env_throughput import random_legal_steps
env = gym.make("EDO-v0", **{kwargs!r})
service = env.unwrapped.service
t1 = time.perf_counter()
env.reset(seed={seed})  # the first reset, timed apart (it builds the retrieval indexes; the steps below reset again)
t2 = time.perf_counter()
rng = np.random.default_rng({seed})
cpu0 = time.process_time()
edo_s = random_legal_steps(env, {steps}, rng, masked=True)
edo_cpu_s = time.process_time() - cpu0
cart_s = random_legal_steps(gym.make("CartPole-v1"), {steps}, rng, masked=False)
print(json.dumps({{
    "make_s": t1 - t0, "first_reset_s": t2 - t1, "edo_s": edo_s, "edo_cpu_s": edo_cpu_s, "cartpole_s": cart_s,
    "embedder_calls": sum(e.model_calls for e in service.encoders),
    "runtime_cache_vector_hits": service.runtime.vector_hits if service.runtime else 0,
    "runtime_cache_token_hits": service.runtime.token_hits if service.runtime else 0,
    "token_counts_computed_or_read": service.token_memo.misses,
    "word_pieces_counted": getattr(service, "pieces_counted", 0),
    "word_pieces_loaded_from_disk": len(service.piece_tokens or ()) - getattr(service, "pieces_counted", 0),
    "chromadb_searches": sum(x.searches for x in {{id(x): x for x in service.retrievers}}.values()),
    "search_results_read_from_disk": sum(x.disk_hits for x in {{id(x): x for x in service.retrievers}}.values()),
}}))
"""


def first_steps(cache_dir: str, steps: int, seed: int, env_kwargs: dict | None = None) -> dict[str, float]:
    """A fresh interpreter with the embedding cache ``cache_dir`` present: seconds of its first ``steps`` random legal
    EDO-v0 steps (after import + make and the first reset, each timed apart), then of as many CartPole-v1 steps in
    the same process."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the child imports benchmarks.env_throughput
    env = dict(os.environ, EDO_GYM_CACHE_DIR=cache_dir, HF_HUB_OFFLINE="1", TQDM_DISABLE="1",
               PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))  # fmt: skip
    code = _FIRST_STEPS_SNIPPET.format(seed=seed, steps=steps, kwargs=env_kwargs or {})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["edo_steps_per_s"] = steps / result["edo_s"]
    # the same steps with the process's start counted in: import + make + the first reset
    result["edo_steps_per_s_incl_start"] = steps / (result["make_s"] + result["first_reset_s"] + result["edo_s"])
    result["cartpole_steps_per_s"] = steps / result["cartpole_s"]
    return result


#: what the install runs on the user's cache directory (Makefile: the PREPARED stamp's recipe, `$(BIN)/edo prepare`)
INSTALL_PREPARE = ["-m", "edo_gym.cli", "prepare"]


def newcomer_first_steps(steps: int, seed: int, after_install: bool, env_kwargs: dict | None = None) -> dict[str, float]:
    """A new empty cache directory; then, if ``after_install``, the install's prepare step (``edo prepare``, timed, in
    a process of its own); then :func:`first_steps` in a new process: a newcomer's first ``steps`` random legal
    steps next to CartPole-v1 in the same process. The directory is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="edo_newcomer_") as cache_dir:
        prepare_s = 0.0
        if after_install:
            args = list(INSTALL_PREPARE)
            if (env_kwargs or {}).get("retrieval", {}).get("encoder"):
                args += ["--retrieval-encoder", env_kwargs["retrieval"]["encoder"]]
            env = dict(os.environ, EDO_GYM_CACHE_DIR=cache_dir, HF_HUB_OFFLINE="1", TQDM_DISABLE="1")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True)
            prepare_s = time.perf_counter() - t0
        result = first_steps(cache_dir, steps, seed=seed, env_kwargs=env_kwargs)
    result["prepare_s"] = prepare_s
    result["edo_over_cartpole"] = result["edo_steps_per_s"] / result["cartpole_steps_per_s"]
    return result


def random_legal_steps(env, n: int, rng: np.random.Generator, masked: bool) -> float:
    """Seconds to take ``n`` random (legal, if ``masked``) steps, resetting at episode ends."""
    obs, info = env.reset(seed=int(rng.integers(1 << 30)))
    t0 = time.perf_counter()
    for _ in range(n):
        if masked:
            # a uniform legal action, drawn as cheaply as CartPole's (Generator.choice alone costs ~5 us, which is not
            # the env's time)
            legal = np.flatnonzero(info["action_mask"])
            action = int(legal[int(rng.random() * len(legal))])
        else:
            action = int(rng.integers(env.action_space.n))
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            obs, info = env.reset()
    return time.perf_counter() - t0


def retrieval_latency(env, n: int = 300) -> dict[str, dict[str, float]]:
    """p50/p99 of memoised hits, uncached searches (known query vector), and uncached queries with embedding (ms)."""
    from edo_gym.world.generator import RELATIONS

    base = env.unwrapped
    retriever = base.service.retrievers[1]
    world = base.world
    queries = [
        RELATIONS[rel].question.format(x=subj) for (subj, rel) in world.facts if RELATIONS[rel].domain in retriever.domains
    ]
    queries = queries[:n]
    out = {}
    retriever.memo.clear()
    presearched, retriever.presearched = retriever.presearched, None  # each timed search is one real index query
    disk, retriever.disk = retriever.disk, None  # (and not a result read from the run-time disk cache)
    times = []
    for q in queries:  # canonical vector known, search not memoised: a real chromadb query
        t0 = time.perf_counter()
        retriever.search(q, 3)
        times.append(time.perf_counter() - t0)
    out["uncached_search_ms"] = times
    times = []
    for q in queries:  # memoised
        t0 = time.perf_counter()
        retriever.search(q, 3)
        times.append(time.perf_counter() - t0)
    out["cached_ms"] = times
    times = []
    nonce = uuid.uuid4().hex[:8]  # texts no process met before, so not in the run-time disk cache either
    for k, q in enumerate(queries[: n // 3]):  # brand-new text: embedder + chromadb
        novel = q.replace("?", f" (ticket {nonce}-{k})?")
        t0 = time.perf_counter()
        retriever.search(novel, 3)
        times.append(time.perf_counter() - t0)
    out["uncached_with_embedding_ms"] = times
    retriever.disk = disk
    if disk is not None:  # a search result read from the run-time disk cache (stored by a first pass)
        retriever.memo.clear()
        for q in queries:
            retriever.search(q, 3)
        disk.flush()
        retriever.memo.clear()
        times = []
        for q in queries:
            t0 = time.perf_counter()
            retriever.search(q, 3)
            times.append(time.perf_counter() - t0)
        out["disk_hit_ms"] = times
    retriever.presearched = presearched
    return {
        key: {"p50": float(np.percentile(v, 50) * 1e3), "p99": float(np.percentile(v, 99) * 1e3), "n": len(v)}
        for key, v in out.items()
    }


def shard_recall(env: Any, max_queries: int | None) -> dict[str, Any]:
    """recall@k and distractor-at-top-1 per worker, over the canonical questions of the facts in its shard."""
    from edo_gym.world.generator import RELATIONS

    base = env.unwrapped
    world = base.world
    gold = {(d.subject, d.relation): i for i, d in enumerate(world.documents) if not d.is_distractor}
    out = {}
    for w, spec in enumerate(base.config.workers):
        retriever = base.service.retrievers[w]
        facts = [f for f in world.facts if RELATIONS[f[1]].domain in retriever.domains]
        if max_queries is not None:
            facts = facts[:max_queries]
        hits = {k: 0 for k in KS}
        distractor_top1 = 0
        for subject, rel in facts:
            ids = retriever.search(RELATIONS[rel].question.format(x=subject), max(KS))
            target = gold[(subject, rel)]
            for k in KS:
                hits[k] += target in ids[:k]
            if ids and ids[0] != target and world.documents[ids[0]].is_distractor and world.documents[ids[0]].relation == rel:
                distractor_top1 += 1
        n = len(facts)
        out[spec.name] = {
            "shard": list(spec.shard),
            "n_queries": n,
            **{f"recall@{k}": hits[k] / n if n else None for k in KS},
            "distractor_top1": distractor_top1 / n if n else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000, help="steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=150_000, help="EDO warm-up steps before timing (fills memo caches)")
    parser.add_argument("--no-start", action="store_true", help="skip the cold/warm start measurements")
    parser.add_argument("--first-steps", type=int, default=50_000, help="steps of the fresh-process measurement")
    parser.add_argument("--first-repeats", type=int, default=3, help="fresh processes for --first-steps (0: skip)")
    parser.add_argument(
        "--encoder",
        choices=("transformer", "static"),
        default="transformer",
        help="retrieval.encoder of every EDO-v0 env measured; 'static' writes env_throughput_static.{json,md} and its "
        "recall@k is reported beside the default's",
    )
    parser.add_argument(
        "--no-reachable",
        action="store_true",
        help="do not embed the reachable queries ahead of use after the start measurements (as `edo prepare` does): "
        "the fresh processes then embed every non-canonical query they meet first",
    )
    parser.add_argument(
        "--cold-repeats",
        type=int,
        default=3,
        help="cold starts, each in an empty cache directory (median reported; the later ones stop after make + reset)",
    )
    parser.add_argument(
        "--newcomer-repeats",
        type=int,
        default=3,
        help="new empty cache directories for a newcomer's first --first-steps steps, each measured after the install's "
        "`edo prepare` and with nothing prepared (0: skip)",
    )
    parser.add_argument("--out-dir", default=None)
    args = parser.parse_args()
    if args.cold_repeats < 1:
        parser.error(f"--cold-repeats must be >= 1, got {args.cold_repeats}")
    reachable = not args.no_reachable
    env_kwargs = {} if args.encoder == "transformer" else {"retrieval": {"encoder": args.encoder}}

    import gymnasium as gym

    import edo_gym  # noqa: F401

    load0 = os.getloadavg()[0]
    newcomer: dict[str, list[dict[str, float]]] = {"after_install": [], "empty_cache": []}
    for r in range(args.newcomer_repeats):
        for case in ("after_install", "empty_cache"):
            what = "after the install's `edo prepare`" if case == "after_install" else "nothing prepared"
            print(f"newcomer {r + 1} of {args.newcomer_repeats}: new empty cache directory, {what}, seed {r} ...", flush=True)
            run = newcomer_first_steps(args.first_steps, seed=r, after_install=case == "after_install", env_kwargs=env_kwargs)
            newcomer[case].append(run)
            print(
                f"  prepare {run['prepare_s']:.1f} s, make {run['make_s']:.2f} s + first reset {run['first_reset_s']:.2f} s; "
                f"EDO {run['edo_steps_per_s']:,.0f} steps/s, CartPole {run['cartpole_steps_per_s']:,.0f} steps/s: "
                f"{run['edo_over_cartpole']:.3f}",
                flush=True,
            )
    starts = {}
    first: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as cache_dir:
        if not args.no_start:
            print("cold start (empty embedding cache) ...", flush=True)
            starts["cold"] = start_time(cache_dir, env_kwargs, reachable)
            cold_runs = [starts["cold"]["make_reset_s"]]
            for r in range(1, args.cold_repeats):  # more cold starts, each in an empty directory of its own
                print(f"cold start {r + 1} of {args.cold_repeats} ...", flush=True)
                with tempfile.TemporaryDirectory() as other:
                    cold_runs.append(start_time(other, env_kwargs, reachable, only_start=True)["make_reset_s"])
            # the key keeps its meaning (make + reset on an empty cache), as the median of the repeats
            starts["cold"]["make_reset_runs_s"] = cold_runs
            starts["cold"]["make_reset_s"] = float(np.median(cold_runs))
            print("warm start (cache present) ...", flush=True)
            starts["warm"] = start_time(cache_dir, env_kwargs, reachable)
        for r in range(args.first_repeats):
            if r == 0 and args.no_start:
                start_time(cache_dir, env_kwargs, reachable)  # fills the disk cache
            print(f"first {args.first_steps} steps of a fresh process (disk cache present), seed {r} ...", flush=True)
            first.append(first_steps(cache_dir, args.first_steps, seed=r, env_kwargs=env_kwargs))
            print(
                f"  EDO {first[-1]['edo_steps_per_s']:,.0f} steps/s, CartPole {first[-1]['cartpole_steps_per_s']:,.0f} "
                f"steps/s; {first[-1]['embedder_calls']} embedder calls ({first[-1]['runtime_cache_vector_hits']} query "
                f"vectors read from the run-time cache), {first[-1]['chromadb_searches']} chromadb searches",
                flush=True,
            )
        # the warm process uses the same cache directory (run-time cache entries of the processes above included)
        os.environ["EDO_GYM_CACHE_DIR"] = cache_dir
        print(f"EDO warm-up: {args.warmup} random legal steps ...", flush=True)
        edo = gym.make("EDO-v0", **env_kwargs)
        service = edo.unwrapped.service
        rng = np.random.default_rng(0)
        random_legal_steps(edo, args.warmup, rng, masked=True)
        cart = gym.make("CartPole-v1")
        edo_times, edo_cpu, cart_times, model_calls, searches, runtime_hits, disk_hits = [], [], [], [], [], [], []
        retrievers = list({id(x): x for x in service.retrievers}.values())
        for r in range(args.repeats):
            calls0 = sum(e.model_calls for e in service.encoders)
            search0 = sum(x.searches for x in retrievers)
            disk0 = sum(x.disk_hits for x in retrievers)
            hits0 = service.runtime.vector_hits if service.runtime else 0
            cpu0 = time.process_time()
            edo_times.append(random_legal_steps(edo, args.steps, rng, masked=True))
            edo_cpu.append(time.process_time() - cpu0)
            model_calls.append(sum(e.model_calls for e in service.encoders) - calls0)
            searches.append(sum(x.searches for x in retrievers) - search0)
            disk_hits.append(sum(x.disk_hits for x in retrievers) - disk0)
            runtime_hits.append((service.runtime.vector_hits if service.runtime else 0) - hits0)
            cart_times.append(random_legal_steps(cart, args.steps, rng, masked=False))
            print(
                f"  repeat {r + 1}: EDO {args.steps / edo_times[-1]:,.0f} steps/s, "
                f"CartPole {args.steps / cart_times[-1]:,.0f} steps/s",
                flush=True,
            )
        latency = retrieval_latency(edo)
        recall = shard_recall(edo, None)
        runtime_sizes = service.runtime.sizes() if service.runtime else {}
    edo_sps = [args.steps / t for t in edo_times]
    cart_sps = [args.steps / t for t in cart_times]
    ratios = [e / c for e, c in zip(edo_sps, cart_sps, strict=True)]
    first_ratios = [f["edo_steps_per_s"] / f["cartpole_steps_per_s"] for f in first]
    first_incl_ratios = [f["edo_steps_per_s_incl_start"] / f["cartpole_steps_per_s"] for f in first]
    warm_cpu_rate = float(np.median([args.steps / c for c in edo_cpu]))
    payload = {
        "settings": vars(args),
        "edo_steps_per_s": median_iqr(edo_sps),
        # steps per CPU second of this process: less sensitive than wall time to other jobs on the machine
        "edo_steps_per_cpu_s": median_iqr([args.steps / c for c in edo_cpu]),
        "cartpole_steps_per_s": median_iqr(cart_sps),
        "edo_over_cartpole": median_iqr(ratios),
        "embedder_calls_in_timed_steps": model_calls,
        "chromadb_searches_in_timed_steps": searches,
        "search_results_read_from_disk_in_timed_steps": disk_hits,
        "runtime_cache_vector_hits_in_timed_steps": runtime_hits,
        "runtime_cache_rows_at_end": runtime_sizes,
        "start": starts,
        "first_steps": {
            "steps": args.first_steps,
            "runs": first,
            "edo_steps_per_s": median_iqr([f["edo_steps_per_s"] for f in first]) if first else None,
            "cartpole_steps_per_s": median_iqr([f["cartpole_steps_per_s"] for f in first]) if first else None,
            "edo_steps_per_cpu_s": median_iqr([args.first_steps / f["edo_cpu_s"] for f in first]) if first else None,
        },
        # mean steps/s over the first --first-steps steps of a fresh process (disk cache present) / CartPole's, same process
        "first_50k_over_cartpole": median_iqr(first_ratios) if first else None,
        # the same with import + make + the first reset counted in the EDO time (what a fresh process costs in all)
        "first_50k_incl_start_over_cartpole": median_iqr(first_incl_ratios) if first else None,
        # the same first-steps rate over the warm (steady-state) rate of the main process, in wall and in CPU time
        "first_50k_over_warm": median_iqr([f["edo_steps_per_s"] / float(np.median(edo_sps)) for f in first])
        if first
        else None,
        "first_50k_over_warm_cpu": median_iqr([(args.first_steps / f["edo_cpu_s"]) / warm_cpu_rate for f in first])
        if first
        else None,
        # a newcomer's first --first-steps steps over CartPole (same process), each repeat in a new empty cache directory:
        # after what the install does to it (`edo prepare`), and with nothing prepared
        "first_50k_after_install_over_cartpole": median_iqr([f["edo_over_cartpole"] for f in newcomer["after_install"]])
        if newcomer["after_install"]
        else None,
        "first_50k_empty_cache_over_cartpole": median_iqr([f["edo_over_cartpole"] for f in newcomer["empty_cache"]])
        if newcomer["empty_cache"]
        else None,
        "newcomer": {
            "steps": args.first_steps,
            "install_prepare_command": "edo prepare",
            "after_install": newcomer["after_install"],
            "empty_cache": newcomer["empty_cache"],
            # seconds of import + gym.make + the first reset on the empty cache (the cold start's make + reset without
            # the import is start.cold.make_reset_s)
            "empty_cache_import_make_reset_s": median_iqr([f["make_s"] + f["first_reset_s"] for f in newcomer["empty_cache"]])
            if newcomer["empty_cache"]
            else None,
        },
        "retrieval_latency_ms": latency,
        "encoder": args.encoder,
        "model_id": service.model_id,
        # recall@k per worker shard over every canonical lookup question of its facts (study_retriever's measure)
        "recall": recall,
        "load_average_at_start": load0,
        "target_steps_per_s": 5000,
        "target_met": float(np.median(edo_sps)) >= 5000,
    }
    m = machine_info()
    lines = [
        "# EDO-v0 throughput",
        "",
        f"Machine: {machine_line(m)}. Command: `python -m benchmarks.env_throughput "
        f"--steps {args.steps} --repeats {args.repeats} --warmup {args.warmup} --first-steps {args.first_steps} "
        f"--first-repeats {args.first_repeats} --cold-repeats {args.cold_repeats} --newcomer-repeats {args.newcomer_repeats}"
        + (f" --encoder {args.encoder}" if args.encoder != "transformer" else "")
        + (" --no-reachable" if args.no_reachable else "")
        + f"`. Load average at the start: {load0:.1f}. Retrieval encoder: {args.encoder} (`{service.model_id}`).",
        "",
        "| measure | median | IQR |",
        "|---|---|---|",
        f"| EDO-v0 steps/s (random legal actions, warm caches) | {np.median(edo_sps):,.0f} | "
        f"{np.percentile(edo_sps, 25):,.0f}-{np.percentile(edo_sps, 75):,.0f} |",
        f"| CartPole-v1 steps/s (random actions, same run) | {np.median(cart_sps):,.0f} | "
        f"{np.percentile(cart_sps, 25):,.0f}-{np.percentile(cart_sps, 75):,.0f} |",
        f"| EDO / CartPole | {np.median(ratios):.3f} | {np.percentile(ratios, 25):.3f}-{np.percentile(ratios, 75):.3f} |",
        "",
        f"Real embedder calls / chromadb searches inside the timed EDO steps (per repeat of {args.steps}): "
        f"{model_calls} / {searches}; query vectors / search results read from the run-time disk cache instead: "
        f"{runtime_hits} / {disk_hits} (it held {runtime_sizes} rows at the end). Target 5,000 steps/s: {'met' if payload['target_met'] else 'NOT met'}.",
        "",
    ]
    if newcomer["after_install"] or newcomer["empty_cache"]:
        lines += [
            f"A newcomer's first {args.first_steps:,} random legal steps: each repeat a new process on a new empty cache "
            f"directory ({args.newcomer_repeats} repeats, seeds 0-{args.newcomer_repeats - 1}), after exactly what the "
            "install does to it (`make install`, and every make target that installs, runs `edo prepare` once) or with "
            "nothing prepared (a `pip install` without `edo prepare`); CartPole-v1 measured in the same process right after:",
            "",
            "| cache the new process finds | EDO-v0 steps/s | CartPole-v1 steps/s | first "
            f"{args.first_steps // 1000}k / CartPole (median) | IQR | per run | prepare (s) | import + make + first reset (s) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for case, label in (
            ("after_install", "after the install (`edo prepare` on the empty directory)"),
            ("empty_cache", "empty, nothing prepared"),
        ):
            runs = newcomer[case]
            if not runs:
                continue
            r = [f["edo_over_cartpole"] for f in runs]
            lines.append(
                f"| {label} | {np.median([f['edo_steps_per_s'] for f in runs]):,.0f} | "
                f"{np.median([f['cartpole_steps_per_s'] for f in runs]):,.0f} | {np.median(r):.3f} | "
                f"{np.percentile(r, 25):.3f}-{np.percentile(r, 75):.3f} | {[round(x, 3) for x in r]} | "
                f"{np.median([f['prepare_s'] for f in runs]):.1f} | "
                f"{np.median([f['make_s'] + f['first_reset_s'] for f in runs]):.2f} |"
            )
        lines += [
            "",
            f"Embedder calls in those steps: after the install {[f['embedder_calls'] for f in newcomer['after_install']]}, "
            f"nothing prepared {[f['embedder_calls'] for f in newcomer['empty_cache']]}.",
            "",
        ]
    if first:
        fe = [f["edo_steps_per_s"] for f in first]
        fc = [f["cartpole_steps_per_s"] for f in first]
        lines += [
            f"First {args.first_steps:,} steps of a fresh process on a prepared cache shared with the processes before "
            f"it (`first_50k_over_cartpole`: `edo prepare`'s work done by the start measurements, no warm-up; "
            f"{len(first)} processes, seeds 0-{len(first) - 1}; CartPole measured in the same process right after):",
            "",
            "| measure | median | IQR |",
            "|---|---|---|",
            f"| EDO-v0 steps/s, first {args.first_steps:,} steps | {np.median(fe):,.0f} | "
            f"{np.percentile(fe, 25):,.0f}-{np.percentile(fe, 75):,.0f} |",
            f"| CartPole-v1 steps/s (same processes) | {np.median(fc):,.0f} | "
            f"{np.percentile(fc, 25):,.0f}-{np.percentile(fc, 75):,.0f} |",
            f"| first {args.first_steps // 1000}k / CartPole | {np.median(first_ratios):.3f} | "
            f"{np.percentile(first_ratios, 25):.3f}-{np.percentile(first_ratios, 75):.3f} |",
            f"| same, counting import + make ({np.median([f['make_s'] for f in first]):.2f} s) and the first reset "
            f"({np.median([f['first_reset_s'] for f in first]):.2f} s) in the EDO time | {np.median(first_incl_ratios):.3f} | "
            f"{np.percentile(first_incl_ratios, 25):.3f}-{np.percentile(first_incl_ratios, 75):.3f} |",
            f"| first {args.first_steps // 1000}k / warm EDO-v0 (above) | {np.median(fe) / np.median(edo_sps):.2f} | |",
            f"| same, in steps per CPU second | {payload['first_50k_over_warm_cpu']['median']:.2f} | |",
            "",
            f"Embedder calls / chromadb searches in those steps: {[f['embedder_calls'] for f in first]} / "
            f"{[f['chromadb_searches'] for f in first]}; query vectors / whole-text token counts / search results read from "
            f"the run-time disk cache (written ahead or by the processes before): {[f['runtime_cache_vector_hits'] for f in first]}"
            f" / {[f['runtime_cache_token_hits'] for f in first]} / {[f.get('search_results_read_from_disk', 0) for f in first]}"
            f"; word pieces counted by the tokenizer / loaded from that cache at once (the default "
            f"tokenizer counts a text by its pieces): {[f.get('word_pieces_counted', 0) for f in first]} / "
            f"{[f.get('word_pieces_loaded_from_disk', 0) for f in first]}"
            f"; EDO-v0 steps/s per process: "
            f"{[round(x) for x in fe]}.",
            "",
        ]
    if starts:
        lines += [
            "| start | import (s) | make + reset (s) | then embedding the rest at once (s) | then the reachable queries "
            "ahead of use (s) | then searching them ahead (s) | then counting their words' tokens ahead (s) | whole process (s) |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {k} | {v['import_s']:.2f} | {v['make_reset_s']:.2f} | {v['complete_cache_s']:.2f} | "
                f"{v['reachable_queries_s']:.2f} ({v['reachable_queries_embedded']:,} texts) | "
                f"{v.get('reachable_searches_s', 0.0):.2f} ({v.get('reachable_searches', 0):,} searches) | "
                f"{v.get('piece_counts_s', 0.0):.2f} ({v.get('pieces_counted', 0):,} pieces) | {v['process_s']:.2f} |"
                for k, v in starts.items()
            ),
            "",
            f"Cold make + reset, each in an empty cache directory: {[round(x, 2) for x in starts['cold']['make_reset_runs_s']]} "
            f"s (the table's cold row gives their median; the other columns are the first cold start's). "
            f"Batches embedded lazily by the first cold make + reset: {starts['cold'].get('lazy_batches_built')}."
            if "cold" in starts
            else "",
            "",
        ]
    lines += ["| retrieval latency | p50 (ms) | p99 (ms) |", "|---|---|---|"]
    lines += [f"| {k} | {v['p50']:.3f} | {v['p99']:.3f} |" for k, v in latency.items()]
    lines += ["", "| worker | queries | recall@1 | recall@3 | recall@5 |", "|---|---|---|---|---|"]
    lines += [
        f"| {w} | {r['n_queries']} | " + " | ".join(f"{r[f'recall@{k}']:.3f}" for k in (1, 3, 5)) + " |"
        for w, r in recall.items()
    ]
    markdown = "\n".join(lines)
    print("\n" + markdown)
    write_results(
        "env_throughput" if args.encoder == "transformer" else f"env_throughput_{args.encoder}",
        payload,
        markdown,
        out_dir=None if args.out_dir is None else __import__("pathlib").Path(args.out_dir),
    )


if __name__ == "__main__":
    main()
