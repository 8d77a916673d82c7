"""Ground truth and grading: what a plan *should* produce, and whether an answer is right.

Nothing here reaches the policy. The environment uses it for the reward (the final answer against the task's
gold answer) and for :meth:`~edo_gym.envs.edo_env.EDOEnv.hidden_state` (per-step truth for the oracle and tests):
a plan is executed on the true facts, step by step, following its dependencies, by parsing each step's
instruction with the world's own language (:mod:`edo_gym.world.language`).

**Grading is on the key value.** Every answer is reduced to the key values it states, of the kind the question asks
for (:data:`VALUE_KINDS`), and is right only when it states exactly one such value and that value is the gold one:

- ``duration`` (a refund window, and so every support reply): numbers with a unit (``"30 days"``, ``"4 weeks"``,
  ``"thirty days"``) in days; a bare number counts as days when the text states no unit at all;
- ``amount`` (revenue, asked "in thousands"): ``"978"``, ``"978 thousand"``, ``"978k"``, ``"$978k"``,
  ``"$978,000"``, ``"0.978 million"`` all read 978 thousand; a bare number is in thousands, as the task asks;
- ``year``: a four-digit year;
- entities (people, companies, cities, countries, carriers, orders, shipments, stores, membership tiers): the known
  entity names (and their aliases, e.g. ``"Quell, Mara"``) the text mentions as whole words, titles and punctuation
  around them forgiven (``"Dr. Mara Quell"``), less the names the question itself mentions. A near-miss name
  (``"Mara Quill"``) names no entity.

A gold answer that states a rule instead of a value (a tiered carrier's refund window is "the period set by the
customer's membership tier", :mod:`edo_gym.world.extra_step`) is met by an answer that states no value either and
says the same (token F1 at least :data:`RULE_F1`).

So a reply in the gold reply's template with another window is wrong, and a correct fact in a real model's
phrasing (``"You have 90 days to request a refund."``) is right: phrasing is forgiven, the fact is not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from edo_gym.world.generator import RELATIONS, World
from edo_gym.world.language import fill, parse_compute, parse_question, parse_reply
from edo_gym.world.tasks import Task, apply_op
from edo_gym.world.text import normalize, token_f1, tokens

#: Kinds of key value an answer can be graded on (a relation's ``value_kind``, ``amount`` for computed revenue,
#: ``duration`` for a support reply).
VALUE_KINDS: tuple[str, ...] = (
    "person", "company", "city", "country", "carrier", "order", "shipment", "store", "year", "duration", "amount", "tier",
)  # fmt: skip

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17,
    "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90, "hundred": 100,
}  # fmt: skip
_WORD_NUMBER = (
    r"(?:(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[\s-](?:one|two|three|four|five|six|seven|eight|nine))?|"
    + "|".join(sorted((w for w in _NUMBER_WORDS if w not in ("hundred",)), key=len, reverse=True))
    + ")"
)
# a number not glued to a word or an identifier ("ORD-VARBEL-37" holds no number)
_DIGITS = r"(?<![\w.-])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w-]|\.\d)"
_NUMBER_LEFT = r"(?<![\w.-])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"  # the same, whatever follows
_DURATION = re.compile(rf"(?:{_NUMBER_LEFT}|\b({_WORD_NUMBER})\b)\s*-?\s*(days?|weeks?|months?)\b", re.IGNORECASE)
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30}
_BARE_NUMBER = re.compile(_DIGITS)
_AMOUNT = re.compile(
    rf"(\$|\busd\s*)?{_NUMBER_LEFT}\s*(thousand|k|million|mn|m|billion|bn)?(?![\w-])(\s*dollars)?", re.IGNORECASE
)
_SCALE_THOUSANDS = {"thousand": 1.0, "k": 1.0, "million": 1000.0, "mn": 1000.0, "m": 1000.0, "billion": 1e6, "bn": 1e6}
_YEAR = re.compile(r"(?<![\w.-])(1\d{3}|20\d{2})(?![\w-]|\.\d)")
#: Token F1 with a gold answer that states a rule instead of a value (a tiered refund policy) from which an answer that
#: states no value is right.
RULE_F1 = 0.5
#: Most words an entity name (or alias) has; longer spans are not looked up.
_MAX_NAME_WORDS = 6


def _number(whole: str, frac: str | None) -> float:
    return float(whole.replace(",", "") + ("." + frac if frac else ""))


def _word_number(text: str) -> int:
    parts = re.split(r"[\s-]+", text.lower())
    return sum(_NUMBER_WORDS[p] for p in parts)


def durations(text: str) -> frozenset[float]:
    """The durations ``text`` states, in days (``"4 weeks"`` -> 28); a bare number counts when no unit is written."""
    found = set()
    for m in _DURATION.finditer(text):
        value = _number(m.group(1), m.group(2)) if m.group(1) else float(_word_number(m.group(3)))
        found.add(value * _UNIT_DAYS[m.group(4).lower().rstrip("s")])
    if not found:
        found = {_number(m.group(1), m.group(2)) for m in _BARE_NUMBER.finditer(text)}
    return frozenset(found)


def amounts(text: str) -> frozenset[float]:
    """The money amounts ``text`` states, in thousands (a bare number is in thousands, as the tasks ask)."""
    found = set()
    for m in _AMOUNT.finditer(text):
        dollar, scale, dollars_word = m.group(1), m.group(4), m.group(5)
        value = _number(m.group(2), m.group(3))
        if scale:
            value *= _SCALE_THOUSANDS[scale.lower()]
        elif dollar or dollars_word:
            value /= 1000.0  # "$978,000" / "978000 dollars": plain dollars
        found.add(round(value, 6))
    return frozenset(found)


def years(text: str) -> frozenset[float]:
    """The four-digit years ``text`` states."""
    return frozenset(float(m.group(1)) for m in _YEAR.finditer(text))


#: The reader of each numeric value kind (its values in days, thousands or years).
_NUMERIC_READERS = {"duration": durations, "amount": amounts, "year": years}


class EntityIndex:
    """Finds the known entity names a text mentions as whole words (aliases map to their canonical name).

    :param names: canonical names, each with its kind (``{name: kind}``).
    :param aliases: other surface forms, ``{canonical name: (alias, ...)}``.
    """

    def __init__(self, names: dict[str, str], aliases: dict[str, tuple[str, ...]]) -> None:
        self.kind_of = dict(names)
        self._spans: dict[tuple[str, ...], str] = {}
        for name in names:
            self._spans.setdefault(tuple(tokens(name)), name)
        for name, forms in aliases.items():
            for form in forms:
                self._spans.setdefault(tuple(tokens(form)), name)
        self._spans.pop((), None)
        self._longest = min(_MAX_NAME_WORDS, max((len(s) for s in self._spans), default=1))

    def mentions(self, text: str) -> frozenset[str]:
        """Canonical names mentioned in ``text``, longest match first, left to right."""
        words = tokens(text)
        found: set[str] = set()
        i = 0
        while i < len(words):
            for n in range(min(self._longest, len(words) - i), 0, -1):
                name = self._spans.get(tuple(words[i : i + n]))
                if name is not None:
                    found.add(name)
                    i += n
                    break
            else:
                i += 1
        return frozenset(found)


_INDEXES: dict[int, tuple[World, EntityIndex]] = {}


def entity_index(world: World) -> EntityIndex:
    """The :class:`EntityIndex` of ``world``'s entities and aliases (one per world object)."""
    entry = _INDEXES.get(id(world))
    if entry is None or entry[0] is not world:
        if len(_INDEXES) >= 8:
            _INDEXES.clear()
        entry = _INDEXES[id(world)] = (world, EntityIndex(world.kind_of, world.aliases))
    return entry[1]


