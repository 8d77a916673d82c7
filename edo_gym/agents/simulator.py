"""``SimulatedBackend``: seeded, calibrated stand-ins for the planner, worker and verifier models.

It answers :class:`~edo_gym.agents.protocol.LLMRequest`\\ s from their *text*, as a model would:

- a **worker** parses the instruction with the world's language (:mod:`edo_gym.world.language`). For a lookup it
  reads the request's documents: each document's text is parsed for the fact it states, candidates about the
  asked relation are compared with the asked subject (an exact name, a near-duplicate name, or another entity),
  and the worker takes a value from the text it read. Confusion depends on the document's rank, on
  near-duplicates ranked above the right document, and on the worker's hidden reading skill for that domain.
  Without a usable document it answers from its *parametric memory* (a partial, noisy copy of the facts fixed
  when the world is generated, :meth:`~edo_gym.world.generator.World.parametric_memory`), else abstains or makes
  up a plausible value. Compute and write steps parse their inputs as written upstream. The world's fact table is
  never consulted at answer time;
- a **verifier** re-derives the answer the same way from its own evidence (its own retrieval, its own memory)
  and compares: ``CORRECT``, ``INCORRECT``, or ``UNSURE`` when it found nothing to check against;
- the **planner** writes a JSON plan (:data:`~edo_gym.agents.planner.PLAN_FORMAT`) of the task, with one error
  with probability ``PlannerConfig.error_rate`` (drop, merge, reorder, mislabel, wrong relation, wrong entity,
  wrong operator), sometimes malformed JSON, and a stated confidence that is informative but not separating.

All randomness comes from ``request.seed`` (drawn by the env from its own RNG), so a request always gets the
same reply, in any process. Confidence is reported as if from token log-probabilities.
"""

from __future__ import annotations

import _random
import math
import operator
import random
import zlib
from bisect import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np

from edo_gym.agents.planner import PLAN_INSTRUCTION, REPLAN_INSTRUCTION, PlanError, parse_plan, plan_to_json
from edo_gym.agents.protocol import LLMRequest, LLMResponse
from edo_gym.config import DOMAINS, PLANNER_ERRORS, SUBTASK_TYPES, PlannerConfig, WorkerSpec
from edo_gym.world.extra_step import has_extra_step, known_chain, reveals, scripted_subtasks, states_tier_rule
from edo_gym.world.generator import CHAIN_RELATIONS, FINAL_RELATIONS, RELATIONS, TIER_WINDOW_RELATIONS, World
from edo_gym.world.grading import durations
from edo_gym.world.language import (
    compute_instruction,
    parse_compute,
    parse_document,
    parse_question,
    parse_reply,
    question,
    reply_instruction,
    tier_window_question,
)
from edo_gym.world.tasks import REPLY_TEMPLATE, Task, apply_op
from edo_gym.world.text import ABSTAIN_TEXT, DRIFTS, answers_match, drift, first_number, normalize, similarity

#: Name similarity above which a document about another name is a confusable near-duplicate.
NEAR_DUPLICATE = 0.75
#: Mean stated confidence by where an answer came from (noise sd ``CONFIDENCE_SD``).
CONFIDENCE_BY_SOURCE = {"document": 0.72, "memory": 0.6, "computed": 0.7, "guess": 0.5, "abstain": 0.15}
CONFIDENCE_SD = 0.16
#: The most steps a plan under critique may have (longer: not a plan of any task here).
MAX_PLAN_STEPS = 64
#: Gold plans memoised per simulator (cleared when full).
GOLD_MEMO_SIZE = 4096


_TWO_PI = 2.0 * math.pi


