"""``edo`` command line (the console script): ``edo demo`` (heuristic policies on EDO-v0), ``edo train`` (GRPO / GiGPO
/ PPO / MaskablePPO, then the held-out evaluation table), ``edo evaluate PATH`` (a saved model next to the
heuristics) and ``edo record-dataset`` (episodes of a policy as a Minari dataset, for a warm start), beside the env's own commands from :mod:`edo_gym.cli` (``prepare``, ``serve-llm``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from edo_gym.argtypes import count, non_negative_float, non_negative_int, positive_float, positive_int
from edo_gym.cli import (
    add_backend_args,
    add_prepare_command,
    add_retrieval_arg,
    backend_failures,
    llm_backend_from_args,
    retrieval_kwargs,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_positive_int, _count = positive_int, count
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


def cmd_demo(args: argparse.Namespace) -> int:
    from baselines.evaluation import evaluate_heuristic, format_table, heldout_task_ids, make_eval_env
    from baselines.heuristics import HEURISTICS, make_heuristic
    from edo_gym.llm.errors import LLMBackendError

    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        try:
            backend = llm_backend_from_args(args, stack)
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
        kwargs: dict[str, Any] = {"info_text": "llm_router" in names, **retrieval_kwargs(args)}
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
            return backend_failures("edo demo", backend, args.allow_failures)
    return 0


def observation_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Env kwargs of ``--retrieval-encoder``, ``--text-features`` and ``--plan-check`` (none for the defaults)."""
    out = dict(retrieval_kwargs(args))
    for flag in ("text_features", "plan_check"):
        if getattr(args, flag, False):
            out[flag] = True
    return out


def add_text_features_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text-features", action="store_true",
                   help="make the env with text_features=True: the observation adds step_text and plan_text, what an "
                   "orchestrator computes from the task and plan text it reads (a model must be evaluated with the same "
                   "setting)")  # fmt: skip
    p.add_argument("--plan-check", action="store_true",
                   help="make the env with plan_check=True: the observation adds step_check and plan_check, whether each "
                   "written plan step is the one a rule-based planner writes from the task text (a model must be evaluated "
                   "with the same setting)")  # fmt: skip


