"""Declare a benchmark study once; run it serially or on Ray, resumably; summarise whatever has finished.

A *study* is a grid of independent training runs -- **study points x algorithms x seeds** -- and a summary
computed from their records. A study file (``benchmarks/study_*.py``, ``grpo_vs_ppo.py``) holds only what is
particular to it: a :class:`Study` declaration and its ``summarise`` (and ``plot``) functions::

    STUDY = Study(
        name="study_horizon",
        doc=__doc__,
        budgets=Tiered(full=Budget(150_000, (0, 1, 2), 200), quick=Budget(12_000, (0, 1), 60), smoke=Budget(300, (0,), 3)),
        algos=Tiered(full=("grpo", "ppo", "maskable_ppo"), quick=("grpo", "ppo"), smoke=("grpo",)),
        options=(Option("--hops", Tiered(full=[2, 4, 6, 8, 10, 12], quick=[2, 4, 8, 12], smoke=[2, 4]), type=int, nargs="+"),),
        points=lambda cfg: {f"h{h}": Point(env_kwargs={"tasks": {"min_hops": h, "max_hops": h}}) for h in cfg.options.hops},
        summarise=summarise,  # (cfg, runs) -> (payload, markdown)
        plot=plot,            # optional: (cfg, payload, png_path) -> None
    )

    if __name__ == "__main__":
        sys.exit(STUDY.main())

Everything else is shared, here:

- **Budget tiers** ``smoke`` (plumbing only; figures mean nothing), ``quick`` (``make bench-quick``) and ``full``
  (``make bench``): each fixes the env steps per run, the seeds and the held-out evaluation tasks, and may
  change the algorithms and any study option. ``--seeds``/``--timesteps``/``--eval-episodes``/``--algos`` and
  the study's own options override them.
- **One result file per run**: ``<out-dir>/records/<study>/<point>-<algo>-s<seed>.json``, written atomically when
  the run finishes. A restart skips every run whose file exists for the same ``RunSpec`` (a file written for
  another spec, e.g. another budget, or under another env version or other ``TrainConfig`` defaults
  (:func:`run_context`) is stale and the run is redone), so a long suite can be stopped at any
  time and continued later -- in another session, on another machine -- and finished runs can be committed as
  they come.
- **Partial summaries**: the study's ``summarise`` gets the records that exist; the runner adds
  ``completeness`` (planned, finished, missing and failed runs) to the JSON and a warning to the Markdown.
  ``--summarise-only`` summarises without running anything.
- **Execution** (``benchmarks.executors``): one fresh subprocess per run, one after the other, or as Ray tasks
  (``--ray``: a local Ray instance with one task per core; ``--ray-address ADDR``: an existing cluster). Runs
  keep their own seeds; the summary is computed in this process from the records in plan order, so serial and
  Ray runs produce the same JSON and tables (up to timings and memory). A failed run is retried once, then
  reported in the summary, in the exit code and in its log (``<out-dir>/logs/<study>/<run>.log``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from benchmarks.bench_lib import RunSpec
from benchmarks.common import RESULTS_DIR, git_revision, write_json_atomic, write_results, write_text_atomic
from benchmarks.executors import RAY_MISSING, execute

T = TypeVar("T")

#: Budget tiers, cheapest first.
TIERS = ("smoke", "quick", "full")
#: The actor's hidden layers in every study (the same for every algorithm; PPO's critic gets the same sizes).
NET_ARCH = [128, 128]


@dataclass(frozen=True)
class Tiered(Generic[T]):
    """One value per budget tier."""

    full: T
    quick: T
    smoke: T

    def __getitem__(self, tier: str) -> T:
        if tier not in TIERS:
            raise KeyError(f"unknown budget tier {tier!r}; choose from {list(TIERS)}")
        return getattr(self, tier)


@dataclass(frozen=True)
class Budget:
    """What one tier spends per run: env steps, training seeds, held-out evaluation tasks."""

    timesteps: int  #: env steps per training run (0: the study trains nothing at this tier)
    seeds: tuple[int, ...]  #: one run per seed per (point, algorithm)
    eval_episodes: int  #: held-out tasks per evaluation (the first ones of the test split)


@dataclass(frozen=True)
class Point:
    """One setting a study varies: the env (id and ``gym.make`` kwargs) and training overrides.

    ``algos`` restricts the algorithms trained at this point (None: the study's). ``extra_eval`` lists further
    ``(env_id, env_kwargs)`` to evaluate the final models on.
    """

    env_id: str = "EDO-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)
    extra_eval: tuple[tuple[str, dict[str, Any]], ...] = ()
    algos: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Option:
    """A study's own command-line option; ``default`` may be :class:`Tiered` (a value per budget tier)."""

    flag: str
    default: Any = None
    help: str = ""
    type: Callable[[str], Any] | None = None
    nargs: str | None = None
    choices: Sequence[Any] | None = None
    store_true: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.store_true:
            parser.add_argument(self.flag, action="store_true", help=self.help)
            return
        shown = self.default if not isinstance(self.default, Tiered) else f"{self.default.full} (full)"
        parser.add_argument(self.flag, default=None, type=self.type, nargs=self.nargs, choices=self.choices,
                            help=f"{self.help} (default: {shown})")  # fmt: skip

    def resolve(self, value: Any, tier: str) -> Any:
        if value is not None:
            return value
        return self.default[tier] if isinstance(self.default, Tiered) else self.default


@dataclass
class StudyConfig:
    """A study resolved for one invocation: tier, budget and algorithms after overrides, and the study's options."""

    name: str  #: base name of the result files and of the per-run record folder
    tier: str
    budget: Budget
    algos: tuple[str, ...]
    options: argparse.Namespace
    out_dir: Path
    command: str  #: the command line that reproduces this study on its own
    #: studies summarised before this one in the same invocation (a study reading their results finds them fresh)
    upstream: tuple[str, ...] = ()
    #: the budget knobs given on the command line (of "seeds", "timesteps", "eval_episodes", "algos")
    given: tuple[str, ...] = ()

    def settings(self) -> dict[str, Any]:
        """The settings every study records: command, tier, seeds, env steps, evaluation tasks, algorithms."""
        return {"command": self.command, "mode": self.tier, "seeds": list(self.budget.seeds), "timesteps": self.budget.timesteps,
                "eval_episodes": self.budget.eval_episodes, "algos": list(self.algos)}  # fmt: skip


@dataclass(frozen=True)
class PlannedRun:
    """One run of the grid, identified by ``key`` (unique within its study)."""

    study: str
    key: str
    point: str
    algo: str
    seed: int
    spec: RunSpec


def run_key(point: str, algo: str, seed: int) -> str:
    """``<point>-<algo>-s<seed>`` (``<algo>-s<seed>`` for a study with a single, unnamed point)."""
    return f"{point}-{algo}-s{seed}" if point else f"{algo}-s{seed}"


_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.=+-]+$")


