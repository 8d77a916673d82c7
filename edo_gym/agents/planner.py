"""The Planner: asks a model for a JSON plan, validates it, repairs it once, and falls back when it cannot.

A plan is an ordered list of steps, each with a type label, a domain label, an instruction and the ids of the
earlier steps whose answers it reads (``{k}`` in an instruction stands for step ``k``'s answer, 1-based). The
planner's reply must follow :data:`PLAN_FORMAT`; :func:`parse_plan` checks it against that schema. The request
also carries the schema as JSON (:func:`plan_schema`), so a server that constrains decoding to a schema (llama.cpp,
vLLM, OpenAI's structured output) can only write plans whose steps read earlier steps. A reply that fails gets one
repair call (the error is quoted back); if that fails too, the fallback plan (:func:`fallback_plan`) is used: a
plan of the shape the task's text asks for. Every call is charged. What the plan *means* (its true step types,
whether it answers the task) is hidden state, computed by :mod:`edo_gym.world.grading`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from edo_gym.config import DOMAINS, SUBTASK_TYPES
from edo_gym.world.generator import RELATIONS
from edo_gym.world.language import compute_instruction, parse_noun_phrase, parse_question, question, reply_instruction
from edo_gym.world.tasks import SUPPORT_TEXTS

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
#: Longest instruction the plan schema admits: a step's instruction is one question or one operation (the longest the
#: simulated planner writes is about 120 characters); a small model decoding under the schema otherwise can repeat
#: itself inside one string until it runs out of tokens.
SCHEMA_INSTRUCTION_CHARS = 200


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
    """A validated plan. ``source`` is ``planner``, ``repaired``, ``fallback`` or ``rules`` (:func:`rule_plan`);
    ``confidence`` may be ``None``."""

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


@lru_cache(maxsize=16)
def plan_schema(max_steps: int) -> str:
    """The JSON schema of a plan of 1 to ``max_steps`` steps in which step ``k`` reads only steps ``1..k-1``, as
    canonical JSON text (:attr:`LLMRequest.json_schema`).

    One schema per position (``prefixItems``): step ``k``'s ``inputs`` items are an enum of ``1..k-1`` (the first
    step has no inputs), so a server that decodes under the schema cannot write a forward or self reference. An
    instruction is at most ``SCHEMA_INSTRUCTION_CHARS`` characters here (``parse_plan`` accepts up to
    ``MAX_INSTRUCTION_CHARS``)."""
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")

    def step(k: int) -> dict:
        inputs: dict = {"type": "array", "maxItems": 0} if k == 1 else {
            "type": "array", "items": {"enum": list(range(1, k))}, "uniqueItems": True, "maxItems": k - 1,
        }  # fmt: skip
        return {
            "type": "object",
            "properties": {
                "type": {"enum": list(SUBTASK_TYPES)},
                "domain": {"enum": list(DOMAINS)},
                "instruction": {"type": "string", "minLength": 1, "maxLength": SCHEMA_INSTRUCTION_CHARS},
                "inputs": inputs,
            },
            "required": ["type", "domain", "instruction", "inputs"],
            "additionalProperties": False,
        }

    schema = {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                # no "items": false (llama.cpp's grammar converter rejects it); maxItems bounds the list to the prefix
                "prefixItems": [step(k) for k in range(1, max_steps + 1)],
                "minItems": 1,
                "maxItems": max_steps,
            }
        },
        "required": ["steps"],
        "additionalProperties": False,
    }
    # the properties in the order a plan is written (a grammar built from the schema follows it)
    return json.dumps(schema, separators=(",", ":"))


_ANALYTICS = re.compile(
    r"^What was the (?P<what>combined|highest single-store) revenue of the (?P<stores>.+?) stores? in (?P<month>\w+), "
    r"in thousands\?$"
)
_CUSTOMER = re.compile(r"\b(customer|ticket|reply|refund)\b", re.IGNORECASE)


def _analytics_steps(text: str) -> tuple[PlanStep, ...] | None:
    """One lookup per named store and a compute step over them, for a revenue question; ``None`` for other text."""
    m = _ANALYTICS.match(text)
    if not m:
        return None
    stores = [x.strip() for x in re.split(r",\s*|\s+and\s+", m.group("stores")) if x.strip()]
    relation = RELATIONS.get(f"revenue_{m.group('month').lower()}")
    if relation is None or not stores:
        return None
    steps = [PlanStep("lookup", relation.domain, relation.question.format(x=store), ()) for store in stores]
    op = "sum" if m.group("what") == "combined" else "max"
    refs = [f"{{{k}}}" for k in range(1, len(stores) + 1)]
    steps.append(PlanStep("compute", relation.domain, compute_instruction(op, refs), tuple(range(len(stores)))))
    return tuple(steps)


def _chain_steps(relations: tuple[str, ...], subject: str) -> list[PlanStep]:
    """Chained lookups: the first asks about ``subject``, each next one about the previous step's answer."""
    return [
        PlanStep("lookup", RELATIONS[rel].domain, question((rel,), subject if k == 0 else f"{{{k}}}"), (k - 1,) if k else ())
        for k, rel in enumerate(relations)
    ]


