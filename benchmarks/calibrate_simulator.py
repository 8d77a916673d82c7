"""Calibrate the simulated workers to a real model from its recorded calls.

Runs hand-written policies on the *training* tasks of a tier (``--env``, default ``EDO-Small-v0``) with a real model
behind the workers (the bundled SmolLM2-135M started here, or ``--base-url``; every call through the record/replay
cache, so ``--llm-cache-mode replay`` refits offline from the committed recording). Every worker and verifier call is
graded with the env's own graders against the world's facts, then each worker's hidden profile is fitted to what it
did (each distinct request once: a retry of the same request adds nothing about a greedy model):

- ``domain_skills`` / ``skills["lookup"]``: how often a lookup is right when the document stating its answer is among
  the documents it was given (per document domain, shrunk towards the worker's overall rate by ``--prior`` calls);
- ``memory_coverage`` (with ``memory_accuracy`` 1): how often a lookup is right without that document;
- ``abstain_rate``: how often a lookup without that document abstains instead of guessing;
- ``skills["write"]``: how often a reply states the window it was given (in days); ``bare_window_rate``: how often
  it does so for a window given as a bare number ("10"), relative to that;
- ``verdict_rate``: how often a verification starts with a verdict that says something (CORRECT or INCORRECT);
- ``greedy``: set when every recorded call was sampled at temperature 0 (the same request gets the same answer).
- ``prompt_token_scale``: the prompt tokens the server reported over the env's estimate for the same requests (the
  server counts with its model's tokenizer and chat template);
- ``verbosity``: the mean of the completion tokens the server reported less the tokens of the calibrated simulator's
  reply to the same request (what a real reply costs beyond the answer).

Everything else (shards, prices, ``top_k``, sizes) is the tier's. The fitted team is written as a named worker
configuration (``benchmarks/results/calibration/<env>.json``, loaded with ``edo_gym.config.load_workers``), and the
report (``benchmarks/results/calibrate_simulator.{json,md}``) gives, per worker and call type, the real rate beside the
rate the default and the calibrated simulators give on the very same requests, and per worker the tokens per call.

Usage::

    python -m benchmarks.calibrate_simulator                              # record (starts the bundled model)
    python -m benchmarks.calibrate_simulator --llm-cache-mode replay      # refit offline from the recording
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import gymnasium as gym

from baselines.evaluation import evaluate_heuristic
from baselines.heuristics import HEURISTICS, make_heuristic
from benchmarks.common import command_line, machine_line, write_json_atomic, write_results
from benchmarks.sim_to_real import TIERS, add_real_backend_arguments, real_backend
from edo_gym.agents.protocol import LLMRequest, LLMResponse, parse_verdict
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.agents.worker import VERBOSITY
from edo_gym.config import WorkerSpec
from edo_gym.llm.errors import LLMBackendError
from edo_gym.world.generator import RELATIONS, World
from edo_gym.world.grading import durations, grade
from edo_gym.world.language import parse_question, parse_reply
from edo_gym.world.tasks import REPLY_TEMPLATE
from edo_gym.world.text import ABSTAIN_TEXT, normalize

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAME = "calibrate_simulator"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_POLICIES = ("oracle", "static_pipeline", "rule_based", "random")
#: Call types the report fits, in its order.
CALL_TYPES = ("lookup_with_doc", "lookup_without_doc", "abstain_without_doc", "write", "write_bare", "verdict")


class Tap:
    """A backend that hands every call on and keeps the worker and verifier requests with their replies."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[LLMRequest, LLMResponse]] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        response = self.inner.complete(request)
        if request.role in ("worker", "verifier"):
            self.calls.append((request, response))
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclasses.dataclass(frozen=True)
class Graded:
    """One call, graded: ``kind`` is ``lookup``, ``write`` or ``verdict``; ``value`` is 1/0 (right, or a verdict given)."""

    worker: str
    kind: str
    domain: str
    with_doc: bool
    right: bool
    abstained: bool = False


