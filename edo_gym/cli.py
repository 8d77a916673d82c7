"""``edo`` command line, the env's commands: ``edo prepare`` (embed ahead of time what runs will need) and
``edo serve-llm`` (a local model server), plus the flags that choose an env's LLM backend and retrieval encoder,
which the training commands share.

The ``edo`` console script is :func:`baselines.cli.main`: it adds ``edo demo``, ``edo train`` and ``edo evaluate``
(policies and algorithms live in ``baselines``, which depends on ``edo_gym``, never the other way round).
``python -m edo_gym.cli`` runs the env's commands alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from edo_gym.argtypes import count, positive_float

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_count, _positive_float = count, positive_float


def _agent_model(text: str) -> tuple[str, str]:
    """``"analyst=qwen2.5-7b"`` -> ``("analyst", "qwen2.5-7b")``."""
    name, sep, model = text.partition("=")
    if not sep or not name.strip() or not model.strip():
        raise argparse.ArgumentTypeError(f"must be NAME=MODEL (an agent or role name, then a model name), got {text!r}")
    return name.strip(), model.strip()


def llm_backend_from_args(args: argparse.Namespace, stack: contextlib.ExitStack) -> Any:
    """The LLM backend the flags ask for (``None``: the simulated default), started and cached as asked."""
    if args.backend == "simulated":
        if args.agent_model:
            raise ValueError("--agent-model needs --backend openai or --backend local (the simulator has no models to choose)")
        if args.llm_cache is not None:
            raise ValueError("--llm-cache needs --backend openai or --backend local (the simulator is free and seeded)")
        return None
    from edo_gym.agents.protocol import ROLES
    from edo_gym.config import default_workers
    from edo_gym.llm import CachedBackend, OpenAIBackend

    known = sorted({"planner", "router", *ROLES, *(w.name for w in default_workers())})
    unknown = sorted({name for name, _ in args.agent_model or []} - set(known))
    if unknown:
        raise ValueError(f"--agent-model names unknown agents or roles {unknown}; choose from {known}")
    from edo_gym.llm.cache import cache_file

    if args.llm_cache is not None:
        cache_file(args.llm_cache)  # a file that is not named *.sqlite is an error here, not a surprise later
    elif args.llm_cache_mode not in ("off", "record"):
        raise ValueError(f"--llm-cache-mode {args.llm_cache_mode} needs --llm-cache PATH")
    base_url, model = args.base_url, args.model
    if args.backend == "local" and args.llm_cache is not None and args.llm_cache_mode == "replay":
        # replay reads the recording only: no server, no model file needed; requests keep the served model's name
        from edo_gym.llm.server import SMOLLM2_NAME

        base_url, model = "http://127.0.0.1:9/v1", model or SMOLLM2_NAME
        print(f"  replaying the local model's recorded answers from {args.llm_cache} (no server started)", flush=True)
    elif args.backend == "local":
        from edo_gym.llm.server import LocalLLMServer

        server = LocalLLMServer(threads=args.llm_threads)
        base_url = stack.enter_context(server)
        model = model or server.model_name
        print(f"  local model server at {base_url} (model {model}, loaded in {server.load_time_s:.1f} s)", flush=True)
    elif not base_url:
        raise ValueError("--backend openai needs --base-url URL (e.g. http://127.0.0.1:8080/v1 for a local server)")
    else:
        model = served_model(args, base_url, model)
    backend: Any = OpenAIBackend(
        base_url,
        model,
        models=dict(args.agent_model or []),
        api_key_env=args.api_key_env,
        timeout_s=args.llm_timeout,
    )
    if args.llm_cache is not None:
        backend = CachedBackend(backend, args.llm_cache, mode=args.llm_cache_mode)
        stack.callback(backend.close)
    return backend


def served_model(args: argparse.Namespace, base_url: str, model: str | None) -> str:
    """``--backend openai``: the model requests go to and are recorded under (``--model``, else the server's own, else in
    replay the recording's one model); a server that does not answer is an error here unless the mode is replay."""
    from edo_gym.llm.cache import ResponseCache, cache_file
    from edo_gym.llm.preflight import resolve_model

    mode = args.llm_cache_mode if args.llm_cache is not None else "off"
    held = None
    if mode == "replay" and not model and cache_file(args.llm_cache).exists():
        held = ResponseCache(args.llm_cache, readonly=True).models()
    resolved = resolve_model(
        base_url, model, mode=mode, held_models=held, api_key_env=args.api_key_env, timeout_s=min(5.0, args.llm_timeout)
    )
    if not model:
        source = "the recording's model" if mode == "replay" else "the model the server serves"
        print(f"  model {resolved!r} ({source}; --model NAME to choose another)", flush=True)
    return resolved


def backend_failures(prog: str, backend: Any, allow_failures: bool) -> int:
    """Print the ``backend calls:`` line; when a call failed, the first error in full and the counts on stderr.

    :return: the exit status: 1 when a call failed and ``--allow-failures`` was not given, else 0."""
    counts = backend.counts
    print(str(counts))
    if not counts.failed:
        return 0
    print(f"{prog}: first failed language-model call:\n  {counts.first_error}", file=sys.stderr)
    print(
        f"{prog}: {counts.failed} of {counts.total} language-model calls failed; the rows marked (!) count them as failed steps",
        file=sys.stderr,
    )
    if allow_failures:
        print(f"{prog}: --allow-failures: exit status 0 although calls failed", file=sys.stderr)
        return 0
    print(f"{prog}: error: calls failed (pass --allow-failures to accept a table with failed calls)", file=sys.stderr)
    return 1


def cmd_prepare(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import edo_gym  # noqa: F401  (registers the ids)
    from edo_gym.retrieval.runtime_cache import MAX_MB_ENV_VAR

    t0 = time.perf_counter()
    try:
        env = gym.make(args.env, **retrieval_kwargs(args))
    except gym.error.Error as exc:
        print(f"edo prepare: error: {exc}", file=sys.stderr)
        return 2
    try:
        base = env.unwrapped
        service = getattr(base, "service", None)
        if service is None:
            print(f"edo prepare: error: {args.env} has no retrieval service to prepare", file=sys.stderr)
            return 2
        env.reset(seed=0)  # builds the shard indexes, as the first reset of any run does
        t1 = time.perf_counter()
        print(f"{args.env}: world, corpus embeddings and shard indexes ready in {t1 - t0:.1f} s", flush=True)
        service.complete_all()
        t2 = time.perf_counter()
        print(f"  canonical queries and task texts embedded and cached, and the canonical queries searched in every "
              f"shard ahead of use, in {t2 - t1:.1f} s", flush=True)  # fmt: skip
        runtime = service.runtime
        if args.no_reachable:
            print("  reachable queries: skipped (--no-reachable)")
        elif runtime is None:
            print("  reachable queries: nothing to do (retrieval.runtime_cache is off; no run-time cache)")
        elif not runtime.writable():
            print(f"  reachable queries: not embedded: the run-time cache {runtime.path} cannot be written (unusable, "
                  f"or at its size limit ${MAX_MB_ENV_VAR})", file=sys.stderr)  # fmt: skip
        else:
            if service.vector_runtime is None:
                print("  reachable queries: not embedded ahead (the static encoder embeds a query in microseconds); "
                      f"run-time cache: {runtime.path}", flush=True)  # fmt: skip
            else:
                n = service.embed_reachable_queries()
                print(f"  {n:,} reachable queries embedded ahead of use in {time.perf_counter() - t2:.1f} s (the others "
                      f"were cached already); run-time cache: {runtime.path}", flush=True)  # fmt: skip
            t3 = time.perf_counter()
            if service.config.search_cache:
                m = service.search_reachable_queries([w.spec.top_k for w in base.workers])
                print(f"  {m:,} (query, shard) searches of them run ahead of use in {time.perf_counter() - t3:.1f} s (the "
                      "others were cached already)")  # fmt: skip
            else:
                print("  reachable queries: not searched ahead (retrieval.search_cache is off)")
            t4 = time.perf_counter()
            m = service.store_piece_counts()
            print(f"  {m:,} word pieces' token counts stored ahead of use in {time.perf_counter() - t4:.1f} s (the others "
                  "were cached already)")  # fmt: skip
        service.flush()
    finally:
        env.close()
    print(f"done in {time.perf_counter() - t0:.1f} s; later processes load all of this from {service.cache.directory}")
    return 0


def retrieval_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Env kwargs for ``--retrieval-encoder`` (none for the default or when not given, so the env's own defaults apply)."""
    encoder = getattr(args, "retrieval_encoder", None)
    return {} if encoder in (None, "transformer") else {"retrieval": {"encoder": encoder}}


def add_retrieval_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup, default: str | None = "transformer") -> None:
    """Add ``--retrieval-encoder`` (``default=None``: not given unless on the command line, for a command that reads
    the setting from elsewhere when the flag is left out)."""
    from edo_gym.config import RETRIEVAL_ENCODERS

    p.add_argument("--retrieval-encoder", choices=RETRIEVAL_ENCODERS, default=default,
                   help="retrieval.encoder: the sentence-transformers model (default, exact) or 'static', a model2vec "
                   "embedder distilled from it once and cached (faster, not exact: other retrieval results and task "
                   "embedding; a model must be evaluated with the encoder it was trained with)")  # fmt: skip


def add_backend_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("language models (planner, workers, verifiers; default: the seeded simulator)")
    g.add_argument("--backend", choices=("simulated", "openai", "local"), default="simulated",
                   help="simulated (default); openai: any OpenAI-compatible server at --base-url; local: start the bundled "
                   "SmolLM2 with llama.cpp for this run")  # fmt: skip
    g.add_argument("--base-url", default=None, help="API root of an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    g.add_argument("--model", default=None,
                   help="model name to request and record under (default: the one the server lists at /v1/models; in "
                   "replay, the one the recording holds)")  # fmt: skip
    g.add_argument("--agent-model", type=_agent_model, action="append", metavar="NAME=MODEL", default=None,
                   help="a model for one agent or role, repeatable: an agent name (planner, router or a worker's name, "
                   "e.g. support_agent) or a role (worker, verifier); an agent's entry wins over its role's, both over "
                   "--model. E.g. --agent-model analyst=big-model --agent-model worker=small-model")  # fmt: skip
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key (never printed)")
    g.add_argument("--llm-timeout", type=_positive_float, default=60.0, help="seconds per HTTP attempt (default: 60)")
    g.add_argument("--llm-threads", type=_count, default=1, help="--backend local: server threads (default: 1)")
    g.add_argument("--llm-cache", default=None, metavar="PATH",
                   help="the record/replay cache: a directory (created when missing) holding llm_cache.sqlite, or an "
                   "SQLite file named *.sqlite")  # fmt: skip
    g.add_argument("--llm-cache-mode", choices=("off", "record", "replay", "read-through"), default="record",
                   help="with --llm-cache: record (default; repeats answered from the cache), replay (offline; a miss is "
                   "an error), read-through (read the cache, ask the server on a miss, write nothing), off")  # fmt: skip
    g.add_argument("--allow-failures", action="store_true",
                   help="exit 0 although language-model calls failed (replay misses, cache errors, server failures); "
                   "without it any failed call makes the command exit 1. The table marks the rows with failed calls")  # fmt: skip


def add_prepare_command(sub: Any) -> argparse.ArgumentParser:
    """Register ``edo prepare`` on an ``argparse`` subparsers object."""
    prep = sub.add_parser(
        "prepare",
        help="embed ahead of time what an env's runs will need (corpus, canonical queries, task texts, reachable queries)",
        description="Build the env's world and caches now, so that later processes start warm: the corpus, canonical "
        "query and task-text embeddings (disk cache), and the world's reachable non-canonical queries (run-time disk "
        "cache; each vector is the one the model gives the query alone, so results are unchanged), then searches them in "
        "each worker's shard and stores the results there too (retrieval.search_cache; exact), and stores the token "
        "counts of the words of all these texts (exact). Idempotent: what is cached already is skipped. Cache "
        "directory: $EDO_GYM_CACHE_DIR, else $XDG_CACHE_HOME/edo_gym, else ~/.cache/edo_gym.",
    )
    prep.add_argument("--env", default="EDO-v0", help="registered env id (default: EDO-v0)")
    prep.add_argument("--no-reachable", action="store_true", help="skip the reachable queries")
    add_retrieval_arg(prep)
    prep.set_defaults(func=cmd_prepare)

    return prep


def add_env_commands(sub: Any) -> None:
    """Register the env's commands (``prepare``, ``serve-llm``) on an ``argparse`` subparsers object."""
    from edo_gym.llm.server import add_serve_llm_parser  # stdlib only; xllamacpp is imported when serving

    add_prepare_command(sub)
    add_serve_llm_parser(sub)


def build_parser() -> argparse.ArgumentParser:
    """The env's commands alone (``python -m edo_gym.cli``); the ``edo`` script's parser is ``baselines.cli``'s."""
    parser = argparse.ArgumentParser(prog="edo", description="EDO-Gym: the env's commands (prepare, serve-llm)")
    add_env_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
