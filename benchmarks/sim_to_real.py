"""Sim-to-real: the heuristics and a GRPO policy trained in simulation, on the same held-out tasks, with the simulated
backend and with a real language model (the bundled SmolLM2-135M served by llama.cpp, or any OpenAI-compatible
server) behind the planner, the workers and the verifiers.

Every real call goes through a record/replay cache (``--llm-cache``, mode ``record`` by default), so a finished run
can be replayed offline with the server stopped (``--llm-cache-mode replay``) and gives the same table. The GRPO
policy is trained once with ``TrainConfig()``'s defaults (300k steps on EDO-v0 with
the simulator) and saved next to the results; ``--policy-model PATH`` uses another saved model instead.

Usage::

    python benchmarks/sim_to_real.py                       # 20 held-out tasks, local SmolLM2 (1 thread), record mode
    python benchmarks/sim_to_real.py --episodes 5          # a quick look
    python benchmarks/sim_to_real.py --llm-cache-mode replay   # offline, from the committed recording
    python benchmarks/sim_to_real.py --base-url http://127.0.0.1:8000/v1 --model my-model --out-dir /tmp/s2r

Resumable: one record per (backend, policy) under ``<out-dir>/records/sim_to_real/``; a rerun skips finished ones
(``--force`` reruns them). Results: ``<out-dir>/sim_to_real.{json,md}``. JSON keys: ``settings``, ``results``
(backend -> policy -> EvalResult fields plus ``planner_fallback_rate``, ``failed_calls_per_episode``,
``router_fallbacks``, ``backend_calls``), ``deltas`` (policy -> real minus simulated success, tokens, calls,
latency_s), ``policy_model``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from baselines.evaluation import EvalResult, evaluate_heuristic, evaluate_model, heldout_task_ids, make_eval_env  # noqa: E402
from baselines.heuristics import HEURISTICS, make_heuristic  # noqa: E402
from benchmarks.common import command_line, machine_line, write_json_atomic, write_results  # noqa: E402
from edo_gym.llm.errors import LLMBackendError  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAME = "sim_to_real"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
BACKENDS = ("simulated", "real")
#: ``llm_router`` needs a language model: it runs with the real backend only.
DEFAULT_POLICIES = (*HEURISTICS, "grpo", "llm_router")


class CallLedger(gym.Wrapper):
    """Counts, per episode, whether the planner fell back to the charged fallback plan and how many calls failed."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.episodes = 0
        self.plan_fallbacks = 0
        self.failed_calls = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.episodes += 1
        self.plan_fallbacks += int(self.env.unwrapped.plan.source == "fallback")
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.failed_calls += int(bool(info.get("call_failed", False)))
        return obs, reward, terminated, truncated, info


def policy_model_path(out_dir: Path, given: str | None) -> Path:
    """The GRPO policy to evaluate: ``given``, else the one trained here (training it first when missing)."""
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise FileNotFoundError(f"--policy-model {path}: no such file (a model saved by `edo train`)")
        return path
    from baselines.training import TrainConfig, train

    cfg = TrainConfig(output_dir=str(out_dir / NAME), eval_episodes=0)
    if not cfg.model_path.is_file():
        print(f"Training the simulation policy with TrainConfig's defaults ({cfg.total_timesteps} steps) ...", flush=True)
        _, result = train(cfg)
        print(f"  trained in {result.train_wall_s:.0f} s, saved {result.model_path}", flush=True)
    return cfg.model_path


