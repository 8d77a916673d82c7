"""The retrieval queries a world's episodes can produce beyond its canonical ones, listed ahead of use.

A worker searches its shard with a lookup step's question, built from the plan's instruction and the upstream
answers filled in (:meth:`edo_gym.envs.edo_env.EDOEnv._filled`). The canonical queries
(:meth:`~edo_gym.world.generator.World.canonical_queries`: each relation asked about a subject of the right kind)
are embedded with the corpus. Planner errors, wrong and drifted answers make others: a relation asked about an
entity of another kind (an upstream hop answered wrongly, or a reordered plan), a merged two-hop question, an
abstention or a missing input as the subject, a drifted name the entity linker could not resolve, a write step
mislabelled as a lookup (its instruction is the query), and an analytics task's compute step mislabelled as a
lookup (its instruction with the revenue figures filled in is the query). :func:`reachable_queries` lists those
families for one world and the task pools given, so that
:meth:`~edo_gym.retrieval.service.RetrievalService.embed_reachable_queries` can embed them ahead of use in a few
batched passes instead of one model call each at step time.

The list is a superset of what random play meets most often, not a proof of reachability, and not complete. The
compute family holds each analytics task's instruction over its gold figures; a wrong, drifted or abstained figure
makes a query that is not listed, embedded when first met, as before. Nothing here decides what a query retrieves:
each query is still embedded by the configured model (ahead of time or at step time, the same vector bit for bit)
and searched.
Measured on the default world, without the compute family: 6,592 texts, which held 628 (87%) of the 723 distinct
non-canonical queries met in 200,000 random legal steps (``benchmarks/env_throughput.py`` reports the embedder calls
left at step time). The compute family of the default task pool (500 analytics tasks) adds 489 texts: of the 273
query texts a ``make train`` run met that no cache held, 264 were mislabelled compute steps, and 145 of those are
listed (random play fills in mostly wrong figures: 1 of the 112 it met in 200,000 random legal steps).
"""

from __future__ import annotations

from collections.abc import Iterable

from edo_gym.world.generator import DURATION_DAYS, RELATIONS, World
from edo_gym.world.language import OP_QUERIES, compute_instruction, question, reply_instruction
from edo_gym.world.tasks import Task
from edo_gym.world.text import ABSTAIN_TEXT, DRIFTS, drift

#: Entity kinds whose names can be the subject of a lookup (an upstream answer, right or wrong).
SUBJECT_KINDS: tuple[str, ...] = ("person", "company", "city", "order", "shipment", "carrier")
#: Drift styles that can leave a name the entity linker does not resolve (the query then holds the drifted text).
UNLINKED_DRIFTS: tuple[str, ...] = ("abbreviated", "reordered")
#: What a lookup's filled-in subject reads when its input abstained, or is missing (not done, or rolled back).
NON_ANSWERS: tuple[str, ...] = (ABSTAIN_TEXT.rstrip("."), "(missing)")


def reachable_queries(world: World, tasks: Iterable[Task] = ()) -> list[str]:
    """Non-canonical retrieval queries ``world``'s episodes can produce, each once, in a fixed order.

    Families, in this order: every relation whose subject is an entity asked about every entity name of
    :data:`SUBJECT_KINDS` and :data:`NON_ANSWERS`; merged two-hop questions over every chain of two such relations
    (the first one's value kind is the second one's subject kind) about a subject of the first one's kind or a
    non-answer; each relation asked about the :data:`UNLINKED_DRIFTS` forms of its own subjects; the write step's
    instruction over every refund window as written (each drift style, with and without a final period) or a
    non-answer; the compute and write steps' fixed queries; then, for each analytics task of ``tasks`` (a task pool
    of ``world``, e.g. ``TaskPool.tasks``), its compute step's instruction over the gold revenue figures in the gold
    plan's order (:func:`analytics_compute_queries`). Canonical queries are left out.
    """
    # the relations this world holds facts of (the tier relations only in a world with tiered refund policies)
    entity_relations = [
        r for r in RELATIONS.values() if r.subject_kind in SUBJECT_KINDS and r.name in world.subjects_by_relation
    ]
    seen: dict[str, None] = {}
    names = [name for kind in SUBJECT_KINDS for name in world.entities.get(kind, ())]
    for rel in entity_relations:
        for subject in (*names, *NON_ANSWERS):
            seen[question((rel.name,), subject)] = None
    for first in entity_relations:
        for second in entity_relations:
            if second.subject_kind != first.value_kind:
                continue
            for subject in (*world.entities.get(first.subject_kind, ()), *NON_ANSWERS):
                seen[question((first.name, second.name), subject)] = None
    for rel in entity_relations:
        for subject in world.entities.get(rel.subject_kind, ()):
            for style in UNLINKED_DRIFTS:
                drifted = drift(subject, style).rstrip(".")
                if drifted != subject:
                    seen[question((rel.name,), drifted)] = None
    for days in DURATION_DAYS:
        value = f"{days} days"
        for written in (value, *(drift(value, style) for style in DRIFTS)):
            seen[reply_instruction(written)] = None
            seen[reply_instruction(written.rstrip("."))] = None
    for non_answer in (ABSTAIN_TEXT, *NON_ANSWERS):
        seen[reply_instruction(non_answer)] = None
    for text in OP_QUERIES.values():
        seen[text] = None
    for task in tasks:
        for text in analytics_compute_queries(task):
            seen[text] = None
    canonical = set(world.canonical_queries())
    return [text for text in seen if text not in canonical]


def analytics_compute_queries(task: Task) -> list[str]:
    """What a worker searches with when ``task``'s compute step is mislabelled as a lookup and its inputs are the gold
    lookups' answers: one text for an analytics task (its instruction over the gold figures), none for the others.

    The env fills a lookup-labelled step's placeholders as the entity linker leaves each upstream answer
    (:meth:`~edo_gym.envs.edo_env.EDOEnv._filled`): a figure links to no entity name and keeps its text without a
    final period. Inputs with abstentions are left out: on the default task pool, listing each figure or its
    abstention would add 2,898 texts to embed and search ahead, for 7 more of the 273 first-seen query texts of a
    ``make train`` run.
    """
    if task.family != "analytics" or not task.subtasks or task.subtasks[-1].kind != "compute":
        return []
    compute = task.subtasks[-1]
    assert compute.op is not None
    return [compute_instruction(compute.op, [task.subtasks[d].answer.rstrip(".") for d in compute.deps])]
