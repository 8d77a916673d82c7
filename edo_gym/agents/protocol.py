"""The one protocol between the environment and a language model (simulated or real).

Every planner, worker, verifier and router call is an :class:`LLMRequest` answered by an :class:`LLMResponse`.
A request carries only what a real multi-agent system has: the agent's standing instructions, the task text,
the step's instruction, the inputs as upstream workers wrote them, the retrieved document *texts* and the
expected output format, plus a sampling seed drawn from the env's RNG. It carries no hidden state: no gold
answer, no correctness flag, no relation name. A backend (``LLMBackend``) answers with text, usage, latency and
an optional confidence.

Implementations: :class:`~edo_gym.agents.simulator.SimulatedBackend` (default; seeded, free, reads the request
text like a model would) and the OpenAI-compatible client in :mod:`edo_gym.llm` (any server: vLLM, llama.cpp,
Ollama, hosted APIs) with a record/replay cache.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Protocol, runtime_checkable

#: Who is called.
ROLES: tuple[str, ...] = ("planner", "worker", "verifier", "plan_verifier", "router")
#: Verdict words a verifier answers with (first word of its reply, case-insensitive).
VERDICTS: tuple[str, ...] = ("CORRECT", "INCORRECT", "UNSURE")


@dataclass(frozen=True)
class LLMRequest:
    """One call to a language model.

    :param role: one of ``ROLES``.
    :param agent: the agent called: a worker's name, ``"planner"`` or ``"router"``; a backend may map it to a model.
    :param system: the agent's standing instructions (the system message).
    :param task: the user's task text.
    :param instruction: what this call must do (the step's question, the plan request, the verification request).
    :param inputs: upstream answers exactly as the workers wrote them, in dependency order.
    :param documents: texts of the documents the agent's retriever returned, best first (empty without retrieval).
    :param answer: for a verifier, the answer under review; empty otherwise.
    :param output_format: how the reply must be written.
    :param max_tokens: completion token limit.
    :param temperature: sampling temperature.
    :param seed: sampling seed, drawn from the env's RNG; part of the cache key.
    :param json_schema: a JSON schema (as canonical JSON text) the reply must follow, or ``""`` for free text; a
        server that supports it constrains its decoding to it (OpenAI's ``response_format`` ``json_schema``).
    :param stop: strings at which generation stops (not included in the reply); ``()`` for none.
    """

    role: str
    agent: str
    system: str
    task: str
    instruction: str
    inputs: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    answer: str = ""
    output_format: str = ""
    max_tokens: int = 96
    temperature: float = 0.0
    seed: int = 0
    json_schema: str = ""
    stop: tuple[str, ...] = ()

    def __init__(
        self,
        role: str,
        agent: str,
        system: str,
        task: str,
        instruction: str,
        inputs: tuple[str, ...] = (),
        documents: tuple[str, ...] = (),
        answer: str = "",
        output_format: str = "",
        max_tokens: int = 96,
        temperature: float = 0.0,
        seed: int = 0,
        json_schema: str = "",
        stop: tuple[str, ...] = (),
    ) -> None:
        # what the generated frozen-dataclass __init__ does, without its object.__setattr__ per field (a request is
        # made on every step: this is about 4x cheaper); the dataclass still generates repr, eq, hash and fields()
        d = self.__dict__
        d["role"] = role
        d["agent"] = agent
        d["system"] = system
        d["task"] = task
        d["instruction"] = instruction
        d["inputs"] = inputs
        d["documents"] = documents
        d["answer"] = answer
        d["output_format"] = output_format
        d["max_tokens"] = max_tokens
        d["temperature"] = temperature
        d["seed"] = seed
        d["json_schema"] = json_schema
        d["stop"] = stop
        if role not in ROLES:
            raise ValueError(f"LLMRequest.role must be one of {list(ROLES)}, got {role!r}")
        if not isinstance(inputs, tuple) or not isinstance(documents, tuple):
            raise TypeError("LLMRequest.inputs and .documents must be tuples of str")
        if type(stop) is not tuple or type(json_schema) is not str:  # the items of stop are checked where they are sent
            raise TypeError(
                f"LLMRequest.stop must be a tuple of strings and .json_schema JSON text ('' for none), got {stop!r}, "
                f"{type(json_schema).__name__}"
            )

    def user_message(self) -> str:
        """The user message a chat model reads: task, instruction, inputs, context documents, answer, format."""
        parts = [f"Task: {self.task}", f"Instruction: {self.instruction}"]
        if self.inputs:
            parts.append("Inputs from earlier steps:\n" + "\n".join(f"- {x}" for x in self.inputs))
        if self.documents:
            parts.append("Context documents:\n" + "\n".join(f"[{k + 1}] {d}" for k, d in enumerate(self.documents)))
        if self.answer:
            parts.append(f"Answer under review: {self.answer}")
        if self.output_format:
            parts.append(f"Output format: {self.output_format}")
        return "\n\n".join(parts)

    def messages(self) -> list[dict[str, str]]:
        """OpenAI-style chat messages (system, user)."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user_message()}]

    def prompt_text(self) -> str:
        """System and user message as one string (what an estimate of prompt tokens counts)."""
        return self.system + "\n" + self.user_message()

    def schema(self) -> dict | None:
        """``json_schema`` parsed, or ``None`` when the reply is free text."""
        return json.loads(self.json_schema) if self.json_schema else None

    def cache_key(self, model: str, extra: dict | None = None) -> str:
        """Content address of this request sent to ``model`` (sha256 of the canonical JSON of every field; the
        optional ``json_schema`` and ``stop`` only when set, so that requests without them keep the keys they were
        recorded under before these fields existed)."""
        # the fields are str, int, float and tuples of str: this dict is what ``dataclasses.asdict`` gives (the keys of
        # recorded caches depend on it; tested), without its recursive deep copy (most of a replayed call's cost)
        request = {name: getattr(self, name) for name in _REQUEST_FIELDS}
        for name in _OPTIONAL_FIELDS:
            if not request[name]:
                del request[name]
        payload = {"model": model, "request": request, "extra": extra or {}}
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


_REQUEST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LLMRequest))
#: Fields left out of the cache key when empty.
_OPTIONAL_FIELDS: tuple[str, ...] = ("json_schema", "stop")


