"""EDO-v0 against a real language model: episodes/s with K envs sharing one server, and the replay rate.

Two measurements, both with seeded random legal actions:

``live``
    K = 1, 2, 4 envs in an SB3 ``SubprocVecEnv`` (one process per env), every env's planner, workers and verifiers
    asking one local llama.cpp server (the bundled SmolLM2-135M, ``--server-threads`` threads, default 1) over HTTP,
    for ``--seconds`` each. Reported: finished episodes/s, env steps/s, and the share of the envs' time spent
    waiting on the server (summed time inside ``backend.complete`` / (K x wall time)). No cache: every call is real.
``replay``
    ``--replay-episodes`` episodes are recorded into a cache (mode ``record``), then replayed ``--replay-repeats``
    times with the server stopped (mode ``replay``: answers, usage and latency come from the sqlite cache), in a
    subprocess pinned to one core, beside CartPole-v1 random steps timed in the same subprocess. The first replay
    pass also embeds the query strings the recorded answers produced; the figure is the median over the later
    passes, divided by CartPole's rate (target >= 0.02).

Usage::

    python -m benchmarks.llm_throughput                 # K = 1 2 4, 180 s each, replay of 20 episodes x 7 passes
    python -m benchmarks.llm_throughput --ks 1 2 --seconds 20 --replay-episodes 5   # quick

Results: ``benchmarks/results/llm_throughput.{json,md}`` (or ``--out-dir``). JSON keys: ``settings``, ``live``
(one entry per K: ``k``, ``episodes``, ``steps``, ``wall_s``, ``episodes_per_s``, ``steps_per_s``,
``server_wait_share``, ``calls``, ``failed_calls``), ``replay`` (``edo_steps_per_s`` per pass, ``cartpole_steps_per_s``,
``replay_over_cartpole`` with ``median``, ``cpu_affinity``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import command_line, machine_line, median_iqr, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

NAME = "llm_throughput"
REPLAY_TARGET = 0.02


class TimedBackend:
    """An LLM backend that adds up the wall time spent inside the wrapped backend's ``complete``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.waited_s = 0.0
        self.calls = 0
        self.failed = 0
        self.first_error = ""

    def complete(self, request: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.complete(request)
        except Exception as exc:
            self.failed += 1
            self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.waited_s += time.perf_counter() - t0
            self.calls += 1

    def cache_identity(self, request: Any) -> tuple[str, dict]:
        return self.inner.cache_identity(request)

    def stats(self) -> dict[str, float]:
        return {"waited_s": self.waited_s, "calls": self.calls, "failed": self.failed}


def _make_env(backend: Any):
    """A picklable env factory (the workers import this module by name)."""

    def thunk():
        import gymnasium as gym
        import torch

        import edo_gym  # noqa: F401

        torch.set_num_threads(1)
        return gym.make("EDO-v0", backend=backend)

    return thunk


def live(k: int, base_url: str, model: str, seconds: float, seed: int) -> dict[str, Any]:
    """K envs in subprocesses against the server at ``base_url`` for ``seconds``; random legal actions."""
    from stable_baselines3.common.vec_env import SubprocVecEnv

    from benchmarks.llm_throughput import TimedBackend as Timed  # importable by name in the workers (not __main__)
    from edo_gym.llm import OpenAIBackend

    vec = SubprocVecEnv([_make_env(Timed(OpenAIBackend(base_url, model, timeout_s=120))) for _ in range(k)])
    try:
        vec.seed(seed)
        obs = vec.reset()
        rng = np.random.default_rng(seed)
        start = [b.stats() for b in vec.env_method("get_wrapper_attr", "backend")]  # the first resets' calls
        episodes = steps = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            masks = obs["action_mask"] > 0
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            obs, _, dones, _ = vec.step(actions)
            steps += k
            episodes += int(np.sum(dones))
        wall = time.perf_counter() - t0
        backends = vec.env_method("get_wrapper_attr", "backend")
        end = [b.stats() for b in backends]
        first_error = next((b.first_error for b in backends if b.first_error), "")
    finally:
        vec.close()
    stats = [{key: e[key] - s[key] for key in e} for s, e in zip(start, end, strict=True)]
    waited = sum(s["waited_s"] for s in stats)
    return {
        "k": k,
        "episodes": episodes,
        "steps": steps,
        "wall_s": wall,
        "episodes_per_s": episodes / wall,
        "steps_per_s": steps / wall,
        "server_wait_share": waited / (k * wall),
        "calls": int(sum(s["calls"] for s in stats)),
        "failed_calls": int(sum(s["failed"] for s in stats)),
        "first_error": first_error,
    }


def run_episodes(env: Any, n: int, seed: int) -> int:
    """``n`` random-legal-action episodes with fixed seeds (the same requests every time); returns the steps taken."""
    steps = 0
    for i in range(n):
        obs, _ = env.reset(seed=seed + i)
        rng = np.random.default_rng(seed + i)
        done = False
        while not done:
            action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            steps += 1
    return steps


def cartpole_rate(min_seconds: float = 2.0) -> float:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=100_000)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds:
        for a in actions[:20_000]:
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:
                env.reset()
        steps += 20_000
    return steps / (time.perf_counter() - t0)


