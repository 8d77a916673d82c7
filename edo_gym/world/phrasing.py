"""Task texts composed from parts: the *language* deviation of the task distribution.

Without it (``TaskConfig.phrasing_rate == 0``, the default) every relation and family has one canonical template
(:mod:`edo_gym.world.tasks`). With it, a share ``phrasing_rate`` of the pool's tasks has its text composed from
parts instead, each part a small template:

- ``multihop``: a question *frame* (``"Tell me {q}."``) around a noun phrase built hop by hop from one *synonym* per
  relation (``"the mentor of {x}"``, ``"{x}'s mentor"``, ``"the person who mentored {x}"``), innermost hop first;
- ``support``: an *envelope* around the customer's message (``"A customer writes: '{m}' Draft a reply."``), and in
  the message a *reference* to what it names (an order, a shipment or a carrier, directly or indirectly: ``"my last
  order, {x},"``), a *complaint*, a refund *question* and the *clause order* of those two;
- ``analytics``: a *frame* that also places the month (``"In {month}, what was {np}? Answer in thousands."``), an
  *operation* phrase (``"the total revenue of {s}"``) and a *store list* (``"the stores {names}"``);
- any family: an optional *context* sentence first (``"I'm preparing a report."``), irrelevant to the answer, naming
  no entity and no number.

A task's :class:`Composition` names its parts; its :attr:`~Composition.key` (family, frame, other core parts) is what
the split below is about. The canonical texts are compositions too where they decompose (the first frame, synonym,
operation and store list of each table); the canonical support texts stay whole templates of their own.

**Split.** Every part is a training part or a held-out one (:attr:`Part.held_out`), fixed here:

- training tasks (``TaskPool.train_ids``) compose only training parts;
- held-out tasks (``TaskPool.test_ids``) draw each part from all of them, and at least one *core* part (a frame or
  envelope, a synonym, a reference, complaint, question or clause order, an operation or a store list) is held out;
  so no held-out task's core composition is one a training task can have;
- rule-based components of the package (:func:`edo_gym.agents.planner.rule_plan`) are written from the training
  parts only (:func:`training`): a text with a held-out part is of no form they know.

Held out: per relation two synonyms, three of the seven multihop frames, per start kind two references, two
complaints, two questions, the question-first clause order, two of the five envelopes, per operation two phrases,
two store lists, two of the five analytics frames, and some context sentences.

Every text stays unambiguous for a human: the subject entity (or the stores and month) is named, and the chain of
relations reads off the noun phrase. A possessive (``"{x}'s mentor"``) is used only on a name or another possessive
(``"Mara Quell's mentor's employer"``), and a phrase that ends with its slot (``"the employer of {x}"``) never wraps a
possessive: ``"the employer of Mara Quell's mentor"`` could be read two ways.

**Determinism.** Whether a task is rephrased and how is drawn from a generator of its own, seeded from
``(TaskConfig.seed, task_id)``, never from the pool's structure generator: the tasks' structure, gold answers and split
are the same at any rate, and at rate 0 the pool is exactly the canonical one. Grading never reads the phrasing (the
gold answer is a function of the structure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from edo_gym.world.generator import MONTHS, RELATIONS

if TYPE_CHECKING:  # (tasks.py imports this module)
    from edo_gym.config import TaskConfig
    from edo_gym.world.tasks import Task

#: Distinguishes the phrasing generators' seeds from any other use of ``TaskConfig.seed`` ("phra" in ASCII).
_STREAM = 0x70687261


@dataclass(frozen=True)
class Part:
    """One interchangeable piece of a task text.

    :param name: unique within its table (a :class:`Composition` names its parts by these).
    :param template: the text, with slots such as ``{x}`` (an entity or inner phrase), ``{q}``, ``{m}``, ``{np}``.
    :param held_out: a held-out part: only test-split tasks use it, and no rule-based component knows it.
    """

    name: str
    template: str
    held_out: bool = False

    @property
    def form(self) -> str:
        """``poss`` (``"{x}'s mentor"``), ``end`` (the slot ends the phrase) or ``mid`` (the slot is inside it)."""
        if self.template.startswith("{x}'s "):
            return "poss"
        return "end" if self.template.endswith("{x}") else "mid"

    def may_wrap(self, inner_form: str | None) -> bool:
        """Whether this synonym may wrap an inner phrase of form ``inner_form`` (``None``: the bare subject) and stay
        unambiguous: a possessive only on a name or another possessive, and no phrase that ends with its slot around
        a possessive (``"the employer of Mara Quell's mentor"`` reads two ways)."""
        if self.form == "poss":
            return inner_form in (None, "poss")
        return not (self.form == "end" and inner_form == "poss")


def _parts(train: Sequence[tuple[str, str]], held: Sequence[tuple[str, str]]) -> tuple[Part, ...]:
    return tuple(Part(n, t) for n, t in train) + tuple(Part(n, t, True) for n, t in held)


# -- multihop --------------------------------------------------------------------------------------------------------
#: Question frames around the noun phrase ``{q}``; the first is the canonical one.
FRAMES: tuple[Part, ...] = _parts(
    [("what_is", "What is {q}?"), ("tell_me", "Tell me {q}."), ("need_to_know", "I need to know {q}."),
     ("identify", "Please identify {q}.")],
    [("could_you_find", "Could you find {q}?"), ("name_please", "Name {q}, please."),
     ("happen_to_know", "Do you happen to know {q}?")],
)  # fmt: skip

#: Noun-phrase synonyms per relation, ``{x}`` the inner phrase; the first is the canonical one (``tasks.phrase``).
SYNONYMS: dict[str, tuple[Part, ...]] = {
    "mentor": _parts(
        [("mentor.of", "the mentor of {x}"), ("mentor.poss", "{x}'s mentor"), ("mentor.who", "the person who mentored {x}")],
        [("mentor.by", "the person {x} was mentored by"), ("mentor.served", "the one who served as mentor to {x}")],
    ),
    "employer": _parts(
        [("employer.of", "the employer of {x}"), ("employer.poss", "{x}'s employer"),
         ("employer.works_for", "the company {x} works for")],
        [("employer.employs", "the company that employs {x}"), ("employer.payroll", "the firm that has {x} on its payroll")],
    ),
    "birth_city": _parts(
        [("birth_city.of", "the birth city of {x}"), ("birth_city.poss", "{x}'s birth city"),
         ("birth_city.where", "the city where {x} was born")],
        [("birth_city.birthplace", "the birthplace of {x}"), ("birth_city.born_in", "the city {x} was born in")],
    ),
    "founder": _parts(
        [("founder.of", "the founder of {x}"), ("founder.poss", "{x}'s founder"), ("founder.who", "the person who founded {x}")],
        [("founder.started", "the person who started {x}"), ("founder.by", "the one {x} was founded by")],
    ),
    "headquarters": _parts(
        [("headquarters.of", "the headquarters city of {x}"), ("headquarters.poss", "{x}'s headquarters city"),
         ("headquarters.where", "the city where {x} is headquartered")],
        [("headquarters.hosts", "the city that hosts the head office of {x}"),
         ("headquarters.run_from", "the city {x} is run from")],
    ),
    "founded_year": _parts(
        [("founded_year.of", "the founding year of {x}"), ("founded_year.poss", "{x}'s founding year"),
         ("founded_year.year", "the year {x} was founded")],
        [("founded_year.established", "the year in which {x} was established"),
         ("founded_year.came", "the year {x} came into being")],
    ),
    "mayor": _parts(
        [("mayor.of", "the mayor of {x}"), ("mayor.poss", "{x}'s mayor"), ("mayor.who", "the person who is mayor of {x}")],
        [("mayor.office", "the person holding the office of mayor in {x}"), ("mayor.elected", "the official elected mayor of {x}")],
    ),
    "country": _parts(
        [("country.of", "the country of {x}"), ("country.poss", "{x}'s country"), ("country.lies", "the country where {x} lies")],
        [("country.belongs", "the country that {x} belongs to"), ("country.located", "the nation in which {x} is located")],
    ),
}  # fmt: skip

#: Context sentences put before a multihop or analytics question (irrelevant to the answer).
CONTEXTS: tuple[Part, ...] = _parts(
    [("report", "I'm preparing a report."), ("briefing", "This is for a briefing."),
     ("colleague", "A colleague asked me about this.")],
    [("note", "I want to double-check a note."), ("meeting", "It came up in a meeting earlier."),
     ("quiz", "This is for a quiz I'm writing.")],
)  # fmt: skip

# -- support ---------------------------------------------------------------------------------------------------------
#: How the customer's message ``{m}`` is handed over, and the instruction before or after it.
ENVELOPES: tuple[Part, ...] = _parts(
    [("message", "Customer message: '{m}' Write the reply."), ("writes", "A customer writes: '{m}' Draft a reply."),
     ("reply_to", "Reply to this customer: '{m}'")],
    [("ticket", "New ticket from a customer: '{m}' Respond to it."),
     ("wrote", "'{m}' That is what a customer wrote; answer them.")],
)  # fmt: skip

#: What the message names, by the kind of entity ``{x}`` (the task's first lookup starts from it).
REFERENCES: dict[str, tuple[Part, ...]] = {
    "order": _parts(
        [("order.my", "my order {x}"), ("order.last", "my last order, {x},"), ("order.placed", "the order I placed, {x},")],
        [("order.parcel_for", "the parcel for my order {x}"), ("order.bought", "everything I bought in order {x}")],
    ),
    "shipment": _parts(
        [("shipment.bare", "shipment {x}"), ("shipment.tracking", "my parcel with tracking number {x}"),
         ("shipment.tracked", "the package tracked as {x}")],
        [("shipment.code", "the delivery with tracking code {x}"), ("shipment.box", "the box tracked under {x}")],
    ),
    "carrier": _parts(
        [("carrier.with", "my parcel with {x}"), ("carrier.sent", "my parcel sent with {x}"),
         ("carrier.from", "my delivery from {x}")],
        [("carrier.carrying", "the package {x} was carrying for me"), ("carrier.delivery", "my {x} delivery")],
    ),
}  # fmt: skip

#: What went wrong, said after the reference.
COMPLAINTS: tuple[Part, ...] = _parts(
    [("late", "arrived late."), ("delayed", "is delayed."), ("not_arrived", "still has not arrived.")],
    [("behind", "is running behind schedule."), ("promised", "came much later than promised.")],
)
#: The refund question (always the refund deadline).
QUESTIONS: tuple[Part, ...] = _parts(
    [("how_long", "How long do I have to ask for a refund?"), ("deadline", "What is the refund deadline?"),
     ("until_when", "Until when can I claim a refund?")],
    [("money_back", "How much time do I have to get my money back?"), ("by_when", "By when must I request a refund?")],
)  # fmt: skip
#: Clause order in the message: the complaint ``{c}`` and the question ``{r}``.
ORDERS: tuple[Part, ...] = _parts([("complaint_first", "{c} {r}")], [("question_first", "{r} {c}")])
#: Context sentences put first in a customer's message (no apostrophe: the message is in single quotes).
SUPPORT_CONTEXTS: tuple[Part, ...] = _parts(
    [("gift", "It was meant to be a gift."), ("trip", "I needed it for a trip.")],
    [("never", "This has never happened to me before."), ("loyal", "I have been a customer for a long time.")],
)

# -- analytics -------------------------------------------------------------------------------------------------------
#: Frames around the operation phrase ``{np}`` that also place the ``{month}``; the first is the canonical one.
ANALYTICS_FRAMES: tuple[Part, ...] = _parts(
    [("what_was", "What was {np} in {month}, in thousands?"), ("tell_me", "Tell me {np} in {month}, in thousands."),
     ("month_first", "In {month}, what was {np}? Answer in thousands.")],
    [("work_out", "Could you work out {np} for {month}, in thousands?"),
     ("for_month", "For the month of {month}, I need {np} (in thousands).")],
)  # fmt: skip
#: Operation phrases over the store list ``{s}``, by compute op; the first of each is the canonical one.
OPERATIONS: dict[str, tuple[Part, ...]] = {
    "sum": _parts(
        [("sum.combined", "the combined revenue of {s}"), ("sum.total", "the total revenue of {s}")],
        [("sum.added", "the revenue of {s} added together"), ("sum.sum_of", "the sum of the revenues of {s}")],
    ),
    "max": _parts(
        [("max.highest", "the highest single-store revenue of {s}"), ("max.largest", "the largest revenue of any one of {s}")],
        [("max.best", "the best revenue figure among {s}"), ("max.top", "the top revenue reached by a single one of {s}")],
    ),
}
#: Store lists: ``{names}`` is ``"Alder, Birch and Cedar"``; the plural template for several stores, the singular one
#: (after ``|``) for one. The first is the canonical one.
STORE_LISTS: tuple[Part, ...] = _parts(
    [("suffix", "the {names} stores|the {names} store"), ("prefix", "the stores {names}|the store {names}")],
    [("branches", "the {names} branches|the {names} branch"), ("named", "the shops named {names}|the shop named {names}")],
)


def training(parts: Sequence[Part]) -> tuple[Part, ...]:
    """The training parts of a table (what a rule-based component may be written from)."""
    return tuple(p for p in parts if not p.held_out)


def core_table(family: str, slot: int, key: str | None = None) -> tuple[Part, ...]:
    """The table core part ``slot`` of a ``family`` text is drawn from: slot 0 is the frame or envelope; the others
    are a multihop hop's synonyms (``key``: its relation), a support text's reference (``key``: the kind of entity it
    names), complaint, question and clause order, or an analytics text's operation (``key``: the compute op) and store
    list."""
    if family == "multihop":
        return FRAMES if slot == 0 else SYNONYMS[key or ""]
    if family == "support":
        return (ENVELOPES, REFERENCES.get(key or "", ()), COMPLAINTS, QUESTIONS, ORDERS)[slot]
    return (ANALYTICS_FRAMES, OPERATIONS.get(key or "", ()), STORE_LISTS)[slot]


def _part(table: Sequence[Part], name: str) -> Part:
    for p in table:
        if p.name == name:
            return p
    raise KeyError(f"no part {name!r}; known: {[p.name for p in table]}")


@dataclass(frozen=True)
class Composition:
    """The parts one task text is composed of (names of :class:`Part`).

    :param family: the task's family.
    :param frame: the question frame (multihop, analytics) or envelope (support).
    :param parts: the other core parts: one synonym per hop, innermost first (multihop); reference, complaint, question,
        clause order (support); operation, store list (analytics).
    :param context: an extra context sentence, or ``None``.
    :param held_out: whether it holds a held-out part (drawn for a test-split task).
    """

    family: str
    frame: str
    parts: tuple[str, ...]
    context: str | None
    held_out: bool

    @property
    def key(self) -> tuple[str, str, tuple[str, ...]]:
        """The core composition (family, frame, other core parts): what the train/test split keeps apart."""
        return self.family, self.frame, self.parts


@dataclass(frozen=True)
class _Shape:
    """What a text must say, read off a task's gold structure."""

    family: str
    relations: tuple[str, ...]  # multihop, support: the lookups' relations, innermost first
    subject: str  # multihop, support: the entity the first lookup starts from
    kind: str  # support: the kind of that entity (order, shipment, carrier); analytics: the compute op
    stores: tuple[str, ...]  # analytics
    month: str  # analytics


