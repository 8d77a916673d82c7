"""Agents of the team: workers (with a mini-RAG over their own shard), verifiers, and how every call is priced.

:meth:`Worker.run` executes one plan step: optionally queries the worker's own retriever with the step's
question, sends an :class:`~edo_gym.agents.protocol.LLMRequest` (task, instruction, inputs as written upstream,
retrieved document texts, output format), and prices the call. :meth:`Worker.verify` has the worker re-check a
result against its own evidence (its own retrieval and knowledge), charged like a dispatch.

Pricing (:class:`AgentCaller`): prompt and completion tokens as the server reports them, else an estimate with
the embedder's tokenizer (instructions, task, instruction, inputs, documents; the completion plus a size-dependent
verbosity); latency as reported, else a size-based model of fixed overhead plus per-token time. A call with ``n``
attempts sends its prompt ``n`` times (``n`` calls); a timed-out attempt costs ``timeout_s`` of latency, another
failed attempt the fixed overhead plus its prompt time; the simulated back-off between attempts is added. Faults
never escape: a retriever that raises makes the worker answer without retrieval; a backend call that fails after
its retries gives a *failed* record (no answer, but charged).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edo_gym.agents.backend import CallOutcome, RetryPolicy, call_backend, validate_response
from edo_gym.agents.protocol import LLMBackend, LLMRequest, LLMResponse, parse_verdict
from edo_gym.config import WorkerSpec
from edo_gym.retrieval.search import ShardRetriever
from edo_gym.retrieval.service import RetrievalService
from edo_gym.world.language import OP_QUERIES
from edo_gym.world.text import ABSTAIN_TEXT, normalize

#: Simulated latency model per size: fixed overhead (s), per prompt token (s), per completion token (s).
LATENCY_MODEL: dict[str, tuple[float, float, float]] = {
    "small": (0.25, 0.0002, 0.008),
    "medium": (0.4, 0.0004, 0.015),
    "large": (0.8, 0.0008, 0.03),
}
#: Extra completion tokens (reasoning, pleasantries) a model of each size writes beyond the answer.
VERBOSITY: dict[str, int] = {"small": 8, "medium": 16, "large": 40}
WORKER_SYSTEM = (
    "You are {name}, a worker in a team of assistants. Follow the instruction and reply with the answer only. "
    "Use the context documents when given; if you do not know, reply: I don't know."
)
VERIFIER_SYSTEM = (
    "You are {name}, checking a teammate's answer. Compare it with the context documents and what you know. Reply with "
    "one word first: CORRECT, INCORRECT or UNSURE (when you cannot check it)."
)
PLAN_VERIFIER_SYSTEM = (
    "You are {name}, checking the plan a planner wrote for a task: does executing its steps in order answer the task? "
    "Reply with one word first: CORRECT, INCORRECT or UNSURE (when you cannot check it)."
)
# What each call must return, said plainly, as a noun phrase: the bundled 135M model echoes an imperative ("Reply with
# the answer only: ...") back as its answer far more often than it echoes these. A real model reads this; the simulator
# does not, and it is not counted in the estimated prompt tokens, so simulated costs do not depend on its wording.
OUTPUT_FORMATS = {
    "lookup": "the answer only (a name, a number or a short phrase), no explanation",
    "compute": "the resulting number only, in digits (no words, units or working)",
    "write": "one sentence addressed to the customer, in the form: You can request a refund within <refund window>.",
}
# A verifier's format must not start with a verdict word: an echo of it would then read as that verdict.
VERIFY_FORMAT = (
    "Start the reply with one word: CORRECT (the answer under review is right), INCORRECT (it is wrong) or UNSURE (you "
    "cannot check it); then at most one short sentence"
)
PLAN_VERIFY_FORMAT = (
    "Start the reply with one word: CORRECT (the plan answers the task), INCORRECT (a step is missing, extra, out of "
    "order or mislabelled) or UNSURE (you cannot check it); then at most one short sentence"
)
#: What a plan critic is asked (the plan itself is the request's one input, as the planner's JSON).
PLAN_VERIFY_INSTRUCTION = "Check this plan for the task."
#: Where a worker's and a verifier's reply ends: the first line holds the answer (or the verdict).
STOP_AT_NEWLINE: tuple[str, ...] = ("\n",)
_ABSTAIN = normalize(ABSTAIN_TEXT)
#: A verifier's verdict by the word it answered with (any other: ``unsure``).
_VERDICT_OF_WORD = {"CORRECT": "ok", "INCORRECT": "flagged"}
#: Entries of an ``AgentCaller``'s own token-count memo before it starts afresh (a plain dict in front of the
#: service's LRU memo: the same counts, about 4x cheaper to read).
TOKEN_COUNT_MEMO_SIZE = 100_000
#: Token-count memos by retrieval service (weakly: a memo goes with its service).
_TOKEN_COUNTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _shared_token_counts(service: Any) -> dict[str, int]:
    """The token-count memo of the callers of ``service``; a memo of its own for a service that cannot be weakly
    referenced."""
    try:
        memo = _TOKEN_COUNTS.get(service)
        if memo is None:
            memo = _TOKEN_COUNTS[service] = {}
    except TypeError:
        return {}
    return memo


@dataclass
class CallCost:
    """What a call cost: tokens (prompt + completion, all attempts), calls (attempts), simulated latency (s)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    latency_s: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class AgentCaller:
    """Sends requests to a backend under a retry policy and prices them (see module docstring)."""

    def __init__(self, backend: LLMBackend, service: RetrievalService, policy: RetryPolicy) -> None:
        self.backend = backend
        self.service = service
        self.policy = policy
        #: shared by the callers of one service (the envs of a vector env): a count never changes
        self._token_counts: dict[str, int] = _shared_token_counts(service)

    def count_tokens(self, text: str) -> int:
        """``service.count_tokens(text)``, memoised here too (a count never changes: the tokenizer's own)."""
        n = self._token_counts.get(text)
        if n is None:
            n = self.service.count_tokens(text)
            if len(self._token_counts) >= TOKEN_COUNT_MEMO_SIZE:
                self._token_counts.clear()
            self._token_counts[text] = n
        return n

    def estimate_prompt_tokens(self, request: LLMRequest, doc_tokens: int = 0) -> int:
        memo, count = self._token_counts, self.count_tokens
        n = 12 + doc_tokens
        for text in (request.system, request.task, request.instruction, *request.inputs):
            c = memo.get(text)
            n += count(text) if c is None else c
        if request.answer:
            n += count(request.answer)
        return n

    def call(
        self,
        request: LLMRequest,
        size: str,
        doc_tokens: int = 0,
        verbosity: int | None = None,
        prompt_token_scale: float = 1.0,
    ) -> tuple[LLMResponse | None, CallOutcome, CallCost]:
        """``(response or None when failed, outcome, cost)``; ``doc_tokens``: tokens of ``request.documents`` if known.

        ``verbosity`` (default: the size's) and ``prompt_token_scale`` shape the token counts estimated when the
        backend reports none (``WorkerSpec.verbosity``, ``WorkerSpec.prompt_token_scale``)."""
        outcome = call_backend(lambda: self.backend.complete(request), validate_response, self.policy)
        base, per_prompt, per_completion = LATENCY_MODEL[size]
        response: LLMResponse | None = outcome.value
        estimate = self.estimate_prompt_tokens(request, doc_tokens)
        if prompt_token_scale != 1.0:
            estimate = round(estimate * prompt_token_scale)
        prompt = response.prompt_tokens if response is not None and response.prompt_tokens is not None else estimate
        latency = outcome.backoff_s
        if outcome.failures:
            latency += sum(
                self.policy.timeout_s if kind == "timeout" else base + per_prompt * estimate for kind in outcome.failures
            )
        cost = CallCost(prompt + estimate * (outcome.attempts - 1), 0, outcome.attempts)
        if response is not None:
            completion = response.completion_tokens
            if completion is None:
                completion = self.count_tokens(response.text) + (VERBOSITY[size] if verbosity is None else verbosity)
            cost.completion_tokens = completion
            latency += (
                response.latency_s
                if response.latency_s is not None
                else base + per_prompt * prompt + per_completion * completion
            )
        cost.latency_s = latency
        return response, outcome, cost