def replay_worker(cache: str, model: str, episodes: int, repeats: int, seed: int) -> dict[str, Any]:
    """In a subprocess pinned to one core: replay the recorded episodes ``repeats`` times, time CartPole beside it."""
    import gymnasium as gym
    import torch

    import edo_gym  # noqa: F401
    from edo_gym.llm import CachedBackend, OpenAIBackend

    torch.set_num_threads(1)
    backend = CachedBackend(OpenAIBackend("http://127.0.0.1:9/v1", model, timeout_s=2, retries=0), cache, mode="replay")
    env = gym.make("EDO-v0", backend=backend)
    rates, cartpole = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        steps = run_episodes(env, episodes, seed)
        rates.append(steps / (time.perf_counter() - t0))
        cartpole.append(cartpole_rate())
    counts = backend.counts
    return {
        "edo_steps_per_s": rates,
        "cartpole_steps_per_s": cartpole,
        "steps_per_pass": steps,
        "backend_calls": {"real": counts.real, "cached": counts.cached, "failed": counts.failed},
        "first_error": counts.first_error,
    }


def replay(base_url: str, model: str, episodes: int, repeats: int, seed: int, cache_dir: Path) -> dict[str, Any]:
    import gymnasium as gym

    import edo_gym  # noqa: F401
    from edo_gym.llm import CachedBackend, OpenAIBackend

    recorder = CachedBackend(OpenAIBackend(base_url, model, timeout_s=120), cache_dir, mode="record")
    t0 = time.perf_counter()
    steps = run_episodes(gym.make("EDO-v0", backend=recorder), episodes, seed)
    record_s = time.perf_counter() - t0
    recorder.close()
    recorded = recorder.counts
    cores = sorted(os.sched_getaffinity(0))[:1] if hasattr(os, "sched_getaffinity") else []
    code = (
        "import json, sys; from benchmarks.llm_throughput import replay_worker; "
        f"print('RESULT ' + json.dumps(replay_worker({str(cache_dir)!r}, {model!r}, {episodes}, {repeats}, {seed})))"
    )
    cmd = [sys.executable, "-c", code]
    if cores and _has_taskset():
        cmd = ["taskset", "-c", str(cores[0]), *cmd]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"replay subprocess failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(line[len("RESULT ") :])
    later = list(zip(result["edo_steps_per_s"][1:], result["cartpole_steps_per_s"][1:], strict=True))
    ratios = [e / c for e, c in later] or [result["edo_steps_per_s"][0] / result["cartpole_steps_per_s"][0]]
    result.update(
        record_calls={"real": recorded.real, "cached": recorded.cached, "failed": recorded.failed},
        first_error=recorded.first_error or result["first_error"],
        recorded_episodes=episodes,
        recorded_steps=steps,
        record_s=record_s,
        cpu_affinity=f"one core ({cores[0]})" if cores and _has_taskset() else "not pinned (no taskset)",
        first_pass_over_cartpole=result["edo_steps_per_s"][0] / result["cartpole_steps_per_s"][0],
        replay_over_cartpole=median_iqr(ratios),
    )
    return result


def _has_taskset() -> bool:
    from shutil import which

    return which("taskset") is not None


