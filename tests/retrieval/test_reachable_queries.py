"""Reachable queries embedded ahead of use (``edo prepare``, ``RetrievalService.embed_reachable_queries``).

- the list is deterministic, holds each text once, leaves the canonical queries out and has every family it claims;
  the compute family holds the query the env itself builds for a compute step mislabelled as a lookup whose inputs
  are the gold figures or abstentions;
- each stored vector is the model's vector of the text embedded alone, bit for bit, and a fresh cache reads it back;
- a second call embeds nothing; trajectories are the same with the queries embedded ahead or not, and the env then
  runs the model for none of the queries the list covers;
- ``RuntimeCache.missing`` / ``put_vectors`` behave (pending rows, bad shapes, a cache that cannot be used);
- ``edo prepare`` embeds and searches the default world's list once, then finds it cached (slow); ``--no-reachable`` skips it; a bad
  env id is a clear error.
"""

from __future__ import annotations

import copy
import json
import pickle
import sqlite3

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401  (registers the ids)
from edo_gym.agents.worker import retrieval_query
from edo_gym.retrieval.runtime_cache import RuntimeCache
from edo_gym.world.language import OP_QUERIES, parse_compute, question, reply_instruction
from edo_gym.world.queries import NON_ANSWERS, analytics_compute_queries, reachable_queries
from edo_gym.world.text import ABSTAIN_TEXT, drift
from tests.exactness import assert_same, trajectory


def _env(small_world_kwargs, cache_dir):
    return gym.make("EDO-v0", **small_world_kwargs, retrieval={"cache_dir": str(cache_dir)})


def test_reachable_queries_list_every_family_once_and_no_canonical_query(small_world_kwargs, make_env):
    world = make_env(**small_world_kwargs).unwrapped.world
    texts = reachable_queries(world)
    assert texts == reachable_queries(world)  # deterministic
    assert len(texts) == len(set(texts))
    assert not set(texts) & set(world.canonical_queries())
    person, company = world.entities["person"][0], world.entities["company"][0]
    shipment = world.entities["shipment"][0]
    expected = [
        question(("mentor",), company),  # a relation asked about an entity of another kind
        question(("employer", "headquarters"), person),  # a merged two-hop question
        question(("carrier", "refund_window"), shipment),
        question(("mentor",), drift(person, "abbreviated")),  # a drifted name the linker missed
        question(("founder",), drift(company, "reordered")),
        *(question(("birth_city",), non_answer) for non_answer in NON_ANSWERS),  # an abstention or a missing input
        reply_instruction("45 days"),  # a write step mislabelled as a lookup
        reply_instruction(drift("45 days", "sentence").rstrip(".")),
        reply_instruction(ABSTAIN_TEXT),
        *OP_QUERIES.values(),
    ]
    missing = [text for text in expected if text not in set(texts)]
    assert not missing, missing
    # with a task pool: each analytics task's compute query comes after the world's families
    tasks = make_env(**small_world_kwargs).unwrapped.pool.tasks
    with_tasks = reachable_queries(world, tasks)
    assert with_tasks == reachable_queries(world, list(tasks)) and with_tasks[: len(texts)] == texts
    analytics = [task for task in tasks if task.family == "analytics"]
    assert analytics and all(not analytics_compute_queries(task) for task in tasks if task.family != "analytics")
    added = {text for task in analytics for text in analytics_compute_queries(task)}
    assert set(with_tasks[len(texts) :]) == added
    for task in analytics:
        figures = tuple(sub.answer for sub in task.subtasks[:-1])
        (query,) = analytics_compute_queries(task)
        assert parse_compute(query) == (task.subtasks[-1].op, figures)


