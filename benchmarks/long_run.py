"""EDO-v0 long run: memory and memoisation caches over 200,000 steps in one process.

Steps ``gym.make("EDO-v0")`` with random legal actions (resetting at episode ends) and samples, every
``--sample-every`` steps: resident memory (RSS, via psutil, after a ``gc.collect()``), the entries held by the
retrieval service's bounded memoisation caches (``service.cache_sizes()``: query embeddings, search results,
token counts), how many queries ran the embedding model / a real chromadb search, and throughput.

Pass criteria (the process exits 1 if one fails): every cache stays within its configured bound, and RSS at the
end exceeds RSS at the end of the warm-up (``--warmup`` steps) by at most ``--max-growth-pct`` percent.

Usage: ``python -m benchmarks.long_run [--steps 200000] [--warmup 20000] [--sample-every 5000] [--seed 0]``;
``--query-cache-size N --result-cache-size M --name long_run_small_caches`` shows the caches plateau at their
bounds (LRU eviction) within a short run. Results: ``benchmarks/results/<name>.{json,md}`` (default ``long_run``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import machine_info, machine_line, write_results


def _rss_mib(proc) -> float:
    gc.collect()
    return proc.memory_info().rss / 2**20


def _counters(service) -> dict[str, int]:
    retrievers = {id(r): r for r in service.retrievers}.values()
    return {
        "model_encodes": int(sum(e.model_calls for e in service.encoders)),
        "chroma_searches": int(sum(r.searches for r in retrievers)),
    }


def run(steps: int, warmup: int, sample_every: int, seed: int, env_id: str, retrieval: dict | None = None) -> dict:
    import gymnasium as gym
    import psutil

    import edo_gym  # noqa: F401
    from edo_gym.retrieval import embedder as embedder_lib

    proc = psutil.Process()
    rss_start = _rss_mib(proc)
    t0 = time.perf_counter()
    env = gym.make(env_id, **({"retrieval": retrieval} if retrieval else {}))
    u = env.unwrapped
    service = u.service
    make_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    bounds = {
        "query_embeddings": service.config.query_cache_size * len(service.encoders),
        "search_results": service.config.result_cache_size * len({id(r) for r in service.retrievers}),
        "token_counts": service.config.query_cache_size,
    }
    samples: list[dict] = []
    episodes = successes = 0
    reward_sum = 0.0
    t_window = time.perf_counter()
    t_loop = t_window
    for step in range(1, steps + 1):
        legal = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(legal[rng.integers(len(legal))]))
        reward_sum += reward
        if terminated or truncated:
            episodes += 1
            successes += int(info["episode_stats"]["success"])
            obs, info = env.reset()
        if step % sample_every == 0 or step == steps:
            now = time.perf_counter()
            window = step - (samples[-1]["step"] if samples else 0)
            samples.append(
                {
                    "step": step,
                    "elapsed_s": round(now - t_loop, 2),
                    "steps_per_s": round(window / (now - t_window), 1),
                    "rss_mib": round(_rss_mib(proc), 1),
                    "episodes": episodes,
                    **service.cache_sizes(),
                    **_counters(service),
                }
            )
            t_window = time.perf_counter()
            s = samples[-1]
            print(
                f"step {step:>7,}: RSS {s['rss_mib']:7.1f} MiB, caches q={s['query_embeddings']:>6,} "
                f"r={s['search_results']:>6,} t={s['token_counts']:>6,}, model encodes {s['model_encodes']:>6,}, "
                f"{s['steps_per_s']:>7.0f} steps/s",
                flush=True,
            )
    total_s = time.perf_counter() - t_loop
    env.close()
    at_warmup = min((s for s in samples if s["step"] >= warmup), key=lambda s: s["step"])
    after = [s for s in samples if s["step"] >= warmup]
    end = samples[-1]
    growth_pct = 100.0 * (end["rss_mib"] - at_warmup["rss_mib"]) / at_warmup["rss_mib"]
    peak_growth_pct = 100.0 * (max(s["rss_mib"] for s in after) - at_warmup["rss_mib"]) / at_warmup["rss_mib"]
    within_bounds = all(s[k] <= bounds[k] for s in samples for k in bounds)
    return {
        "env_id": env_id,
        "retrieval_overrides": retrieval or {},
        "steps": steps,
        "warmup_steps": warmup,
        "sample_every": sample_every,
        "seed": seed,
        "episodes": episodes,
        "success_rate": successes / max(1, episodes),
        "mean_reward_per_step": reward_sum / steps,
        "make_s": round(make_s, 2),
        "loop_s": round(total_s, 1),
        "steps_per_s": round(steps / total_s, 1),
        "rss_mib": {
            "before_make": round(rss_start, 1),
            "at_warmup": at_warmup["rss_mib"],
            "end": end["rss_mib"],
            "max_after_warmup": max(s["rss_mib"] for s in after),
        },
        "rss_growth_after_warmup_pct": round(growth_pct, 2),
        "rss_peak_growth_after_warmup_pct": round(peak_growth_pct, 2),
        "cache_bounds": bounds,
        "caches_within_bounds": within_bounds,
        "model_loads_in_process": embedder_lib.model_load_count(),
        "samples": samples,
    }


def markdown(r: dict, max_growth: float, machine: dict) -> str:
    rss = r["rss_mib"]
    lines = [
        "# EDO-v0 long run",
        "",
        f"Machine: {machine_line(machine)}. Command: `{r['command_line']}`.",
        "",
        f"{r['steps']:,} steps of `{r['env_id']}` with random legal actions in one process ({r['episodes']:,} episodes, "
        f"{r['loop_s']} s, {r['steps_per_s']:,.0f} steps/s; the embedding model was loaded "
        f"{r['model_loads_in_process']} time(s)).",
        "",
        "| | value |",
        "|---|---|",
        f"| RSS before `gym.make` | {rss['before_make']} MiB |",
        f"| RSS after warm-up ({r['warmup_steps']:,} steps) | {rss['at_warmup']} MiB |",
        f"| RSS at the end | {rss['end']} MiB |",
        f"| max RSS after warm-up | {rss['max_after_warmup']} MiB |",
        f"| RSS growth after warm-up (end / peak) | {r['rss_growth_after_warmup_pct']:+.2f} % / "
        f"{r['rss_peak_growth_after_warmup_pct']:+.2f} % (limit {max_growth} %) |",
        f"| caches within their bounds | {r['caches_within_bounds']} (bounds: "
        + ", ".join(f"{k} {v:,}" for k, v in r["cache_bounds"].items())
        + ") |",
        "",
        "Cache entries (`service.cache_sizes()`) and resident memory over time:",
        "",
        "| step | RSS MiB | query embeddings | search results | token counts | model encodes | chroma searches | steps/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    samples = r["samples"]
    stride = max(1, len(samples) // 20)
    shown = samples[::stride] + ([samples[-1]] if (len(samples) - 1) % stride else [])
    for s in shown:
        lines.append(
            f"| {s['step']:,} | {s['rss_mib']} | {s['query_embeddings']:,} | {s['search_results']:,} | "
            f"{s['token_counts']:,} | {s['model_encodes']:,} | {s['chroma_searches']:,} | {s['steps_per_s']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--sample-every", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env-id", default="EDO-v0")
    parser.add_argument("--max-growth-pct", type=float, default=5.0)
    parser.add_argument("--query-cache-size", type=int, default=None, help="override RetrievalConfig.query_cache_size")
    parser.add_argument("--result-cache-size", type=int, default=None, help="override RetrievalConfig.result_cache_size")
    parser.add_argument("--name", default="long_run", help="results file name (benchmarks/results/<name>.{json,md})")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write benchmarks/results")
    args = parser.parse_args(argv)
    if not 0 < args.warmup < args.steps or args.sample_every < 1:
        parser.error("need 0 < --warmup < --steps and --sample-every >= 1")
    retrieval = {
        k: v
        for k, v in (("query_cache_size", args.query_cache_size), ("result_cache_size", args.result_cache_size))
        if v is not None
    }
    result = run(args.steps, args.warmup, args.sample_every, args.seed, args.env_id, retrieval)
    result["command_line"] = " ".join(["python", "-m", "benchmarks.long_run", *(argv if argv is not None else sys.argv[1:])])
    ok = result["caches_within_bounds"] and result["rss_growth_after_warmup_pct"] <= args.max_growth_pct
    result["max_growth_pct"] = args.max_growth_pct
    result["passed"] = ok
    machine = machine_info()
    md = markdown(result, args.max_growth_pct, machine)
    print()
    print(md)
    if not args.no_write:
        paths = write_results(args.name, result, md)
        print(f"\nwrote {paths[0]} and {paths[1]}")
    print(f"\n{'PASS' if ok else 'FAIL'}: RSS growth after warm-up {result['rss_growth_after_warmup_pct']:+.2f} % "
          f"(limit {args.max_growth_pct} %), caches within bounds: {result['caches_within_bounds']}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