class FastRNG(random.Random):
    """The subset of ``numpy.random.Generator`` the simulator uses, on Python's Mersenne Twister.

    Seeding a numpy ``Generator`` costs about 6 us, a third of a simulated call; this costs about half of that, and its
    draws are cheaper. Methods: ``random()``, ``integers(low, high=None)`` (high excluded), ``normal(mean, sd)``,
    ``choice(a, p=None)`` (``a`` an int n for ``range(n)``, or a sequence).
    """

    def __init__(self, seed: Any = None) -> None:
        if type(seed) is int:
            # what random.Random(seed) does for an int (Random.seed: the C seeding, then no cached gauss), without the
            # Python-level type dispatch of Random.seed: the same state, so the same draws (tested)
            _random.Random.seed(self, seed)
            self.gauss_next = None
        else:
            super().__init__(seed)

    def integers(self, low: int, high: int | None = None) -> int:
        # random.Random.randrange(low[, high]) with step 1, written out: the same getrandbits draws (k bits, redrawn
        # while >= n), so the same values (tested against randrange)
        start, stop = (0, operator.index(low)) if high is None else (operator.index(low), operator.index(high))
        n = stop - start
        if n <= 0:
            return self.randrange(low) if high is None else self.randrange(low, high)  # its error for an empty range
        k = n.bit_length()
        r = self.getrandbits(k)
        while r >= n:
            r = self.getrandbits(k)
        return start + r

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> float:
        # random.Random.gauss(mean, sd) written out: the same Box-Muller pair from two
        # random() draws, the second value kept in gauss_next for the next call (tested against gauss)
        z = self.gauss_next
        self.gauss_next = None
        if z is None:
            x2pi = self.random() * _TWO_PI
            g2rad = math.sqrt(-2.0 * math.log(1.0 - self.random()))
            z = math.cos(x2pi) * g2rad
            self.gauss_next = math.sin(x2pi) * g2rad
        return mean + z * sd

    def choice(self, a: Any, p: Sequence[float] | None = None) -> Any:  # type: ignore[override]
        seq = range(a) if isinstance(a, int) else a
        if p is not None:
            # random.choices(seq, weights=p)[0] on plain floats (numpy scalars made it several times slower): the same
            # cumulative sums, the same single random() draw and bisection; anything it would reject goes to it
            cum = list(accumulate(p.tolist() if isinstance(p, np.ndarray) else p))
            n = len(seq)
            total = cum[-1] + 0.0 if cum else 0.0
            if len(cum) != n or not 0.0 < total < math.inf:
                return self.choices(seq, weights=p)[0]
            return seq[bisect(cum, self.random() * total, 0, n - 1)]
        return seq[self.integers(len(seq))]


#: A random source: a :class:`FastRNG` (the simulator's own) or a ``numpy.random.Generator`` (tests may pass one).
RNG = FastRNG | np.random.Generator


@dataclass(frozen=True)
class Reading:
    """A simulated model's answer and where it came from (``document``, ``memory``, ``computed``, ``guess``, ``abstain``)."""

    text: str
    source: str

    def __init__(self, text: str, source: str) -> None:
        # the generated frozen-dataclass __init__ without object.__setattr__ per field (one reading per simulated call)
        d = self.__dict__
        d["text"] = text
        d["source"] = source


