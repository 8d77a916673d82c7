"""Every hand-written policy and the oracle per deviation kind, on training-like and held-out tasks.

For each deviation kind (none, ``phrasing``, ``team``, ``drift``, ``extra_step``, and all of them at once) the env is
made from the scripted world (:data:`edo_gym.SCRIPTED`: every rate at 0, no plan review) with that kind alone at rate 1.0
(``extra_step``: every support task whose carrier has a tiered refund policy), and ``default`` is EDO-v0 as registered
(each kind at its default rate, ``verify_plan(w)`` on); each is evaluated on two splits: ``train`` (training tasks, training phrasings and team draws) and
``test`` (held-out tasks: held-out phrasings, team draws outside the training range). Each policy's drop from
``train`` to ``test`` is reported, and the oracle's lead over the best observation-only policy on ``test``.

Policies: the numeric heuristics (static pipeline, rule-based, greedy router), the validity probes
(:data:`baselines.probes.PROBES`), the text-reading probes (:data:`baselines.probes.TEXT_PROBES`, on an env with
``info_text=True``) and the oracle (reads ``hidden_state()``).

Learned policies (``--models NAME=PATH``, models saved by ``edo train`` with the ``.json`` beside them) are evaluated
on the ``default`` kind's two splits with the same tasks and seeds, on the env settings they were trained with: their
drop from training-like to held-out tasks beside the hand-written policies' (the other kinds run on the scripted
world, whose action space, without ``verify_plan(w)``, a model of the defaults cannot act in). Models evaluated by an
earlier run with the same tasks and seeds are kept, as the kinds are.

Usage: ``python -m benchmarks.deviations [--tasks 300] [--seeds 0] [--kinds ...] [--models NAME=PATH ...]``.
Results: ``benchmarks/results/deviations.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import edo_gym  # noqa: E402, F401
from baselines.evaluation import evaluate_heuristic, evaluate_model  # noqa: E402
from baselines.probes import PROBES, TEXT_PROBES  # noqa: E402
from benchmarks.common import RESULTS_DIR, machine_line, write_results  # noqa: E402
from benchmarks.env_validity import policy  # noqa: E402
from edo_gym import __version__  # noqa: E402
from edo_gym.registration import SCRIPTED  # noqa: E402

#: Env settings per deviation kind: each alone at rate 1.0 on top of the scripted world (``none``: that world), all of
#: them at rate 1.0, and the registered defaults.
KINDS: dict[str, dict[str, Any]] = {
    "none": {},
    "phrasing": {"tasks_phrasing_rate": 1.0},
    "team": {"deviations_team_rate": 1.0},
    "drift": {"deviations_drift_rate": 1.0},
    "extra_step": {"world_tiered_refunds": True, "tasks_extra_step_rate": 1.0},
    "all": {
        "tasks_phrasing_rate": 1.0,
        "deviations_team_rate": 1.0,
        "deviations_drift_rate": 1.0,
        "world_tiered_refunds": True,
        "tasks_extra_step_rate": 1.0,
    },
    "default": {},
}
HEURISTIC_ROWS = ("static_pipeline", "rule_based", "greedy_router")


def _policies() -> list[str]:
    return [*HEURISTIC_ROWS, *PROBES, *TEXT_PROBES, "oracle"]


def evaluate_kind(kind: str, split: str, n_tasks: int, seeds: list[int]) -> dict[str, dict[str, float]]:
    """Success rate and mean return of every policy, averaged over ``seeds``, on ``n_tasks`` tasks of ``split``."""
    settings = KINDS[kind] if kind == "default" else {**SCRIPTED, **KINDS[kind]}
    env = gym.make("EDO-v0", tasks_split=split, info_text=True, **settings)
    ids = list(range(min(n_tasks, env.unwrapped.num_tasks)))
    rows: dict[str, dict[str, float]] = {}
    for name in _policies():
        results = [evaluate_heuristic(policy(name), env, ids, seed=seed) for seed in seeds]
        rows[name] = {
            "success": float(np.mean([r.success_rate for r in results])),
            "return": float(np.mean([r.mean_return for r in results])),
            "episodes": int(sum(r.episodes for r in results)),
        }
    env.close()
    return rows


def parse_model(spec: str) -> tuple[str, Path]:
    """``NAME=PATH`` of ``--models``: a row name and a model saved by ``edo train`` (its ``.json`` beside it)."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--models takes NAME=PATH (a row name and a saved model), got {spec!r}")
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"--models {spec}: no saved model at {path}")
    if not Path(path).with_suffix(".json").is_file():
        raise argparse.ArgumentTypeError(f"--models {spec}: no {Path(path).with_suffix('.json').name} beside the model "
                                         "(the settings edo train saves; the env is made with them)")  # fmt: skip
    return name, Path(path)


