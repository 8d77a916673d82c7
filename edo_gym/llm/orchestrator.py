"""The text interface of an LLM orchestrator (the "dynamic LLM orchestration" school), in the shape of verifiers'
``GymEnv``: :func:`obs_to_text` renders what the orchestrator may know as a prompt, :func:`action_parser` reads an
action back out of a model's reply.

It works from plain data (:class:`OrchestratorView`: task text, plan lines, step results, budget numbers, action
names and mask), so it knows nothing of the env's internals; the env fills a view from what it shows a human
(``render()`` / ``info``). Invalid output (no action name, two different ones, an illegal one) parses to ``None``:
the caller takes its fallback action and counts it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edo_gym.agents.protocol import LLMRequest

#: The router's standing instructions (system message).
ROUTER_SYSTEM = (
    "You are the orchestrator of a team of language-model agents: a planner, workers that may search their own "
    "document collections, and verifiers. Each turn you choose the next action. Every action costs tokens, calls "
    "and time, so stop (submit) as soon as the answer is good enough, and spend on retrieval or verification only "
    "where it is likely to help."
)
#: How the router must reply.
ROUTER_OUTPUT_FORMAT = "exactly one action name from the list of legal actions, and nothing else"

_NON_WORD = re.compile(r"[^0-9a-z]+")
_MARKER = re.compile(r"\baction\s*[:=]\s*(.+)", re.IGNORECASE)


def _normalise(text: str) -> str:
    """Lower case, every run of non-alphanumerics one space: ``"Dispatch(w0, retrieve)"`` -> ``"dispatch w0 retrieve"``."""
    return _NON_WORD.sub(" ", text.lower()).strip()


@dataclass(frozen=True)
class OrchestratorView:
    """What an orchestrator may know at one decision, as plain data.

    :param task: the user's task text.
    :param plan: the plan's steps as written by the planner, in order.
    :param action_names: the name of every action, indexed by action id (the env's ``Discrete`` space).
    :param action_mask: which actions are legal now (``None``: all).
    :param current_step: index into ``plan`` of the step to work on (``None``: none, e.g. all done).
    :param results: what has happened so far, one line each (step results as the workers wrote them, verdicts).
    :param budget: budget used so far, by name, e.g. ``{"tokens": 812, "calls": 3, "latency_s": 4.1}``.
    :param history: the latest actions taken, by name, oldest first.
    """

    task: str
    plan: Sequence[str]
    action_names: Sequence[str]
    action_mask: Sequence[bool] | None = None
    current_step: int | None = None
    results: Sequence[str] = ()
    budget: Mapping[str, float] = field(default_factory=dict)
    history: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.action_mask is not None and len(self.action_mask) != len(self.action_names):
            raise ValueError(
                f"action_mask has {len(self.action_mask)} entries but there are {len(self.action_names)} action names"
            )
        if self.current_step is not None and not 0 <= self.current_step < max(1, len(self.plan)):
            raise ValueError(f"current_step {self.current_step} is outside the plan's {len(self.plan)} steps")

    def legal_actions(self) -> list[str]:
        """The names of the legal actions, in action-id order."""
        mask = self.action_mask
        return [name for k, name in enumerate(self.action_names) if mask is None or mask[k]]


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def state_text(view: OrchestratorView) -> str:
    """Everything in ``view`` but the task: plan, results, budget, recent actions and the legal actions."""
    plan_lines = []
    for k, step in enumerate(view.plan):
        marker = ">" if k == view.current_step else " "
        status = " (current)" if k == view.current_step else ""
        plan_lines.append(f"{marker} {k + 1}. {step}{status}")
    parts = ["Plan:\n" + ("\n".join(plan_lines) if plan_lines else "  (no plan)")]
    parts.append("Results so far:\n" + ("\n".join(f"- {r}" for r in view.results) if view.results else "- (none yet)"))
    if view.budget:
        parts.append("Budget used: " + ", ".join(f"{name} {_number(v)}" for name, v in view.budget.items()))
    if view.history:
        parts.append("Recent actions: " + ", ".join(view.history))
    parts.append("Legal actions:\n" + "\n".join(f"- {name}" for name in view.legal_actions()))
    return "\n\n".join(parts)


def obs_to_text(view: OrchestratorView) -> str:
    """The prompt an LLM orchestrator reads: task, plan (current step marked), results, budget, legal actions."""
    return f"Task: {view.task}\n\n{state_text(view)}\n\nReply with {ROUTER_OUTPUT_FORMAT}."


def router_request(view: OrchestratorView, *, seed: int, max_tokens: int = 24, temperature: float = 0.0) -> LLMRequest:
    """The router's :class:`LLMRequest` for ``view`` (role and agent ``"router"``), to send through any backend."""
    return LLMRequest(
        role="router",
        agent="router",
        system=ROUTER_SYSTEM,
        task=view.task,
        instruction="Choose the next action.\n\n" + state_text(view),
        output_format=ROUTER_OUTPUT_FORMAT,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
    )


def action_parser(text: str, action_names: Sequence[str], action_mask: Sequence[bool] | None = None) -> int | None:
    """The action id named in a model's reply ``text``, or ``None`` when the reply names no legal action clearly.

    Names match case- and punctuation-insensitively as whole words (``Dispatch(w0, retrieve)`` matches the name
    ``dispatch(w0,retrieve)``). A line ``Action: NAME`` wins over the rest of the reply; otherwise the reply must
    name exactly one action (a name inside a longer matched name does not count: ``dispatch(w0)`` inside
    ``dispatch(w0, retrieve)``). Two different actions, none, or an illegal one (``action_mask`` false) give
    ``None``.

    :raises ValueError: two action names are the same after normalisation (the caller's names are ambiguous).
    """
    names = [_normalise(n) for n in action_names]
    if len(set(names)) != len(names) or "" in names:
        raise ValueError(f"action names must be distinct and non-empty ignoring case and punctuation: {list(action_names)}")
    if action_mask is not None and len(action_mask) != len(names):
        raise ValueError(f"action_mask has {len(action_mask)} entries but there are {len(names)} action names")
    if not isinstance(text, str):
        return None
    marked = _MARKER.search(text)
    for segment in ([marked.group(1)] if marked else []) + [text]:
        chosen = _single_action(_normalise(segment), names)
        if chosen is not None:
            return chosen if action_mask is None or action_mask[chosen] else None
    return None


def _single_action(segment: str, names: list[str]) -> int | None:
    """The one action named in a normalised ``segment``, or ``None`` (no name, or two different ones)."""
    padded = f" {segment} "
    spans: list[tuple[int, int, int]] = []  # (start, end, action id)
    for index, name in enumerate(names):
        start = padded.find(f" {name} ")
        while start != -1:
            spans.append((start, start + len(name) + 1, index))
            start = padded.find(f" {name} ", start + 1)
    # A match inside a longer match is part of that name, not a mention of its own.
    outer = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    chosen = {index for _, _, index in outer}
    return chosen.pop() if len(chosen) == 1 else None
