"""``edo`` command line (the console script): ``edo demo`` (heuristic policies on EDO-v0), ``edo train`` (GRPO / GiGPO
/ PPO / MaskablePPO, then the held-out evaluation table), ``edo evaluate PATH`` (a saved model next to the
heuristics) and ``edo record-dataset`` (episodes of a policy as a Minari dataset, for a warm start), beside the env's own commands from :mod:`edo_gym.cli` (``prepare``, ``serve-llm``)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edo_gym.argtypes import count, non_negative_int, parse_int, positive_int
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
_non_negative_int = non_negative_int

#: Older spellings of ``edo train`` flags that commands in use still write, beside the flag named after each field:
#: field -> its extra option strings (a boolean's ``--no-`` form comes with each). The one table of aliases.
TRAIN_FLAG_ALIASES: dict[str, tuple[str, ...]] = {
    "env_id": ("--env",),
    "total_timesteps": ("--timesteps",),
    "learning_rate": ("--lr",),
    "tensorboard_log": ("--tensorboard-dir",),
    "normalize_std": ("--std-normalization",),
    "progress_bar": ("--progress",),
}


def train_flag(name: str) -> str:
    """The ``edo train`` flag of the ``TrainConfig`` field ``name``: ``"total_timesteps"`` -> ``"--total-timesteps"``."""
    return "--" + name.replace("_", "-")


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def _parse_int_list(text: str) -> list[int]:
    """``"64,64"`` -> ``[64, 64]``; ``""`` or ``"none"`` -> ``[]``."""
    if text.strip().lower() in ("", "none"):
        return []
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers like 64,64, got {text!r}") from None


def _parse_name_list(text: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; ``""`` or ``"none"`` -> ``[]``."""
    if text.strip().lower() in ("", "none"):
        return []
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"must be comma-separated names like a,b, got {text!r}")
    return names


def _show(value: Any, none_word: str = "none") -> str:
    """A setting's value as it is written on the command line."""
    if value is None:
        return none_word
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list) and all(isinstance(v, (int, str)) for v in value):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return json.dumps(value) if value else "{}"
    return str(value)


def _setting_type(f: dataclasses.Field, annotation: Any) -> Callable[[str], Any]:
    """The argparse ``type`` of a ``TrainConfig`` field (not a bool): from its annotation (``int``, ``float``, ``str``,
    ``list[int]``, ``list[str]``, ``dict``, each also ``| None``) or its ``setting(parse=...)``, then its ``choices``."""
    meta = f.metadata
    args = typing.get_args(annotation)
    optional = type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else annotation
    parse: Callable[[str], Any]
    if meta.get("parse") is not None:
        parse = meta["parse"]
    elif base is int:
        parse = parse_int
    elif base is float:
        parse = _parse_float
    elif base is str:
        parse = str
    elif typing.get_origin(base) is list and typing.get_args(base) == (int,):
        parse = _parse_int_list
    elif typing.get_origin(base) is list and typing.get_args(base) == (str,):
        parse = _parse_name_list
    else:
        raise TypeError(f"TrainConfig.{f.name}: no command-line form for {annotation!r}; declare it with setting(parse=...)")
    choices = meta.get("choices")
    none_words = tuple(meta.get("none", ("none",))) if optional else ()
    shown = None if choices is None else [_show(c, none_words[0] if none_words else "none") for c in choices]

    def convert(text: str) -> Any:
        # a choice spelled like a None word (scale_rewards' "none") is that choice
        if text.strip().lower() in none_words and (choices is None or text not in choices):
            return None
        try:
            value = parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if choices is not None and value not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(shown or ())})")
        return value

    convert.__name__ = f.name  # argparse's own messages name the type
    return convert