def evaluate_one(policy: str, backend: Any, args: argparse.Namespace, model_path: Path | None) -> dict[str, Any]:
    """One policy on the held-out tasks with one backend: EvalResult fields plus the ledger's counts."""
    kwargs: dict[str, Any] = {"info_text": policy == "llm_router"}
    if backend is not None:
        kwargs["backend"] = backend
    model = None
    if policy == "grpo":
        from baselines.training import load_model
        from edo_gym.envs.observation import observation_layout

        model = load_model(model_path, "grpo")
        # a policy trained on the observation without the pointer-free view runs on an env made without it (the same
        # dynamics, so the same requests: a recording made with it replays)
        if observation_layout(model.observation_space) == "0.3":
            kwargs["focus_view"] = False
    env = CallLedger(make_eval_env(args.env, **kwargs))
    before = backend.counts if backend is not None else None
    router = None
    try:
        task_ids = heldout_task_ids(env, args.episodes)
        t0 = time.perf_counter()
        if model is not None:
            result: EvalResult = evaluate_model(model, env, task_ids, seed=args.seed, name="grpo", progress=True)
        elif policy == "llm_router":
            from baselines.llm_router import LLMRouter

            router = LLMRouter(backend, env.unwrapped.action_names, seed=args.seed)
            result = evaluate_heuristic(router, env, task_ids, seed=args.seed, progress=True)
        else:
            result = evaluate_heuristic(make_heuristic(policy), env, task_ids, seed=args.seed, progress=True)
        wall = time.perf_counter() - t0
    finally:
        env.close()
    row = result.as_dict()
    row.update(
        planner_fallback_rate=env.plan_fallbacks / max(env.episodes, 1),
        failed_calls_per_episode=env.failed_calls / max(env.episodes, 1),
        router_fallbacks=None if router is None else router.fallbacks,
        eval_wall_s=wall,
    )
    if backend is not None:
        delta = backend.counts - before
        row["backend_calls"] = {"real": delta.real, "cached": delta.cached, "failed": delta.failed}
        row["first_error"] = delta.first_error
    return row


@contextlib.contextmanager
def real_backend(args: argparse.Namespace):
    """The real backend (started local server, or ``--base-url``) behind the record/replay cache."""
    from edo_gym.llm import CachedBackend, OpenAIBackend

    with contextlib.ExitStack() as stack:
        base_url, model, info = args.base_url, args.model, {}
        if base_url is None:
            from edo_gym.llm.server import SMOLLM2_NAME, LocalLLMServer

            if args.llm_cache_mode == "replay":
                base_url, model = "http://127.0.0.1:9/v1", model or SMOLLM2_NAME
                info = {"server": "none (replay)", "model": model}
            else:
                server = LocalLLMServer(threads=args.llm_threads)
                base_url = stack.enter_context(server)
                model = model or server.model_name
                info = {"server": "llama.cpp (xllamacpp), bundled SmolLM2", "model": model, "threads": args.llm_threads,
                        "load_time_s": server.load_time_s}  # fmt: skip
                print(f"  local model server at {base_url} (model {model}, loaded in {server.load_time_s:.1f} s)", flush=True)
        else:
            from edo_gym.llm.cache import ResponseCache, cache_file
            from edo_gym.llm.preflight import resolve_model

            held = None
            if args.llm_cache_mode == "replay" and not model and cache_file(args.llm_cache).exists():
                held = ResponseCache(args.llm_cache, readonly=True).models()
            model = resolve_model(base_url, model, mode=args.llm_cache_mode, held_models=held)
            info = {"server": "OpenAI-compatible server given by --base-url", "model": model}
        backend = CachedBackend(OpenAIBackend(base_url, model, timeout_s=args.llm_timeout), args.llm_cache,
                                mode=args.llm_cache_mode)  # fmt: skip
        stack.callback(backend.close)
        yield backend, info


