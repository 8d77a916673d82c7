"""
GRPO's class defaults on EDO-v0, used as a user would use them, and how often GiGPO's anchor states repeat on EDO.

``defaults``
    ``GRPO("MultiInputPolicy", gym.make("EDO-v0"), seed=s).learn(--timesteps)`` (30k by default) for each seed and
    each variant (the defaults; ``dynamic_sampling=True``; ``ent_coef=0.01``), then the deterministic policy on the
    first ``--eval-episodes`` held-out tasks, beside random play and ``submit_at_once`` (return 0) on the same tasks
    and seeds. The defaults pass when every seed's held-out mean return is above both.
``anchors``
    ``GiGPO`` with its defaults on multihop tasks with exactly ``h`` hops (h = 2..12), ``--anchor-timesteps`` steps;
    the share of steps whose anchor group (steps of one episode group taken in the same state, matched by
    the observation's anchor view) has at least two members, averaged over the rollouts (``rollout/anchor_repeat_rate``).
    Below a few percent the step-level advantage is almost always 0 and GiGPO reduces to GRPO.

Runs are resumable: one JSON per run under ``--out`` (finished runs are skipped); the summary goes to
``tools/results/grpo_edo_defaults.json``.

Usage::

    python -m tools.grpo_edo_defaults                          # 3 variants x 3 seeds x 30k, anchors at 6 hop counts
    python -m tools.grpo_edo_defaults --parts anchors --seeds 0
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

from benchmarks.common import machine_line

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "dynamic_sampling": {"dynamic_sampling": True},
    "ent_coef_0.01": {"ent_coef": 0.01},
}
HOPS = (2, 4, 6, 8, 10, 12)
SUMMARY = Path(__file__).resolve().parent / "results" / "grpo_edo_defaults.json"


def _eval(model: Any, episodes: int) -> dict[str, Any]:
    from baselines.evaluation import evaluate_heuristic, evaluate_model, heldout_task_ids, make_eval_env
    from baselines.heuristics import make_heuristic
    from baselines.probes import PROBES

    env = make_eval_env("EDO-v0")
    try:
        tasks = heldout_task_ids(env, episodes)
        rows = {
            "grpo": evaluate_model(model, env, tasks, seed=0, name="grpo"),
            "random": evaluate_heuristic(make_heuristic("random"), env, tasks, seed=0),
            "submit_at_once": evaluate_heuristic(PROBES["submit_at_once"](), env, tasks, seed=0),
        }
    finally:
        env.close()
    return {
        k: {"success": r.success_rate, "return": r.mean_return, "return_ci95": list(r.return_ci95)} for k, r in rows.items()
    }


def run_defaults(variant: str, seed: int, timesteps: int, episodes: int) -> dict[str, Any]:
    import edo_gym  # noqa: F401
    from baselines.grpo import GRPO

    th.manual_seed(seed)
    model = GRPO("MultiInputPolicy", gym.make("EDO-v0"), seed=seed, **VARIANTS[variant])
    t0 = time.perf_counter()
    model.learn(timesteps)
    train_s = time.perf_counter() - t0
    return {"part": "defaults", "variant": variant, "seed": seed, "timesteps": model.num_timesteps, "train_s": train_s,
            "eval": _eval(model, episodes)}  # fmt: skip


def run_anchors(hops: int, seed: int, timesteps: int) -> dict[str, Any]:
    import edo_gym  # noqa: F401
    from baselines.grpo import GiGPO

    env = gym.make("EDO-v0", tasks={"families": ["multihop"], "min_hops": hops, "max_hops": hops})
    model = GiGPO("MultiInputPolicy", env, seed=seed)
    rates: list[float] = []
    record = model._record_rollout_stats

    def record_and_keep(buffer: Any, state: Any) -> None:
        record(buffer, state)
        rates.append(float(buffer.anchor_repeat_rate))

    model._record_rollout_stats = record_and_keep  # type: ignore[method-assign]
    t0 = time.perf_counter()
    model.learn(timesteps)
    return {"part": "anchors", "hops": hops, "seed": seed, "timesteps": model.num_timesteps, "train_s": time.perf_counter() - t0,
            "anchor_repeat_rate_per_rollout": rates, "anchor_repeat_rate": float(np.mean(rates)) if rates else None}  # fmt: skip


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"defaults": {}, "anchors": {}}
    for variant in VARIANTS:
        rs = [r for r in runs if r["part"] == "defaults" and r["variant"] == variant]
        if not rs:
            continue
        per_seed = [
            {"seed": r["seed"], **{k: r["eval"][k]["return"] for k in ("grpo", "random", "submit_at_once")}, "grpo_success": r["eval"]["grpo"]["success"]}
            for r in sorted(rs, key=lambda r: r["seed"])
        ]  # fmt: skip
        out["defaults"][variant] = {
            "per_seed": per_seed,
            "grpo_return_mean": float(np.mean([p["grpo"] for p in per_seed])),
            "grpo_success_mean": float(np.mean([p["grpo_success"] for p in per_seed])),
            "beats_random_and_submit_every_seed": all(p["grpo"] > max(p["random"], p["submit_at_once"]) for p in per_seed),
        }
    for h in HOPS:
        rs = [r for r in runs if r["part"] == "anchors" and r["hops"] == h and r["anchor_repeat_rate"] is not None]
        if rs:
            out["anchors"][str(h)] = {
                "anchor_repeat_rate": float(np.mean([r["anchor_repeat_rate"] for r in rs])),
                "seeds": len(rs),
            }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="+", choices=("defaults", "anchors"), default=["defaults", "anchors"])
    p.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=list(VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--timesteps", type=int, default=30_000)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--hops", type=int, nargs="+", default=list(HOPS))
    p.add_argument("--anchor-timesteps", type=int, default=10_000)
    p.add_argument("--out", type=Path, default=Path("runs/grpo_edo_defaults"))
    p.add_argument("--summary", type=Path, default=SUMMARY)
    args = p.parse_args(argv)
    th.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, Any]] = []
    if "defaults" in args.parts:
        jobs += [(f"defaults-{v}-s{s}", ("defaults", v, s)) for v in args.variants for s in args.seeds]
    if "anchors" in args.parts:
        jobs += [(f"anchors-h{h}-s{s}", ("anchors", h, s)) for h in args.hops for s in args.seeds[:1]]
    runs = []
    for name, job in jobs:
        path = args.out / f"{name}.json"
        if path.is_file():
            runs.append(json.loads(path.read_text()))
            continue
        if job[0] == "defaults":
            result = run_defaults(job[1], job[2], args.timesteps, args.eval_episodes)
        else:
            result = run_anchors(job[1], job[2], args.anchor_timesteps)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(path)
        runs.append(result)
        print(name, json.dumps({k: v for k, v in result.items() if k not in ("anchor_repeat_rate_per_rollout",)}), flush=True)
    summary = {
        "command": "python -m tools.grpo_edo_defaults " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "machine": f"{machine_line()}, torch {th.__version__}, 1 torch thread",
        "settings": {
            "timesteps": args.timesteps,
            "eval_episodes": args.eval_episodes,
            "anchor_timesteps": args.anchor_timesteps,
        },
        **summarise(runs),
        "runs": runs,
    }
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("defaults", "anchors")}, indent=1))
    return summary


if __name__ == "__main__":
    main()