class SimulatedBackend:
    """Seeded simulation of the team's models (see module docstring).

    :param world: the synthetic world (its language, entity names and the models' parametric memories).
    :param workers: the worker specs; a request's ``agent`` names one (hidden skills live here, as in a real model).
    :param planner: the planner's error model.
    :param tasks: the tasks the planner may be asked about (it understands them perfectly, then errs).
    """

    def __init__(self, world: World, workers: Sequence[WorkerSpec], planner: PlannerConfig, tasks: Sequence[Task]) -> None:
        self.world = world
        self.specs = {w.name: w for w in workers}
        self.planner = planner
        self.tasks_by_text = {t.text: t for t in tasks}
        weights = np.asarray(planner.error_weights, dtype=float)
        self._error_p = weights / weights.sum()
        self._memories = {
            w.name: world.parametric_memory(w.name, {d: w.memory_coverage for d in DOMAINS}, w.memory_accuracy)
            for w in workers
        }
        self.calls = 0
        #: Per task text of a task with an extra step (:mod:`edo_gym.world.extra_step`): the decomposition its text
        #: asks for, which the planner writes until a result it is given shows the step.
        self._scripts = {t.text: scripted_subtasks(t) for t in tasks if has_extra_step(t)}
        self._gold_memo: dict[int, tuple[Sequence, tuple[tuple[dict, ...], str]]] = {}
        # The matches memo is shared with the other backends of this process (the envs of a vector env): a pure
        # function of its key, and no draw depends on whether it hits, so they warm it up together.
        #: ``_matches`` by ``(relation, subject, documents)`` (see ``_read_fact``).
        self._matches: dict[tuple, tuple[tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]] = _MATCHES

    def use_team(self, workers: Sequence[WorkerSpec]) -> None:
        """Simulate these specs from now on (an episode's team draw, :mod:`edo_gym.deviations.team`): the same names
        as the team's, other skills and prices. Parametric memories stay those of the public profiles."""
        unknown = sorted({w.name for w in workers} - set(self._memories))
        if unknown:
            raise ValueError(f"use_team: no worker named {unknown}; the team is {sorted(self._memories)}")
        self.specs = {w.name: w for w in workers}

    # -- protocol -------------------------------------------------------------------------------------------------
    def cache_identity(self, request: LLMRequest) -> tuple[str, dict]:
        """``(model name, parameters)`` for a record/replay cache key: the simulated team's full configuration."""
        spec = self.specs.get(request.agent)
        return "edo-simulator", {"world": repr(self.world.config), "agent": repr(spec), "planner": repr(self.planner)}

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        rng = FastRNG(request.seed)
        if request.role == "planner":
            return self._plan(request, rng)
        spec = self.specs.get(request.agent)
        if spec is None:
            raise ValueError(f"SimulatedBackend has no model for agent {request.agent!r}; known: {sorted(self.specs)}")
        if spec.greedy:  # the same request, the same draws: seeded by its content, not by its sampling seed
            rng = FastRNG(_content_seed(request))
        if request.role == "worker":
            reading = self.read(spec, request.instruction, request.inputs, request.documents, rng)
            text, source = reading.text, reading.source
            if source != "abstain" and rng.random() < spec.format_drift:
                text = drift(text, DRIFTS[int(rng.integers(len(DRIFTS)))])
            # _confidence with FastRNG.normal inlined (gauss: the same draw)
            confidence = float(min(1.0, max(0.0, rng.gauss(CONFIDENCE_BY_SOURCE[source], CONFIDENCE_SD))))
            return LLMResponse(text, confidence=confidence)
        if request.role == "verifier":
            return LLMResponse(self._verify(spec, request, rng), confidence=None)
        if request.role == "plan_verifier":
            return LLMResponse(self._verify_plan(spec, request, rng), confidence=None)
        raise ValueError(f"SimulatedBackend does not simulate role {request.role!r}; use a real model for it")

    @staticmethod
    def _confidence(source: str, rng: RNG) -> float:
        return float(min(1.0, max(0.0, rng.normal(CONFIDENCE_BY_SOURCE[source], CONFIDENCE_SD))))

    # -- workers --------------------------------------------------------------------------------------------------
    def read(self, spec: WorkerSpec, instruction: str, inputs: Sequence[str], documents: Sequence[str], rng: RNG) -> Reading:
        """What worker ``spec`` answers to ``instruction`` given ``inputs`` and the ``documents`` it retrieved."""
        q = parse_question(instruction)
        if q is not None:
            relations, subject = q
            return self._lookup(spec, relations, subject, documents, rng)
        c = parse_compute(instruction)
        if c is not None:
            return self._compute(spec, c[0], list(inputs) if inputs else list(c[1]), rng)
        r = parse_reply(instruction)
        if r is not None:
            return self._write(spec, inputs[0] if inputs else r, rng)
        return self._nothing(spec, None, rng)

    def _nothing(self, spec: WorkerSpec, relation: str | None, rng: RNG) -> Reading:
        if relation is None or rng.random() < spec.abstain_rate:
            return Reading(ABSTAIN_TEXT, "abstain")
        return Reading(self.world.plausible_value(relation, rng), "guess")

    def _lookup(
        self, spec: WorkerSpec, relations: tuple[str, ...], subject: str, documents: Sequence[str], rng: RNG
    ) -> Reading:
        value, source = subject, "document"
        penalty = 0.0 if len(relations) == 1 else 0.1  # a two-hop question in one call is harder
        for hop, rel in enumerate(relations):
            got = self._read_fact(spec, rel, value, documents, rng, penalty)
            if got is None:
                return self._nothing(spec, relations[-1], rng)
            value, how = got
            if how != "document" or hop > 0:
                source = how if source == "document" else source
        return Reading(value, source)

    def _read_fact(
        self, spec: WorkerSpec, relation: str, subject: str, documents: Sequence[str], rng: RNG, penalty: float
    ) -> tuple[str, str] | None:
        """``(value, source)`` of ``relation`` for ``subject`` read off ``documents`` or remembered, or ``None``."""
        if not documents:
            exact, near = _NO_MATCHES
        elif type(documents) is tuple:  # a request's documents: the matches are memoised (no draw depends on them)
            key = (relation, subject, documents)
            matches = self._matches.get(key)
            if matches is None:
                if len(self._matches) >= MATCH_MEMO_SIZE:
                    self._matches.clear()
                matches = self._matches[key] = _matches(relation, subject, documents)
            exact, near = matches
        else:
            exact, near = _matches(relation, subject, documents)
        skill = spec.lookup_skill(RELATIONS[relation].domain) - penalty
        if exact:
            rank, value = exact[0]
            confusers = [v for r, v in near if r < rank]
            p = skill - 0.12 * len(confusers) - 0.03 * rank
            if rng.random() < p:
                return value, "document"
            if near:  # misread: took the near-duplicate's line
                return near[int(rng.integers(len(near)))][1], "document"
            return self.world.plausible_value(relation, rng, value), "guess"
        if near and rng.random() < 0.3 + 0.5 * (1.0 - skill):
            # a careless reader does not notice that the document is about a different (similar) name
            return near[0][1], "document"
        remembered = self._memories[spec.name].get((subject, relation))
        if remembered is not None:
            return remembered, "memory"
        return None

    def _compute(self, spec: WorkerSpec, op: str, inputs: Sequence[str], rng: RNG) -> Reading:
        numbers = [first_number(x) for x in inputs]
        if not numbers or any(n is None for n in numbers):
            if rng.random() < spec.abstain_rate:
                return Reading(ABSTAIN_TEXT, "abstain")
            return Reading(str(int(rng.integers(100, 5000))), "guess")
        right = apply_op(op, [str(n) for n in numbers])
        assert right is not None
        if rng.random() < spec.skills["compute"]:
            return Reading(right, "computed")
        slip = apply_op("max" if op == "sum" else "sum", [str(n) for n in numbers]) if rng.random() < 0.4 else None
        if slip is None or slip == right:
            slip = str(int(right) + int(rng.choice([-1, 1])) * int(rng.integers(1, 60)))
        return Reading(slip, "computed")

    def _write(self, spec: WorkerSpec, window: str, rng: RNG) -> Reading:
        said = durations(window)  # the window the input states, in days (not the first number of a sentence)
        days = int(next(iter(said))) if len(said) == 1 else None
        bare = days is not None and "day" not in window.lower()  # a number without a unit: days only to some readers
        if days is None or (bare and not (spec.bare_window_rate > 0.0 and rng.random() < spec.bare_window_rate)):
            if rng.random() < spec.abstain_rate:
                return Reading(ABSTAIN_TEXT, "abstain")
            return Reading("Please contact our support team about a refund.", "guess")
        if rng.random() < spec.skills["write"]:
            return Reading(REPLY_TEMPLATE.format(v=f"{days} days"), "computed")
        if rng.random() < 0.5:
            return Reading(f"Refunds for late deliveries are handled case by case, usually within {days} days.", "computed")
        return Reading(REPLY_TEMPLATE.format(v=f"{days + int(rng.integers(1, 30))} days"), "computed")

    # -- verifier -------------------------------------------------------------------------------------------------
    def _verify(self, spec: WorkerSpec, request: LLMRequest, rng: RNG) -> str:
        answer = request.answer
        if not normalize(answer) or normalize(answer) == normalize(ABSTAIN_TEXT):
            return "INCORRECT: there is no answer."
        if spec.verdict_rate < 1.0 and rng.random() >= spec.verdict_rate:  # no draw at the default: runs unchanged
            return "UNSURE: I cannot tell."
        reply_to = parse_reply(request.instruction)
        if reply_to is not None and states_tier_rule(request.inputs[0] if request.inputs else reply_to):
            # a reply to a window that is a rule, not a period: no reply can be right before the tier is known
            return "INCORRECT: the refund window depends on the customer's membership tier, which is not known here."
        own = self.read(spec, request.instruction, request.inputs, request.documents, rng)
        if own.source in ("abstain", "guess"):
            return "UNSURE: I cannot check this against anything I know."
        if reply_to is not None:  # a reply: does it state the window the verifier finds?
            said = durations(answer)
            agree = bool(said) and said == durations(own.text)
        else:
            linker = self.world.linker()
            a, b = linker.link(answer), linker.link(own.text)
            agree = answers_match(answer, own.text) or (a is not None and a == b)
            if not agree and first_number(answer) is not None and first_number(own.text) is not None:
                agree = first_number(answer) == first_number(own.text) and parse_compute(request.instruction) is not None
        return "CORRECT" if agree else f"INCORRECT: I find {own.text}"

    def _verify_plan(self, spec: WorkerSpec, request: LLMRequest, rng: RNG) -> str:
        """A critique of the plan in ``request.inputs[0]``: right (it is the task's gold plan, labels included) or not,
        said correctly with probability ``spec.plan_critique_skill``."""
        task = self.tasks_by_text.get(request.task)
        if task is None or not request.inputs:
            return "UNSURE: I do not understand the task."
        if spec.verdict_rate < 1.0 and rng.random() >= spec.verdict_rate:
            return "UNSURE: I cannot tell."
        gold = self._gold_plan(task.subtasks)
        try:
            written = parse_plan(request.inputs[0], MAX_PLAN_STEPS)
            right = written == parse_plan(gold[1], MAX_PLAN_STEPS)
            script = self._scripts.get(request.task)
            if script is not None and not right:  # read against the text, the plan it asks for is right too
                right = written == parse_plan(self._gold_plan(script)[1], MAX_PLAN_STEPS)
        except PlanError:
            right = False
        if rng.random() >= spec.plan_critique_skill:
            right = not right
        return "CORRECT" if right else "INCORRECT: the plan does not answer the task as written."

    # -- planner --------------------------------------------------------------------------------------------------
    def _plan(self, request: LLMRequest, rng: RNG) -> LLMResponse:
        task = self.tasks_by_text.get(request.task)
        cfg = self.planner
        if task is None:
            steps = [{"type": "write", "domain": DOMAINS[0], "instruction": request.task, "inputs": []}]
            return LLMResponse(plan_to_json(steps), confidence=0.3)
        script = self._scripts.get(request.task) if self._scripts else None
        if script is None:
            gold = self._gold_plan(task.subtasks)
        elif not reveals(request.inputs):
            # its text does not tell the step it needs: the plan the text asks for, until a result it is given shows it
            gold = self._gold_plan(script)
        else:  # the full plan, with the answers it was given to the lookups before the rule written in
            steps = _reuse(self._gold_plan(task.subtasks)[0], known_chain(task, request.inputs, self.world.linker().link))
            gold = (steps, self._plan_json(list(steps)))
        # corruptions replace list items with new dicts, never change a dict in place
        steps = list(gold[0])
        error = None
        if rng.random() < cfg.error_rate:
            error = str(PLANNER_ERRORS[int(rng.choice(len(PLANNER_ERRORS), p=self._error_p))])
            steps, error = self._corrupt(steps, error, rng)
        faithful = error in (None, "mislabel")
        mean = cfg.confidence_mean_faithful if faithful else cfg.confidence_mean_unfaithful
        confidence = float(min(1.0, max(0.0, rng.normal(mean, cfg.confidence_sd))))
        text = gold[1] if error is None else self._plan_json(steps)
        if request.instruction in _FIRST_ATTEMPTS and rng.random() < cfg.malformed_rate:
            text = "Here is the plan:\n" + text[: len(text) // 2]  # cut off mid-JSON
        return LLMResponse(text, confidence=confidence)

    def _gold_plan(self, subtasks: Sequence) -> tuple[tuple[dict, ...], str]:
        """The steps (as dicts) of the plan of ``subtasks`` and its JSON reply (memoised by the ``subtasks`` object: a
        task's gold steps and script never change; callers never change the dicts in place)."""
        memo = self._gold_memo.get(id(subtasks))
        if memo is not None and memo[0] is subtasks:
            return memo[1]
        gold_steps = tuple(_gold_step(s) for s in subtasks)
        gold = gold_steps, plan_to_json([_render(s) for s in gold_steps])
        if len(self._gold_memo) >= GOLD_MEMO_SIZE:
            self._gold_memo.clear()
        self._gold_memo[id(subtasks)] = (subtasks, gold)
        return gold

    def _plan_json(self, steps: list[dict]) -> str:
        """The planner reply that writes ``steps``."""
        return plan_to_json([_render(s) for s in steps])

    def _corrupt(self, steps: list[dict], error: str, rng: RNG) -> tuple[list[dict], str]:
        n = len(steps)
        lookups = [j for j in range(n) if steps[j]["kind"] == "lookup"]
        if error == "drop":
            candidates = [j for j in range(n - 1) if any(j in s["deps"] for s in steps)]
            if candidates:
                return _drop(steps, int(rng.choice(candidates))), error
        elif error == "merge":
            candidates = [
                j
                for j in range(n - 1)
                if j in lookups and j + 1 in lookups and steps[j + 1]["deps"] == (j,)
                and steps[j + 1]["relations"][0] not in _TIER_WINDOWS  # (a tier's window reads two inputs)
            ]  # fmt: skip
            if candidates:
                return _merge(steps, int(rng.choice(candidates))), error
        elif error == "reorder":
            candidates = [j for j in range(n - 1) if j in steps[j + 1]["deps"]]
            if candidates:
                return _swap(steps, int(rng.choice(candidates))), error
        elif error == "wrong_relation":
            candidates = [j for j in lookups if _alternatives(steps[j]["relations"][-1], bool(steps[j]["deps"]), j == n - 1)]
            if candidates:
                j = int(rng.choice(candidates))
                alts = _alternatives(steps[j]["relations"][-1], bool(steps[j]["deps"]), j == n - 1)
                new = str(rng.choice(alts))
                steps[j] = {
                    **steps[j],
                    "relations": (new,),
                    "domain": RELATIONS[new].domain,
                    "label_domain": RELATIONS[new].domain,
                }
                return steps, error
        elif error == "wrong_entity":
            candidates = [j for j in lookups if not steps[j]["deps"] and steps[j]["literal"] in self.world.kind_of]
            if candidates:
                j = int(rng.choice(candidates))
                pool = self.world.entities[self.world.kind_of[steps[j]["literal"]]]
                used = {s["literal"] for s in steps}  # (``literal`` is a name or None; pool entries are names)
                others = [e for e in pool if e != steps[j]["literal"] and e not in used]
                if others:
                    steps[j] = {**steps[j], "literal": others[int(rng.integers(len(others)))]}
                    return steps, error
        elif error == "wrong_op":
            candidates = [j for j in range(n) if steps[j]["kind"] == "compute"]
            if candidates:
                j = int(rng.choice(candidates))
                steps[j] = {**steps[j], "op": "max" if steps[j]["op"] == "sum" else "sum"}
                return steps, error
        # the drawn error does not apply to this plan: mislabel a step instead (the plan still works). Labels stay
        # plausible: a compute step is labelled with the sales domain, a write step with policies.
        j = int(rng.integers(n))
        s = steps[j]
        if s["label"] == "lookup" and rng.random() < 0.6:
            label, domain = "lookup", str(rng.choice([d for d in DOMAINS if d != s["label_domain"]]))
        else:
            label = str(rng.choice([t for t in SUBTASK_TYPES if t != s["label"]]))
            domain = {"compute": "sales", "write": "policies"}.get(label, s["domain"])
        steps[j] = {**s, "label": label, "label_domain": domain}
        return steps, "mislabel"


#: Instructions of a planner request's first attempt (a repair request is never cut off).
_FIRST_ATTEMPTS = (PLAN_INSTRUCTION, REPLAN_INSTRUCTION)
#: Tier-window relations (their step reads two inputs: the carrier and the tier).
_TIER_WINDOWS = frozenset(TIER_WINDOW_RELATIONS.values())
#: No exact and no near-duplicate match (``_matches`` of no documents).
_NO_MATCHES: tuple[tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]] = ((), ())
#: The process's matches memo, shared by every ``SimulatedBackend`` (see ``SimulatedBackend.__init__``).
_MATCHES: dict[tuple, tuple[tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]] = {}