def key_values(world: World, kind: str, text: str, context: str = "") -> frozenset:
    """The key values of ``kind`` that ``text`` states (see the module docstring): for entities, the names of that
    kind it mentions (a city asked for: "the birthplace of Elsa Novak is Morven" states Morven), less the names
    mentioned in ``context`` (the question) unless ``text`` names nothing else."""
    if kind in _NUMERIC_READERS:
        return _NUMERIC_READERS[kind](text)
    if kind not in VALUE_KINDS:
        raise ValueError(f"unknown value kind {kind!r}; allowed: {list(VALUE_KINDS)}")
    index = entity_index(world)
    named = index.mentions(text)
    if len(named) > 1:
        kind_of = index.kind_of
        named = frozenset(name for name in named if kind_of.get(name) == kind)
    asked = index.mentions(context) if context else frozenset()
    rest = named - asked
    return rest if rest else named


def _gold_key(kind: str, gold: str) -> float | str | None:
    """The one key value of a gold answer (a canonical entity name is itself)."""
    if kind not in _NUMERIC_READERS:
        return gold
    values = _NUMERIC_READERS[kind](gold)
    return next(iter(values)) if len(values) == 1 else None


def grade(world: World, kind: str, answer: str, gold: str, context: str = "") -> bool:
    """Whether ``answer`` states exactly one key value of ``kind`` and it is ``gold``'s.

    :param kind: one of :data:`VALUE_KINDS`.
    :param context: the question asked (its entity names are not taken for the answer).
    """
    if not gold or not normalize(answer):
        return False
    target = _gold_key(kind, gold)
    if target is None:
        reader = _NUMERIC_READERS.get(kind)
        if reader is not None and not reader(gold):
            # a gold answer that states a rule instead of a value (a refund window "set by the customer's membership
            # tier"): right when the answer states no value either and says what the gold says
            return not reader(answer) and token_f1(answer, gold) >= RULE_F1
        return False
    values = key_values(world, kind, answer, context)
    if kind not in _NUMERIC_READERS and gold not in world.kind_of:  # not a known entity: compare the texts
        aliases = world.aliases.get(gold, ())
        return normalize(answer) in {normalize(gold), *(normalize(a) for a in aliases)}
    return values == {target}