def _shape(task: Task) -> _Shape:
    lookups = [s for s in task.subtasks if s.kind == "lookup"]
    relations = tuple(str(s.relation) for s in lookups)
    if task.family == "analytics":
        op = next(str(s.op) for s in task.subtasks if s.kind == "compute")
        month = next(m for m in MONTHS if f"revenue_{m.lower()}" == relations[0])
        return _Shape("analytics", relations, "", op, tuple(str(s.literal) for s in lookups), month)
    subject = str(lookups[0].literal)
    kind = RELATIONS[relations[0]].subject_kind if task.family == "support" else ""
    return _Shape(task.family, relations, subject, kind, (), "")


def _allowed_synonyms(relation: str, inner_form: str | None, held_out: bool) -> list[Part]:
    """Synonyms of ``relation`` that may wrap a phrase of form ``inner_form`` (all, or the training ones only)."""
    parts = SYNONYMS[relation] if held_out else training(SYNONYMS[relation])
    return [p for p in parts if p.may_wrap(inner_form)]


def _pick(parts: Sequence[Part], rng: np.random.Generator) -> Part:
    return parts[int(rng.integers(len(parts)))]


def draw(task: Task, rng: np.random.Generator, held_out: bool) -> Composition:
    """A composition for ``task``: of training parts only, or (``held_out``) one with at least one held-out core part.

    :param rng: the task's phrasing generator (never the pool's structure generator).
    """
    shape = _shape(task)
    family = shape.family

    def pool(table: Sequence[Part]) -> tuple[Part, ...]:
        return tuple(table) if held_out else training(table)

    frame = _pick(pool(core_table(family, 0)), rng)
    if family == "multihop":
        synonyms: list[Part] = []
        for rel in shape.relations:
            synonyms.append(_pick(_allowed_synonyms(rel, synonyms[-1].form if synonyms else None, held_out), rng))
        if held_out and not frame.held_out and not any(p.held_out for p in synonyms):
            # no held-out part was drawn: hold out the frame or one hop whose neighbours admit a held-out synonym
            options: list[tuple[int, list[Part]]] = [(-1, [p for p in FRAMES if p.held_out])]
            for h, rel in enumerate(shape.relations):
                inner = synonyms[h - 1].form if h else None
                fits = [
                    p
                    for p in SYNONYMS[rel]
                    if p.held_out and p.may_wrap(inner) and (h + 1 == len(synonyms) or synonyms[h + 1].may_wrap(p.form))
                ]
                if fits:
                    options.append((h, fits))
            h, fits = options[int(rng.integers(len(options)))]
            if h < 0:
                frame = _pick(fits, rng)
            else:
                synonyms[h] = _pick(fits, rng)
        parts = [p.name for p in synonyms]
        contexts = CONTEXTS
    else:
        key = shape.kind
        tables = [core_table(family, slot, key) for slot in range(1, 5 if family == "support" else 3)]
        chosen = [_pick(pool(t), rng) for t in tables]
        if held_out and not frame.held_out and not any(p.held_out for p in chosen):
            slot = int(rng.integers(len(tables) + 1))
            if slot == 0:
                frame = _pick([p for p in core_table(family, 0) if p.held_out], rng)
            else:
                chosen[slot - 1] = _pick([p for p in tables[slot - 1] if p.held_out], rng)
        parts = [p.name for p in chosen]
        contexts = SUPPORT_CONTEXTS if family == "support" else CONTEXTS
    context = _pick(pool(contexts), rng).name if rng.random() < 0.5 else None
    return Composition(family, frame.name, tuple(parts), context, held_out)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def names_list(names: Sequence[str]) -> str:
    """``"Alder"``, ``"Alder and Birch"``, ``"Alder, Birch and Cedar"``."""
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def noun_phrase(relations: Sequence[str], subject: str, synonyms: Sequence[str]) -> str:
    """The noun phrase for ``relations`` (innermost first) applied to ``subject``, one named synonym per hop."""
    inner = subject
    for rel, name in zip(relations, synonyms, strict=True):
        inner = _part(SYNONYMS[rel], name).template.replace("{x}", inner)
    return inner