def test_compute_family_holds_the_envs_own_query_of_a_mislabelled_compute_step(small_world_kwargs, make_env):
    # every plan carries one mislabel; on an analytics task it sometimes makes the compute step a lookup, which then
    # searches with its instruction, filled in by the env from the upstream answers
    planner = {"error_rate": 1.0, "error_weights": (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0), "malformed_rate": 0.0}
    kwargs = {**small_world_kwargs, "tasks": {**small_world_kwargs["tasks"], "families": ("analytics",)}}
    env = make_env(**kwargs, planner=planner)
    base = env.unwrapped
    listed = set(base.service.reachable_query_texts())
    checked = 0
    for seed in range(200):
        env.reset(seed=seed)
        steps = base.episode.plan.steps
        compute = [i for i, step in enumerate(steps) if parse_compute(step.instruction) is not None]
        if not compute or steps[compute[0]].label != "lookup":
            continue
        i = compute[0]
        gold = [sub.answer for sub in base.episode.task.subtasks[:-1]]
        assert [base.episode.task.subtasks[d].answer for d in base.episode.task.subtasks[-1].deps] == gold
        for abstained in ((), (0,)):
            for d in range(i):  # what a worker's record holds: the gold figure, or an abstention
                base.episode.plan.results[d] = _Answer(ABSTAIN_TEXT if d in abstained else gold[d])
            query = retrieval_query(steps[i].label, base._filled(i)[0])
            if abstained:  # not listed (see analytics_compute_queries); the env built it from the abstention
                assert query not in listed and ABSTAIN_TEXT.rstrip(".") in query, query
                continue
            assert query in listed and query == analytics_compute_queries(base.episode.task)[0], query
            checked += 1
        base.episode.plan.results[:] = [None] * len(base.episode.plan.results)
    assert checked >= 3  # the planner mislabelled a compute step as a lookup at least once


class _Answer:
    """The one field of a worker's record that ``EDOEnv._filled`` reads."""

    def __init__(self, text: str) -> None:
        self.text = text


