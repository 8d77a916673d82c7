"""Sim-to-real: the heuristics and a GRPO policy trained in simulation, on the same held-out tasks, with the simulated
backend and with a real language model (the bundled SmolLM2-135M served by llama.cpp, or any OpenAI-compatible
server) behind the planner, the workers and the verifiers.

Every real call goes through a record/replay cache (``--llm-cache``, mode ``record`` by default), so a finished run
can be replayed offline with the server stopped (``--llm-cache-mode replay``) and gives the same table. The GRPO
policy is trained once with ``TrainConfig()``'s defaults (300k steps on EDO-v0 with
the simulator) and saved next to the results; ``--policy-model PATH`` uses another saved model instead.

Usage::

    python -m benchmarks.sim_to_real                       # 20 held-out tasks, local SmolLM2 (1 thread), record mode
    python -m benchmarks.sim_to_real --episodes 5          # a quick look
    python -m benchmarks.sim_to_real --llm-cache-mode replay   # offline, from the committed recording
    python -m benchmarks.sim_to_real --base-url http://127.0.0.1:8000/v1 --model my-model --out-dir /tmp/s2r

Tiers (``--env``): ``EDO-v0`` and ``EDO-Small-v0`` (tasks within a small model's reach). Where
``benchmarks/calibrate_simulator.py`` has fitted the tier's team to the real model (``<out-dir>/calibration/<env>.json``,
or ``--calibration PATH``), a third backend, ``calibrated``, runs the simulator with that team, the policy
``grpo_calibrated`` is GRPO trained in it, and the real model runs with that team too: the same shards, prices and
``top_k`` (so the same requests), with the fitted skills as the hidden state the oracle ranks workers by.

    python -m benchmarks.calibrate_simulator --env EDO-Small-v0
    python -m benchmarks.sim_to_real --env EDO-Small-v0 --episodes 60 \
        --policies static_pipeline oracle rule_based grpo grpo_calibrated greedy_router random

Resumable: one record per (backend, policy) under ``<out-dir>/records/sim_to_real/`` (``.../<env>/`` for tiers other
than EDO-v0), with the run's settings in ``run.json``; a rerun skips finished ones (``--force`` reruns them). Results:
``<out-dir>/sim_to_real.{json,md}``. JSON keys: ``settings``, ``results`` (EDO-v0's: backend -> policy -> EvalResult
fields plus ``planner_fallback_rate``, ``failed_calls_per_episode``, ``router_fallbacks``, ``backend_calls``),
``deltas`` (policy -> real minus simulated success, tokens, calls, latency_s), ``policy_model``, and ``tiers`` (env id
-> ``settings``, ``policies.<name>.<backend>.{success,return,tokens,calls,success_ci95}``,
``kendall_tau.{simulated,calibrated}`` (rank agreement of the policies' success with the real model's),
``success_mae.{simulated,calibrated}``).
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

from baselines.evaluation import EvalResult, evaluate_heuristic, evaluate_model, heldout_task_ids, make_eval_env
from baselines.heuristics import HEURISTICS, make_heuristic
from benchmarks.common import command_line, machine_line, write_json_atomic, write_results
from edo_gym.llm.errors import LLMBackendError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAME = "sim_to_real"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: ``calibrated``: the simulator with the team fitted to the real model by ``benchmarks/calibrate_simulator.py``.
BACKENDS = ("simulated", "calibrated", "real")
#: Backends that are simulators (compared with ``real`` in ``tiers.<id>``).
SIM_BACKENDS = ("simulated", "calibrated")
#: The env whose rows are the top-level ``results`` (the other tiers are under ``tiers``).
MAIN_ENV = "EDO-v0"
#: Tiers the results collect (every registered id a run has records of).
TIERS = ("EDO-v0", "EDO-Small-v0")
#: The settings of an env's last run, beside its records.
RUN_FILE = "run.json"
#: ``llm_router`` needs a language model: it runs with the real backend only.
#: ``grpo_calibrated``: GRPO trained (TrainConfig's defaults) in the calibrated simulator.
DEFAULT_POLICIES = (*HEURISTICS, "grpo", "grpo_calibrated", "llm_router")
#: The GRPO policies, by the simulator they are trained in.
GRPO_POLICIES = ("grpo", "grpo_calibrated")


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
        self.plan_fallbacks += int(self.env.unwrapped.episode.plan.source == "fallback")
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.failed_calls += int(bool(info.get("call_failed", False)))
        return obs, reward, terminated, truncated, info


def calibration_file(out_dir: Path, env_id: str) -> Path:
    """Where ``benchmarks/calibrate_simulator.py`` writes the team it fitted for ``env_id``."""
    return out_dir / "calibration" / f"{env_id}.json"


def policy_model_path(out_dir: Path, given: str | None, env_id: str = "EDO-v0", workers_file: Path | None = None) -> Path:
    """The GRPO policy to evaluate: ``given``, else the one trained here on ``env_id`` with the simulator (with the team
    in ``workers_file`` when given: the calibrated simulator), training it first when missing."""
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise FileNotFoundError(f"--policy-model {path}: no such file (a model saved by `edo train`)")
        return path
    from baselines.training import TrainConfig, train

    # relative to the working directory where it lies below it: the saved config names no machine's folders
    where = out_dir / NAME if workers_file is None else out_dir / NAME / "calibrated"
    with contextlib.suppress(ValueError):
        where = where.resolve().relative_to(Path.cwd())
    if workers_file is None:
        cfg = TrainConfig(env_id=env_id, output_dir=str(where), eval_episodes=0)
    else:
        workers = json.loads(workers_file.read_text())["workers"]
        cfg = TrainConfig(env_id=env_id, env_kwargs={"workers": workers}, output_dir=str(where), eval_episodes=0)
    if not trained_for(cfg):
        print(f"Training the simulation policy with TrainConfig's defaults ({cfg.total_timesteps} steps) ...", flush=True)
        _, result = train(cfg)
        print(f"  trained in {result.train_wall_s:.0f} s, saved {result.model_path}", flush=True)
    return cfg.model_path


def trained_for(cfg: Any) -> bool:
    """Whether ``cfg.model_path`` holds a model trained on ``cfg``'s env and team: a model saved for another team (an
    earlier calibration), env settings, registered settings of the id or EDO-Gym version (both named by its warm
    start's dataset id) is trained again, not reused."""
    summary = cfg.model_path.with_suffix(".json")
    if not cfg.model_path.is_file() or not summary.is_file():
        return False
    try:
        data = json.loads(summary.read_text())
        saved = data["config"]
        dataset = (data.get("warm_start") or {}).get("dataset")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    if saved.get("env_id") != cfg.env_id or saved.get("env_kwargs") != json.loads(json.dumps(cfg.env_kwargs)):
        return False
    if cfg.warm_start is not None and "/" not in cfg.warm_start:  # a hand-written policy's episodes, recorded per env
        from baselines.experience import warm_start_dataset_id

        return dataset == warm_start_dataset_id(cfg.warm_start, cfg.warm_start_episodes, cfg.env_id, cfg.env_kwargs)
    return True


def evaluate_one(
    policy: str, backend: Any, args: argparse.Namespace, model_path: Path | None, workers: Any = None
) -> dict[str, Any]:
    """One policy on the held-out tasks with one backend (``workers``: the calibrated team, for the calibrated
    simulator): EvalResult fields plus the ledger's counts."""
    kwargs: dict[str, Any] = {"info_text": policy == "llm_router"}
    if backend is not None:
        kwargs["backend"] = backend
    if workers is not None:
        kwargs["workers"] = workers
    model = None
    if policy in GRPO_POLICIES:
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
            result: EvalResult = evaluate_model(model, env, task_ids, seed=args.seed, name=policy, progress=True)
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


def add_real_backend_arguments(p: argparse.ArgumentParser) -> None:
    """The options :func:`real_backend` reads: the server (or the bundled model), its threads and timeout, the cache."""
    p.add_argument("--base-url", default=None, help="an OpenAI-compatible server (default: start the bundled SmolLM2)")
    p.add_argument("--model", default=None, help="model name to request")
    p.add_argument("--llm-threads", type=int, default=1, help="threads of the started local server (default: 1)")
    p.add_argument("--llm-timeout", type=float, default=120.0)
    p.add_argument("--llm-cache", default=None, help="record/replay cache (default: <out-dir>/sim_to_real/llm_cache)")
    p.add_argument("--llm-cache-mode", choices=("record", "replay", "read-through"), default="record")


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


def record_dir(out_dir: Path, env_id: str) -> Path:
    """Where the records of ``env_id``'s rows are kept (EDO-v0's at the top, as before tiers existed)."""
    base = out_dir / "records" / NAME
    return base if env_id == MAIN_ENV else base / env_id


def load_tier(out_dir: Path, env_id: str) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]] | None:
    """``(run settings, backend -> policy -> row)`` of ``env_id``'s last run, or ``None`` when it has none."""
    folder = record_dir(out_dir, env_id)
    run_file = folder / RUN_FILE
    if not run_file.is_file():
        return None
    run = json.loads(run_file.read_text())
    records: dict[str, dict[str, dict[str, Any]]] = {}
    for backend in BACKENDS:
        for policy in run["policies"]:
            path = folder / f"{backend}-{policy}-n{run['episodes']}-s{run['seed']}.json"
            if path.is_file():
                records.setdefault(backend, {})[policy] = json.loads(path.read_text())["row"]
    return run, records


