"""Procedural task families over one world.

A :class:`Task` has a text, a gold decomposition (ordered :class:`Subtask` list whose dependencies form a
chain or a small DAG), a gold answer and a horizon (``hops``). Three families:

- ``support``: order -> tracking number -> carrier -> refund policy, then a written reply;
- ``multihop``: a chain of ``hops`` relation lookups over people, companies and cities;
- ``analytics``: collect ``hops`` revenue records, then compute their sum or maximum.

Each relation and family has one canonical text template here; ``TaskConfig.phrasing_rate`` rewrites a share of the
texts from varied parts, with held-out compositions for the test split (:mod:`edo_gym.world.phrasing`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edo_gym.config import TaskConfig
from edo_gym.world.generator import CHAIN_RELATIONS, FINAL_RELATIONS, MEMBERSHIP_TIER, RELATIONS, TIER_WINDOW_RELATIONS, World
from edo_gym.world.phrasing import Composition, rephrase
from edo_gym.world.text import normalize

_PHRASES = {
    "mentor": "the mentor of {x}",
    "employer": "the employer of {x}",
    "birth_city": "the birth city of {x}",
    "founder": "the founder of {x}",
    "headquarters": "the headquarters city of {x}",
    "founded_year": "the founding year of {x}",
    "mayor": "the mayor of {x}",
    "country": "the country of {x}",
    "shipment": "the tracking number of order {x}",
    "carrier": "the carrier of shipment {x}",
    "refund_window": "the refund window of {x}",
    MEMBERSHIP_TIER: "the membership tier of the customer of shipment {x}",
    **{relation: f"the {tier}-member refund window of {{x}}" for tier, relation in TIER_WINDOW_RELATIONS.items()},
}
_SUPPORT_TEXTS = (
    "Customer message: 'My order {x} arrived late. How long do I have to ask for a refund?' Write the reply.",
    "Ticket: the parcel for order {x} is delayed and the customer wants to know the refund deadline. Draft a reply.",
    "A customer writes about order {x}: 'Still waiting. Can I get my money back, and until when?' Answer them.",
)
_SUPPORT_TEXTS_SHIPMENT = ("Customer message: 'Shipment {x} is late. How long can I claim a refund?' Write the reply.",)
_SUPPORT_TEXTS_CARRIER = ("Customer message: 'My parcel with {x} is late. What is the refund deadline?' Write the reply.",)
#: The support texts by what the customer's message names (an order, a shipment or a carrier).
SUPPORT_TEXTS: dict[str, tuple[str, ...]] = {
    "order": _SUPPORT_TEXTS,
    "shipment": _SUPPORT_TEXTS_SHIPMENT,
    "carrier": _SUPPORT_TEXTS_CARRIER,
}
REPLY_TEMPLATE = "You can request a refund within {v}."
#: Distinguishes the extra-step draws' seeds from any other use of ``TaskConfig.seed`` ("xtra" in ASCII).
_EXTRA_STEP_STREAM = 0x78747261


def phrase(relation: str, inner: str) -> str:
    """English noun phrase for ``relation`` applied to ``inner`` (used in task texts and merged subtasks)."""
    if relation.startswith("revenue_"):
        return f"the {relation.removeprefix('revenue_').capitalize()} revenue of the {inner} store"
    return _PHRASES[relation].format(x=inner)


def apply_op(op: str, inputs: list[str]) -> str | None:
    """Result text of a compute/write op on input answer texts, or ``None`` when an input cannot be parsed.

    This is the one implementation used both to make gold answers and by the simulated workers.
    """
    if op == "refund_reply":
        if len(inputs) != 1 or not normalize(inputs[0]).endswith(" days"):
            return None
        return REPLY_TEMPLATE.format(v=normalize(inputs[0]))
    numbers = []
    for text in inputs:
        norm = normalize(text)
        if not norm.isdigit():
            return None
        numbers.append(int(norm))
    if not numbers:
        return None
    if op == "sum":
        return str(sum(numbers))
    if op == "max":
        return str(max(numbers))
    raise ValueError(f"unknown op {op!r}")


@dataclass(frozen=True)
class Subtask:
    """One gold step. ``deps`` index earlier subtasks whose answers are this step's inputs."""

    kind: str  # lookup | compute | write
    domain: str
    relation: str | None
    op: str | None
    deps: tuple[int, ...]
    literal: str | None  # subject of a first-hop lookup, taken from the task text
    answer: str