def task_value_kind(task: Task) -> str:
    """The kind of key value ``task``'s answer is graded on."""
    if task.family == "support":
        return "duration"
    if task.family == "analytics":
        return "amount"
    last = task.subtasks[-1]
    assert last.relation is not None
    return RELATIONS[last.relation].value_kind


def grade_final(world: World, task: Task, answer: str) -> bool:
    """Whether ``answer`` is a right final answer to ``task`` (the env's reward and ``hidden_state`` use this).

    The names not taken for the answer are those of the task text and of the last step's inputs: a multi-hop answer
    may name the entity the last hop asks about ("The mentor of Elsa Novak is Dario Quell." answers "What is the
    mentor of the mentor of Priya Brandt?" with Dario Quell), as a step's answer may name its question's subject.
    """
    last = task.subtasks[-1] if task.subtasks else None
    inputs = [task.subtasks[d].answer for d in last.deps] if last is not None and last.kind == "lookup" else []
    return grade(world, task_value_kind(task), answer, task.answer, " ".join([task.text, *inputs]))


@dataclass(frozen=True)
class StepTruth:
    """Hidden truth of one plan step.

    :param kind: ``lookup``, ``merged`` (a two-hop question), ``compute``, ``write`` or ``unknown`` (unparseable).
    :param domain: the document domain the step's facts live in (``""`` when unknown).
    :param relations: relations a lookup asks for.
    :param expected: the answer the step gives when every step before it is right (``""`` when undefined).
    :param value_kind: the kind of key value its answer is graded on (``""`` when unknown).
    :param question: the step's instruction with right inputs filled in (its entity names are not an answer).
    """

    kind: str
    domain: str
    relations: tuple[str, ...]
    expected: str
    value_kind: str = ""
    question: str = ""


def execute_plan(world: World, instructions: Sequence[str], deps: Sequence[Sequence[int]]) -> list[StepTruth]:
    """Execute a plan on the true facts. ``instructions`` are templates with 1-based ``{k}`` placeholders."""
    n = len(instructions)
    out: dict[int, StepTruth] = {}

    def run(i: int, depth: int = 0) -> StepTruth:
        if i in out:
            return out[i]
        if depth > n:
            return StepTruth("unknown", "", (), "")
        values = {d + 1: run(d, depth + 1).expected for d in deps[i] if 0 <= d < n and d != i}
        text = fill(instructions[i], values)
        truth = _step_truth(world, text, [values[d + 1] for d in deps[i] if d + 1 in values])
        out[i] = truth
        return truth

    return [run(i) for i in range(n)]


def _step_truth(world: World, text: str, inputs: list[str]) -> StepTruth:
    q = parse_question(text)
    if q is not None:
        relations, subject = q
        value: str = subject
        for rel in relations:
            value = world.facts.get((value, rel), "")
            if not value:
                break
        kind = "lookup" if len(relations) == 1 else "merged"
        return StepTruth(kind, RELATIONS[relations[0]].domain, relations, value, RELATIONS[relations[-1]].value_kind, text)
    c = parse_compute(text)
    if c is not None:
        op, _ = c
        expected = (apply_op(op, inputs) or "") if inputs and all(inputs) else ""
        return StepTruth("compute", "sales", (), expected, "amount", "")
    r = parse_reply(text)
    if r is not None:
        return StepTruth("write", "policies", (), (apply_op("refund_reply", [r]) or "") if r else "", "duration", "")
    return StepTruth("unknown", "", (), "")


def is_correct(world: World, truth: StepTruth, answer: str) -> bool:
    """Whether ``answer`` is right for a plan step whose hidden truth is ``truth`` (key-value grading)."""
    if not truth.expected or not truth.value_kind:
        return False
    return grade(world, truth.value_kind, answer, truth.expected, truth.question)
