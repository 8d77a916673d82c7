"""``edo`` command line: ``edo demo`` (heuristic policies on EDO-v0), ``edo prepare`` (embed ahead of time what runs
will need), ``edo train`` (GRPO / PPO / MaskablePPO, then the held-out evaluation table) and ``edo evaluate PATH`` (a
saved model next to the heuristics)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from edo_gym.argtypes import count, non_negative_float, non_negative_int, parse_int, positive_float, positive_int

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


_positive_int, _parse_int, _count = positive_int, parse_int, count
_non_negative_int, _positive_float, _non_negative_float = non_negative_int, positive_float, non_negative_float


def _net_arch(text: str) -> list[int]:
    """``"64,64"`` -> ``[64, 64]``; ``""`` or ``"none"`` -> ``[]`` (linear policy)."""
    if text.strip().lower() in ("", "none"):
        return []
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers like 64,64, got {text!r}") from None
    if any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"layer sizes must be positive, got {text!r}")
    return sizes


def _batch_size(text: str) -> int | None:
    if text.strip().lower() in ("none", "all"):
        return None
    return _count(text)


def _agent_model(text: str) -> tuple[str, str]:
    """``"analyst=qwen2.5-7b"`` -> ``("analyst", "qwen2.5-7b")``."""
    name, sep, model = text.partition("=")
    if not sep or not name.strip() or not model.strip():
        raise argparse.ArgumentTypeError(f"must be NAME=MODEL (an agent or role name, then a model name), got {text!r}")
    return name.strip(), model.strip()


def _llm_backend(args: argparse.Namespace, stack: contextlib.ExitStack) -> Any:
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
        model = _served_model(args, base_url, model)
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


def _served_model(args: argparse.Namespace, base_url: str, model: str | None) -> str:
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


def _backend_failures(prog: str, backend: Any, allow_failures: bool) -> int:
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


def cmd_demo(args: argparse.Namespace) -> int:
    from baselines.evaluation import evaluate_heuristic, format_table, heldout_task_ids, make_eval_env
    from baselines.heuristics import HEURISTICS, make_heuristic
    from edo_gym.llm.errors import LLMBackendError

    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        try:
            backend = _llm_backend(args, stack)
        except (ValueError, FileNotFoundError, LLMBackendError) as exc:
            print(f"edo demo: error: {exc}", file=sys.stderr)
            return 2
        names = args.policies or list(HEURISTICS) + (["llm_router"] if backend is not None else [])
        unknown = sorted(set(names) - set(HEURISTICS) - {"llm_router"})
        if unknown:
            print(
                f"edo demo: error: unknown policies {unknown}; choose from {sorted(HEURISTICS) + ['llm_router']}",
                file=sys.stderr,
            )
            return 2
        print(f"Building the default world, corpus embeddings and chromadb collections for {args.env} ...", flush=True)
        kwargs: dict[str, Any] = {"info_text": "llm_router" in names, **_retrieval_kwargs(args)}
        if backend is not None:
            kwargs["backend"] = backend
        env = make_eval_env(args.env, **kwargs)
        print(f"  ready in {time.perf_counter() - t0:.1f} s (embedding cache: warm runs skip the embedding)", flush=True)
        task_ids = heldout_task_ids(env, args.episodes)
        results = []
        for name in names:
            if name == "llm_router":
                from baselines.llm_router import LLMRouter

                if backend is None:
                    print("edo demo: error: llm_router needs a language model: --backend openai or local", file=sys.stderr)
                    return 2
                policy: Any = LLMRouter(backend, env.unwrapped.action_names, seed=args.seed)
            else:
                policy = make_heuristic(name)
            results.append(evaluate_heuristic(policy, env, task_ids, seed=args.seed, progress=True))
        where = "simulated backend" if backend is None else f"{args.backend} backend"
        print(f"\nHeuristic policies on {args.env}, {len(task_ids)} held-out tasks (test split), seed {args.seed}, {where}:\n")
        print(format_table(results))
        print("\nSuccess by task family:")
        for r in results:
            fams = ", ".join(f"{f} {s:.2f}" for f, s in r.success_by_family.items())
            print(f"  {r.policy:16s} {fams}")
        if backend is not None:
            return _backend_failures("edo demo", backend, args.allow_failures)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import edo_gym  # noqa: F401  (registers the ids)
    from edo_gym.retrieval.runtime_cache import MAX_MB_ENV_VAR

    t0 = time.perf_counter()
    try:
        env = gym.make(args.env, **_retrieval_kwargs(args))
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


def cmd_compile(args: argparse.Namespace) -> int:
    from edo_gym import compiled

    if args.clean:
        removed = compiled.clean()
        print(f"removed {len(removed)} file(s); the hot modules run from source" + "".join(f"\n  {p}" for p in removed))
        return 0
    if not args.status:
        t0 = time.perf_counter()
        try:
            built = compiled.build(force=args.force, jobs=args.jobs, progress=not args.no_progress)
        except (RuntimeError, ValueError) as exc:
            print(f"edo compile: error: {exc}", file=sys.stderr)
            return 1
        n = sum(v == "compiled" for v in built.values())
        print(f"{n}/{len(built)} hot modules compiled and current ({time.perf_counter() - t0:.1f} s); manifest: "
              f"{compiled.PACKAGE_DIR / compiled.MANIFEST_NAME}")  # fmt: skip
        return 0
    return compiled.main()


def cmd_train(args: argparse.Namespace) -> int:
    from baselines.training import TrainConfig, check_env_id, train

    try:
        check_env_id(args.env)
        cfg = TrainConfig(
            algo=args.algo,
            env_id=args.env,
            total_timesteps=args.timesteps,
            seed=args.seed,
            n_envs=args.n_envs,
            net_arch=args.net_arch,
            learning_rate=args.learning_rate,
            ent_coef=args.ent_coef,
            batch_size=args.batch_size,
            n_epochs=args.n_epochs,
            group_size=args.group_size,
            groups_per_rollout=args.groups_per_rollout,
            normalize_std=args.normalize_std,
            scale_rewards=args.scale_rewards,
            loss_type=args.loss_type,
            step_advantage_weight=args.step_advantage_weight,
            filter_on=args.filter_on,
            dynamic_sampling=args.dynamic_sampling,
            n_steps=args.n_steps,
            output_dir=args.output_dir,
            tensorboard_log=args.tensorboard_dir,
            eval_episodes=args.eval_episodes,
            eval_seed=args.eval_seed,
            progress_bar=not args.no_progress,
            vec_env=args.vec_env,
            vec_workers=args.vec_workers,
            torch_threads=args.torch_threads,
            update_threads=args.update_threads,
            gc_freeze=not args.no_gc_freeze,
            verbose=args.verbose,
            env_kwargs=_retrieval_kwargs(args),
        )
    except ValueError as exc:
        print(f"edo train: error: {exc}", file=sys.stderr)
        return 2
    arch = ",".join(map(str, cfg.net_arch)) or "linear"
    print(
        f"Training {cfg.algo} on {cfg.env_id}: {cfg.total_timesteps} steps, seed {cfg.seed}, {cfg.n_envs} envs, net_arch {arch}",
        flush=True,
    )
    t0 = time.perf_counter()
    _, result = train(cfg)
    print(
        f"Trained {result.num_timesteps} steps in {result.train_wall_s:.1f} s ({result.steps_per_s:.0f} steps/s), "
        f"{result.n_params} policy parameters; saved {result.model_path}",
        flush=True,
    )
    if result.time_breakdown:
        from baselines.training import format_time_breakdown

        print(f"Where the training time went: {format_time_breakdown(result.time_breakdown)}", flush=True)
        env_s, total_s = result.time_breakdown.get("env_s", 0.0), result.time_breakdown.get("total_s", 0.0)
        recorded = result.num_timesteps
        env_steps = max(int(result.time_breakdown.get("env_steps", 0)), recorded)
        if env_steps > recorded:  # GRPO/GiGPO step every env, also those idle at the end of a rollout
            idle = env_steps - recorded
            print(
                f"The training envs took {env_steps:,} steps for {recorded:,} recorded ones: {idle:,} ({idle / env_steps:.0%}) "
                "were steps of envs left idle at the end of a rollout while its last episodes finished",
                flush=True,
            )
        if env_s > 0 and total_s > 0:  # the env's own rate in this run: its steps over the time spent inside the VecEnv
            print(
                f"The training envs stepped at {env_steps / env_s:.0f} steps/s on their own; training ran at "
                f"{(recorded / total_s) / (env_steps / env_s):.2f}x that rate",
                flush=True,
            )
    if result.results:
        print(
            f"\n{cfg.algo} vs heuristics on {cfg.env_id}, {result.results[-1].episodes} held-out tasks (test split), "
            f"eval seed {cfg.eval_seed} (evaluation {result.eval_wall_s:.1f} s):\n"
        )
        print(result.table)
        by_name = {r.policy: r for r in result.results}
        if "static_pipeline" in by_name:
            learned, static = by_name[cfg.algo], by_name["static_pipeline"]
            clearly = learned.success_ci95[0] > static.success_ci95[1]
            verdict = "beats" if clearly else "does not clearly beat"
            detail = "95% intervals disjoint" if clearly else "95% intervals overlap"
            print(
                f"\n{cfg.algo} success {learned.success_rate:.3f} {verdict} "
                f"the static pipeline's {static.success_rate:.3f} ({detail})"
            )
    print(f"\nTotal wall time {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import torch

    from baselines.evaluation import format_table
    from baselines.training import check_env_id, evaluate_saved, infer_algo
    from edo_gym.llm.errors import LLMBackendError

    # one torch thread for the policy's one-observation passes, as edo train's default (until stop 36 loading the
    # embedding model set it for the whole process; it no longer touches the process's setting)
    torch.set_num_threads(1)
    with contextlib.ExitStack() as stack:
        try:
            check_env_id(args.env)
            algo = args.algo or infer_algo(args.path)
            backend = _llm_backend(args, stack)
            env_kwargs = _retrieval_kwargs(args) if backend is None else {"backend": backend, **_retrieval_kwargs(args)}
            results = evaluate_saved(
                args.path,
                args.env,
                args.episodes,
                seed=args.seed,
                algo=algo,
                heuristics=not args.no_heuristics,
                progress=True,
                env_kwargs=env_kwargs,
            )
        except (FileNotFoundError, ValueError, LLMBackendError) as exc:
            print(f"edo evaluate: error: {exc}", file=sys.stderr)
            return 2
        where = "simulated backend" if backend is None else f"{args.backend} backend"
        print(
            f"\n{algo} model {args.path} on {args.env}, {results[-1].episodes} held-out tasks (test split), "
            f"seed {args.seed}, {where}:\n"
        )
        print(format_table(results))
        if backend is not None:
            return _backend_failures("edo evaluate", backend, args.allow_failures)
    return 0


def _retrieval_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Env kwargs for ``--retrieval-encoder`` (none for the default, so the env's own defaults apply)."""
    encoder = getattr(args, "retrieval_encoder", "transformer")
    return {} if encoder == "transformer" else {"retrieval": {"encoder": encoder}}