def _content_seed(request: LLMRequest) -> int:
    """A seed from what a request asks (role, agent, instruction, inputs, documents, answer), not its sampling seed."""
    text = "\x1f".join((request.role, request.agent, request.instruction, *request.inputs, "\x1e", *request.documents,
                        "\x1e", request.answer))  # fmt: skip
    return zlib.crc32(text.encode())


#: Most ``(relation, subject, documents)`` keys ``SimulatedBackend`` memoises the matches of (then it starts afresh).
MATCH_MEMO_SIZE = 100_000


def _matches(
    relation: str, subject: str, documents: Sequence[str]
) -> tuple[tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]:
    """``(exact, near)``: ``(rank, value)`` of each document stating ``relation`` of ``subject`` (exact: the same
    normalised name; near: a near-duplicate name, similarity >= ``NEAR_DUPLICATE``), in rank order."""
    target = normalize(subject)
    exact: list[tuple[int, str]] = []
    near: list[tuple[int, str]] = []
    for rank, text in enumerate(documents):
        fact = parse_document(text)
        if fact is None or fact[1] != relation:
            continue
        name = normalize(fact[0])
        if name == target:
            exact.append((rank, fact[2]))
        elif similarity(name, target) >= NEAR_DUPLICATE:
            near.append((rank, fact[2]))
    return tuple(exact), tuple(near)


