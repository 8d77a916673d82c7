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
from typing import Any

from edo_gym.config import DOMAINS, SUBTASK_TYPES
from edo_gym.world import phrasing
from edo_gym.world.generator import MONTHS, RELATIONS
from edo_gym.world.language import compute_instruction, parse_question, question, reply_instruction
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
#: The instruction of a request that carries the results found so far (:func:`edo_gym.world.language.result_notes`); a
#: new plan is executed from its first step.
REPLAN_INSTRUCTION = (
    "Decompose the task into steps. The inputs are results that earlier steps found: a step they show to be needed "
    "belongs in the plan."
)
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


#: Memo of :func:`parse_plan` by ``(text, max_steps)``: the parsed steps, or the message of the error (a reply is parsed
#: again at each critique of the plan it wrote; the steps are immutable). Cleared when full.
_PARSED: dict[tuple[str, int], tuple[PlanStep, ...] | str] = {}
_PARSED_SIZE = 4096


def parse_plan(text: str, max_steps: int) -> tuple[PlanStep, ...]:
    """Validate a planner reply against the plan schema.

    Accepts the JSON object alone or inside a chatty reply / a fenced code block (the outermost ``{...}``).

    :raises PlanError: naming the first violation (what was wrong and what is allowed).
    """
    key = (text, max_steps)
    parsed = _PARSED.get(key)
    if parsed is None:
        try:
            parsed = _parse_plan(text, max_steps)
        except PlanError as exc:
            parsed = str(exc)
        if len(_PARSED) >= _PARSED_SIZE:
            _PARSED.clear()
        _PARSED[key] = parsed
    if isinstance(parsed, str):
        raise PlanError(parsed)
    return parsed


def _parse_plan(text: str, max_steps: int) -> tuple[PlanStep, ...]:
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


def _revenue_steps(op: str, stores: list[str], month: str) -> tuple[PlanStep, ...] | None:
    """One lookup per store and a compute step (``op``) over them; ``None`` for an unknown month or no store."""
    relation = RELATIONS.get(f"revenue_{month.lower()}")
    if relation is None or not stores:
        return None
    steps = [PlanStep("lookup", relation.domain, relation.question.format(x=store), ()) for store in stores]
    refs = [f"{{{k}}}" for k in range(1, len(stores) + 1)]
    steps.append(PlanStep("compute", relation.domain, compute_instruction(op, refs), tuple(range(len(stores)))))
    return tuple(steps)


def _analytics_steps(text: str) -> tuple[PlanStep, ...] | None:
    """One lookup per named store and a compute step over them, for a revenue question in a training phrasing;
    ``None`` for other text."""
    m = _ANALYTICS.match(text)
    if not m:
        reading = _read_analytics(text)
        return _revenue_steps(*reading) if reading is not None else None
    stores = [x.strip() for x in re.split(r",\s*|\s+and\s+", m.group("stores")) if x.strip()]
    return _revenue_steps("sum" if m.group("what") == "combined" else "max", stores, m.group("month"))


def _chain_steps(relations: tuple[str, ...], subject: str) -> list[PlanStep]:
    """Chained lookups: the first asks about ``subject``, each next one about the previous step's answer."""
    return [
        PlanStep("lookup", RELATIONS[rel].domain, question((rel,), subject if k == 0 else f"{{{k}}}"), (k - 1,) if k else ())
        for k, rel in enumerate(relations)
    ]


def _support_patterns() -> list[tuple[re.Pattern[str], tuple[str, ...]]]:
    out = []
    for start, texts in SUPPORT_TEXTS.items():
        for template in texts:
            pattern = "^" + re.escape(template).replace(re.escape("{x}"), r"(?P<x>.+?)") + "$"
            out.append((re.compile(pattern), _SUPPORT_CHAINS[start]))
    return out


_SUPPORT_CHAINS: dict[str, tuple[str, ...]] = {
    "order": ("shipment", "carrier", "refund_window"), "shipment": ("carrier", "refund_window"), "carrier": ("refund_window",),
}  # fmt: skip
_SUPPORT_PATTERNS: list[tuple[re.Pattern[str], tuple[str, ...]]] = []


# -- the training phrasings (edo_gym.world.phrasing), read from its training parts only ------------------------------
#: A name as the world writes them: capitalised words (``Mara Quell``, ``ORD-VARBEL-37``, ``Northway Post``).
_NAME = re.compile(r"[A-Z0-9][\w-]*(?: [A-Z0-9][\w-]*)*")
#: Deepest noun phrase read (hops); deeper phrases are of no form the reader knows.
_MAX_DEPTH = 32