def _gold_documents(world: World) -> dict[tuple[str, str], frozenset[str]]:
    """The texts of the documents stating each fact (a fact may be stated by several)."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for d in world.documents:
        if not d.is_distractor:
            out[(d.subject, d.relation)].add(d.text)
    return {k: frozenset(v) for k, v in out.items()}


def _request_key(request: LLMRequest) -> tuple:
    """What a request asks, without its sampling seed."""
    return (request.role, request.agent, request.instruction, request.inputs, request.documents, request.answer)


def grade_call(
    world: World, gold_docs: dict[tuple[str, str], frozenset[str]], request: LLMRequest, text: str
) -> Graded | None:
    """The call graded against the world's facts, or ``None`` when it has no defined right answer (a lookup about a
    wrong upstream answer, a reply to a window that is not one)."""
    if request.role == "verifier":  # a verdict that says something (UNSURE, or no verdict word, says nothing)
        return Graded(request.agent, "verdict", "", False, parse_verdict(text) in ("CORRECT", "INCORRECT"))
    parsed = parse_question(request.instruction)
    if parsed is not None and len(parsed[0]) == 1:
        relation, subject = parsed[0][0], parsed[1]
        value = world.facts.get((subject, relation))
        if value is None:
            return None
        with_doc = not gold_docs.get((subject, relation), frozenset()).isdisjoint(request.documents)
        right = grade(world, RELATIONS[relation].value_kind, text, value, request.instruction)
        abstained = normalize(text) in (normalize(ABSTAIN_TEXT), "")
        return Graded(request.agent, "lookup", RELATIONS[relation].domain, with_doc, right, abstained)
    window = parse_reply(request.instruction)
    if window is not None:
        days = durations(window)
        if len(days) != 1:
            return None
        expected = REPLY_TEMPLATE.format(v=f"{int(next(iter(days)))} days")
        kind = "write" if "day" in window.lower() else "write_bare"  # a window given as a bare number
        return Graded(request.agent, kind, "policies", False, grade(world, "duration", text, expected))
    return None


def rates(graded: list[Graded]) -> dict[str, dict[str, list[int]]]:
    """worker -> call type -> ``[hits, calls]`` (``abstain_without_doc``: abstentions among wrong lookups without the
    document)."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: {t: [0, 0] for t in CALL_TYPES})
    for g in graded:
        by = out[g.worker]
        if g.kind == "lookup":
            key = "lookup_with_doc" if g.with_doc else "lookup_without_doc"
            by[key][0] += g.right
            by[key][1] += 1
            if not g.with_doc and not g.right:
                by["abstain_without_doc"][0] += g.abstained
                by["abstain_without_doc"][1] += 1
        else:
            by[g.kind][0] += g.right
            by[g.kind][1] += 1
    return {w: dict(v) for w, v in out.items()}


def _rate(hits: int, n: int, prior: float, weight: float) -> float:
    """``hits / n`` shrunk towards ``prior`` by ``weight`` calls' worth (``prior`` itself with no calls)."""
    return prior if n + weight == 0 else (hits + prior * weight) / (n + weight)


