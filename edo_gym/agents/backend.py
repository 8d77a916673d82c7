"""The generation backend: the one place where an LLM would produce text.

Workers build a :class:`GenerationRequest` (prompt text plus the structured facts a simulator needs) and ask
a :class:`GenerationBackend` for an answer. The default :class:`SimulatedBackend` is a seeded, calibrated
reader: for a lookup it reads the answer from the documents the real retriever returned (right when the
gold document is among them, with the worker's skill), otherwise it falls back to "parametric memory", a
plausible wrong value, or an abstention. A real LLM backend implements the same two methods from
``request.prompt`` alone and ignores ``request.hidden``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from edo_gym.config import WorkerSpec
from edo_gym.world.generator import RELATIONS, World
from edo_gym.world.tasks import apply_op, phrase
from edo_gym.world.text import ABSTAIN_TEXT, RECOVERABLE_DRIFTS, UNRECOVERABLE_DRIFTS, drift, normalize

_ALL_DRIFTS = RECOVERABLE_DRIFTS + UNRECOVERABLE_DRIFTS


@dataclass
class GenerationRequest:
    """What a worker sends to its backend.

    :param prompt: the full prompt text (instructions, input, retrieved documents); what a real LLM reads.
    :param kind: ``lookup``, ``merged`` (a planner-merged two-hop lookup), ``compute`` or ``write``.
    :param inputs: the input answer texts, exactly as upstream workers gave them (``None`` = not available).
    :param subject: the parsed subject entity of a lookup, or ``None`` when the input could not be parsed.
    :param relations: relation names of a lookup (two for ``merged``).
    :param op: operation of a compute/write step.
    :param retrieved: corpus indices of the documents the retriever returned (empty without retrieval).
    """

    worker: WorkerSpec
    prompt: str
    kind: str
    inputs: list[str | None]
    subject: str | None = None
    relations: tuple[str, ...] = ()
    op: str | None = None
    retrieved: tuple[int, ...] = ()
    hidden: dict = field(default_factory=dict)


@dataclass
class GenerationResult:
    """A backend's answer. ``text`` is what downstream workers and the grader see."""

    text: str
    confidence: float
    completion_tokens: int = 0


@runtime_checkable
class GenerationBackend(Protocol):
    """Interface of a generation backend (simulated or a real LLM client)."""

    def generate(self, request: GenerationRequest, rng: np.random.Generator) -> GenerationResult: ...

    def verify(self, prompt: str, answer: str, hidden_correct: bool, rng: np.random.Generator) -> bool:
        """``True`` when the verifier flags ``answer`` as wrong or badly formatted."""
        ...