def _slot_regex(template: str, slots: dict[str, str]) -> re.Pattern[str]:
    """``template`` as an anchored regex: each ``{slot}`` named in ``slots`` becomes a group matching its pattern."""
    out = []
    for piece in re.split(r"(\{\w+\})", template):
        name = piece[1:-1]
        out.append(f"(?P<{name}>{slots[name]})" if piece[:1] == "{" and name in slots else re.escape(piece))
    return re.compile("^" + "".join(out) + "$")


def _alternatives(texts: list[str]) -> str:
    return "(?:" + "|".join(re.escape(t) for t in texts) + ")"


@lru_cache(maxsize=1)
def _readers() -> dict[str, list]:
    """The regexes of the training parts, built once."""
    any_text = {"q": ".+", "x": ".+", "m": ".+", "np": ".+", "s": ".+", "names": ".+"}
    stores = []
    for part in phrasing.training(phrasing.STORE_LISTS):
        plural, singular = part.template.split("|")
        stores += [(_slot_regex(plural, any_text), True), (_slot_regex(singular, any_text), False)]
    return {
        "frames": [_slot_regex(p.template, any_text) for p in phrasing.training(phrasing.FRAMES)],
        "synonyms": [
            (rel, _slot_regex(p.template, any_text))
            for rel, parts in phrasing.SYNONYMS.items()
            for p in phrasing.training(parts)
        ],
        "contexts": [p.template + " " for p in phrasing.training(phrasing.CONTEXTS)],
        "envelopes": [_slot_regex(p.template, any_text) for p in phrasing.training(phrasing.ENVELOPES)],
        "support_contexts": [p.template + " " for p in phrasing.training(phrasing.SUPPORT_CONTEXTS)],
        "orders": [
            _slot_regex(
                p.template, {"c": ".+", "r": _alternatives([q.template for q in phrasing.training(phrasing.QUESTIONS)])}
            )
            for p in phrasing.training(phrasing.ORDERS)
        ],
        "complaints": [
            re.compile("^(?P<ref>.+) " + _alternatives([c.template for c in phrasing.training(phrasing.COMPLAINTS)]) + "$")
        ],
        "references": [
            (kind, _slot_regex(p.template[:1].upper() + p.template[1:], any_text))
            for kind, parts in phrasing.REFERENCES.items()
            for p in phrasing.training(parts)
        ],
        "analytics_frames": [
            _slot_regex(p.template, {"np": ".+", "month": _alternatives(list(MONTHS))})
            for p in phrasing.training(phrasing.ANALYTICS_FRAMES)
        ],
        "operations": [
            (op, _slot_regex(p.template, any_text))
            for op, parts in phrasing.OPERATIONS.items()
            for p in phrasing.training(parts)
        ],
        "stores": stores,
    }


def _bodies(text: str, contexts: list[str]) -> list[str]:
    """``text``, and ``text`` without a training context sentence in front."""
    return [text] + [text[len(c) :] for c in contexts if text.startswith(c)]


def _read_phrase(phrase: str, depth: int = 0) -> list[tuple[tuple[str, ...], str]]:
    """Every reading ``(relations, subject)`` of a noun phrase in training synonyms whose hops chain (each relation
    reads the kind of value the previous one gives), innermost relation first; ``((), name)`` for a bare name."""
    out: list[tuple[tuple[str, ...], str]] = [((), phrase)] if _NAME.fullmatch(phrase) else []
    if depth >= _MAX_DEPTH:
        return out
    for rel, pattern in _readers()["synonyms"]:
        m = pattern.match(phrase)
        if m is None:
            continue
        for relations, subject in _read_phrase(m.group("x"), depth + 1):
            if not relations or RELATIONS[relations[-1]].value_kind == RELATIONS[rel].subject_kind:
                out.append(((*relations, rel), subject))
    return out


def _one(readings: set) -> Any:
    """The one reading, or ``None`` where there is none or the text reads several ways."""
    return next(iter(readings)) if len(readings) == 1 else None


def _read_multihop(text: str) -> tuple[tuple[str, ...], str] | None:
    """``(relations, subject)`` of a question in a training frame over training synonyms, or ``None``."""
    readers = _readers()
    readings = set()
    for body in _bodies(text, readers["contexts"]):
        for frame in readers["frames"]:
            m = frame.match(body)
            if m is not None:
                readings.update(r for r in _read_phrase(m.group("q")) if r[0])
    return _one(readings)