def test_embedded_ahead_vectors_are_the_models_own_and_trajectories_do_not_change(tmp_path, small_world_kwargs):
    plain = _env(small_world_kwargs, tmp_path / "plain")
    ahead = _env(small_world_kwargs, tmp_path / "ahead")
    try:
        service = ahead.unwrapped.service
        texts = service.reachable_query_texts()
        n = service.embed_reachable_queries(progress=False)
        assert n == len(texts) > 100
        assert service.embed_reachable_queries(progress=False) == 0  # all cached now
        # a fresh connection reads each vector back: the model's vector of the text alone, bit for bit
        fresh = RuntimeCache(service.cache.directory, service.model_id, service.embedders[0].dim)
        embedder = service.embedders[0]
        for text in texts[:: max(1, len(texts) // 7)]:
            stored = fresh.get_vector(text)
            assert stored is not None, text
            assert np.array_equal(stored, embedder.encode_one(text)), text
        runs = {name: trajectory(env, 600, seed=3) for name, env in (("plain", plain), ("ahead", ahead))}
        assert_same(runs["plain"], runs["ahead"], "reachable queries embedded ahead")
        plain_calls = plain.unwrapped.service.encoders[0].model_calls
        assert plain_calls > 0  # the plain run met non-canonical queries and ran the model for them
        assert service.encoders[0].model_calls == 0 < service.runtime.vector_hits  # read, not computed
    finally:
        plain.close()
        ahead.close()


def test_runtime_cache_missing_and_put_vectors(tmp_path):
    cache = RuntimeCache(tmp_path, "model-a", 4)
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert cache.missing(["a", "b", "a", "c"]) == ["a", "b", "c"]
    cache.put_vector("b", vectors[1])  # buffered, not committed yet
    assert cache.missing(["a", "b", "c"]) == ["a", "c"]
    cache.put_vectors(["a", "c"], vectors[[0, 2]])
    assert cache.missing(["a", "b", "c", "d"]) == ["d"]
    reread = RuntimeCache(tmp_path, "model-a", 4)
    assert np.array_equal(reread.get_vector("c"), vectors[2])
    with pytest.raises(ValueError, match=r"2 texts need vectors of shape \(2, 4\)"):
        cache.put_vectors(["x", "y"], vectors)
    # a database written for another vector size is not used: everything is missing, nothing is written
    with pytest.warns(Warning, match="not used"):
        other = RuntimeCache(tmp_path, "model-a", 2)
        assert other.missing(["a"]) == ["a"]
    assert not other.writable()
    other.put_vectors(["z"], vectors[:1, :2])
    with sqlite3.connect(str(cache.path)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM vectors WHERE text = 'z'").fetchone()[0] == 0


def test_edo_prepare_cli_without_reachable_queries_and_errors(capsys):
    from edo_gym.cli import main

    assert main(["prepare", "--no-reachable"]) == 0  # the default world on the suite's cache
    out = capsys.readouterr().out
    assert "reachable queries: skipped (--no-reachable)" in out and "done in" in out
    assert main(["prepare", "--env", "CartPole-v1"]) == 2
    assert "has no retrieval service" in capsys.readouterr().err
    assert main(["prepare", "--env", "NoSuchEnv-v0"]) == 2
    assert "edo prepare: error:" in capsys.readouterr().err


@pytest.mark.slow
def test_edo_prepare_cli_embeds_the_default_worlds_queries_once(capsys):
    from edo_gym.cli import main

    assert main(["prepare"]) == 0  # the default world on the suite's cache: embeds what is missing (~15 s once)
    assert main(["prepare"]) == 0
    out = capsys.readouterr().out
    assert "\n  0 reachable queries embedded ahead of use" in out  # the second run found them all cached
    assert "\n  0 (query, shard) searches of them run ahead of use" in out  # and their search results stored
    assert "\n  0 word pieces' token counts stored ahead of use" in out  # and their words' token counts


def test_a_pickled_service_keeps_its_task_pools_in_a_fresh_process(small_world_kwargs, make_env, run_python, tmp_path):
    """An unpickled service lists the same reachable queries as the pickled one, its task pools' compute queries
    included: a fresh process builds its own service and registers the pools that came with it."""
    service = make_env(**small_world_kwargs).unwrapped.service
    expected = service.reachable_query_texts()
    assert len(expected) > len(reachable_queries(service.world))  # the registered pool adds compute queries
    assert pickle.loads(pickle.dumps(service)) is service  # this process's own service, as RetrievalService.get gives
    path = tmp_path / "service.pkl"
    path.write_bytes(pickle.dumps(service))
    code = f"import json, pickle; s = pickle.loads(open({str(path)!r}, 'rb').read()); print(json.dumps(s.reachable_query_texts()))"
    proc = run_python(code, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected


def test_round_trips_in_one_process_register_no_copies_of_the_pools(small_world_kwargs, make_env):
    """An env unpickled (or deep-copied) in the process that holds its service registers no copy of the task pool it
    brings along: the service keeps its pools, the reachable queries stay the same and the next pickle does not grow.
    Before, each round trip doubled the pools the service held and pickled (7 round trips in a row took a minute)."""
    env = make_env(**small_world_kwargs)
    service = env.unwrapped.service
    expected = service.reachable_query_texts()
    pools = len(service._task_lists)  # this env's, and those of other tests' envs on the same world
    clones, sizes = [env], []
    try:
        for _ in range(4):
            data = pickle.dumps(clones[-1])
            sizes.append(len(data))
            clones.append(pickle.loads(data))
        for _ in range(2):
            clones.append(copy.deepcopy(clones[-1]))
        assert all(clone.unwrapped.service is service for clone in clones)
        # the first pickle holds one pool list (the env's is the service's); a clone's own list is another, equal one
        assert sizes[1:] == [sizes[1]] * 3, sizes
        assert len(service._task_lists) == pools
        assert service.reachable_query_texts() == expected
    finally:
        for clone in clones[1:]:
            clone.close()