def evaluate_learned(path: Path, split: str, n_tasks: int, seeds: list[int]) -> dict[str, float]:
    """A saved model on ``n_tasks`` tasks of ``split`` of the env it was trained on (the ``default`` kind), averaged
    over ``seeds`` (deterministic actions)."""
    from baselines.algorithms import load_model
    from baselines.training import saved_config

    saved = saved_config(path)
    assert saved is not None  # parse_model checked the file
    env_kwargs = {k: v for k, v in dict(saved.get("env_kwargs") or {}).items() if k != "backend"}
    env = gym.make(saved["env_id"], tasks_split=split, **env_kwargs)
    model = load_model(path)  # evaluate_model checks it against the env
    ids = list(range(min(n_tasks, env.unwrapped.num_tasks)))
    results = [evaluate_model(model, env, ids, seed=seed) for seed in seeds]
    env.close()
    return {
        "success": float(np.mean([r.success_rate for r in results])),
        "return": float(np.mean([r.mean_return for r in results])),
        "episodes": int(sum(r.episodes for r in results)),
    }


def summarize(table: dict[str, dict[str, dict[str, dict[str, float]]]]) -> dict[str, Any]:
    """Per kind: each policy's drop from train to test, the best observation-only policy on test and the oracle's
    lead over it (success and return)."""
    out: dict[str, Any] = {}
    for kind, splits in table.items():
        test = splits["test"]
        observable = {k: v for k, v in test.items() if k != "oracle"}
        best = max(observable, key=lambda k: (observable[k]["success"], observable[k]["return"]))
        out[kind] = {
            "drop": {k: splits["train"][k]["success"] - test[k]["success"] for k in test},
            "best_hand_written_on_test": best,
            "oracle_lead_success": test["oracle"]["success"] - test[best]["success"],
            "oracle_lead_return": test["oracle"]["return"] - test[best]["return"],
        }
    return out