def _read_support(text: str) -> tuple[tuple[str, ...], str] | None:
    """``(relations, subject)`` of a customer's refund question in training parts: the lookups from what the message
    names (an order, a shipment or a carrier) to the refund window; ``None`` for other text."""
    readers = _readers()
    readings = set()
    for envelope in readers["envelopes"]:
        m = envelope.match(text)
        if m is None:
            continue
        for body in _bodies(m.group("m"), readers["support_contexts"]):
            for order in readers["orders"]:
                clause = order.match(body)
                if clause is None:
                    continue
                for complaint in readers["complaints"]:
                    ref = complaint.match(clause.group("c"))
                    if ref is None:
                        continue
                    for kind, pattern in readers["references"]:
                        x = pattern.match(ref.group("ref"))
                        if x is not None and _NAME.fullmatch(x.group("x")):
                            readings.add((_SUPPORT_CHAINS[kind], x.group("x")))
    return _one(readings)


def _read_analytics(text: str) -> tuple[str, list[str], str] | None:
    """``(op, stores, month)`` of a revenue question in training parts, or ``None``."""
    readers = _readers()
    readings = set()
    for body in _bodies(text, readers["contexts"]):
        for frame in readers["analytics_frames"]:
            m = frame.match(body)
            if m is None:
                continue
            for op, pattern in readers["operations"]:
                np_ = pattern.match(m.group("np"))
                if np_ is None:
                    continue
                for stores, plural in readers["stores"]:
                    s = stores.match(np_.group("s"))
                    if s is None:
                        continue
                    names = tuple(re.split(r", | and ", s.group("names")))
                    if (len(names) > 1) == plural and all(_NAME.fullmatch(n) for n in names):
                        readings.add((op, names, m.group("month")))
    reading = _one(readings)
    return (reading[0], list(reading[1]), reading[2]) if reading is not None else None


def rule_plan(task_text: str) -> Plan | None:
    """The plan a rule-based planner writes from the task's text alone (``PlannerConfig.mode == "rules"``), or ``None``
    when the text is of no form it knows.

    It knows the canonical texts of the three task families and the *training* phrasings of
    :mod:`edo_gym.world.phrasing` (built from its training parts only; a text with a held-out part, as the test split
    has, is of no form it knows): a question about "the <relation> of ... of <subject>" (in any training frame and
    synonyms) becomes one lookup per relation, innermost first, each reading the previous answer; a customer's refund
    question about an order, a shipment or a carrier becomes the lookups from what the message names to the refund
    window, then the written reply; a revenue question becomes one lookup per store and the sum or maximum. A subject
    must read as a name (capitalised words), and a text that reads two ways has no plan. No model is called and
    nothing hidden is read: these are the plans a team writes when its tasks come from known templates (and the plans
    a small model cannot write; see the ``EDO-Small-v0`` tier).
    """
    text = task_text.strip()
    steps = _analytics_steps(text)
    if steps is not None:
        return Plan(steps, None, "rules")
    chain = _read_multihop(text)
    if chain is not None:
        return Plan(tuple(_chain_steps(*chain)), None, "rules")
    if not _SUPPORT_PATTERNS:
        _SUPPORT_PATTERNS.extend(_support_patterns())
    reading = next(((relations, m.group("x")) for pattern, relations in _SUPPORT_PATTERNS if (m := pattern.match(text))), None)
    if reading is None:
        reading = _read_support(text)
    if reading is None:
        return None
    chain_steps = _chain_steps(*reading)
    n = len(chain_steps)
    reply = PlanStep("write", RELATIONS["refund_window"].domain, reply_instruction(f"{{{n}}}"), (n - 1,))
    return Plan((*chain_steps, reply), None, "rules")


def fallback_plan(task_text: str) -> Plan:
    """The plan used when the planner gives no valid plan twice: the shape the task's text asks for, read from the
    text alone (as a rule-based planner would; nothing hidden).

    - revenue of named stores "in thousands" (canonical, or in a training phrasing of :mod:`edo_gym.world.phrasing`):
      one lookup per store, then a compute step (the sum for "combined", the maximum for "highest single-store")
      over them;
    - a customer's message (a refund question): a lookup with the message, then a one-sentence reply from it;
    - any other question (a text that ends with a question mark, or a question in a training frame of
      :mod:`edo_gym.world.phrasing` such as ``"Tell me {q}."``): one lookup that asks it (a question stays a lookup);
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
    # a training frame need not end with "?" ("Tell me ...", "I need to know ..."): read as the rules planner reads it
    parsed = parse_question(text) or _read_multihop(text)
    if text.endswith("?") or parsed is not None:
        domain = RELATIONS[parsed[0][-1]].domain if parsed is not None else DOMAINS[0]
        return Plan((PlanStep("lookup", domain, instruction, ()),), None, "fallback")
    return Plan((PlanStep("write", DOMAINS[0], instruction, ()),), None, "fallback")