# -- plan construction helpers (gold steps as dicts, then rendered as the planner's JSON) ----------------------------
def _gold_step(s) -> dict:
    return {
        "kind": s.kind,
        "label": s.kind,
        "domain": s.domain,
        "label_domain": s.domain,
        "relations": (s.relation,) if s.relation else (),
        "op": s.op,
        "deps": tuple(s.deps),
        "literal": s.literal,
    }


def _render(s: dict) -> dict:
    refs = [f"{{{d + 1}}}" for d in s["deps"]]
    if s["kind"] == "lookup" and s["relations"][0] in _TIER_WINDOWS:
        # the carrier (a literal the planner reuses, or an input) and the tier (an input); without the tier's input, the
        # general policy question (the planner never writes the tier itself)
        carrier, tier = (s["literal"], refs[:1]) if s["literal"] is not None else (refs[0] if refs else "", refs[1:2])
        instruction = tier_window_question(carrier, tier[0]) if tier else question(("refund_window",), carrier)
    elif s["kind"] in ("lookup", "merged"):
        subject = refs[0] if s["deps"] else (s["literal"] or "")
        instruction = question(tuple(s["relations"]), subject)
    elif s["kind"] == "compute":
        instruction = compute_instruction(s["op"], refs)
    else:
        instruction = reply_instruction(refs[0] if refs else "")
    return {"type": s["label"], "domain": s["label_domain"], "instruction": instruction, "inputs": [d + 1 for d in s["deps"]]}