def markdown(payload: dict[str, Any]) -> str:
    s = payload["settings"]
    lines = [
        "# EDO-v0 with a real language model: throughput",
        "",
        f"`{s['command']}` on {s['machine']}. Server: {s['server']}, {s['server_threads']} thread(s); random legal "
        f"actions, seed {s['seed']}.",
        "",
        f"## K envs (SubprocVecEnv) against one server, {s['seconds']:.0f} s each",
        "",
        "| K | episodes/s | env steps/s | share of env time waiting on the server | calls | failed |",
        "|---|---|---|---|---|---|",
    ]
    for r in payload["live"]:
        lines.append(
            f"| {r['k']} | {r['episodes_per_s']:.3f} | {r['steps_per_s']:.2f} | {r['server_wait_share']:.2f} | "
            f"{r['calls']} | {r['failed_calls']} |"
        )
    rp = payload.get("replay")
    if rp:
        ratio = rp["replay_over_cartpole"]
        lines += [
            "",
            "## Replay (server stopped, answers from the sqlite cache)",
            "",
            f"{rp['recorded_episodes']} recorded episodes ({rp['recorded_steps']} steps, recorded in {rp['record_s']:.0f} s) "
            f"replayed {len(rp['edo_steps_per_s'])} times, {rp['cpu_affinity']}: "
            f"{np.median(rp['edo_steps_per_s'][1:] or rp['edo_steps_per_s']):,.0f} steps/s vs CartPole-v1 "
            f"{np.median(rp['cartpole_steps_per_s']):,.0f} in the same process: **{ratio['median']:.3f}x** "
            f"(IQR {ratio['q25']:.3f}-{ratio['q75']:.3f}; target >= {REPLAY_TARGET}; first pass, which also embeds new "
            f"query strings: {rp['first_pass_over_cartpole']:.4f}x, {rp['edo_steps_per_s'][0]:,.0f} steps/s). Backend calls: {rp['backend_calls']['cached']} from "
            f"cache, {rp['backend_calls']['real']} real, {rp['backend_calls']['failed']} failed.",
        ]
    failed, first = failures(payload)
    if failed:
        lines += ["", f"**{failed} language-model calls failed** (--allow-failures); the first: {first}"]
    return "\n".join(lines) + "\n"


def failures(payload: dict[str, Any]) -> tuple[int, str]:
    """Failed language-model calls over the whole run, and the first one's message."""
    rp = payload.get("replay") or {}
    parts = [(r["failed_calls"], r.get("first_error", "")) for r in payload["live"]]
    if rp:
        parts.append((rp.get("record_calls", {}).get("failed", 0) + rp["backend_calls"]["failed"], rp.get("first_error", "")))
    return sum(n for n, _ in parts), next((e for n, e in parts if n and e), "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4], help="envs per vector env (default: 1 2 4)")
    p.add_argument("--seconds", type=float, default=180.0, help="wall time per K (default: 180)")
    p.add_argument("--server-threads", type=int, default=1)
    p.add_argument("--replay-episodes", type=int, default=20, help="episodes recorded then replayed (0: skip)")
    p.add_argument("--replay-repeats", type=int, default=7, help="replay passes (the first one is reported apart)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--allow-failures", action="store_true",
                   help="write the results and exit 0 although language-model calls failed (they are then marked)")  # fmt: skip
    args = p.parse_args(argv)
    if any(k < 1 for k in args.ks) or args.seconds <= 0 or args.replay_repeats < 2 or args.replay_episodes < 0:
        p.error("--ks must be >= 1, --seconds > 0, --replay-repeats >= 2, --replay-episodes >= 0")
    from edo_gym.llm.server import LocalLLMServer

    server = LocalLLMServer(threads=args.server_threads)
    results: list[dict[str, Any]] = []
    rp = None
    with server as base_url, tempfile.TemporaryDirectory() as tmp:
        print(f"server at {base_url} ({server.model_name}, {args.server_threads} thread(s))", flush=True)
        for k in args.ks:
            r = live(k, base_url, server.model_name, args.seconds, args.seed)
            results.append(r)
            print(
                f"K={k}: {r['episodes_per_s']:.3f} episodes/s, {r['steps_per_s']:.2f} steps/s, "
                f"waiting on the server {r['server_wait_share']:.0%} of env time",
                flush=True,
            )
        if args.replay_episodes:
            rp = replay(base_url, server.model_name, args.replay_episodes, args.replay_repeats, args.seed, Path(tmp))
            print(f"replay: {rp['replay_over_cartpole']['median']:.3f}x CartPole-v1 (target >= {REPLAY_TARGET})", flush=True)
    payload = {
        "settings": {
            "seconds": args.seconds,
            "ks": args.ks,
            "server": f"llama.cpp (xllamacpp) serving {server.model_name}",
            "server_threads": args.server_threads,
            "seed": args.seed,
            "command": command_line(),
            "machine": machine_line(),
        },
        "live": results,
        "replay": rp,
    }
    failed, first = failures(payload)
    if failed:
        print(f"first failed language-model call:\n  {first}", file=sys.stderr)
        print(f"{failed} language-model calls failed", file=sys.stderr)
        if not args.allow_failures:
            print("error: calls failed; no results written (pass --allow-failures to write them, marked)", file=sys.stderr)
            return 1
    json_path, md_path = write_results(NAME, payload, markdown(payload), args.out_dir)
    print(markdown(payload))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