@dataclass
class CallRecord:
    """The outcome and price of one worker call (all its attempts). A ``failed`` record has no answer (``text == ""``).

    :param confidence: the reply's confidence, or ``None`` when the backend gives none.
    """

    worker: int
    text: str
    confidence: float | None
    retrieved: tuple[int, ...]
    used_retrieval: bool
    cost: CallCost
    instruction: str
    inputs: tuple[str, ...]
    failed: bool = False
    error: str = ""
    attempts: int = 1
    #: Why retrieval was requested but not used (the retriever failed); ``""`` otherwise.
    retrieval_error: str = ""

    #: The worker said it does not know (or answered nothing): set in ``__post_init__``.
    abstained: bool = False
    #: The answer names a known entity or a number (set by the env; how the answer is written, not whether it is right).
    linked: bool = False

    def __post_init__(self) -> None:
        self.abstained = not self.failed and normalize(self.text) in (_ABSTAIN, "")

    @property
    def retrieval_fallback(self) -> bool:
        return bool(self.retrieval_error)


@dataclass
class VerifyRecord:
    """A verification: ``verdict`` in ``ok``/``flagged``/``unsure`` (``""`` when the call failed)."""

    worker: int
    step: int
    verdict: str
    text: str
    retrieved: tuple[int, ...]
    cost: CallCost
    failed: bool = False
    error: str = ""
    attempts: int = 1
    #: Why the verifier's own retrieval failed (it judged without documents); ``""`` otherwise.
    retrieval_error: str = ""

    @property
    def retrieval_fallback(self) -> bool:
        return bool(self.retrieval_error)