def render(task: Task, composition: Composition) -> str:
    """The text of ``task`` composed as ``composition`` says (a pure function of the two)."""
    shape = _shape(task)
    family = composition.family
    if family != shape.family:
        raise ValueError(f"a {family} composition cannot render a {shape.family} task")
    frame = _part(core_table(family, 0), composition.frame).template
    if family == "multihop":
        core = frame.replace("{q}", noun_phrase(shape.relations, shape.subject, composition.parts))
    elif family == "support":
        ref, complaint, question, order = (
            _part(core_table(family, slot + 1, shape.kind), name).template for slot, name in enumerate(composition.parts)
        )
        clause = _cap(ref.replace("{x}", shape.subject)) + " " + complaint
        message = order.replace("{c}", clause).replace("{r}", question)
        if composition.context is not None:
            message = _part(SUPPORT_CONTEXTS, composition.context).template + " " + message
        return frame.replace("{m}", message)
    else:
        op, stores = (
            _part(core_table(family, slot + 1, shape.kind), name).template for slot, name in enumerate(composition.parts)
        )
        plural, singular = stores.split("|")
        s = (plural if len(shape.stores) > 1 else singular).replace("{names}", names_list(shape.stores))
        core = frame.replace("{np}", op.replace("{s}", s)).replace("{month}", shape.month)
    if composition.context is not None:
        return _part(CONTEXTS, composition.context).template + " " + core
    return core


def rephrase(
    tasks: Sequence[Task], test_ids: Sequence[int], config: TaskConfig
) -> tuple[list[Task], list[Composition | None]]:
    """The pool's tasks with a share ``config.phrasing_rate`` rephrased, and each task's composition (``None``: the
    canonical text kept).

    Each task draws from its own generator, seeded from ``(config.seed, task_id)``: whether it is rephrased does not
    depend on the other tasks, and a higher rate rephrases a superset of the tasks a lower one does.
    """
    rate = config.phrasing_rate
    if rate <= 0.0:
        return list(tasks), [None] * len(tasks)
    held = {int(i) for i in test_ids}
    out: list[Task] = []
    compositions: list[Composition | None] = []
    for task in tasks:
        rng = np.random.default_rng((config.seed, _STREAM, task.task_id))
        if rng.random() >= rate:
            out.append(task)
            compositions.append(None)
            continue
        composition = draw(task, rng, task.task_id in held)
        out.append(replace(task, text=render(task, composition)))
        compositions.append(composition)
    return out, compositions