@dataclass
class RunSet:
    """The records of a study's planned runs that exist, by key, and what is missing. ``summarise`` reads it."""

    planned: list[PlannedRun]
    records: dict[str, dict[str, Any]]
    failed: dict[str, str] = field(default_factory=dict)

    def seeds(self, point: str, algo: str) -> list[dict[str, Any]]:
        """The finished records of ``(point, algo)``, in plan (seed) order."""
        return [self.records[r.key] for r in self.planned if r.point == point and r.algo == algo and r.key in self.records]

    @property
    def missing(self) -> list[str]:
        return [r.key for r in self.planned if r.key not in self.records]

    def by_key(self) -> dict[str, dict[str, Any]]:
        """Finished records by key, in plan order (the ``runs`` object of most studies' JSON)."""
        return {r.key: self.records[r.key] for r in self.planned if r.key in self.records}

    def completeness(self) -> dict[str, Any]:
        return {"planned": len(self.planned), "finished": len(self.records), "missing": self.missing,
                "failed": dict(self.failed)}  # fmt: skip


Summarise = Callable[[StudyConfig, RunSet], tuple[dict[str, Any], str]]


def train_spec(cfg: StudyConfig, point: Point, algo: str, seed: int) -> RunSpec:
    """The default way to run a point: train for the budget, evaluate once at the end on the held-out tasks."""
    timesteps = cfg.budget.timesteps
    return RunSpec(algo=algo, seed=seed, env_id=point.env_id, total_timesteps=timesteps, eval_every=timesteps + 1,
                   eval_episodes=cfg.budget.eval_episodes, eval_at_start=False, env_kwargs=dict(point.env_kwargs),
                   train_overrides={"net_arch": list(NET_ARCH), **point.train_overrides},
                   extra_eval=[(e, dict(k)) for e, k in point.extra_eval])  # fmt: skip