class Worker:
    """One worker of the team (see module docstring).

    :param doc_texts: the corpus texts the worker reads, by corpus index (the env's; an ablation may alter them).
    :param shuffle_rng: when given, the retriever returns random documents of the shard (retrieval ablation).
    """

    def __init__(
        self,
        index: int,
        spec: WorkerSpec,
        retriever: ShardRetriever,
        caller: AgentCaller,
        doc_texts: Sequence[str],
        shard_indices: Sequence[int] = (),
        shuffle: bool = False,
    ) -> None:
        self.index = index
        self.spec = spec
        self.retriever = retriever
        self.caller = caller
        self.service = caller.service
        self.doc_texts = doc_texts
        self.shard_indices = np.asarray(shard_indices, dtype=np.int64)
        self.shuffle = shuffle
        self.system = WORKER_SYSTEM.format(name=spec.name)
        self.verifier_system = VERIFIER_SYSTEM.format(name=spec.name)
        self.plan_verifier_system = PLAN_VERIFIER_SYSTEM.format(name=spec.name)
        self._doc_tokens: list[int] | None = None
        #: Documents this worker's index lacks in the current episode (a team draw's missing shard domain): its
        #: searches never return them. Set by the env at reset.
        self.unavailable: frozenset[int] = frozenset()

    def wants_retrieval(self, label: str, domain_label: str) -> bool:
        """The worker's own retrieval rule (``retrieval_decider="worker"``): lookups labelled with a domain in its shard."""
        return label == "lookup" and domain_label in self.spec.shard

    def search(self, text: str, rng: np.random.Generator) -> tuple[tuple[int, ...], str]:
        """``(document ids, "")``, or ``((), reason)`` when the retriever fails or returns unknown ids."""
        if self.shuffle:  # ablation: random documents of the shard, drawn from the env's RNG
            if len(self.shard_indices) == 0:
                return (), ""
            k = min(self.spec.top_k, len(self.shard_indices))
            return tuple(int(i) for i in rng.choice(self.shard_indices, size=k, replace=False)), ""
        try:
            ids = self.retriever.search(text, self.spec.top_k)
            if type(ids) is not tuple:
                ids = tuple(ids)
            if self.unavailable:
                ids = tuple([i for i in ids if i not in self.unavailable])
            n_docs = len(self.doc_texts)
            if all([type(i) is int and 0 <= i < n_docs for i in ids]):  # plain ints in range: returned as they are
                return ids, ""
            if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < n_docs for i in ids):
                return (), f"retriever returned unknown document ids {list(ids)[:5]}"
            return tuple(int(i) for i in ids), ""
        except Exception as exc:  # chromadb raises many types; each means "no context this time"
            message = f"{type(exc).__name__}: {exc}"
            return (), message if len(message) <= 300 else message[:297] + "..."

    def _documents(self, ids: tuple[int, ...]) -> tuple[tuple[str, ...], int]:
        if not ids:
            return (), 0
        if self._doc_tokens is None:  # the service's token counts as a list: summing a few is ~20x cheaper than in numpy
            self._doc_tokens = [int(n) for n in self.service.doc_tokens]
        texts, tokens = self.doc_texts, self._doc_tokens
        return tuple([texts[i] for i in ids]), sum([tokens[i] for i in ids])

    def run(
        self,
        task: str,
        label: str,
        instruction: str,
        inputs: tuple[str, ...],
        retrieve: bool,
        rng: np.random.Generator,
        seed: int,
    ) -> CallRecord:
        """Execute a step: ``instruction`` with placeholders filled, ``inputs`` the upstream answers as written."""
        retrieved: tuple[int, ...] = ()
        retrieval_error = ""
        if retrieve:
            retrieved, retrieval_error = self.search(retrieval_query(label, instruction), rng)
        documents, doc_tokens = self._documents(retrieved) if retrieved else ((), 0)
        request = LLMRequest(
            role="worker",
            agent=self.spec.name,
            system=self.system,
            task=task,
            instruction=instruction,
            inputs=inputs,
            documents=documents,
            output_format=OUTPUT_FORMATS.get(label, OUTPUT_FORMATS["lookup"]),
            seed=seed,
            stop=STOP_AT_NEWLINE,
        )
        response, outcome, cost = self.caller.call(
            request, self.spec.size, doc_tokens, self.spec.verbosity, self.spec.prompt_token_scale
        )
        if retrieve:
            cost.latency_s += self.service.config.latency_s
        used = retrieve and not retrieval_error
        if response is None:
            return CallRecord(
                self.index,
                "",
                None,
                retrieved,
                used,
                cost,
                instruction,
                inputs,
                True,
                outcome.error or "",
                outcome.attempts,
                retrieval_error,
            )
        return CallRecord(
            self.index, response.text.strip(), response.confidence, retrieved, used, cost, instruction, inputs,
            attempts=outcome.attempts, retrieval_error=retrieval_error,
        )  # fmt: skip

    def verify(
        self, task: str, label: str, step: int, record: CallRecord, rng: np.random.Generator, seed: int
    ) -> VerifyRecord:
        """Re-check ``record`` (the result of plan step ``step``) against this worker's own evidence."""
        retrieved: tuple[int, ...] = ()
        retrieval_error = ""
        if self.retriever.size > 0 or self.shuffle:
            retrieved, retrieval_error = self.search(retrieval_query(label, record.instruction), rng)
        documents, doc_tokens = self._documents(retrieved) if retrieved else ((), 0)
        request = LLMRequest(
            role="verifier",
            agent=self.spec.name,
            system=self.verifier_system,
            task=task,
            instruction=record.instruction,
            inputs=record.inputs,
            documents=documents,
            answer=record.text,
            output_format=VERIFY_FORMAT,
            max_tokens=32,
            seed=seed,
            stop=STOP_AT_NEWLINE,
        )
        response, outcome, cost = self.caller.call(
            request, self.spec.size, doc_tokens, self.spec.verbosity, self.spec.prompt_token_scale
        )
        if retrieved:
            cost.latency_s += self.service.config.latency_s
        if response is None:
            return VerifyRecord(
                self.index, step, "", "", retrieved, cost, True, outcome.error or "", outcome.attempts, retrieval_error
            )
        word = parse_verdict(response.text)
        verdict = _VERDICT_OF_WORD.get(word or "", "unsure")
        return VerifyRecord(
            self.index,
            step,
            verdict,
            response.text,
            retrieved,
            cost,
            attempts=outcome.attempts,
            retrieval_error=retrieval_error,
        )

    def verify_plan(self, task: str, plan_json: str, seed: int) -> VerifyRecord:
        """Critique a plan (``plan_json``, the planner's JSON) against the task text: a real call, no retrieval."""
        request = LLMRequest(
            role="plan_verifier",
            agent=self.spec.name,
            system=self.plan_verifier_system,
            task=task,
            instruction=PLAN_VERIFY_INSTRUCTION,
            inputs=(plan_json,),
            output_format=PLAN_VERIFY_FORMAT,
            max_tokens=32,
            seed=seed,
            stop=STOP_AT_NEWLINE,
        )
        response, outcome, cost = self.caller.call(
            request, self.spec.size, 0, self.spec.verbosity, self.spec.prompt_token_scale
        )
        if response is None:
            return VerifyRecord(self.index, -1, "", "", (), cost, True, outcome.error or "", outcome.attempts)
        verdict = _VERDICT_OF_WORD.get(parse_verdict(response.text) or "", "unsure")
        return VerifyRecord(self.index, -1, verdict, response.text, (), cost, attempts=outcome.attempts)


def retrieval_query(label: str, instruction: str) -> str:
    """What a worker searches its shard with: a lookup's question, or guidance about a compute/write operation."""
    return instruction if label == "lookup" else OP_QUERIES.get(label, instruction)


def plan_request(
    task: str,
    instruction: str,
    output_format: str,
    seed: int,
    system: str,
    json_schema: str = "",
    inputs: tuple[str, ...] = (),
) -> LLMRequest:
    """A planner request (see :mod:`edo_gym.agents.planner`); ``json_schema``: the plan schema a server may decode under;
    ``inputs``: the results found so far that a replan request carries (:func:`edo_gym.agents.planner.result_notes`)."""
    return LLMRequest(
        role="planner", agent="planner", system=system, task=task, instruction=instruction, inputs=inputs,
        output_format=output_format, max_tokens=512, seed=seed, json_schema=json_schema,
    )  # fmt: skip