def fit_workers(
    team: tuple[WorkerSpec, ...], graded: list[Graded], prior_calls: float, greedy: bool = False
) -> tuple[WorkerSpec, ...]:
    """Each worker of ``team`` with its hidden profile fitted to ``graded`` (see the module docstring); a rate with no
    calls keeps the worker's value, one with few is shrunk towards it (or towards the worker's overall lookup rate)."""
    by_worker = rates(graded)
    fitted = []
    for spec in team:
        r = by_worker.get(spec.name)
        if r is None:
            fitted.append(spec)
            continue
        hits, n = r["lookup_with_doc"]
        overall = _rate(hits, n, spec.skills["lookup"], prior_calls)
        domain_skills = {}
        for domain in spec.shard:
            d_hits = sum(g.right for g in graded if g.worker == spec.name and g.kind == "lookup" and g.with_doc
                         and g.domain == domain)  # fmt: skip
            d_n = sum(1 for g in graded if g.worker == spec.name and g.kind == "lookup" and g.with_doc and g.domain == domain)
            domain_skills[domain] = round(_rate(d_hits, d_n, overall, prior_calls), 4)
        hits0, n0 = r["lookup_without_doc"]
        memory = _rate(hits0, n0, spec.memory_coverage * spec.memory_accuracy, prior_calls)
        a_hits, a_n = r["abstain_without_doc"]
        w_hits, w_n = r["write"]
        write = _rate(w_hits, w_n, spec.skills["write"], prior_calls)
        b_hits, b_n = r["write_bare"]
        bare = min(1.0, _rate(b_hits, b_n, spec.bare_window_rate * write, prior_calls) / max(write, 1e-9))
        v_hits, v_n = r["verdict"]
        fitted.append(
            dataclasses.replace(
                spec,
                skills={
                    **spec.skills,
                    "lookup": round(overall, 4),
                    "write": round(write, 4),
                },
                domain_skills=domain_skills,
                memory_coverage=round(memory, 4),
                memory_accuracy=1.0,
                abstain_rate=round(_rate(a_hits, a_n, spec.abstain_rate, prior_calls), 4),
                verdict_rate=round(_rate(v_hits, v_n, spec.verdict_rate, prior_calls), 4),
                greedy=greedy,
                bare_window_rate=round(bare, 4),
            )  # fmt: skip
        )
    return tuple(fitted)


def simulated_rates(env: gym.Env, team: tuple[WorkerSpec, ...], calls: list[tuple[LLMRequest, LLMResponse]],
                    gold_docs: dict[tuple[str, str], frozenset[str]]) -> dict[str, dict[str, list[int]]]:  # fmt: skip
    """What a simulator with ``team`` answers to the very requests the real model got, graded the same way."""
    base = env.unwrapped
    sim = SimulatedBackend(base.world, team, base.config.planner, base.pool.tasks)
    graded = []
    for request, _ in calls:
        g = grade_call(base.world, gold_docs, request, sim.complete(request).text)
        if g is not None:
            graded.append(g)
    return rates(graded)


def fit_tokens(
    env: gym.Env, team: tuple[WorkerSpec, ...], calls: list[tuple[LLMRequest, LLMResponse]]
) -> tuple[tuple[WorkerSpec, ...], dict[str, dict[str, Any]], dict[str, float]]:
    """``team`` with ``prompt_token_scale`` and ``verbosity`` fitted to the token counts the server reported, the
    per-worker table (mean prompt and completion tokens per call: real, default simulator, calibrated simulator) and the
    mean absolute error of tokens per call (default, calibrated). Calls without reported counts are left out."""
    base = env.unwrapped
    caller = base.caller
    sim = SimulatedBackend(base.world, team, base.config.planner, base.pool.tasks)
    default_sim = SimulatedBackend(base.world, base.config.workers, base.config.planner, base.pool.tasks)
    by_name = {spec.name: spec for spec in team}
    rows: dict[str, list[tuple[int, int, int, int, int]]] = defaultdict(list)
    for request, response in calls:
        if response.prompt_tokens is None or response.completion_tokens is None or request.agent not in by_name:
            continue
        estimate = caller.estimate_prompt_tokens(request, sum(caller.count_tokens(d) for d in request.documents))
        rows[request.agent].append((
            response.prompt_tokens, response.completion_tokens, estimate,
            caller.count_tokens(sim.complete(request).text), caller.count_tokens(default_sim.complete(request).text),
        ))  # fmt: skip
    fitted, table = [], {}
    errors, total = {"default": 0.0, "calibrated": 0.0}, 0
    for spec in team:
        r = rows.get(spec.name)
        if not r:
            fitted.append(spec)
            continue
        # totals matter (tokens per episode): the ratio of the sums and the mean difference, not medians
        scale = round(sum(p for p, *_ in r) / max(1, sum(e for _, _, e, _, _ in r)), 4)
        verbosity = max(0, round(statistics.fmean(c - n for _, c, _, n, _ in r)))
        new = dataclasses.replace(spec, prompt_token_scale=scale, verbosity=int(verbosity))
        fitted.append(new)
        default_v = VERBOSITY[spec.size]
        real = [p + c for p, c, _, _, _ in r]
        default = [e + n0 + default_v for _, _, e, _, n0 in r]
        calibrated = [round(e * scale) + n + verbosity for _, _, e, n, _ in r]
        table[spec.name] = {
            "calls": len(r),
            "prompt": {"real": statistics.fmean(p for p, *_ in r), "default": statistics.fmean(e for _, _, e, _, _ in r),
                       "calibrated": statistics.fmean(round(e * scale) for _, _, e, _, _ in r)},
            "completion": {"real": statistics.fmean(c for _, c, *_ in r),
                           "default": statistics.fmean(n0 + default_v for *_, n0 in r),
                           "calibrated": statistics.fmean(n + verbosity for _, _, _, n, _ in r)},
            "prompt_token_scale": scale,
            "verbosity": int(verbosity),
        }  # fmt: skip
        errors["default"] += sum(abs(d - x) for d, x in zip(default, real, strict=True))
        errors["calibrated"] += sum(abs(c - x) for c, x in zip(calibrated, real, strict=True))
        total += len(r)
    return tuple(fitted), table, {k: v / max(total, 1) for k, v in errors.items()}