def _alternatives(relation: str, has_input: bool, last: bool) -> list[str]:
    """Relations a planner could confuse ``relation`` with: same subject kind (and, mid-chain, an entity value)."""
    rel = RELATIONS[relation]
    if rel.subject_kind == "store" or relation in ("shipment", "carrier", "refund_window"):
        return []
    pool = FINAL_RELATIONS if last else CHAIN_RELATIONS
    return [r for r in pool.get(rel.subject_kind, ()) if r != relation and (last or RELATIONS[r].value_kind == rel.value_kind)]


def _reuse(steps: Sequence[dict], known: dict[int, str]) -> tuple[dict, ...]:
    """``steps`` without the steps whose answers are ``known`` (by index): a step that read one of them has it as its
    literal subject instead."""
    index = {old: new for new, old in enumerate(i for i in range(len(steps)) if i not in known)}
    out = []
    for i, s in enumerate(steps):
        if i in known:
            continue
        literal, deps = s["literal"], []
        for d in s["deps"]:
            if d in known:
                literal = known[d]
            else:
                deps.append(index[d])
        out.append({**s, "deps": tuple(deps), "literal": literal})
    return tuple(out)


def _reindex(steps: list[dict], mapping: dict[int, tuple[int, ...]]) -> list[dict]:
    out = []
    for s in steps:
        deps: list[int] = []
        for d in s["deps"]:
            for nd in mapping[d]:
                if nd not in deps:
                    deps.append(nd)
        out.append({**s, "deps": tuple(deps)})
    return out