def add_train_config_args(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """Add one flag per ``TrainConfig`` field to ``parser``, generated from the dataclass: the flag is the field's name
    (:func:`train_flag`, plus its :data:`TRAIN_FLAG_ALIASES`), its default the field's, its help text and ``--help``
    group its ``setting(...)`` metadata; a bool is ``--x/--no-x``. The parsed value lands in ``args.<field>``.

    :return: the argument groups by title (:data:`baselines.training.config.SETTING_GROUPS`), for flags to add beside
    """
    from baselines.training.config import SETTING_GROUPS, TrainConfig

    groups = {title: parser.add_argument_group(title) for title in SETTING_GROUPS}
    hints = typing.get_type_hints(TrainConfig)
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        meta = f.metadata
        if "help" not in meta:
            raise TypeError(f"TrainConfig.{f.name} has no help text: declare it with setting(..., help=...)")
        default = getattr(defaults, f.name)
        flags = [train_flag(f.name), *TRAIN_FLAG_ALIASES.get(f.name, ())]
        none_word = (meta.get("none") or ("none",))[0]
        text = f"{meta['help']} (default: {_show(default, none_word)})".replace("%", "%%")
        group = groups[meta["group"]]
        if hints[f.name] is bool:
            group.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=text)
            continue
        choices = meta.get("choices")
        metavar = meta.get("metavar")
        if metavar is None and choices is not None:
            metavar = "{" + ",".join(_show(c, none_word) for c in choices) + "}"
        group.add_argument(*flags, dest=f.name, type=_setting_type(f, hints[f.name]), default=default, metavar=metavar,
                           help=text)  # fmt: skip
    return groups


def train_config_from_args(args: argparse.Namespace) -> Any:
    """The ``TrainConfig`` of parsed ``edo train`` flags: every field from ``args.<field>``, and ``env_kwargs`` with the
    observation flags' kwargs added (:func:`observation_kwargs`). Raises ``ValueError`` for a bad setting."""
    from baselines.training.config import TrainConfig

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    values["env_kwargs"] = {**values["env_kwargs"], **observation_kwargs(args)}
    return TrainConfig(**values)


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
        if getattr(args, flag, None):
            out[flag] = True
    return out


def add_text_features_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text-features", action=argparse.BooleanOptionalAction, default=None,
                   help="make the env with text_features=True: the observation adds step_text and plan_text, what an "
                   "orchestrator computes from the task and plan text it reads (a model must be evaluated with the same "
                   "setting; default: off)")  # fmt: skip
    p.add_argument("--plan-check", action=argparse.BooleanOptionalAction, default=None,
                   help="PRIVILEGED, for diagnostics: make the env with plan_check=True: the observation adds step_check and "
                   "plan_check, whether each written plan step is the one a rule-based planner writes from the task text (a "
                   "free plan oracle where texts come from known templates; a model must be evaluated with the same "
                   "setting; default: off)")  # fmt: skip


def existing_outputs(model_path: Path) -> list[Path]:
    """The files of a run saved at ``model_path`` that are there already: the model and its ``.json`` summary."""
    return [p for p in (model_path, model_path.with_suffix(".json")) if p.exists()]


def cmd_train(args: argparse.Namespace) -> int:
    from baselines.training import check_env_id, train

    try:
        check_env_id(args.env_id)
        cfg = train_config_from_args(args)
    except ValueError as exc:
        print(f"edo train: error: {exc}", file=sys.stderr)
        return 2
    in_the_way = existing_outputs(cfg.model_path)
    if in_the_way and not args.overwrite:
        print(
            f"edo train: error: {' and '.join(map(str, in_the_way))} {'exist' if len(in_the_way) > 1 else 'exists'} already "
            "(a run of the same algo, env and seed in this --output-dir); pass --overwrite to replace it, or choose "
            "another --output-dir or --seed",
            file=sys.stderr,
        )
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
        if result.summary:
            print(f"\nThe ladder, {result.summary}")
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