def spec_dict(spec: WorkerSpec) -> dict[str, Any]:
    out = dataclasses.asdict(spec)
    out["shard"] = list(spec.shard)
    return out


def markdown(payload: dict[str, Any]) -> str:
    s = payload["settings"]
    lines = [
        f"# Simulator calibrated to {s['real']['model']} on {s['env']}",
        "",
        f"`{s['command']}` on {s['machine']}.",
        f"{s['episodes']} training tasks per policy ({', '.join(s['policies'])}), seed {s['seed']}; real model "
        f"{s['real']['model']} ({s['real']['server']}), cache {s['llm_cache_mode']} mode. {payload['graded_calls']} "
        f"graded calls. Calibrated team: `{payload['workers_file']}`.",
        "",
        "Rate per worker and call type: the real model, and the default and calibrated simulators on the same requests.",
        "",
        "| worker | call type | calls | real | default simulator | calibrated simulator |",
        "|---|---|---|---|---|---|",
    ]
    for worker, by in payload["fit"].items():
        for call_type, f in by.items():
            if f["calls"]:
                lines.append(
                    f"| {worker} | {call_type} | {f['calls']} | {f['real']:.2f} | {f['default']:.2f} | {f['calibrated']:.2f} |"
                )
    lines += [
        "",
        f"Mean absolute error over the rows, weighted by calls: default simulator {payload['fit_mae']['default']:.3f}, "
        f"calibrated {payload['fit_mae']['calibrated']:.3f}.",
    ]
    if payload.get("tokens"):
        lines += [
            "",
            "Tokens per call (mean over the distinct calls with counts the server reported), real and as the default and "
            "the calibrated simulators count them for the same requests:",
            "",
            "| worker | calls | prompt: real | default | calibrated | completion: real | default | calibrated |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for worker, t in payload["tokens"].items():
            p, c = t["prompt"], t["completion"]
            lines.append(
                f"| {worker} | {t['calls']} | {p['real']:.0f} | {p['default']:.0f} | {p['calibrated']:.0f} "
                f"| {c['real']:.1f} | {c['default']:.1f} | {c['calibrated']:.1f} |"
            )
        lines += [
            "",
            f"Mean absolute error of tokens per call: default simulator {payload['tokens_mae']['default']:.1f}, "
            f"calibrated {payload['tokens_mae']['calibrated']:.1f}.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="EDO-Small-v0", choices=TIERS)
    p.add_argument("--episodes", type=int, default=100, help="training tasks per policy (default: 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), choices=sorted(HEURISTICS))
    p.add_argument("--prior", type=float, default=4.0, help="calls' worth of shrinkage towards the default (default: 4)")
    add_real_backend_arguments(p)
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    if args.prior < 0:
        p.error(f"--prior must be >= 0, got {args.prior}")
    if args.llm_cache is None:
        (args.out_dir / "sim_to_real" / "llm_cache").mkdir(parents=True, exist_ok=True)
        args.llm_cache = str(args.out_dir / "sim_to_real" / "llm_cache")

    with contextlib.ExitStack() as stack:
        try:
            backend, real_info = stack.enter_context(real_backend(args))
        except (ValueError, FileNotFoundError, LLMBackendError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        tap = Tap(backend)
        env = gym.make(args.env, tasks_split="train", backend=tap)
        stack.callback(env.close)
        before = backend.counts
        for name in args.policies:
            result = evaluate_heuristic(make_heuristic(name), env, list(range(args.episodes)), seed=args.seed, progress=True)
            print(f"  {name}: success {result.success_rate:.3f} with the real model on training tasks", flush=True)
        delta = backend.counts - before
        if delta.failed:
            print(f"error: {delta.failed} language-model calls failed; the first: {delta.first_error}", file=sys.stderr)
            return 1
        world = env.unwrapped.world
        gold_docs = _gold_documents(world)
        # each distinct request once: a policy that retries a step asks the same thing again, and a greedy model's
        # repeats would weigh the steps it fails on many times over (the sampling seed is left out of the key)
        unique = list({_request_key(req): (req, resp) for req, resp in tap.calls}.values())
        graded = [g for req, resp in unique if (g := grade_call(world, gold_docs, req, resp.text)) is not None]
        team = env.unwrapped.config.workers
        greedy = all(req.temperature == 0.0 for req, _ in tap.calls)
        fitted = fit_workers(team, graded, args.prior, greedy)
        real = rates(graded)
        default = simulated_rates(env, team, unique, gold_docs)
        calibrated = simulated_rates(env, fitted, unique, gold_docs)
        fitted, tokens, tokens_mae = fit_tokens(env, fitted, unique)

    fit: dict[str, dict[str, dict[str, float]]] = {}
    errors = {"default": 0.0, "calibrated": 0.0}
    total = 0
    for worker, by in real.items():
        for call_type, (hits, n) in by.items():
            if not n:
                continue
            row = {"calls": n, "real": hits / n}
            for label, source in (("default", default), ("calibrated", calibrated)):
                s_hits, s_n = source.get(worker, {}).get(call_type, [0, 0])
                row[label] = s_hits / s_n if s_n else 0.0
                errors[label] += n * abs(row[label] - row["real"])
            total += n
            fit.setdefault(worker, {})[call_type] = row
    workers_file = args.out_dir / "calibration" / f"{args.env}.json"
    model = real_info.get("model", args.model)
    write_json_atomic(workers_file, {"name": f"{args.env} calibrated to {model}", "env": args.env, "model": model,
                                     "workers": [spec_dict(w) for w in fitted]})  # fmt: skip
    payload = {
        "settings": {
            "env": args.env,
            "episodes": args.episodes,
            "seed": args.seed,
            "policies": args.policies,
            "prior": args.prior,
            "llm_cache_mode": args.llm_cache_mode,
            "real": real_info,
            "command": command_line(),
            "machine": machine_line(),
        },  # fmt: skip
        "graded_calls": len(graded),
        "workers_file": os.path.relpath(workers_file, Path.cwd()),
        "fit": fit,
        "fit_mae": {k: v / max(total, 1) for k, v in errors.items()},
        "tokens": tokens,
        "tokens_mae": tokens_mae,
        "workers": [spec_dict(w) for w in fitted],
    }
    json_path, md_path = write_results(NAME, payload, markdown(payload), args.out_dir)
    print(markdown(payload))
    print(f"wrote {workers_file}, {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