def _add_retrieval_arg(p: argparse.ArgumentParser) -> None:
    from edo_gym.config import RETRIEVAL_ENCODERS

    p.add_argument("--retrieval-encoder", choices=RETRIEVAL_ENCODERS, default="transformer",
                   help="retrieval.encoder: the sentence-transformers model (default, exact) or 'static', a model2vec "
                   "embedder distilled from it once and cached (faster, not exact: other retrieval results and task "
                   "embedding; a model must be evaluated with the encoder it was trained with)")  # fmt: skip


def _add_backend_args(p: argparse.ArgumentParser) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edo", description="EDO-Gym: learned orchestration of multi-agent LLM systems")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the heuristic policies on an EDO env and print their table")
    demo.add_argument("--env", default="EDO-v0", help="registered env id (default: EDO-v0)")
    demo.add_argument("--episodes", type=_positive_int, default=300, help="held-out tasks to evaluate (default: 300)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--policies", nargs="+", default=None, help="policies to run (default: all heuristics, + llm_router with an LLM)"
    )
    _add_backend_args(demo)
    _add_retrieval_arg(demo)
    demo.set_defaults(func=cmd_demo)

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
    _add_retrieval_arg(prep)
    prep.set_defaults(func=cmd_prepare)

    comp = sub.add_parser(
        "compile",
        help="build the env's hot modules with Cython (same source, same trajectories, faster steps)",
        description="Translate the modules a step runs through (edo_gym.compiled.HOT_MODULES) with Cython and build them "
        "with the C compiler, in place beside their sources; later imports use them. Only modules whose source changed "
        "since their build (or with no build) are rebuilt. A build whose source changed is never used: that module runs "
        "from source, with a warning. EDO_GYM_COMPILED=off runs pure Python; =on fails unless all are compiled.",
    )
    what = comp.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true", help="print which hot modules run compiled, build nothing")
    what.add_argument("--clean", action="store_true", help="remove the builds (pure Python again)")
    what.add_argument("--force", action="store_true", help="rebuild every hot module")
    comp.add_argument("--jobs", type=_positive_int, default=None, help="modules compiled at once (default: CPUs, max 4)")
    comp.add_argument("--no-progress", action="store_true", help="no progress bar")
    comp.set_defaults(func=cmd_compile)

    from baselines.training import ALGOS, VEC_ENV_KINDS, TrainConfig

    d = TrainConfig()  # the defaults (the tuned `make train` run)
    tr = sub.add_parser(
        "train",
        help="train GRPO / PPO / MaskablePPO on an EDO env, save it, evaluate it next to the heuristics",
        description="Train on the env's train split, save OUTPUT_DIR/<algo>_<env>_<seed>.zip, then evaluate the model "
        "and the heuristic policies on the first EVAL_EPISODES held-out (test split) tasks.",
    )
    dft = " (default: %(default)s)"
    tr.add_argument("--algo", choices=ALGOS, default=d.algo, help="algorithm; ppo = stock PPO without action masks" + dft)
    tr.add_argument("--env", default=d.env_id, help="registered env id" + dft)
    tr.add_argument("--timesteps", type=_count, default=d.total_timesteps, help="env steps to train on" + dft)
    tr.add_argument("--seed", type=_non_negative_int, default=d.seed, help="training seed" + dft)
    tr.add_argument("--n-envs", type=_count, default=d.n_envs, help="parallel training envs (DummyVecEnv)" + dft)
    tr.add_argument(
        "--net-arch",
        type=_net_arch,
        default=d.net_arch,
        help=f"hidden layer sizes, comma-separated, e.g. 64,64 (default: {','.join(map(str, d.net_arch))})",
    )
    tr.add_argument("--learning-rate", "--lr", type=_positive_float, default=d.learning_rate, help="Adam step size" + dft)
    tr.add_argument("--ent-coef", type=_non_negative_float, default=d.ent_coef, help="entropy bonus coefficient" + dft)
    tr.add_argument(
        "--batch-size", type=_batch_size, default=d.batch_size, help="minibatch size in steps; 'all': GRPO only" + dft
    )
    tr.add_argument("--n-epochs", type=_count, default=d.n_epochs, help="passes over each rollout" + dft)
    tr.add_argument("--group-size", type=_count, default=d.group_size, help="GRPO: episodes per group, >= 2" + dft)
    tr.add_argument("--groups-per-rollout", type=_count, default=d.groups_per_rollout, help="GRPO: groups per update" + dft)
    norm = tr.add_mutually_exclusive_group()
    norm.add_argument(
        "--no-std-normalization",
        dest="normalize_std",
        action="store_false",
        help="GRPO: only centre each group's returns (Dr. GRPO)" + (" (the default)" if not d.normalize_std else ""),
    )
    norm.add_argument(
        "--std-normalization",
        dest="normalize_std",
        action="store_true",
        help="GRPO: also divide by the group's return std (standard GRPO)" + (" (the default)" if d.normalize_std else ""),
    )
    tr.set_defaults(normalize_std=d.normalize_std)
    from baselines.grpo.advantages import SCALE_REWARDS
    from baselines.grpo.buffers import LOSS_TYPES

    tr.add_argument("--scale-rewards", choices=SCALE_REWARDS, default=d.scale_rewards,
                    help="GRPO/GiGPO advantage scaling (TRL's scale_rewards): group std, batch std or none (Dr. GRPO); "
                    "overrides the --std-normalization flags (default: from them)")  # fmt: skip
    tr.add_argument(
        "--loss-type", choices=LOSS_TYPES, default=d.loss_type, help="GRPO/GiGPO loss aggregation (TRL's loss_type)" + dft
    )
    tr.add_argument("--step-advantage-weight", type=_non_negative_float, default=d.step_advantage_weight,
                    help="GiGPO: weight of the step-level (anchor-state) advantage" + dft)  # fmt: skip
    tr.add_argument("--filter-on", choices=("return", "success"), default=d.filter_on,
                    help="GRPO/GiGPO tie filter: groups whose returns tie, or (success) whose members all succeeded or "
                    "all failed, DAPO's criterion" + dft)  # fmt: skip
    tr.add_argument("--dynamic-sampling", action="store_true",
                    help="GRPO/GiGPO: draw more groups until groups_per_rollout are informative (DAPO), up to 4x")  # fmt: skip
    tr.add_argument("--n-steps", type=_count, default=d.n_steps, help="PPO/MaskablePPO: steps per env per rollout" + dft)
    tr.add_argument("--output-dir", default=d.output_dir, help="where <algo>_<env>_<seed>.zip and .json go" + dft)
    tr.add_argument("--tensorboard-dir", default=d.tensorboard_log, help="TensorBoard log dir (default: no logging)")
    tr.add_argument("--eval-episodes", type=_non_negative_int, default=d.eval_episodes, help="held-out tasks, 0: skip" + dft)
    tr.add_argument("--eval-seed", type=_non_negative_int, default=d.eval_seed, help="evaluation seed" + dft)
    tr.add_argument("--vec-env", choices=VEC_ENV_KINDS, default=d.vec_env,
                    help="training VecEnv: dummy (one process), subproc (one process per env), shards (a shard of the "
                         "envs in this process and one in each of --vec-workers processes; the same training as dummy)"
                         + dft)  # fmt: skip
    tr.add_argument("--vec-workers", type=_count, default=None,
                    help="--vec-env shards: worker processes besides this one (default: the CPU count less one, at least 1)")  # fmt: skip
    tr.add_argument("--torch-threads", type=_count, default=d.torch_threads,
                    help="torch intra-op threads of the training process (torch does not promise bit-identical results "
                         "across thread counts)" + dft)  # fmt: skip
    tr.add_argument("--update-threads", type=_count, default=d.update_threads,
                    help="torch intra-op threads during each update, restored for the rollout (default: "
                         "--torch-threads throughout; make train uses 2; results differ by float rounding)")  # fmt: skip
    tr.add_argument("--no-progress", action="store_true", help="no progress bars")
    tr.add_argument("--no-gc-freeze", action="store_true",
                    help="do not gc.freeze() at each rollout start (the same results; for timing comparisons)")  # fmt: skip
    tr.add_argument("--verbose", type=int, choices=(0, 1, 2), default=d.verbose, help="SB3 log verbosity" + dft)
    _add_retrieval_arg(tr)
    tr.set_defaults(func=cmd_train)

    ev = sub.add_parser("evaluate", help="evaluate a saved model next to the heuristics on held-out tasks")
    ev.add_argument("path", help="a model saved by `edo train` (.zip)")
    ev.add_argument("--algo", choices=ALGOS, default=None, help="algorithm of the model (default: read from the zip)")
    ev.add_argument("--env", default="EDO-v0", help="registered env id (default: EDO-v0)")
    ev.add_argument("--episodes", type=_count, default=200, help="held-out tasks to evaluate (default: 200)")
    ev.add_argument("--seed", type=_non_negative_int, default=0)
    ev.add_argument("--no-heuristics", action="store_true", help="evaluate only the model")
    _add_backend_args(ev)
    _add_retrieval_arg(ev)
    ev.set_defaults(func=cmd_evaluate)

    from edo_gym.llm.server import add_serve_llm_parser  # stdlib only; xllamacpp is imported when serving

    add_serve_llm_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
