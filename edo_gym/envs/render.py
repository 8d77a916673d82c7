"""Readable text trace of an EDO episode (``render_mode="ansi"``/``"human"``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edo_gym.agents.planner import Plan
    from edo_gym.envs.edo_env import EDOEnv


def _plan_lines(plan: Plan) -> list[str]:
    lines = [f"  plan ({len(plan.steps)} steps, planner confidence {plan.confidence:.2f}):"]
    for i, s in enumerate(plan.steps):
        what = "+".join(s.relations) if s.relations else s.op
        deps = f" <- {list(s.deps)}" if s.deps else f" <- {s.literal!r}"
        lines.append(f"    [{i}] {s.label}/{s.domain_label}: {what}{deps}")
    return lines


def render_trace(env: EDOEnv) -> str:
    """The episode so far: task, plan, each decision with worker, retrieval hits, answer and cost."""
    docs = env.world.documents
    out: list[str] = []
    for event in env.trace:
        kind = event[0]
        if kind == "reset":
            task, plan = event[1], event[2]
            out.append(f"TASK #{env.task_id} ({task.family}, {task.hops} hops): {task.text}")
            out.extend(_plan_lines(plan))
        elif kind == "dispatch":
            i, w, rec = event[1], event[2], event[3]
            name = env.config.workers[w].name
            out.append(f"  dispatch step {i} -> {name} ({'with' if rec.used_retrieval else 'without'} retrieval)")
            out.append(f"    query: {rec.query}")
            if getattr(rec, "retrieval_error", None) is not None:
                out.append(f"    retrieval FAILED ({rec.retrieval_error}); answered without retrieval")
            for d in rec.retrieved:
                out.append(f"    hit: [{docs[d].domain}] {docs[d].text}")
            attempts = getattr(rec, "attempts", 1)
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            cost = f"{rec.prompt_tokens}+{rec.completion_tokens} tokens, {rec.latency_s:.2f} s"
            if getattr(rec, "failed", False):
                out.append(f"    call FAILED{tries}: {rec.error}; step stays undone; {cost}")
            else:
                out.append(f"    answer: {rec.text!r} (confidence {rec.confidence:.2f}){tries}; {cost}")
        elif kind == "verify":
            attempts = event[3] if len(event) > 3 else 1
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            if event[2] is None:
                out.append(f"  verify step {event[1]}: call FAILED{tries}: {event[4]}; result stays unchecked")
            else:
                out.append(f"  verify step {event[1]}: {'FLAGGED' if event[2] else 'ok'}{tries}")
        elif kind == "rollback":
            out.append(f"  rollback step {event[1]}")
        elif kind == "replan":
            out.append("  replan:")
            out.extend(_plan_lines(event[1]))
        elif kind == "illegal":
            out.append(f"  illegal action {event[1]} ({event[2]}): penalised, nothing changed")
        elif kind == "budget":
            out.append(f"  token budget exhausted ({event[1]} tokens)")
        elif kind == "submit":
            out.append(f"  submit: {event[1]!r} (gold {event[2]!r}) -> score {event[3]:.2f}")
    totals = f"  totals: {env.steps} steps, {env.tokens} tokens, {env.calls} calls, {env.latency_s:.2f} s simulated latency"
    faults = [
        f"{n} {label}"
        for n, label in (
            (getattr(env, "failed_calls", 0), "failed calls"),
            (getattr(env, "call_retries", 0), "retries"),
            (getattr(env, "retrieval_fallbacks", 0), "retrieval fallbacks"),
        )
        if n
    ]
    out.append(totals + (f"; {', '.join(faults)}" if faults else ""))
    return "\n".join(out)
