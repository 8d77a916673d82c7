"""Workers: a specialty profile, a mini-RAG over their own knowledge shard, and a cost model.

``Worker.run`` executes one plan step: it parses its inputs (as upstream workers wrote them), optionally
queries its own retriever, builds the prompt, asks the generation backend, and prices the call with real
token counts (the embedder's tokenizer) and a simulated latency that depends on model size and tokens.

Faults never escape ``run``: a retriever that raises (e.g. a chromadb error) or returns unknown document ids
makes the worker answer without retrieval (``CallRecord.retrieval_error`` says why); a backend call that fails
after its retries (see :func:`~edo_gym.agents.backend.call_backend`) gives a *failed* record: no answer, but
charged. Pricing of a call with ``n`` attempts: every attempt sends the prompt (``n`` calls, ``n`` times the
prompt tokens); a timed-out attempt costs ``timeout_s`` of latency, another failed attempt the model's fixed
overhead plus its prompt time; the simulated back-off between attempts is added to the latency.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edo_gym.agents.backend import (
    GenerationBackend,
    GenerationRequest,
    RetryPolicy,
    call_backend,
    lookup_prompt,
    parse_input,
    validate_result,
)
from edo_gym.agents.planner import PlanStep
from edo_gym.config import WorkerSpec
from edo_gym.retrieval.store import RetrievalService, ShardRetriever
from edo_gym.world.text import ABSTAIN_TEXT, normalize

#: Simulated latency model per size: fixed overhead (s), per prompt token (s), per completion token (s).
LATENCY_MODEL: dict[str, tuple[float, float, float]] = {
    "small": (0.25, 0.0002, 0.008),
    "medium": (0.4, 0.0004, 0.015),
    "large": (0.8, 0.0008, 0.03),
}
#: Extra completion tokens (reasoning, pleasantries) a model of each size writes beyond the answer.
VERBOSITY: dict[str, int] = {"small": 8, "medium": 16, "large": 40}
_OP_QUERIES = {
    "sum": "How is the combined revenue of several stores computed?",
    "max": "Which store had the highest revenue?",
    "refund_reply": "How should a reply about a refund window be worded?",
}
_INSTRUCTIONS = "You are {name}, a worker in a team of assistants. Answer the question briefly. Use the context if given."


@dataclass
class CallRecord:
    """The outcome and price of one worker call (all its attempts).

    A ``failed`` record carries no answer (``text == ""``): the step it ran stays undone.
    """

    worker: int
    text: str
    confidence: float
    retrieved: tuple[int, ...]
    used_retrieval: bool
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    correct: bool  # hidden: the answer equals what this step should produce
    abstained: bool
    query: str
    #: The backend call failed after ``attempts`` tries; ``error`` says how (``"TimeoutError: ..."``).
    failed: bool = False
    error: str | None = None
    attempts: int = 1
    #: Why retrieval was requested but not used (the retriever failed); ``None`` otherwise.
    retrieval_error: str | None = None

    @property
    def retrieval_fallback(self) -> bool:
        """Retrieval was requested, failed, and the worker answered without it."""
        return self.retrieval_error is not None


class Worker:
    """One worker of the team (see module docstring)."""

    def __init__(
        self,
        index: int,
        spec: WorkerSpec,
        retriever: ShardRetriever,
        service: RetrievalService,
        backend: GenerationBackend,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.index = index
        self.spec = spec
        self.retriever = retriever
        self.service = service
        self.backend = backend
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy()
        self.world = service.world
        instructions = _INSTRUCTIONS.format(name=spec.name)
        self._instructions = instructions
        self._instruction_tokens = service.count_tokens(instructions)
        self._latency = LATENCY_MODEL[spec.size]
        self._verbosity = VERBOSITY[spec.size]

    def wants_retrieval(self, step: PlanStep) -> bool:
        """The worker's own retrieval rule (used when ``retrieval_decider="worker"``): fact lookups in its shard."""
        return step.kind in ("lookup", "merged") and step.domain in self.spec.shard

    def run(self, step: PlanStep, inputs: list[str | None], retrieve: bool, rng: np.random.Generator) -> CallRecord:
        """Execute ``step`` on ``inputs`` (upstream answer texts, ``None`` where not yet available)."""
        subject = None
        if step.kind in ("lookup", "merged"):
            raw = step.literal if not step.deps else inputs[0]
            subject = step.literal if not step.deps else parse_input(self.world, raw)
            # A worker that can parse its input asks about the canonical entity; otherwise about the raw text.
            subject_text = subject if subject is not None else (raw if raw is not None else "(missing input)")
            query = lookup_prompt(step.relations, subject_text)
            lookup_inputs: list[str | None] = [raw]
        else:
            query = f"{step.op}: " + " | ".join(x if x is not None else "(missing)" for x in inputs)
            lookup_inputs = inputs
        retrieved: tuple[int, ...] = ()
        retrieval_error = None
        if retrieve:
            # A compute/write step retrieves guidance about its operation, not about its (numeric) inputs.
            search_text = query if step.kind in ("lookup", "merged") else _OP_QUERIES.get(step.op or "", query)
            retrieved, retrieval_error = self._search(search_text)
        docs = self.world.documents
        prompt = self._instructions + "\n" + query
        if retrieved:
            prompt += "\nContext:\n" + "\n".join(docs[i].text for i in retrieved)
        request = GenerationRequest(
            worker=self.spec,
            prompt=prompt,
            kind=step.kind,
            inputs=lookup_inputs,
            subject=subject,
            relations=step.relations,
            op=step.op,
            retrieved=retrieved,
            timeout_s=self.retry_policy.timeout_s,
        )
        outcome = call_backend(lambda: self.backend.generate(request, rng), validate_result, self.retry_policy)
        prompt_tokens = self._instruction_tokens + self.service.count_tokens(query)
        if retrieved:
            prompt_tokens += int(self.service.doc_tokens[list(retrieved)].sum())
        base, per_prompt, per_completion = self._latency
        # failed attempts: a timeout waited timeout_s, any other failure cost the fixed overhead and the prompt
        latency = outcome.backoff_s + sum(
            self.retry_policy.timeout_s if kind == "timeout" else base + per_prompt * prompt_tokens
            for kind in outcome.failures
        )
        if retrieve:
            latency += self.service.config.latency_s
        if outcome.failed:
            return CallRecord(
                worker=self.index,
                text="",
                confidence=0.0,
                retrieved=retrieved,
                used_retrieval=retrieve and retrieval_error is None,
                prompt_tokens=prompt_tokens * outcome.attempts,
                completion_tokens=0,
                latency_s=latency,
                correct=False,
                abstained=False,
                query=query,
                failed=True,
                error=outcome.error,
                attempts=outcome.attempts,
                retrieval_error=retrieval_error,
            )
        result = outcome.value
        completion_tokens = result.completion_tokens or (self.service.count_tokens(result.text) + self._verbosity)
        if outcome.reported_latency_s is not None:
            latency += outcome.reported_latency_s
        else:
            latency += base + per_prompt * prompt_tokens + per_completion * completion_tokens
        correct = bool(step.expected) and normalize(result.text) == normalize(step.expected)
        return CallRecord(
            worker=self.index,
            text=result.text,
            confidence=result.confidence,
            retrieved=retrieved,
            used_retrieval=retrieve and retrieval_error is None,
            prompt_tokens=prompt_tokens * outcome.attempts,
            completion_tokens=completion_tokens,
            latency_s=latency,
            correct=correct,
            abstained=result.text == ABSTAIN_TEXT,
            query=query,
            attempts=outcome.attempts,
            retrieval_error=retrieval_error,
        )

    def _search(self, text: str) -> tuple[tuple[int, ...], str | None]:
        """``(document ids, None)``, or ``((), reason)`` when the retriever fails or returns unknown ids."""
        try:
            ids = tuple(self.retriever.search(text, self.spec.top_k))
            n_docs = len(self.world.documents)
            if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < n_docs for i in ids):
                return (), f"retriever returned unknown document ids {list(ids)[:5]}"
            return tuple(int(i) for i in ids), None
        except Exception as exc:  # chromadb raises many types; each means "no context this time"
            message = f"{type(exc).__name__}: {exc}"
            return (), message if len(message) <= 300 else message[:297] + "..."