@dataclass(frozen=True)
class Task:
    task_id: int
    family: str
    text: str
    subtasks: tuple[Subtask, ...]
    answer: str
    hops: int


class TaskPool:
    """A seeded pool of ``config.n_tasks`` tasks with a fixed train/test split."""

    def __init__(self, world: World, config: TaskConfig) -> None:
        self.world = world
        self.config = config
        if config.extra_step_rate > 0 and not world.tiered_carriers:
            raise ValueError(
                "TaskConfig.extra_step_rate > 0 needs a world with tiered refund policies (WorldConfig.tiered_refunds)"
            )
        rng = np.random.default_rng(config.seed)
        self.tasks: list[Task] = []
        for i in range(config.n_tasks):
            family = config.families[i % len(config.families)]
            hops = int(rng.integers(config.min_hops, config.max_hops + 1))
            make = {"support": self._support, "multihop": self._multihop, "analytics": self._analytics}[family]
            self.tasks.append(make(i, hops, rng))
        order = rng.permutation(config.n_tasks)
        n_test = max(1, int(round(config.test_fraction * config.n_tasks)))
        self.test_ids = np.sort(order[:n_test])
        self.train_ids = np.sort(order[n_test:])
        # texts last, from generators of their own: the structure and the split above do not depend on the phrasing
        #: Per task, the parts its text is composed of (:mod:`edo_gym.world.phrasing`), ``None`` for a canonical text.
        self.compositions: list[Composition | None]
        self.tasks, self.compositions = rephrase(self.tasks, self.test_ids, config)
        self.ids = {"train": self.train_ids, "test": self.test_ids, "all": np.arange(config.n_tasks)}[config.split]

    def _lookup(self, relation: str, subject: str, deps: tuple[int, ...], literal: str | None) -> Subtask:
        return Subtask(
            "lookup", RELATIONS[relation].domain, relation, None, deps, literal, self.world.facts[(subject, relation)]
        )

    def _chain(self, relations: list[str], start: str) -> list[Subtask]:
        out = []
        subject = start
        for h, rel in enumerate(relations):
            out.append(self._lookup(rel, subject, (h - 1,) if h else (), None if h else start))
            subject = out[-1].answer
        return out

    def _support(self, task_id: int, hops: int, rng: np.random.Generator) -> Task:
        n = drawn_n = min(hops, 3)
        order = self.world.entities["order"][int(rng.integers(len(self.world.entities["order"])))]
        extra, own = False, None
        if self.world.tiered_carriers:  # in a world with tiered policies, whether the order ships with such a carrier
            own = np.random.default_rng((self.config.seed, _EXTRA_STEP_STREAM, task_id))
            extra, order = self._tier_draw(order, own)
            if extra:
                n = max(n, 2)  # the customer's tier is found from the shipment: a carrier alone names no customer
        relations = ["shipment", "carrier", "refund_window"][3 - n :]
        start = order
        kind = ("carrier", "shipment", "order")[n - 1]
        if n == 2:
            start = self.world.facts[(order, "shipment")]
        elif n == 1:
            start = self.world.facts[(self.world.facts[(order, "shipment")], "carrier")]
        # the text's draw from the pool's generator, as without tiers (the structure of every other task stays as it is)
        index = int(rng.integers(len(SUPPORT_TEXTS[("carrier", "shipment", "order")[drawn_n - 1]])))
        texts = SUPPORT_TEXTS[kind]
        if n != drawn_n:
            assert own is not None
            index = int(own.integers(len(texts)))
        text = texts[index].format(x=start)
        if extra:  # the policy lookup that answers with the tier rule, then the two steps it reveals
            subtasks, reply = self._tiered_support(start, n)
            return Task(task_id, "support", text, subtasks, reply, n + 2)
        chain = self._chain(relations, start)
        reply = apply_op("refund_reply", [chain[-1].answer])
        assert reply is not None
        chain.append(Subtask("write", "policies", None, "refund_reply", (len(chain) - 1,), None, reply))
        return Task(task_id, "support", text, tuple(chain), reply, n)

    def _tier_draw(self, order: str, rng: np.random.Generator) -> tuple[bool, str]:
        """``(extra, order)``: whether a support task needs the extra step (probability ``TaskConfig.extra_step_rate``,
        :mod:`edo_gym.world.extra_step`), and an order that fits that draw: ``order`` (the one the pool drew) when its
        carrier's policy is tiered exactly when ``extra`` is, else one drawn from ``rng`` (the task's own) among those
        that fit."""
        extra = bool(rng.random() < self.config.extra_step_rate)
        facts, tiered = self.world.facts, self.world.tiered_carriers

        def fits(o: str) -> bool:
            return (facts[(facts[(o, "shipment")], "carrier")] in tiered) == extra

        if fits(order):
            return extra, order
        options = [o for o in self.world.entities["order"] if fits(o)]
        if not options:
            kind = "a tiered" if extra else "an untiered"
            raise ValueError(f"no order of this world ships with {kind} refund policy; use more orders (WorldConfig.n_orders)")
        return extra, options[int(rng.integers(len(options)))]

    def _tiered_support(self, start: str, n: int) -> tuple[tuple[Subtask, ...], str]:
        """The gold steps and reply of a support task with the extra step, from ``start`` (an order when ``n == 3``, a
        shipment when ``n == 2``): the lookups to the carrier, the membership tier of the shipment's customer, the
        carrier's window for that tier (reading both), then the reply."""
        chain = self._chain(["shipment", "carrier"][3 - n :], start)
        carrier, carrier_step = chain[-1].answer, len(chain) - 1
        if n == 3:  # the shipment is the first lookup's answer
            chain.append(self._lookup(MEMBERSHIP_TIER, chain[0].answer, (0,), None))
        else:
            chain.append(self._lookup(MEMBERSHIP_TIER, start, (), start))
        relation = TIER_WINDOW_RELATIONS[chain[-1].answer]
        chain.append(self._lookup(relation, carrier, (carrier_step, len(chain) - 1), None))
        reply = apply_op("refund_reply", [chain[-1].answer])
        assert reply is not None
        chain.append(Subtask("write", "policies", None, "refund_reply", (len(chain) - 1,), None, reply))
        return tuple(chain), reply

    def _multihop(self, task_id: int, hops: int, rng: np.random.Generator) -> Task:
        kind = str(rng.choice(["person", "company", "city"], p=[0.6, 0.2, 0.2]))
        pool = self.world.entities[kind]
        start = pool[int(rng.integers(len(pool)))]
        relations = []
        subject, subject_kind = start, kind
        for h in range(hops):
            options = FINAL_RELATIONS[subject_kind] if h == hops - 1 else CHAIN_RELATIONS[subject_kind]
            rel = str(rng.choice(options))
            relations.append(rel)
            subject = self.world.facts[(subject, rel)]
            subject_kind = RELATIONS[rel].value_kind
        chain = self._chain(relations, start)
        text_phrase = start
        for rel in relations:
            text_phrase = phrase(rel, text_phrase)
        text = f"What is {text_phrase}?"
        return Task(task_id, "multihop", text, tuple(chain), chain[-1].answer, hops)

    def _analytics(self, task_id: int, hops: int, rng: np.random.Generator) -> Task:
        stores = self.world.entities["store"]
        k = min(hops, len(stores))
        chosen = [stores[i] for i in rng.choice(len(stores), size=k, replace=False)]
        month = self.world.months[int(rng.integers(len(self.world.months)))]
        relation = f"revenue_{month.lower()}"
        subtasks = [self._lookup(relation, s, (), s) for s in chosen]
        op = str(rng.choice(["sum", "max"]))
        answer = apply_op(op, [s.answer for s in subtasks])
        assert answer is not None
        subtasks.append(Subtask("compute", "sales", None, op, tuple(range(k)), None, answer))
        names = ", ".join(chosen[:-1]) + (" and " if k > 1 else "") + chosen[-1]
        what = "combined" if op == "sum" else "highest single-store"
        text = f"What was the {what} revenue of the {names} store{'s' if k > 1 else ''} in {month}, in thousands?"
        return Task(task_id, "analytics", text, tuple(subtasks), answer, k)