def _support_patterns() -> list[tuple[re.Pattern[str], tuple[str, ...]]]:
    chains = {"order": ("shipment", "carrier", "refund_window"), "shipment": ("carrier", "refund_window"),
              "carrier": ("refund_window",)}  # fmt: skip
    out = []
    for start, texts in SUPPORT_TEXTS.items():
        for template in texts:
            pattern = "^" + re.escape(template).replace(re.escape("{x}"), r"(?P<x>.+?)") + "$"
            out.append((re.compile(pattern), chains[start]))
    return out


_SUPPORT_PATTERNS: list[tuple[re.Pattern[str], tuple[str, ...]]] = []


def rule_plan(task_text: str) -> Plan | None:
    """The plan a rule-based planner writes from the task's text alone (``PlannerConfig.mode == "rules"``), or ``None``
    when the text is of no form it knows.

    It knows the forms of the three task families: a question "What is the <relation> of ... of <subject>?" becomes
    one lookup per relation, innermost first, each reading the previous answer; a customer's refund question about
    an order, a shipment or a carrier becomes the lookups from what the message names to the refund window, then
    the written reply; a revenue question becomes one lookup per store and the sum or maximum. No model is called
    and nothing hidden is read: these are the plans a team writes when its tasks come from known templates (and
    the plans a small model cannot write; see the ``EDO-Small-v0`` tier).
    """
    text = task_text.strip()
    steps = _analytics_steps(text)
    if steps is not None:
        return Plan(steps, None, "rules")
    if text.startswith("What is ") and text.endswith("?"):
        parsed = parse_noun_phrase(text[len("What is ") : -1])
        if parsed is None:
            return None
        relations, subject = parsed
        while (inner := parse_noun_phrase(subject)) is not None:  # the parser reads a few levels at a time
            relations, subject = inner[0] + relations, inner[1]
        return Plan(tuple(_chain_steps(relations, subject)), None, "rules")
    if not _SUPPORT_PATTERNS:
        _SUPPORT_PATTERNS.extend(_support_patterns())
    for pattern, relations in _SUPPORT_PATTERNS:
        m = pattern.match(text)
        if m:
            chain = _chain_steps(relations, m.group("x"))
            n = len(chain)
            reply = PlanStep("write", RELATIONS["refund_window"].domain, reply_instruction(f"{{{n}}}"), (n - 1,))
            return Plan((*chain, reply), None, "rules")
    return None


def fallback_plan(task_text: str) -> Plan:
    """The plan used when the planner gives no valid plan twice: the shape the task's text asks for, read from the
    text alone (as a rule-based planner would; nothing hidden).

    - revenue of named stores "in thousands": one lookup per store, then a compute step (the sum for "combined",
      the maximum for "highest single-store") over them;
    - a customer's message (a refund question): a lookup with the message, then a one-sentence reply from it;
    - any other question: one lookup that asks it (a question stays a lookup);
    - anything else: one write step with the task text.
    """
    text = task_text.strip()
    steps = _analytics_steps(text)
    if steps is not None:
        return Plan(steps, None, "fallback")
    instruction = text[:MAX_INSTRUCTION_CHARS]
    if _CUSTOMER.search(text):
        policies = RELATIONS["refund_window"].domain
        lookup = PlanStep("lookup", policies, instruction, ())
        return Plan((lookup, PlanStep("write", policies, reply_instruction("{1}"), (0,))), None, "fallback")
    if text.endswith("?"):
        parsed = parse_question(text)
        domain = RELATIONS[parsed[0][-1]].domain if parsed is not None else DOMAINS[0]
        return Plan((PlanStep("lookup", domain, instruction, ()),), None, "fallback")
    return Plan((PlanStep("write", DOMAINS[0], instruction, ()),), None, "fallback")
