"""The language deviation (:mod:`edo_gym.world.phrasing`): varied task texts, held-out compositions for the test split,
and the rule-based planner that knows only the training phrasings.

With ``TaskConfig.phrasing_rate == 0`` (``SCRIPTED``) every text is canonical and the pool is the one without
phrasing; at any rate the structure, gold answers and split are unchanged and grading agrees; every training text reads
with :func:`rule_plan` to the plan its text asks for (the gold plan, but for a task with the extra step, whose text asks
for the usual support plan: :func:`~edo_gym.world.extra_step.scripted_subtasks`) and no held-out one reads at all; the
simulated planner plans every text, canonical or not.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest

from edo_gym import SCRIPTED
from edo_gym.agents.planner import PlanStep, rule_plan
from edo_gym.config import EDOConfig, TaskConfig
from edo_gym.world import phrasing
from edo_gym.world.extra_step import has_extra_step, scripted_subtasks
from edo_gym.world.generator import RELATIONS, World
from edo_gym.world.grading import entity_index, grade_final
from edo_gym.world.language import compute_instruction, question, reply_instruction
from edo_gym.world.phrasing import Composition, Part
from edo_gym.world.tasks import Task, TaskPool, phrase

# the default pool, and one with short and very long chains (every relation, up to 12 hops)
POOLS = [{}, {"min_hops": 1, "max_hops": 12, "seed": 3}]


@pytest.fixture(scope="module")
def world() -> World:
    return World(EDOConfig().world)


def gold_steps(task: Task) -> tuple[PlanStep, ...]:
    """The decomposition ``task``'s text asks for, as plan steps in the world's language (what a faithful planner
    writes from the text): the gold one, but for a task with the extra step (no text asks for its two revealed steps)."""
    out = []
    for s in scripted_subtasks(task) if has_extra_step(task) else task.subtasks:
        if s.kind == "lookup":
            assert s.relation is not None
            about = s.literal if s.literal is not None else f"{{{s.deps[0] + 1}}}"
            out.append(PlanStep("lookup", s.domain, question((s.relation,), about), s.deps))
        elif s.kind == "compute":
            assert s.op is not None
            out.append(PlanStep("compute", s.domain, compute_instruction(s.op, [f"{{{d + 1}}}" for d in s.deps]), s.deps))
        else:
            out.append(PlanStep("write", s.domain, reply_instruction(f"{{{s.deps[0] + 1}}}"), s.deps))
    return tuple(out)


def core_parts(c: Composition) -> list[Part]:
    """The core parts a composition names, frame or envelope first."""
    slots = {
        "multihop": [phrasing.FRAMES, *phrasing.SYNONYMS.values()],
        "support": [
            phrasing.ENVELOPES,
            *phrasing.REFERENCES.values(),
            phrasing.COMPLAINTS,
            phrasing.QUESTIONS,
            phrasing.ORDERS,
        ],
        "analytics": [phrasing.ANALYTICS_FRAMES, *phrasing.OPERATIONS.values(), phrasing.STORE_LISTS],
    }[c.family]
    by_name = {p.name: p for table in slots for p in table}
    assert len(by_name) == sum(len(t) for t in slots)  # part names are unique within a family
    return [by_name[name] for name in (c.frame, *c.parts)]


def test_rate_zero_is_the_canonical_pool_and_any_rate_keeps_structure_answers_and_split(world):
    assert TaskConfig().phrasing_rate == 1.0 and EDOConfig.from_kwargs(None, **SCRIPTED).tasks.phrasing_rate == 0.0
    canonical = TaskPool(world, TaskConfig(phrasing_rate=0.0))
    assert canonical.compositions == [None] * len(canonical.tasks)
    # the canonical texts are what tasks.py writes: the first frame and synonyms of each table are its templates
    for rel, parts in phrasing.SYNONYMS.items():
        assert parts[0].template == phrase(rel, "{x}")
    assert phrasing.FRAMES[0].template == "What is {q}?"
    rephrased_at: dict[float, set[int]] = {}
    for rate in (0.3, 0.7, 1.0):
        pool = TaskPool(world, TaskConfig(phrasing_rate=rate))
        np.testing.assert_array_equal(pool.test_ids, canonical.test_ids)
        np.testing.assert_array_equal(pool.train_ids, canonical.train_ids)
        for a, b in zip(pool.tasks, canonical.tasks, strict=True):
            assert dataclasses.replace(a, text=b.text) == b  # same id, family, subtasks, answer, hops
        rephrased_at[rate] = {i for i, c in enumerate(pool.compositions) if c is not None}
        for i, c in enumerate(pool.compositions):
            assert (pool.tasks[i].text != canonical.tasks[i].text) <= (c is not None)
        share = len(rephrased_at[rate]) / len(pool.tasks)
        assert abs(share - rate) < 0.05, (rate, share)
    # each task draws from its own generator: a higher rate rephrases a superset, with the same texts
    assert rephrased_at[0.3] <= rephrased_at[0.7] <= rephrased_at[1.0] == set(range(len(canonical.tasks)))
    low, high = TaskPool(world, TaskConfig(phrasing_rate=0.3)), TaskPool(world, TaskConfig(phrasing_rate=0.7))
    assert all(low.tasks[i].text == high.tasks[i].text for i in rephrased_at[0.3])
    # deterministic from the seed; another seed draws other phrasings
    again = TaskPool(world, TaskConfig(phrasing_rate=1.0))
    assert [t.text for t in again.tasks] == [t.text for t in TaskPool(world, TaskConfig(phrasing_rate=1.0)).tasks]
    other = TaskPool(world, TaskConfig(phrasing_rate=1.0, seed=12))
    assert [t.text for t in other.tasks] != [t.text for t in again.tasks]


def test_grading_does_not_depend_on_the_phrasing(world):
    """The gold answer is the structure's, and grading reads the same entity names off either text."""
    canonical = TaskPool(world, TaskConfig(min_hops=1, max_hops=6, phrasing_rate=0.0))
    pool = TaskPool(world, TaskConfig(min_hops=1, max_hops=6, phrasing_rate=1.0))
    index = entity_index(world)
    answers = [t.answer for t in canonical.tasks]
    rng = np.random.default_rng(0)
    for a, b in zip(pool.tasks, canonical.tasks, strict=True):
        assert a.subtasks == b.subtasks and a.answer == b.answer
        assert index.mentions(a.text) == index.mentions(b.text), (a.text, b.text)
        assert grade_final(world, a, a.answer)
        # the gold answer, the gold answer said with the question's entity names, and other tasks' answers
        names = " and ".join(sorted(index.mentions(b.text)))
        for answer in (
            b.answer,
            f"About {names}: {b.answer}.",
            *(answers[int(i)] for i in rng.integers(len(answers), size=3)),
        ):
            assert grade_final(world, a, answer) == grade_final(world, b, answer), (a.text, answer)