def previous_results(out_dir: Path, tasks: int, seeds: list[int]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What the results file in ``out_dir`` holds when it was measured with the same ``tasks`` and ``seeds`` (all empty
    when there is none or it differs): its kinds, when and on which version each was measured, and its learned rows."""
    path = out_dir / "deviations.json"
    if not path.is_file():
        return {}, {}, {}
    data = json.loads(path.read_text())
    if data.get("tasks") != tasks or data.get("seeds") != seeds:
        return {}, {}, {}
    table = {kind: value for kind, value in data.get("table", {}).items() if kind in KINDS}
    default = {"date_utc": data.get("date_utc", "?"), "edo_gym_version": data.get("edo_gym_version", "?")}
    measured = {kind: data.get("measured", {}).get(kind, default) for kind in table}
    return table, measured, dict(data.get("learned") or {})


def recorded_command(argv: list[str], models: list[tuple[str, Path]]) -> str:
    """This run's command line, each ``--models`` path written as ``runs/<file>`` (not as a path of this machine)."""

    def shown(arg: str) -> str:
        name, sep, given = arg.partition("=")
        return f"{name}=runs/{Path(given).name}" if sep and (name, Path(given)) in models else arg

    return " ".join(["python", "-m", "benchmarks.deviations", *(shlex.quote(shown(a)) for a in argv)])


def markdown(
    table: dict[str, Any], summary: dict[str, Any], args: argparse.Namespace, learned: dict[str, Any] | None = None
) -> str:
    lines = [
        "# Policies per deviation kind, training-like and held-out tasks",
        "",
        f"`python -m benchmarks.deviations --tasks {args.tasks} --seeds {' '.join(map(str, args.seeds))}` "
        f"({machine_line()}). Each kind alone at rate 1.0 on the scripted world (edo_gym.SCRIPTED), all of them at "
        f"rate 1.0, and EDO-v0's defaults (`default`); success / mean return over {args.tasks} tasks per split and seed. "
        "A kind measured by an earlier run with the same tasks and seeds is kept from it (`measured` in the JSON says "
        "when and on which version each kind was measured).",
        "",
    ]
    policies = _policies()
    header = "| policy | " + " | ".join(f"{k} train | {k} test | {k} drop" for k in table) + " |"
    lines += [header, "|---|" + "---|" * (3 * len(table))]
    for name in policies:
        cells = []
        for kind in table:
            tr, te = table[kind]["train"][name], table[kind]["test"][name]
            cells += [
                f"{tr['success']:.3f} / {tr['return']:+.2f}",
                f"{te['success']:.3f} / {te['return']:+.2f}",
                f"{summary[kind]['drop'][name]:+.3f}",
            ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| kind | best hand-written on test | oracle lead, success | oracle lead, return |", "|---|---|---|---|"]
    for kind, s in summary.items():
        lines.append(
            f"| {kind} | {s['best_hand_written_on_test']} | {s['oracle_lead_success']:+.3f} | {s['oracle_lead_return']:+.3f} |"
        )
    if learned and "default" in table:
        lines += [
            "",
            "## Learned policies on the defaults",
            "",
            "Each saved model on the `default` kind's splits (the same tasks and seeds), beside the hand-written policies'"
            " drop from training-like (`train`) to held-out (`test`) tasks:",
            "",
            "| policy | train | test | drop | model |",
            "|---|---|---|---|---|",
        ]
        for name, row in learned.items():
            lines.append(f"| {name} (learned) | {row['train']['success']:.3f} / {row['train']['return']:+.2f} | "
                         f"{row['test']['success']:.3f} / {row['test']['return']:+.2f} | {row['drop']:+.3f} | "
                         f"{row['description']} |")  # fmt: skip
        for name in policies:
            tr, te = table["default"]["train"][name], table["default"]["test"][name]
            lines.append(f"| {name} | {tr['success']:.3f} / {tr['return']:+.2f} | {te['success']:.3f} / {te['return']:+.2f}"
                         f" | {summary['default']['drop'][name]:+.3f} | hand-written |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=300, help="tasks per split (default 300)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="evaluation seeds (default 0)")
    parser.add_argument(
        "--kinds",
        nargs="*",
        default=list(KINDS),
        choices=list(KINDS),
        help="deviation kinds to measure (none: only --models, the kinds kept from the results file)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=[],
        type=parse_model,
        metavar="NAME=PATH",
        help="saved models (edo train's .zip, its .json beside it) evaluated on the default kind's splits",
    )
    parser.add_argument("--out-dir", type=Path, default=None, help="where the results go (default: benchmarks/results)")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    # kinds measured before with the same tasks and seeds are kept (one kind can be rerun or added alone), each with
    # the date and version it was measured on
    table, measured, learned = previous_results(args.out_dir or RESULTS_DIR, args.tasks, args.seeds)
    for kind in args.kinds:
        table[kind] = {split: evaluate_kind(kind, split, args.tasks, args.seeds) for split in ("train", "test")}
        measured[kind] = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "edo_gym_version": __version__}
    table = {kind: table[kind] for kind in KINDS if kind in table}
    if not table:
        parser.error("no kind measured: give --kinds, or run where a results file with the same --tasks and --seeds is")
    if args.models and "default" not in table:
        parser.error("--models compares with the default kind: measure it too (--kinds default)")
    for name, path in args.models:
        saved = json.loads(path.with_suffix(".json").read_text())
        config = saved["config"]
        description = (f"{config.get('algo')}, {saved.get('num_timesteps', 0):,} steps, seed {config.get('seed')}, "
                       f"warm start {config.get('warm_start')}")  # fmt: skip
        row = {split: evaluate_learned(path, split, args.tasks, args.seeds) for split in ("train", "test")}
        learned[name] = {**row, "drop": row["train"]["success"] - row["test"]["success"], "description": description,
                         "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "edo_gym_version": __version__}  # fmt: skip
    summary = summarize(table)
    command = recorded_command(list(sys.argv[1:] if argv is None else argv), args.models)
    payload = {"command": command, "tasks": args.tasks, "seeds": args.seeds, "table": table, "summary": summary,
               "measured": measured, "learned": learned}  # fmt: skip
    text = markdown(table, summary, args, learned)
    json_path, md_path = write_results("deviations", payload, text, out_dir=args.out_dir)
    print(text)
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
