"""Readable text trace of an EDO episode (``render_mode="ansi"``/``"human"``).

It shows what the orchestrator sees: the task, the plan as written, each decision with the worker, the retrieved
documents, the answer as written, verdicts and cost. It never shows hidden state (gold answers, correctness).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edo_gym.agents.planner import Plan
    from edo_gym.envs.edo_env import EDOEnv


def _plan_lines(plan: Plan) -> list[str]:
    conf = "n/a" if plan.confidence is None else f"{plan.confidence:.2f}"
    lines = [f"  plan ({len(plan.steps)} steps, {plan.source}, planner confidence {conf}):"]
    for i, s in enumerate(plan.steps):
        deps = f" <- {[d + 1 for d in s.deps]}" if s.deps else ""
        lines.append(f"    [{i + 1}] {s.label}/{s.domain_label}: {s.instruction}{deps}")
    return lines


def _cost(cost) -> str:
    return f"{cost.prompt_tokens}+{cost.completion_tokens} tokens, {cost.latency_s:.2f} s"


def render_trace(env: EDOEnv) -> str:
    """The episode so far: task, plan, each decision with worker, retrieval hits, answer, verdicts and cost."""
    docs = env.doc_texts
    names = [w.name for w in env.config.workers]
    out: list[str] = []
    for event in env.episode.trace:
        kind = event[0]
        if kind == "reset":
            out.append(f"TASK #{event[1]} ({env.episode.task.family}): {env.episode.task.text}")
        elif kind == "plan":
            out.extend(_plan_lines(event[1]))
        elif kind == "plan_fallback":
            out.append(f"  planner gave no valid plan ({event[1]}); using the one-step fallback plan")
        elif kind == "dispatch":
            i, w, rec = event[1], event[2], event[3]
            out.append(f"  dispatch step {i + 1} -> {names[w]} ({'with' if rec.used_retrieval else 'without'} retrieval)")
            out.append(f"    instruction: {rec.instruction}")
            if rec.retrieval_error:
                out.append(f"    retrieval FAILED ({rec.retrieval_error}); answered without retrieval")
            for d in rec.retrieved:
                out.append(f"    hit: {docs[d]}")
            tries = f" after {rec.attempts} attempts" if rec.attempts > 1 else ""
            if rec.failed:
                out.append(f"    call FAILED{tries}: {rec.error}; step stays undone; {_cost(rec.cost)}")
            else:
                conf = "n/a" if rec.confidence is None else f"{rec.confidence:.2f}"
                out.append(f"    answer: {rec.text!r} (confidence {conf}){tries}; {_cost(rec.cost)}")
        elif kind == "verify":
            check = event[1]
            tries = f" after {check.attempts} attempts" if check.attempts > 1 else ""
            if check.failed:
                out.append(f"  verify step {check.step + 1} by {names[check.worker]}: call FAILED{tries}: {check.error}")
            else:
                out.append(
                    f"  verify step {check.step + 1} by {names[check.worker]}: {check.verdict.upper()}{tries}; {_cost(check.cost)}"
                )
        elif kind == "verify_plan":
            check = event[1]
            if check.failed:
                out.append(f"  verify the plan by {names[check.worker]}: call FAILED: {check.error}")
            else:
                out.append(f"  verify the plan by {names[check.worker]}: {check.verdict.upper()}; {_cost(check.cost)}")
        elif kind == "rollback":
            out.append(f"  rollback step {event[1] + 1}")
        elif kind == "replan":
            out.append("  replan:")
            out.extend(_plan_lines(event[1]))
        elif kind == "illegal":
            out.append(f"  illegal action {event[1]} ({event[2]}): penalised, nothing changed")
        elif kind == "budget":
            out.append(f"  token budget exhausted ({event[1]} tokens)")
        elif kind == "submit":
            out.append(f"  submit: {event[1]!r} -> score {event[2]:.2f}")
    totals = f"  totals: {env.episode.steps} steps, {env.episode.tokens} tokens, {env.episode.calls} calls, {env.episode.latency_s:.2f} s simulated latency"
    faults = [
        f"{n} {label}"
        for n, label in (
            (env.episode.failed_calls, "failed calls"),
            (env.episode.call_retries, "retries"),
            (env.episode.retrieval_fallbacks, "retrieval fallbacks"),
        )
        if n
    ]
    out.append(totals + (f"; {', '.join(faults)}" if faults else ""))
    return "\n".join(out)