@pytest.mark.parametrize("kwargs", POOLS)
def test_held_out_compositions_are_unseen_in_training_and_unread_by_the_rules(world, kwargs):
    pool = TaskPool(world, TaskConfig(phrasing_rate=1.0, **kwargs))
    test = {int(i) for i in pool.test_ids}
    keys: dict[str, set] = {"train": set(), "test": set()}
    gold = Counter()
    for task, c in zip(pool.tasks, pool.compositions, strict=True):
        assert c is not None and c.family == task.family
        split = "test" if task.task_id in test else "train"
        keys[split].add(c.key)
        parts = core_parts(c)
        assert c.held_out == (split == "test") == any(p.held_out for p in parts), (split, c)
        if split == "train":
            assert c.context is None or c.context in {
                p.name for p in phrasing.training(phrasing.CONTEXTS + phrasing.SUPPORT_CONTEXTS)
            }
        assert phrasing.render(task, c) == task.text
        plan = rule_plan(task.text)
        # every training composition reads to its gold plan; no held-out one reads at all
        if split == "train":
            assert plan is not None and plan.steps == gold_steps(task), task.text
        else:
            assert plan is None, task.text
        gold[split] += plan is not None and plan.steps == gold_steps(task)
    assert keys["train"] and keys["test"] and not keys["train"] & keys["test"]
    n_test = len(test)
    n_train = len(pool.tasks) - n_test
    print(
        f"\nphrasing_rate=1.0 {kwargs or 'default pool'}: rule_plan gives the gold decomposition for "
        f"{gold['train']}/{n_train} training tasks ({gold['train'] / n_train:.3f}) and {gold['test']}/{n_test} "
        f"test tasks ({gold['test'] / n_test:.3f}); {len(keys['train'])} training and {len(keys['test'])} held-out "
        "compositions"
    )