def _hop_curriculum(text: str) -> Any:
    from baselines.curriculum import parse_curriculum

    try:
        return parse_curriculum(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
            env_kwargs=observation_kwargs(args),
            features_extractor=None if args.features_extractor in (None, "flat") else args.features_extractor,
            hop_curriculum=None if args.hop_curriculum is None else [list(s) for s in args.hop_curriculum],
            warm_start=None if args.warm_start in (None, "none") else args.warm_start,
            warm_start_episodes=args.warm_start_episodes,
            bc_epochs=args.bc_epochs,
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
    try:
        _, result = train(cfg)
    except (FileNotFoundError, FileExistsError) as exc:  # a warm start's dataset that is missing or in the way
        print(f"edo train: error: {exc}", file=sys.stderr)
        return 2
    if result.warm_start:
        w = result.warm_start
        print(
            f"Warm start: behaviour cloning on {w['steps']:,} steps of {w['episodes']:,} {w['source']} episodes "
            f"({'recorded now' if w['recorded'] else 'recorded earlier'}, Minari dataset {w['dataset']}): "
            f"{w['accuracy']:.1%} of the actions matched, {w['wall_s']:.1f} s",
            flush=True,
        )
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
            if learned.success_ci95[0] > static.success_ci95[1]:
                verdict, detail = "beats", "95% intervals disjoint"
            elif learned.success_ci95[1] < static.success_ci95[0]:
                verdict, detail = "is below", "95% intervals disjoint"
            else:
                verdict, detail = "does not clearly beat", "95% intervals overlap"
            print(
                f"\n{cfg.algo} success {learned.success_rate:.3f} {verdict} "
                f"the static pipeline's {static.success_rate:.3f} ({detail})"
            )
    print(f"\nTotal wall time {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


def cmd_record_dataset(args: argparse.Namespace) -> int:
    from baselines.experience import record_dataset
    from baselines.training import check_env_id

    t0 = time.perf_counter()
    try:
        check_env_id(args.env)
        path = record_dataset(
            args.dataset_id, args.policy, args.episodes, args.env, seed=args.seed, env_kwargs=observation_kwargs(args) or None,
            overwrite=args.overwrite, progress=not args.no_progress,
        )  # fmt: skip
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"edo record-dataset: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"Recorded {args.episodes} episodes of {args.policy} on {args.env} as {args.dataset_id} ({path}) in {time.perf_counter() - t0:.1f} s"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import torch

    from baselines.evaluation import format_table
    from baselines.training import check_env_id, evaluate_saved, infer_algo
    from edo_gym.llm.errors import LLMBackendError

    # one torch thread for the policy's one-observation passes, as edo train's default (loading the embedding model
    # leaves the process's setting alone)
    torch.set_num_threads(1)
    with contextlib.ExitStack() as stack:
        try:
            check_env_id(args.env)
            algo = args.algo or infer_algo(args.path)
            backend = llm_backend_from_args(args, stack)
            env_kwargs = observation_kwargs(args) if backend is None else {"backend": backend, **observation_kwargs(args)}
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
            return backend_failures("edo evaluate", backend, args.allow_failures)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``edo`` script's parser: every command, the env's and the training ones."""
    parser = argparse.ArgumentParser(prog="edo", description="EDO-Gym: learned orchestration of multi-agent LLM systems")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the heuristic policies on an EDO env and print their table")
    demo.add_argument("--env", default="EDO-v0", help="registered env id (default: EDO-v0)")
    demo.add_argument("--episodes", type=_positive_int, default=300, help="held-out tasks to evaluate (default: 300)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--policies", nargs="+", default=None, help="policies to run (default: all heuristics, + llm_router with an LLM)"
    )
    add_backend_args(demo)
    add_retrieval_arg(demo)
    demo.set_defaults(func=cmd_demo)

    add_prepare_command(sub)

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
    from baselines.extractors import FEATURES_EXTRACTORS

    tr.add_argument("--features-extractor", choices=("flat", *FEATURES_EXTRACTORS), default=d.features_extractor or "flat",
                    help="flat: every observation key flattened (SB3's default); table: shared encoders over the rows "
                    "of the subtask and worker tables" + dft)  # fmt: skip
    tr.add_argument("--hop-curriculum", type=_hop_curriculum, default=None, metavar="UNTIL:MAX_HOPS[,...]",
                    help="train on short tasks first: e.g. 0.2:2,0.5:3 = tasks of at most 2 hops for the first 20%% of "
                    "the steps, at most 3 up to 50%%, then all (default: every task from the start)")  # fmt: skip
    tr.add_argument("--warm-start", default=d.warm_start,
                    help="pre-train by behaviour cloning before the RL run: a hand-written policy or probe (its episodes "
                    "are recorded once as a Minari dataset; a warm start from a probe adds its row to the table), a local "
                    "Minari dataset id (edo record-dataset), or none"
                    + dft)  # fmt: skip
    tr.add_argument("--warm-start-episodes", type=_count, default=d.warm_start_episodes,
                    help="episodes recorded for a hand-written --warm-start" + dft)  # fmt: skip
    tr.add_argument("--bc-epochs", type=_count, default=d.bc_epochs, help="behaviour-cloning passes over the dataset" + dft)
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
    add_retrieval_arg(tr)
    add_text_features_arg(tr)
    tr.set_defaults(func=cmd_train)

    rd = sub.add_parser(
        "record-dataset",
        help="record episodes of a policy on an EDO env's training split as a Minari dataset (for a warm start)",
        description="Run POLICY for EPISODES episodes of ENV (training split; episode k reset with SEED + k) and store "
        "them as the local Minari dataset DATASET_ID (under ~/.minari/datasets or MINARI_DATASETS_PATH). Train on it "
        "with `edo train --warm-start DATASET_ID`.",
    )
    rd.add_argument("--dataset-id", required=True, help="Minari id 'namespace/name-vN', e.g. edo/rule_based-v0")
    rd.add_argument("--policy", default="rule_based",
                    help="a hand-written policy (random, static_pipeline, rule_based, greedy_router, oracle: it reads "
                    "hidden state, a privileged teacher; or a probe of the validity benchmark, e.g. verify_and_retry, "
                    "plan_check_text: it reads the plan text) or a model saved by edo train (.zip) (default: %(default)s)")  # fmt: skip
    rd.add_argument("--episodes", type=_count, default=2000, help="episodes to record (default: %(default)s)")
    rd.add_argument("--env", default="EDO-v0", help="registered env id (default: EDO-v0)")
    rd.add_argument("--seed", type=_non_negative_int, default=0, help="reset seed of the first episode (default: 0)")
    rd.add_argument("--overwrite", action="store_true", help="replace an existing dataset of that id")
    rd.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_text_features_arg(rd)
    rd.set_defaults(func=cmd_record_dataset)

    ev = sub.add_parser("evaluate", help="evaluate a saved model next to the heuristics on held-out tasks")
    ev.add_argument("path", help="a model saved by `edo train` (.zip)")
    ev.add_argument("--algo", choices=ALGOS, default=None, help="algorithm of the model (default: read from the zip)")
    ev.add_argument("--env", default="EDO-v0", help="registered env id (default: EDO-v0)")
    ev.add_argument("--episodes", type=_count, default=200, help="held-out tasks to evaluate (default: 200)")
    ev.add_argument("--seed", type=_non_negative_int, default=0)
    ev.add_argument("--no-heuristics", action="store_true", help="evaluate only the model")
    add_backend_args(ev)
    add_retrieval_arg(ev)
    add_text_features_arg(ev)
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