def _drop(steps: list[dict], j: int) -> list[dict]:
    dropped = steps[j]
    kept = [s for i, s in enumerate(steps) if i != j]
    new_index = {i: (i if i < j else i - 1,) for i in range(len(steps)) if i != j}
    new_index[j] = tuple(new_index[d][0] for d in dropped["deps"])
    out = _reindex(kept, new_index)
    if not dropped["deps"]:  # the dependents of a first hop now start from its literal
        out = [
            {**s, "literal": dropped["literal"]} if s["kind"] == "lookup" and not s["deps"] and s["literal"] is None else s
            for s in out
        ]
    return out


def _merge(steps: list[dict], j: int) -> list[dict]:
    a, b = steps[j], steps[j + 1]
    merged = {**a, "kind": "merged", "label": "lookup", "relations": tuple(a["relations"]) + tuple(b["relations"])}
    kept = steps[:j] + [merged] + steps[j + 2 :]
    return _reindex(kept, {i: (i if i <= j else i - 1,) for i in range(len(steps))})


def _swap(steps: list[dict], j: int) -> list[dict]:
    order = list(range(len(steps)))
    order[j], order[j + 1] = order[j + 1], order[j]
    new_pos = {old: new for new, old in enumerate(order)}
    return _reindex([steps[i] for i in order], {i: (new_pos[i],) for i in range(len(steps))})