def _variants(task: Task) -> list[tuple[Composition, bool]]:
    """``task`` composed with each part in turn (training parts elsewhere), and whether that part is held out."""
    base_frame = phrasing.training(phrasing.core_table(task.family, 0))[0]
    out = []
    if task.family == "multihop":
        relations = [str(s.relation) for s in task.subtasks]
        canonical = [phrasing.SYNONYMS[r][0].name for r in relations]
        by_name = {p.name: p for parts in phrasing.SYNONYMS.values() for p in parts}
        for p in phrasing.FRAMES:
            out.append((Composition("multihop", p.name, tuple(canonical), None, p.held_out), p.held_out))
        for h, rel in enumerate(relations):
            for p in phrasing.SYNONYMS[rel]:
                synonyms = list(canonical)
                synonyms[h] = p.name
                if p.form == "poss":  # possessives from the subject up to this hop
                    synonyms[:h] = [next(q.name for q in phrasing.SYNONYMS[r] if q.form == "poss") for r in relations[:h]]
                for k in range(h + 1, len(relations)):  # outer hops that may wrap it (no "the mayor of X's city")
                    inner = by_name[synonyms[k - 1]].form
                    if not by_name[synonyms[k]].may_wrap(inner):
                        synonyms[k] = next(
                            q.name for q in phrasing.training(phrasing.SYNONYMS[relations[k]]) if q.may_wrap(inner)
                        )
                out.append((Composition("multihop", base_frame.name, tuple(synonyms), None, p.held_out), p.held_out))
        for p in phrasing.CONTEXTS:
            out.append((Composition("multihop", base_frame.name, tuple(canonical), p.name, p.held_out), p.held_out))
        return out
    kind = RELATIONS[str(task.subtasks[0].relation)].subject_kind if task.family == "support" else str(task.subtasks[-1].op)
    n = 5 if task.family == "support" else 3
    tables = [phrasing.core_table(task.family, slot, kind) for slot in range(n)]
    first = [phrasing.training(t)[0].name for t in tables]
    for slot, table in enumerate(tables):
        for p in table:
            names = list(first)
            names[slot] = p.name
            out.append((Composition(task.family, names[0], tuple(names[1:]), None, p.held_out), p.held_out))
    contexts = phrasing.SUPPORT_CONTEXTS if task.family == "support" else phrasing.CONTEXTS
    for p in contexts:
        out.append((Composition(task.family, first[0], tuple(first[1:]), p.name, p.held_out), p.held_out))
    return out


def test_each_part_alone_is_read_by_the_rules_exactly_when_it_is_a_training_part(world):
    """Every part of every table, put into an otherwise training composition: a training part reads to the gold plan,
    a held-out one makes the text unreadable; and every text is written as a person would read it."""
    pool = TaskPool(world, TaskConfig(min_hops=1, max_hops=3, n_tasks=60))
    index = entity_index(world)
    by_name = {p.name: p for parts in phrasing.SYNONYMS.values() for p in parts}
    seen: set[tuple[str, str | None]] = set()
    for task in pool.tasks:
        for composition, held_out in _variants(task):
            text = phrasing.render(task, composition)
            if task.family == "multihop":  # each hop may wrap the phrase inside it
                forms = [None] + [by_name[name].form for name in composition.parts]
                assert all(by_name[name].may_wrap(forms[h]) for h, name in enumerate(composition.parts)), composition
            plan = rule_plan(text)
            if held_out:
                assert plan is None, text
            else:
                assert plan is not None and plan.steps == gold_steps(task), text
            assert index.mentions(text) == index.mentions(task.text), text
            assert "  " not in text and text == text.strip() and (text[0].isupper() or text[0] == "'"), text
            if task.family == "support":  # the message is in single quotes: no apostrophe inside it
                assert text.count("'") == 2, text
            seen.update((task.family, name) for name in (composition.frame, *composition.parts, composition.context))
    tables = {
        "multihop": [phrasing.FRAMES, *phrasing.SYNONYMS.values(), phrasing.CONTEXTS],
        "support": [phrasing.ENVELOPES, *phrasing.REFERENCES.values(), phrasing.COMPLAINTS, phrasing.QUESTIONS,
                    phrasing.ORDERS, phrasing.SUPPORT_CONTEXTS],
        "analytics": [phrasing.ANALYTICS_FRAMES, *phrasing.OPERATIONS.values(), phrasing.STORE_LISTS, phrasing.CONTEXTS],
    }  # fmt: skip
    assert {(family, p.name) for family, ts in tables.items() for t in ts for p in t} <= seen  # every part was tried
    # context sentences name nothing and state no number that could pass for an answer
    for p in phrasing.CONTEXTS + phrasing.SUPPORT_CONTEXTS:
        assert not index.mentions(p.template) and not re.search(r"\d", p.template), p