@dataclass
class Study:
    """The declaration of a study: what it varies, which algorithms, budgets per tier, and how to summarise.

    :param name: base name of the result files (``<name>.json/.md/.png``) and of the script (``<name>.py``).
    :param doc: the script's description (its ``--help``).
    :param budgets: env steps, seeds and evaluation tasks per tier.
    :param algos: algorithms trained at every point, per tier (a :class:`Point` may restrict them).
    :param points: ``cfg -> {point id: Point}``; ids are short, file-name safe and unique (``""`` for a study with
        one point).
    :param summarise: ``(cfg, runs) -> (payload, markdown)``; ``payload`` is the JSON object (the runner adds
        ``command``, ``date_utc``, ``machine``, ``versions`` and ``completeness``). Must accept missing runs.
    :param plot: optional ``(cfg, payload, png_path) -> None``.
    :param options: the study's own command-line options.
    :param spec: how to run one (point, algorithm, seed); default :func:`train_spec`.
    """

    name: str
    doc: str | None
    budgets: Tiered[Budget]
    algos: Tiered[tuple[str, ...]]
    points: Callable[[StudyConfig], dict[str, Point]]
    summarise: Summarise
    plot: Callable[[StudyConfig, dict[str, Any], Path], None] | None = None
    options: tuple[Option, ...] = ()
    spec: Callable[[StudyConfig, Point, str, int], RunSpec] = train_spec

    # -- configuration -------------------------------------------------------------------------------------------
    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(description=self.doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        add_tier_flags(parser)
        parser.add_argument("--seeds", type=int, nargs="+", default=None, help="training seeds (default: by tier)")
        parser.add_argument("--timesteps", type=int, default=None, help="env steps per training run (default: by tier)")
        parser.add_argument("--eval-episodes", type=int, default=None, help="held-out tasks per evaluation (default: by tier)")
        parser.add_argument("--algos", nargs="+", default=None, help="algorithms to train (default: by tier)")
        parser.add_argument("--out-dir", default=str(RESULTS_DIR), help="where <name>.json/.md/.png, records/ and logs/ go")
        parser.add_argument("--name", default=self.name, help="base name of the result files and of the record folder")
        for option in self.options:
            option.add_to(parser)
        add_execution_flags(parser)
        return parser

    def configure(self, args: argparse.Namespace, argv: Sequence[str], upstream: Sequence[str] = ()) -> StudyConfig:
        """Resolve ``args`` (parsed by :meth:`parser`) against the tier's defaults; raise ``SystemExit`` on bad values."""
        tier = tier_of(args)
        base = self.budgets[tier]
        budget = Budget(
            timesteps=base.timesteps if args.timesteps is None else args.timesteps,
            seeds=tuple(base.seeds if args.seeds is None else args.seeds),
            eval_episodes=base.eval_episodes if args.eval_episodes is None else args.eval_episodes,
        )
        if budget.timesteps < 0 or budget.eval_episodes < 1 or not budget.seeds:
            raise SystemExit(f"{self.name}: --timesteps must be >= 0, --eval-episodes >= 1 and --seeds non-empty")
        algos = tuple(self.algos[tier] if args.algos is None else args.algos)
        check_algos(algos, self.name)
        options = argparse.Namespace(**{o.dest: o.resolve(getattr(args, o.dest), tier) for o in self.options})
        # the command that produces the results: without the flags that only say how or whether the runs execute
        produce = [a for a in argv if a != "--summarise-only"]
        command = " ".join(["python", "-m", f"benchmarks.{self.name}", *(shlex.quote(a) for a in produce)])
        given = tuple(k for k in ("seeds", "timesteps", "eval_episodes", "algos") if getattr(args, k) is not None)
        return StudyConfig(name=args.name, tier=tier, budget=budget, algos=algos, options=options, out_dir=Path(args.out_dir),
                           command=command, upstream=tuple(upstream), given=given)  # fmt: skip

    def plan(self, cfg: StudyConfig) -> list[PlannedRun]:
        """Every run of the grid, in execution order: seed by seed (every point and algorithm of the first seed,
        then of the next), so that slow drift of a shared machine hits all configurations alike and a suite
        stopped early has whole seeds of every cell."""
        if cfg.budget.timesteps == 0:
            return []
        points = self.points(cfg)
        for pid in points:
            if pid and not _SAFE_KEY.match(pid):
                raise ValueError(f"{self.name}: point id {pid!r} must match {_SAFE_KEY.pattern} (it names files)")
        runs = []
        for seed in cfg.budget.seeds:
            for pid, point in points.items():
                for algo in cfg.algos:
                    if point.algos is None or algo in point.algos:
                        spec = self.spec(cfg, point, algo, seed)
                        runs.append(PlannedRun(cfg.name, run_key(pid, algo, seed), pid, algo, seed, spec))
        keys = [r.key for r in runs]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{self.name}: duplicate run keys {sorted({k for k in keys if keys.count(k) > 1})}")
        return runs

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Command-line entry point of the study's script; returns the exit code (1 if a run or the summary failed)."""
        argv = list(sys.argv[1:] if argv is None else argv)
        args = self.parser().parse_args(argv)
        cfg = self.configure(args, argv)
        outcomes = run_studies([(self, cfg)], execution_of(args))
        return 0 if all(o.ok for o in outcomes) else 1


def add_tier_flags(parser: argparse.ArgumentParser) -> None:
    tier = parser.add_mutually_exclusive_group()
    tier.add_argument("--quick", action="store_true", help="the quick tier (make bench-quick)")
    tier.add_argument("--smoke", "--tiny", dest="smoke", action="store_true",
                      help="the smoke tier: checks the plumbing, the figures mean nothing")  # fmt: skip


def tier_of(args: argparse.Namespace) -> str:
    return "smoke" if args.smoke else "quick" if args.quick else "full"


def add_execution_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("execution")
    group.add_argument("--ray", action="store_true", help="run the runs as Ray tasks on a local Ray instance, one per core")
    group.add_argument("--ray-address", default=None, metavar="ADDR",
                       help="run the runs as Ray tasks on the existing cluster at ADDR (e.g. auto, ray://head:10001)")  # fmt: skip
    group.add_argument("--ray-workers", type=int, default=None, metavar="N",
                       help="tasks at a time on a local Ray instance (implies --ray; default: one per core)")  # fmt: skip
    group.add_argument("--summarise-only", action="store_true",
                       help="run nothing: summarise the finished runs and list the missing ones")  # fmt: skip


@dataclass
class Execution:
    """How the pending runs are executed (see ``benchmarks.executors``)."""

    ray: bool = False
    ray_address: str | None = None
    ray_workers: int | None = None
    summarise_only: bool = False


def execution_of(args: argparse.Namespace) -> Execution:
    if args.ray_workers is not None and args.ray_workers < 1:
        raise SystemExit("--ray-workers must be >= 1")
    if args.ray_workers is not None and args.ray_address is not None:
        raise SystemExit("--ray-workers sizes a local Ray instance; a cluster (--ray-address) runs one task per CPU it has")
    if (args.ray or args.ray_address is not None or args.ray_workers is not None) and importlib.util.find_spec("ray") is None:
        raise SystemExit(RAY_MISSING)
    return Execution(ray=args.ray or args.ray_address is not None or args.ray_workers is not None, ray_address=args.ray_address,
                     ray_workers=args.ray_workers, summarise_only=args.summarise_only)  # fmt: skip


def check_algos(algos: Sequence[str], where: str) -> None:
    from baselines.training import ALGOS

    unknown = [a for a in algos if a not in ALGOS]
    if unknown:
        raise SystemExit(f"{where}: unknown algorithm(s) {unknown}; choose from {list(ALGOS)}")


# -- per-run records ---------------------------------------------------------------------------------------------
class RunStore:
    """The finished runs of one study: ``<out_dir>/records/<study>/<key>.json``, one file per run.

    A file holds the run's ``spec``, its ``record`` and provenance (host, git revision, attempts, seconds, date).
    It is written atomically when the run finishes, so it is either complete or absent.
    """

    def __init__(self, out_dir: Path, study: str) -> None:
        self.dir = Path(out_dir) / "records" / study

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def load(self, run: PlannedRun) -> dict[str, Any] | None:
        """The stored record of ``run``; None when absent, unreadable or written for a different spec (stale)."""
        path = self.path(run.key)
        if not path.is_file():
            return None
        try:
            stored = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if stored.get("spec") != json.loads(json.dumps(asdict(run.spec))):
            return None
        if without_retired(stored.get("context")) != run_context():
            return None  # another env version or other training defaults: the same spec meant another run
        return stored["record"]

    def save(self, run: PlannedRun, record: dict[str, Any], provenance: dict[str, Any]) -> Path:
        path = self.path(run.key)
        write_json_atomic(
            path,
            {"key": run.key, "spec": asdict(run.spec), "context": run_context(), "provenance": provenance, "record": record},
        )
        return path


#: ``TrainConfig`` fields added after records were written, with the default that trains exactly as before they
#: existed: at that default they stay out of :func:`run_context`, so that adding them leaves every record valid.
NEUTRAL_DEFAULTS: dict[str, Any] = {"hop_curriculum": None}


#: Settings ``TrainConfig`` no longer has, at the value at which they changed nothing: a stored context that holds
#: them at that value is the context without them, so that removing them leaves every record valid.
RETIRED_DEFAULTS: dict[str, Any] = {"update_threads": None, "vec_workers": None}


def without_retired(context: Any) -> Any:
    """A stored run context less the :data:`RETIRED_DEFAULTS` it holds at their neutral value."""
    if not isinstance(context, dict) or not isinstance(context.get("train_defaults"), dict):
        return context
    defaults = {k: v for k, v in context["train_defaults"].items() if k not in RETIRED_DEFAULTS or v != RETIRED_DEFAULTS[k]}
    return {**context, "train_defaults": defaults}


def run_context() -> dict[str, Any]:
    """What a run depends on besides its spec: the env's version (its dynamics and observation) and the defaults of
    ``TrainConfig`` that the spec does not override. A record written under another context is stale."""
    from baselines.training import TrainConfig
    from edo_gym.envs.edo_env import ENV_VERSION

    defaults = TrainConfig().as_dict()
    for volatile in ("progress_bar", "verbose", "output_dir", "tensorboard_log"):
        defaults.pop(volatile, None)
    for name, off in NEUTRAL_DEFAULTS.items():  # a setting added later, at the value that changes nothing
        if name in defaults and defaults[name] == off:
            defaults.pop(name)
    return json.loads(json.dumps({"edo_gym_version": ENV_VERSION, "train_defaults": defaults}))


# -- the driver ----------------------------------------------------------------------------------------------------
@dataclass
class StudyOutcome:
    """What happened to one study in one invocation."""

    name: str
    command: str
    runs: RunSet
    executed: int  #: runs executed now (successfully)
    summary_error: str | None
    seconds: float  #: summary wall time plus the wall time of this study's runs executed now (subprocess start-up included)

    @property
    def ok(self) -> bool:
        return self.summary_error is None and not self.runs.failed and not self.runs.missing


def run_studies(
    studies: Sequence[tuple[Study, StudyConfig]], execution: Execution, executor: Callable[..., None] | None = None
) -> list[StudyOutcome]:
    """Plan every study, execute the runs without a finished record (all studies' runs together), then summarise
    each study in order from its records and write ``<name>.json/.md`` (and ``.png``).

    ``executor(runs, execution, on_success, on_failure)`` executes the pending runs (default:
    :func:`benchmarks.executors.execute`, serial or Ray tasks; ``tune_ent_coef.py`` passes Ray Tune's).
    """
    if executor is None:
        executor = execute

    plans: dict[str, list[PlannedRun]] = {}
    stores: dict[str, RunStore] = {}
    records: dict[str, dict[str, dict[str, Any]]] = {}
    pending: list[PlannedRun] = []
    for study, cfg in studies:
        plans[cfg.name] = study.plan(cfg)
        stores[cfg.name] = RunStore(cfg.out_dir, cfg.name)
        records[cfg.name] = {}
        for run in plans[cfg.name]:
            rec = stores[cfg.name].load(run)
            if rec is None:
                pending.append(run)
            else:
                records[cfg.name][run.key] = rec
    total = sum(len(p) for p in plans.values())
    print(f"{total} runs planned in {len(studies)} stud{'y' if len(studies) == 1 else 'ies'}: {total - len(pending)} "
          f"finished before, {len(pending)} to run" + (" (--summarise-only: none will)" if execution.summarise_only else ""),
          flush=True)  # fmt: skip

    run_seconds: dict[str, float] = {cfg.name: 0.0 for _, cfg in studies}
    executed = dict.fromkeys(run_seconds, 0)
    failed: dict[str, dict[str, str]] = {cfg.name: {} for _, cfg in studies}
    out_dirs = {cfg.name: cfg.out_dir for _, cfg in studies}
    revision = git_revision()
    t0 = time.perf_counter()
    done = 0

    def log(run: PlannedRun, outcome: dict[str, Any]) -> None:
        write_text_atomic(out_dirs[run.study] / "logs" / run.study / f"{run.key}.log", outcome.get("log") or "")

    def on_success(run: PlannedRun, outcome: dict[str, Any], attempts: int) -> None:
        nonlocal done
        done += 1
        rec = outcome["record"]
        provenance = {"host": outcome.get("host"), "git_revision": revision, "attempts": attempts,
                      "seconds": outcome.get("seconds"), "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        stores[run.study].save(run, rec, provenance)
        log(run, outcome)
        records[run.study][run.key] = rec
        failed[run.study].pop(run.key, None)
        run_seconds[run.study] += outcome.get("seconds") or 0.0
        executed[run.study] += 1
        f = rec["final"]
        print(f"[{done}/{len(pending)}] {run.study}/{run.key} ({rec['num_timesteps']:,} steps): success {f['success']:.3f}, "
              f"return {f['return']:+.3f}, calls/ep {f['calls']:.1f}, train {rec['wall_time_s']:.0f} s, "
              f"{time.perf_counter() - t0:.0f} s elapsed", flush=True)  # fmt: skip

    def on_failure(run: PlannedRun, outcome: dict[str, Any], attempts: int, final: bool) -> None:
        log(run, outcome)
        run_seconds[run.study] += outcome.get("seconds") or 0.0
        error = (outcome.get("error") or "unknown error").strip()
        if final:
            failed[run.study][run.key] = error[-2000:]
        verdict = "FAILED, reported" if final else "failed, will retry once"
        print(
            f"run {run.study}/{run.key} {verdict} (attempt {attempts}): {error.splitlines()[-1] if error else ''}", flush=True
        )

    if pending and not execution.summarise_only:
        executor(pending, execution, on_success, on_failure)

    outcomes = []
    for study, cfg in studies:
        t1 = time.perf_counter()
        runs = RunSet(plans[cfg.name], records[cfg.name], failed[cfg.name])
        error = summarise_study(study, cfg, runs)
        outcomes.append(StudyOutcome(cfg.name, cfg.command, runs, executed[cfg.name], error,
                                     run_seconds[cfg.name] + time.perf_counter() - t1))  # fmt: skip
    return outcomes


def summarise_study(study: Study, cfg: StudyConfig, runs: RunSet) -> str | None:
    """Write the study's result files from ``runs``; return None, or the traceback if the summary failed."""
    try:
        payload, markdown = study.summarise(cfg, runs)
        payload["completeness"] = runs.completeness()
        markdown = completeness_note(runs) + markdown
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        if study.plot is not None:
            study.plot(cfg, payload, cfg.out_dir / f"{cfg.name}.png")
        json_path, md_path = write_results(cfg.name, payload, markdown, cfg.out_dir)
    except Exception:  # a bad summary must not lose the other studies' results
        error = traceback.format_exc()
        print(f"summary of {cfg.name} FAILED:\n{error}", file=sys.stderr, flush=True)
        return error
    print("\n" + markdown)
    print(f"\nwrote {json_path} and {md_path}", flush=True)
    return None


def completeness_note(runs: RunSet) -> str:
    """A Markdown warning for a partial summary (empty when every planned run has finished)."""
    missing = runs.missing
    if not missing:
        return ""
    failed = [k for k in missing if k in runs.failed]
    shown = ", ".join(missing[:12]) + (f" and {len(missing) - 12} more" if len(missing) > 12 else "")
    note = (f"> **Partial results: {len(missing)} of {len(runs.planned)} planned runs are missing** ({shown})"
            + (f"; {len(failed)} of them failed twice: {', '.join(failed)} (see `logs/`)" if failed else "")
            + ". Figures below use the finished runs only.\n\n")  # fmt: skip
    return note


def shown_path(path: Path) -> str:
    """``path`` as written into the results: relative to the repository when it lies inside it (results are
    committed and name no machine's directories)."""
    resolved = Path(path).resolve()
    root = Path(__file__).resolve().parent.parent
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(path)