def summarise(records: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per policy evaluated with both backends: real minus simulated."""
    deltas = {}
    for policy, real in records.get("real", {}).items():
        sim = records.get("simulated", {}).get(policy)
        if sim is None:
            continue
        deltas[policy] = {
            "success": real["success_rate"] - sim["success_rate"],
            "return": real["mean_return"] - sim["mean_return"],
            "tokens": real["tokens"] - sim["tokens"],
            "calls": real["calls"] - sim["calls"],
            "latency_s": real["latency_s"] - sim["latency_s"],
        }
    return deltas


def markdown(payload: dict[str, Any]) -> str:
    s = payload["settings"]
    lines = [
        "# Sim-to-real: simulated backend vs a real language model",
        "",
        f"`{s['command']}` on {s['machine']}.",
        f"{s['episodes']} held-out tasks of {s['env']} (test split), seed {s['seed']}; real model: {s['real']['model']} "
        f"({s['real']['server']}), cache {s['llm_cache_mode']} mode. GRPO policy: `{payload['policy_model']}` "
        "(trained with the simulator, TrainConfig's defaults).",
        "",
        "| policy | backend | success (95% CI) | return | tokens/ep | calls/ep | latency s/ep | plan fallbacks | failed calls/ep |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    policies = list(dict.fromkeys([p for b in BACKENDS for p in payload["results"].get(b, {})]))
    for policy in policies:
        for backend in BACKENDS:
            r = payload["results"].get(backend, {}).get(policy)
            if r is None:
                continue
            lo, hi = r["success_ci95"]
            failed = (r.get("backend_calls") or {}).get("failed", 0)
            lines.append(
                f"| {policy}{' (!)' if failed else ''} | {backend} | {r['success_rate']:.3f} ({lo:.2f}-{hi:.2f}) | {r['mean_return']:+.3f} | "
                f"{r['tokens']:.0f} | {r['calls']:.1f} | {r['latency_s']:.1f} | {r['planner_fallback_rate']:.2f} | "
                f"{r['failed_calls_per_episode']:.2f} |"
            )
    lines += [
        "",
        "Real minus simulated:",
        "",
        "| policy | success | return | tokens/ep | calls/ep | latency s/ep |",
        "|---|---|---|---|---|---|",
    ]
    for policy, d in payload["deltas"].items():
        lines.append(
            f"| {policy} | {d['success']:+.3f} | {d['return']:+.3f} | {d['tokens']:+.0f} | {d['calls']:+.1f} | {d['latency_s']:+.1f} |"
        )
    real = payload["results"].get("real", {})
    if real:
        counts = {
            k: sum((r.get("backend_calls") or {}).get(k, 0) for r in real.values()) for k in ("real", "cached", "failed")
        }
        lines += [
            "",
            f"Backend calls over the real run: {counts['real']} real, {counts['cached']} from cache, {counts['failed']} failed.",
        ]
        if counts["failed"]:
            first = next((r["first_error"] for r in real.values() if r.get("first_error")), "")
            lines += [
                "",
                "(!) language-model calls failed in these rows (kept with --allow-failures): each failed call counts as a "
                f"failure of its step. The first: {first}",
            ]
    return "\n".join(lines) + "\n"


def failed_calls(records: dict[str, dict[str, dict[str, Any]]]) -> tuple[int, str]:
    """Failed language-model calls over all rows, and the first one's message."""
    rows = [r for by_policy in records.values() for r in by_policy.values()]
    failed = sum((r.get("backend_calls") or {}).get("failed", 0) for r in rows)
    return failed, next((r["first_error"] for r in rows if r.get("first_error")), "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="EDO-v0")
    p.add_argument("--episodes", type=int, default=20, help="held-out tasks (default: 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), help=f"default: {' '.join(DEFAULT_POLICIES)}")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--policy-model", default=None, help="a saved GRPO model (default: train one with TrainConfig's defaults)")
    p.add_argument("--base-url", default=None, help="an OpenAI-compatible server (default: start the bundled SmolLM2)")
    p.add_argument("--model", default=None, help="model name to request")
    p.add_argument("--llm-threads", type=int, default=1, help="threads of the started local server (default: 1)")
    p.add_argument("--llm-timeout", type=float, default=120.0)
    p.add_argument("--llm-cache", default=None, help="record/replay cache (default: <out-dir>/sim_to_real/llm_cache)")
    p.add_argument("--llm-cache-mode", choices=("record", "replay", "read-through"), default="record")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--force", action="store_true", help="rerun finished (backend, policy) records")
    p.add_argument("--allow-failures", action="store_true",
                   help="keep rows in which language-model calls failed (marked) and exit 0; without it a failed call "
                   "stops the run with exit status 1 and its row is not saved")  # fmt: skip
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    unknown = sorted(set(args.policies) - set(DEFAULT_POLICIES))
    if unknown:
        p.error(f"unknown policies {unknown}; choose from {list(DEFAULT_POLICIES)}")
    if args.llm_cache is None:  # a directory: the cache is <out-dir>/sim_to_real/llm_cache/llm_cache.sqlite
        (args.out_dir / NAME / "llm_cache").mkdir(parents=True, exist_ok=True)
        args.llm_cache = str(args.out_dir / NAME / "llm_cache")
    record_dir = args.out_dir / "records" / NAME
    record_dir.mkdir(parents=True, exist_ok=True)

    model_path = policy_model_path(args.out_dir, args.policy_model) if "grpo" in args.policies else None
    records: dict[str, dict[str, dict[str, Any]]] = {}
    real_info: dict[str, Any] = {}
    for backend_name in args.backends:
        todo = [pol for pol in args.policies if not (backend_name == "simulated" and pol == "llm_router")]
        with contextlib.ExitStack() as stack:
            backend = None
            for policy in todo:
                path = record_dir / f"{backend_name}-{policy}-n{args.episodes}-s{args.seed}.json"
                if path.is_file() and not args.force:
                    records.setdefault(backend_name, {})[policy] = json.loads(path.read_text())["row"]
                    print(f"[{backend_name}] {policy}: finished earlier ({path.name})", flush=True)
                    continue
                if backend_name == "real" and backend is None:
                    try:
                        backend, real_info = stack.enter_context(real_backend(args))
                    except (ValueError, FileNotFoundError, LLMBackendError) as exc:
                        print(f"error: {exc}", file=sys.stderr)
                        return 2
                row = evaluate_one(policy, backend, args, model_path)
                if row.get("backend_calls", {}).get("failed") and not args.allow_failures:
                    print(
                        f"[{backend_name}] {policy}: first failed language-model call:\n  {row['first_error']}",
                        file=sys.stderr,
                    )
                    print(
                        f"error: {row['backend_calls']['failed']} language-model calls failed in {policy}'s episodes; the "
                        "row is not saved (pass --allow-failures to keep it, marked)",
                        file=sys.stderr,
                    )
                    return 1
                write_json_atomic(path, {"row": row, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                records.setdefault(backend_name, {})[policy] = row
                print(
                    f"[{backend_name}] {policy}: success {row['success_rate']:.3f}, tokens {row['tokens']:.0f}, "
                    f"calls {row['calls']:.1f}, latency {row['latency_s']:.1f} s/ep ({row['eval_wall_s']:.0f} s)",
                    flush=True,
                )
    payload = {
        "settings": {
            "env": args.env,
            "episodes": args.episodes,
            "seed": args.seed,
            "policies": args.policies,
            "llm_cache_mode": args.llm_cache_mode,
            "real": real_info
            or {"model": args.model or "SmolLM2-135M-Instruct-Q4_1", "server": "(all records finished earlier)"},
            "command": command_line(),
            "machine": machine_line(),
        },
        "policy_model": None if model_path is None else os.path.relpath(model_path, Path.cwd()),
        "results": records,
        "deltas": summarise(records),
    }
    failed, first = failed_calls(records)
    if failed:
        print(f"first failed language-model call:\n  {first}\n{failed} language-model calls failed", file=sys.stderr)
        if not args.allow_failures:  # rows finished earlier with --allow-failures
            print("error: calls failed; no results written (pass --allow-failures to write them, marked)", file=sys.stderr)
            return 1
    json_path, md_path = write_results(NAME, payload, markdown(payload), args.out_dir)
    print(markdown(payload))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