def evaluate_env_settings(args: argparse.Namespace) -> tuple[str, str | None, dict[str, Any], Path | None]:
    """``edo evaluate``'s env id, algo and env kwargs: those ``edo train`` saved beside the model (``<model>.json``)
    when that file is there, else the flags' (env default EDO-v0). A flag given with another value than the saved one
    is a ``ValueError`` naming the flag, the saved value and the given one (nothing is evaluated then).

    :return: env id, algo (``None``: read from the zip), env kwargs (without a backend), and the settings file read
        (``None`` when there is none)
    """
    from baselines.training import saved_config

    saved = saved_config(args.path)
    if saved is None:
        return args.env or "EDO-v0", args.algo, observation_kwargs(args), None
    summary = Path(args.path).with_suffix(".json")
    # a backend is an object, saved only as its text: evaluate's own backend flags choose it
    env_kwargs = {k: v for k, v in dict(saved.get("env_kwargs") or {}).items() if k != "backend"}
    retrieval = env_kwargs.get("retrieval")
    encoder = retrieval.get("encoder", "transformer") if isinstance(retrieval, dict) else "transformer"
    checks = [  # (flag as given, given value, setting's name, saved value)
        ("--env", args.env, "env_id", saved["env_id"]),
        ("--algo", args.algo, "algo", saved.get("algo")),
        ("--retrieval-encoder", args.retrieval_encoder, "retrieval.encoder", encoder),
        ("--text-features" if args.text_features else "--no-text-features", args.text_features, "text_features",
         bool(env_kwargs.get("text_features", False))),
        ("--plan-check" if args.plan_check else "--no-plan-check", args.plan_check, "plan_check",
         bool(env_kwargs.get("plan_check", False))),
    ]  # fmt: skip
    for flag, given, name, value in checks:
        if given is not None and value is not None and given != value:
            shown = f" {given}" if not isinstance(given, bool) else ""
            raise ValueError(
                f"{flag}{shown} disagrees with the settings the model was trained with ({summary}): saved {name}={value!r}, "
                f"given {name}={given!r}; leave the flag out to use the saved setting"
            )
    return saved["env_id"], args.algo or saved.get("algo"), env_kwargs, summary


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
            # the settings first: a disagreeing flag fails before a server starts or an episode runs
            env_id, algo, env_kwargs, summary = evaluate_env_settings(args)
            check_env_id(env_id)
            algo = algo or infer_algo(args.path)
            if summary is not None:
                shown = ", ".join(f"{k}={v!r}" for k, v in env_kwargs.items()) or "no env kwargs"
                print(f"Env settings from {summary}: {env_id}, {shown}", flush=True)
            backend = llm_backend_from_args(args, stack)
            if backend is not None:
                env_kwargs = {"backend": backend, **env_kwargs}
            results = evaluate_saved(
                args.path,
                env_id,
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
            f"\n{algo} model {args.path} on {env_id}, {results[-1].episodes} held-out tasks (test split), "
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

    from baselines.training import ALGOS
    from baselines.training.config import GROUP_ENV, GROUP_RUN

    tr = sub.add_parser(
        "train",
        help="train GRPO / PPO / MaskablePPO on an EDO env, save it, evaluate it next to the heuristics",
        description="Train on the env's train split, save OUTPUT_DIR/<algo>_<env>_<seed>.zip (and its .json summary, "
        "which edo evaluate reads the env settings from), then evaluate the model and the heuristic policies on the "
        "first EVAL_EPISODES held-out (test split) tasks. Every setting is a field of baselines.training.TrainConfig: "
        "each field has its flag here, named after it, with the field's default.",
    )
    groups = add_train_config_args(tr)
    add_retrieval_arg(groups[GROUP_ENV])
    add_text_features_arg(groups[GROUP_ENV])
    groups[GROUP_RUN].add_argument("--overwrite", action="store_true",
                                   help="replace the model and .json of an earlier run at the same path (without it, "
                                   "edo train stops at once when they exist)")  # fmt: skip
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

    ev = sub.add_parser(
        "evaluate",
        help="evaluate a saved model next to the heuristics on held-out tasks",
        description="Evaluate a model saved by edo train, and the hand-written policies, on the first EPISODES held-out "
        "(test split) tasks of the env it was trained on: the env id and env settings come from the .json beside the "
        "model; a model without one takes them from the flags.",
    )
    ev.add_argument("path", help="a model saved by `edo train` (.zip)")
    ev.add_argument("--episodes", type=_count, default=200, help="held-out tasks to evaluate (default: 200)")
    ev.add_argument("--seed", type=_non_negative_int, default=0)
    ev.add_argument("--no-heuristics", action="store_true", help="evaluate only the model")
    add_backend_args(ev)
    settings = ev.add_argument_group(
        "settings the model was trained with (default: those in the .json edo train saved beside it; a flag that "
        "disagrees with them is an error)"
    )
    settings.add_argument("--algo", choices=ALGOS, default=None,
                          help="algorithm of the model (default: the saved one, else read from the zip)")  # fmt: skip
    settings.add_argument("--env", default=None,
                          help="registered env id (default: the saved one; without a saved .json, EDO-v0)")  # fmt: skip
    add_retrieval_arg(settings, default=None)
    add_text_features_arg(settings)
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