def kendall_tau(a: list[float], b: list[float]) -> float | None:
    """Kendall's tau-b between two rankings of the same items (``None`` for fewer than 2 items or a constant side)."""
    if len(a) < 2:
        return None
    from scipy.stats import kendalltau

    tau = kendalltau(a, b).statistic
    return None if tau != tau else float(tau)  # NaN: one side constant


def tier_summary(run: dict[str, Any], records: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """``tiers.<id>``: per policy and backend success, return and tokens; and how well each simulator ranks the policies
    as the real model does (Kendall tau of success) and how far off its success is (mean absolute error)."""
    policies: dict[str, dict[str, dict[str, float]]] = {}
    for backend, rows in records.items():
        for policy, row in rows.items():
            policies.setdefault(policy, {})[backend] = {
                "success": row["success_rate"],
                "return": row["mean_return"],
                "tokens": row["tokens"],
                "calls": row["calls"],
                "success_ci95": row["success_ci95"],
            }
    tau: dict[str, float | None] = {}
    mae: dict[str, float | None] = {}
    for sim in SIM_BACKENDS:
        both = [p for p, by in policies.items() if sim in by and "real" in by]
        s_vals = [policies[p][sim]["success"] for p in both]
        r_vals = [policies[p]["real"]["success"] for p in both]
        if not both:
            continue
        tau[sim] = kendall_tau(s_vals, r_vals)
        mae[sim] = sum(abs(x - y) for x, y in zip(s_vals, r_vals, strict=True)) / len(both)
    return {"settings": run, "policies": policies, "kendall_tau": tau, "success_mae": mae}


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
    for tier, t in payload.get("tiers", {}).items():
        ts = t["settings"]
        lines += ["", f"## Tier {tier}", ""]
        if tier != s["env"]:
            lines += [
                f"`{ts['command']}` on {ts['machine']}.",
                f"{ts['episodes']} held-out tasks of {tier} (test split), seed {ts['seed']}; real model: "
                f"{ts['real']['model']} ({ts['real']['server']}), cache {ts['llm_cache_mode']} mode. GRPO policy: "
                f"`{ts.get('policy_model')}` (trained on {tier} with the simulator, TrainConfig's defaults).",
                "",
                "| policy | backend | success (95% CI) | return | tokens/ep | calls/ep |",
                "|---|---|---|---|---|---|",
            ]
            for policy, by in t["policies"].items():
                for backend in BACKENDS:
                    r = by.get(backend)
                    if r is not None:
                        lo, hi = r["success_ci95"]
                        lines.append(
                            f"| {policy} | {backend} | {r['success']:.3f} ({lo:.2f}-{hi:.2f}) | {r['return']:+.3f} | "
                            f"{r['tokens']:.0f} | {r['calls']:.1f} |"
                        )
            lines.append("")
        for sim in SIM_BACKENDS:
            if sim in t["kendall_tau"]:
                tau = t["kendall_tau"][sim]
                lines.append(
                    f"The {sim} backend against the real model, over the policies run with both: Kendall tau of success "
                    f"{'n/a' if tau is None else f'{tau:+.2f}'}, mean absolute success error {t['success_mae'][sim]:.3f}."
                )
    return "\n".join(lines) + "\n"


def build_payload(
    out_dir: Path, env_id: str, run: dict[str, Any], records: dict[str, dict[str, dict[str, Any]]]
) -> dict[str, Any]:
    """The results: EDO-v0's rows at the top (``settings``, ``results``, ``deltas``, ``policy_model``; the env just run
    when EDO-v0 has no run yet), every tier with a run under ``tiers``."""
    tiers = {}
    for tier in TIERS:
        loaded = (run, records) if tier == env_id else load_tier(out_dir, tier)
        if loaded is not None:
            tiers[tier] = tier_summary(*loaded)
    main_run, main_records = (run, records) if env_id == MAIN_ENV else (load_tier(out_dir, MAIN_ENV) or (run, records))
    settings = {k: v for k, v in main_run.items() if k != "policy_model"}
    return {
        "settings": settings,
        "policy_model": main_run.get("policy_model"),
        "results": main_records,
        "deltas": summarise(main_records),
        "tiers": tiers,
    }


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
    p.add_argument(
        "--policies",
        nargs="+",
        default=None,
        help=f"of {' '.join(DEFAULT_POLICIES)} (default: all; grpo_calibrated where a calibration exists)",
    )
    p.add_argument(
        "--backends", nargs="+", choices=BACKENDS, default=None, help="default: all (calibrated where a calibration exists)"
    )
    p.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="the calibrated team (default: <out-dir>/calibration/<env>.json, written by calibrate_simulator.py)",
    )
    p.add_argument("--policy-model", default=None, help="a saved GRPO model (default: train one with TrainConfig's defaults)")
    add_real_backend_arguments(p)
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--force", action="store_true", help="rerun finished (backend, policy) records")
    p.add_argument("--allow-failures", action="store_true",
                   help="keep rows in which language-model calls failed (marked) and exit 0; without it a failed call "
                   "stops the run with exit status 1 and its row is not saved")  # fmt: skip
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    if args.calibration is None:
        args.calibration = calibration_file(args.out_dir, args.env)
    calibrated = args.calibration.is_file()
    if args.policies is None:
        args.policies = [pol for pol in DEFAULT_POLICIES if calibrated or pol != "grpo_calibrated"]
    if args.backends is None:
        args.backends = [b for b in BACKENDS if calibrated or b != "calibrated"]
    if not calibrated and ("calibrated" in args.backends or "grpo_calibrated" in args.policies):
        p.error(f"no calibration at {args.calibration}: run python -m benchmarks.calibrate_simulator --env {args.env} first")
    unknown = sorted(set(args.policies) - set(DEFAULT_POLICIES))
    if unknown:
        p.error(f"unknown policies {unknown}; choose from {list(DEFAULT_POLICIES)}")
    if args.llm_cache is None:  # a directory: the cache is <out-dir>/sim_to_real/llm_cache/llm_cache.sqlite
        (args.out_dir / NAME / "llm_cache").mkdir(parents=True, exist_ok=True)
        args.llm_cache = str(args.out_dir / NAME / "llm_cache")
    if args.env not in TIERS:
        p.error(f"--env must be one of the tiers {list(TIERS)}, got {args.env!r}")
    records_at = record_dir(args.out_dir, args.env)
    records_at.mkdir(parents=True, exist_ok=True)

    workers = json.loads(args.calibration.read_text())["workers"] if calibrated else None
    model_paths = {}
    if "grpo" in args.policies:
        model_paths["grpo"] = policy_model_path(args.out_dir, args.policy_model, args.env)
    if "grpo_calibrated" in args.policies:
        model_paths["grpo_calibrated"] = policy_model_path(args.out_dir, None, args.env, args.calibration)
    model_path = model_paths.get("grpo")
    records: dict[str, dict[str, dict[str, Any]]] = {}
    real_info: dict[str, Any] = {}
    for backend_name in args.backends:
        todo = [pol for pol in args.policies if not (backend_name != "real" and pol == "llm_router")]
        with contextlib.ExitStack() as stack:
            backend = None
            for policy in todo:
                path = records_at / f"{backend_name}-{policy}-n{args.episodes}-s{args.seed}.json"
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
                # the real model runs with the calibrated team too: the same shards, prices and top_k (the same requests),
                # and the fitted skills as the hidden state the oracle ranks workers by
                row = evaluate_one(policy, backend, args, model_paths.get(policy),
                                   workers if backend_name != "simulated" else None)  # fmt: skip
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
    run = {
        "env": args.env,
        "episodes": args.episodes,
        "seed": args.seed,
        "policies": args.policies,
        "llm_cache_mode": args.llm_cache_mode,
        "real": real_info or {"model": args.model or "SmolLM2-135M-Instruct-Q4_1", "server": "(all records finished earlier)"},
        "command": command_line(),
        "machine": machine_line(),
        "policy_model": None if model_path is None else os.path.relpath(model_path, Path.cwd()),
        "calibration": os.path.relpath(args.calibration, Path.cwd()) if calibrated else None,
    }
    write_json_atomic(records_at / RUN_FILE, run)
    payload = build_payload(args.out_dir, args.env, run, records)
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