@dataclass(frozen=True)
class LLMResponse:
    """A model's reply.

    :param text: the completion text.
    :param prompt_tokens: prompt tokens as the server reports them (``None``: not reported; the caller estimates).
    :param completion_tokens: completion tokens as reported (``None``: not reported).
    :param latency_s: seconds the call took (``None``: the caller uses its latency model; the simulator reports none).
    :param confidence: a confidence in [0, 1] (from token logprobs), or ``None`` when the server gives none.
    :param cached: answered from a record/replay cache rather than by a model.
    """

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    confidence: float | None = None
    cached: bool = False

    def __init__(
        self,
        text: str,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        latency_s: float | None = None,
        confidence: float | None = None,
        cached: bool = False,
    ) -> None:
        # the generated frozen-dataclass __init__, without its object.__setattr__ per field (see LLMRequest)
        d = self.__dict__
        d["text"] = text
        d["prompt_tokens"] = prompt_tokens
        d["completion_tokens"] = completion_tokens
        d["latency_s"] = latency_s
        d["confidence"] = confidence
        d["cached"] = cached


@runtime_checkable
class LLMBackend(Protocol):
    """Anything that answers :class:`LLMRequest`\\ s. Transient faults raise ``TransientBackendError`` or
    ``TimeoutError`` (retried by the caller); any other exception fails the call."""

    def complete(self, request: LLMRequest) -> LLMResponse: ...


def parse_verdict(text: str) -> str | None:
    """The verdict word (one of ``VERDICTS``) a verifier's reply starts with, or ``None``.

    Only the start counts: the first word (markdown and punctuation stripped, any case), or the second after a
    ``Verdict:`` label. A verdict word later in a reply does not count: a model that echoes the instruction
    ("Output format: CORRECT, INCORRECT or UNSURE") has given no verdict."""
    words = [w for w in (w.strip(".,:;!*\"'()[]#`_").upper() for w in text.split()[:2]) if w]
    if words and words[0] in VERDICTS:
        return words[0]
    if len(words) > 1 and words[0] == "VERDICT" and words[1] in VERDICTS:
        return words[1]
    return None