def test_phrasing_rate_is_validated_and_has_a_flat_key():
    assert EDOConfig.from_kwargs(tasks_phrasing_rate=0.5).tasks.phrasing_rate == 0.5
    assert EDOConfig.from_kwargs(tasks={"phrasing_rate": 1}).tasks.phrasing_rate == 1
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"TaskConfig\.phrasing_rate must be"):
            EDOConfig.from_kwargs(tasks_phrasing_rate=bad)
    for bad in (True, "0.5", None):
        with pytest.raises(TypeError, match=r"TaskConfig\.phrasing_rate must be int or float"):
            TaskConfig(phrasing_rate=bad)


def _random_episode(env: gym.Env, seed: int) -> None:
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(200):
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        if terminated or truncated:
            return
    raise AssertionError("an episode of random legal actions did not end")


def test_the_simulated_planner_plans_every_phrasing_and_the_rules_planner_only_training_ones():
    """The simulated planner understands any phrasing (it plans from the pool): with the same seeds it writes the same
    plans as for the canonical texts (repaired as often, falling back no more often); random legal play runs. The ``rules`` planner
    reads the training split's texts and falls back on every held-out one."""
    kwargs = {"tasks_split": "all", "planner_malformed_rate": 0.5}  # malformed replies: some plans are repaired
    varied = gym.make("EDO-v0", tasks={"phrasing_rate": 1.0}, **kwargs)
    plain = gym.make("EDO-v0", tasks_phrasing_rate=0.0, **kwargs)
    try:
        a, b = varied.unwrapped, plain.unwrapped
        sources = Counter()
        for seed in range(30):
            varied.reset(seed=seed)
            plain.reset(seed=seed)
            assert a.episode.task.subtasks == b.episode.task.subtasks
            sources["other text"] += a.episode.task.text != b.episode.task.text
            assert a.backend.tasks_by_text[a.episode.task.text] == a.episode.task  # the planner knows this text
            sources[a.episode.plan.source, "varied"] += 1
            sources[b.episode.plan.source, "plain"] += 1
            if b.episode.plan.source != "fallback":
                assert a.episode.plan.steps == b.episode.plan.steps, a.episode.task.text
        print(f"\nplan sources in 30 resets: {dict(sources)}")
        assert sources["other text"] >= 20  # (a training composition may be the canonical one)
        assert sources["fallback", "varied"] <= sources["fallback", "plain"]
        assert sources["repaired", "varied"] == sources["repaired", "plain"] > 0
        for seed in range(8):
            _random_episode(varied, seed)
    finally:
        varied.close()
        plain.close()
    for split, source in (("train", "rules"), ("test", "fallback")):
        env = gym.make("EDO-v0", planner_mode="rules", tasks_split=split, tasks_phrasing_rate=1.0)
        try:
            for seed in range(12):
                env.reset(seed=seed)
                assert env.unwrapped.episode.plan.source == source, env.unwrapped.episode.task.text
            _random_episode(env, 0)
        finally:
            env.close()