class SimulatedBackend:
    """Seeded, calibrated simulation of worker LLMs over the real retrieval results.

    :param world: the synthetic world (documents and facts).
    :param verify_recall: probability that the verifier flags a bad answer.
    :param verify_false_alarm: probability that it flags a good one.
    """

    def __init__(self, world: World, verify_recall: float = 0.85, verify_false_alarm: float = 0.05) -> None:
        self.world = world
        self.verify_recall = verify_recall
        self.verify_false_alarm = verify_false_alarm

    # -- helpers ---------------------------------------------------------------------------------------------
    def _plausible(self, relation: str, rng: np.random.Generator, avoid: str | None) -> str:
        """A wrong but well-formed value for ``relation``."""
        kind = RELATIONS[relation].value_kind
        return self.world._value_for(rng, kind, exclude=avoid)  # noqa: SLF001 - the world owns value sampling

    @staticmethod
    def _confidence(rng: np.random.Generator, correct: bool) -> float:
        mean, sd = (0.78, 0.12) if correct else (0.5, 0.18)
        return float(min(1.0, max(0.0, rng.normal(mean, sd))))

    def _emit(self, text: str, correct: bool, worker: WorkerSpec, rng: np.random.Generator) -> GenerationResult:
        if correct and rng.random() < worker.format_drift:
            text = drift(text, _ALL_DRIFTS[int(rng.integers(len(_ALL_DRIFTS)))])
        return GenerationResult(text, self._confidence(rng, correct))

    def _abstain(self, rng: np.random.Generator) -> GenerationResult:
        return GenerationResult(ABSTAIN_TEXT, float(min(1.0, max(0.0, rng.normal(0.1, 0.08)))))

    # -- interface -------------------------------------------------------------------------------------------
    def generate(self, request: GenerationRequest, rng: np.random.Generator) -> GenerationResult:
        w = request.worker
        if request.kind in ("lookup", "merged"):
            return self._lookup(request, rng)
        if any(x is None for x in request.inputs) or not request.inputs:
            # an upstream answer is missing (dependency not done): mostly abstain, sometimes make something up
            if rng.random() < 0.8:
                return self._abstain(rng)
            return GenerationResult(str(int(rng.integers(100, 5000))), self._confidence(rng, False))
        result = apply_op(request.op or "", [x for x in request.inputs if x is not None])
        skill = w.skills[request.kind]
        if result is not None and rng.random() < skill:
            return self._emit(result, True, w, rng)
        if result is None and rng.random() < w.abstain_rate:
            return self._abstain(rng)
        garbled = (
            f"Refund possible within {int(rng.integers(1, 90))} days."
            if request.op == "refund_reply"
            else str(int(rng.integers(100, 5000)))
        )
        return GenerationResult(garbled, self._confidence(rng, False))

    def _lookup(self, request: GenerationRequest, rng: np.random.Generator) -> GenerationResult:
        w = request.worker
        if request.inputs and request.inputs[0] is None:
            return (
                self._abstain(rng)
                if rng.random() < 0.8
                else GenerationResult(self._plausible(request.relations[0], rng, None), self._confidence(rng, False))
            )
        first = request.relations[0]
        subject = request.subject
        truth = self.world.facts.get((subject, first)) if subject is not None else None
        docs = [self.world.documents[i] for i in request.retrieved]
        gold_hit = truth is not None and any(
            d.subject == subject and d.relation == first and not d.is_distractor for d in docs
        )
        if request.kind == "merged":
            # The second hop must come from the model itself: only strong readers with the first fact manage it.
            second = request.relations[1]
            final = self.world.facts.get((truth, second)) if truth is not None else None
            p = (0.35 * w.skills["lookup"] if gold_hit else 0.5 * w.parametric_knowledge) if final is not None else 0.0
            if final is not None and rng.random() < p:
                return self._emit(final, True, w, rng)
            return GenerationResult(self._plausible(second, rng, final), self._confidence(rng, False))
        if gold_hit:
            if rng.random() < w.skills["lookup"]:
                return self._emit(truth, True, w, rng)
            same = [d for d in docs if d.relation == first and d.value != truth]
            wrong = same[0].value if same else self._plausible(first, rng, truth)
            return GenerationResult(wrong, self._confidence(rng, False))
        # no gold document: parametric memory, a near-duplicate's value, or an abstention
        if truth is not None and rng.random() < w.parametric_knowledge:
            return self._emit(truth, True, w, rng)
        same = [d for d in docs if d.relation == first]
        if same and rng.random() < 0.7:
            return GenerationResult(same[0].value, self._confidence(rng, False) * 0.9 + 0.1)
        if rng.random() < w.abstain_rate:
            return self._abstain(rng)
        return GenerationResult(self._plausible(first, rng, truth), self._confidence(rng, False))

    def verify(self, prompt: str, answer: str, hidden_correct: bool, rng: np.random.Generator) -> bool:
        return bool(rng.random() < (self.verify_false_alarm if hidden_correct else self.verify_recall))


def lookup_prompt(relations: tuple[str, ...], subject_text: str) -> str:
    """The question a lookup (or merged lookup) asks; also the retrieval query."""
    if len(relations) == 1:
        return RELATIONS[relations[0]].question.format(x=subject_text)
    return f"What is {phrase(relations[1], phrase(relations[0], subject_text))}?"


def parse_input(world: World, text: str | None) -> str | None:
    """The entity a downstream worker recovers from an upstream answer text (``None`` if unparseable)."""
    if text is None:
        return None
    return world.entity_index.get(normalize(text))
