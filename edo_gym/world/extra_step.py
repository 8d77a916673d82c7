"""Plans that must change mid-way: a step that no plan written from the task text holds, revealed by a result.

In a world with tiered refund policies (``WorldConfig.tiered_refunds``, drawn in
:meth:`~edo_gym.world.generator.World._make_tiers`), half the carriers set their refund window by the customer's
membership tier: their general policy document states :data:`~edo_gym.world.generator.TIER_RULE` ("the period set by
the customer's membership tier") instead of a number, one document per tier states that tier's window, and one per
shipment states its customer's tier. A share ``TaskConfig.extra_step_rate`` of the support tasks is about an order
that ships with such a carrier; the other support tasks are about orders whose carrier states one window for everyone
(drawn by :class:`~edo_gym.world.tasks.TaskPool`, from a generator of each task's own: the other families' tasks and
the split are the same at any rate, and a world without tiers gives the pool as it was).

Such a task needs two steps its text does not ask for: the membership tier of the shipment's customer, and the
carrier's window for that tier; the reply states that window. Its gold decomposition (``Task.subtasks``) holds them,
``Task.hops`` counts them with the policy lookup that reveals them, and its gold answer states the tier's window. Its
text reads like any other support task's (it names an order or a shipment), so every plan written from the text (the
simulated planner's first plan, ``rule_plan``, the fallback plan) is the usual one (:func:`scripted_subtasks`): the
policy lookup, then the reply. Executed as written, the policy lookup answers with the rule (a right answer to its
question), and the reply step cannot state a window (the worker abstains or writes a non-answer, and a verifier of the
reply flags it): a static pipeline fails, but where a misread window happens to be the tier's.

What solves it is an orchestrator that notices (the policy answer names no window; a verifier objects) and replans
after the rule came back: with the deviation on, a replan request carries the results found so far
(``LLMRequest.inputs``, :func:`edo_gym.world.language.result_notes`), and a planner that reads the rule among them
(the simulated one: :func:`reveals`) writes the full plan, reusing the answers it was given to the lookups before the
rule (:func:`known_chain`) instead of asking them again. A real planner gets the same request.

Hidden: ``EDOEnv.hidden_state()["deviations"]["extra_step"]`` (:func:`hidden`) for the oracle and the tests. Nothing in
the observation or ``info`` tells it beyond the task text and the results themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from edo_gym.world.generator import MEMBERSHIP_TIER, RELATIONS, TIER_RULE, TIER_WINDOW_RELATIONS
from edo_gym.world.grading import StepTruth
from edo_gym.world.language import parse_note, question
from edo_gym.world.tasks import Subtask, Task
from edo_gym.world.text import normalize

_TIER_WINDOWS = frozenset(TIER_WINDOW_RELATIONS.values())
#: What an answer that states the tier rule says (after :func:`~edo_gym.world.text.normalize`).
_RULE_WORDS = "membership tier"


def has_extra_step(task: Task) -> bool:
    """Whether ``task`` needs a step that a plan written from its text does not hold."""
    return task.family == "support" and any(s.relation in _TIER_WINDOWS for s in task.subtasks)


def scripted_subtasks(task: Task) -> tuple[Subtask, ...]:
    """The decomposition of a task with the extra step as its text asks for it (the usual support plan): the lookups
    to the carrier, the carrier's refund policy (which answers with the tier rule), then a reply from it (which has no
    right answer)."""
    chain = [s for s in task.subtasks if s.kind == "lookup" and s.relation in ("shipment", "carrier")]
    k = len(chain)
    policy = Subtask("lookup", RELATIONS["refund_window"].domain, "refund_window", None, (k - 1,), None, TIER_RULE)
    return (*chain, policy, Subtask("write", "policies", None, "refund_reply", (k,), None, ""))


def states_tier_rule(text: str) -> bool:
    """Whether an answer says that the refund window depends on the customer's membership tier."""
    return _RULE_WORDS in normalize(text)


def reveals(notes: Sequence[str]) -> bool:
    """Whether the results a replan request carries (:func:`~edo_gym.world.language.result_notes`) show the tier rule:
    what the simulated planner needs to write the full plan."""
    return any(states_tier_rule(parse_note(note)[1]) for note in notes)


def known_chain(task: Task, notes: Sequence[str], link: Callable[[str], str | None]) -> dict[int, str]:
    """The answers to ``task``'s lookups up to the carrier that the results ``notes`` hold, by gold step index: followed
    from the task's own subject, each step's question as the env asks it (its subject filled in) looked up among the
    notes, and its latest answer linked to an entity name (``link``); the walk stops at the first step the notes do not
    answer. What a planner given the results can reuse instead of asking again."""
    answers = dict(parse_note(note) for note in notes)
    known: dict[int, str] = {}
    for i, step in enumerate(task.subtasks):
        if step.relation not in ("shipment", "carrier"):
            break
        subject = known.get(step.deps[0]) if step.deps else step.literal
        answer = answers.get(question((step.relation,), subject)) if subject is not None else None
        name = link(answer) if answer is not None else None
        if name is None:
            break
        known[i] = name
    return known


def hidden(task: Task, truth: Sequence[StepTruth], notes: Sequence[str]) -> dict[str, Any] | None:
    """The extra step of an episode for ``EDOEnv.hidden_state()``, ``None`` when its task has none.

    :param truth: the current plan's step truths (:func:`~edo_gym.world.grading.execute_plan`).
    :param notes: the results a replan request would carry now.
    :returns: ``tier`` and ``window`` (the customer's tier and its refund window), ``in_plan`` (the current plan looks
        a tier's window up), ``reveal_step`` (the current plan's step whose right answer is the tier rule, ``None``
        when no step's is), ``revealed`` (a replan now carries the rule, so the planner can write the full plan).
    """
    if not has_extra_step(task):
        return None
    tier_step = next(s for s in task.subtasks if s.relation == MEMBERSHIP_TIER)
    window_step = next(s for s in task.subtasks if s.relation in _TIER_WINDOWS)
    return {
        "tier": tier_step.answer,
        "window": window_step.answer,
        "in_plan": any(t.relations and t.relations[-1] in _TIER_WINDOWS for t in truth),
        "reveal_step": next((i for i, t in enumerate(truth) if t.expected == TIER_RULE), None),
        "revealed": reveals(notes),
    }
