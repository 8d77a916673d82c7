"""The Planner: asks a model for a JSON plan, validates it, repairs it once, and falls back when it cannot.

A plan is an ordered list of steps, each with a type label, a domain label, an instruction and the ids of the
earlier steps whose answers it reads (``{k}`` in an instruction stands for step ``k``'s answer, 1-based). The
planner's reply must follow :data:`PLAN_FORMAT`; :func:`parse_plan` checks it against that schema. A reply that
fails gets one repair call (the error is quoted back); if that fails too, a one-step fallback plan ("answer the
task directly") is used. Every call is charged. What the plan *means* (its true step types, whether it answers
the task) is hidden state, computed by :mod:`edo_gym.world.grading`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from edo_gym.config import DOMAINS, SUBTASK_TYPES

PLAN_FORMAT = (
    'JSON only: {"steps": [{"type": "lookup" | "compute" | "write", "domain": one of '
    + ", ".join(f'"{d}"' for d in DOMAINS)
    + ', "instruction": "...", "inputs": [ids of the earlier steps it uses]}]}. Steps are numbered from 1; '
    "write {k} in an instruction where step k's answer goes."
)
PLANNER_SYSTEM = (
    "You are the planner of a team of assistants. Decompose the task into the smallest sequence of steps, each a "
    "single fact lookup, a computation or a written reply."
)
PLAN_INSTRUCTION = "Decompose the task into steps."
REPAIR_INSTRUCTION = "Your previous plan was invalid ({error}). Reply again with a valid plan."
MAX_INSTRUCTION_CHARS = 600


@dataclass(frozen=True)
class PlanStep:
    """One step as the planner wrote it (everything here is observable).

    :param label: the type label (``lookup``, ``compute`` or ``write``).
    :param domain_label: the document domain label.
    :param instruction: instruction template; ``{k}`` placeholders are filled with step ``k``'s answer (1-based).
    :param deps: 0-based indices of the steps it reads.
    """

    label: str
    domain_label: str
    instruction: str
    deps: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """A validated plan. ``source`` is ``planner``, ``repaired`` or ``fallback``; ``confidence`` may be ``None``."""

    steps: tuple[PlanStep, ...]
    confidence: float | None
    source: str = "planner"


class PlanError(ValueError):
    """A planner reply that does not follow :data:`PLAN_FORMAT`."""


@lru_cache(maxsize=50_000)
def parse_plan(text: str, max_steps: int) -> tuple[PlanStep, ...]:
    """Validate a planner reply against the plan schema.

    Accepts the JSON object alone or inside a chatty reply / a fenced code block (the outermost ``{...}``).

    :raises PlanError: naming the first violation (what was wrong and what is allowed).
    """
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise PlanError("no JSON object in the reply")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise PlanError(f"invalid JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:  # a reply nested deeper than the parser's stack
        raise PlanError("invalid JSON: nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise PlanError('the JSON object must have a "steps" list')
    raw = data["steps"]
    if not 1 <= len(raw) <= max_steps:
        raise PlanError(f"a plan must have 1 to {max_steps} steps, got {len(raw)}")
    steps = []
    for k, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            raise PlanError(f"step {k} must be an object")
        kind, domain, instruction, inputs = (
            item.get("type"),
            item.get("domain"),
            item.get("instruction"),
            item.get("inputs", []),
        )
        if kind not in SUBTASK_TYPES:
            raise PlanError(f"step {k}: type must be one of {list(SUBTASK_TYPES)}, got {kind!r}")
        if domain not in DOMAINS:
            raise PlanError(f"step {k}: domain must be one of {list(DOMAINS)}, got {domain!r}")
        if not isinstance(instruction, str) or not instruction.strip() or len(instruction) > MAX_INSTRUCTION_CHARS:
            raise PlanError(f"step {k}: instruction must be a non-empty string of at most {MAX_INSTRUCTION_CHARS} characters")
        if not isinstance(inputs, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in inputs):
            raise PlanError(f"step {k}: inputs must be a list of step ids")
        if any(not 1 <= i <= len(raw) or i == k for i in inputs):
            raise PlanError(f"step {k}: inputs must name other steps in 1..{len(raw)}, got {inputs}")
        steps.append(PlanStep(kind, domain, instruction.strip(), tuple(dict.fromkeys(i - 1 for i in inputs))))
    return tuple(steps)


def plan_to_json(steps: list[dict]) -> str:
    """Serialise steps (dicts with type, domain, instruction, inputs) as a planner reply."""
    return json.dumps({"steps": steps}, ensure_ascii=False)


def fallback_plan(task_text: str) -> Plan:
    """The plan used when the planner gives no valid plan twice: one step that answers the task directly."""
    return Plan((PlanStep("write", DOMAINS[0], task_text[:MAX_INSTRUCTION_CHARS], ()),), None, "fallback")
