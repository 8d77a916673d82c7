"""Search results kept in the run-time disk cache (``RetrievalConfig.search_cache``) and searched ahead of use.

- a process that reads results from disk takes the same trajectories as one that searches the index and as one with
  the cache off, and queries the index for none of the searches an earlier process stored (presearch of the canonical
  queries at the first reset included: read in bulk, the same results);
- ``complete_all`` runs the presearch that a cold cache's first reset left waiting for the canonical vectors, so a
  later process reads those results from disk (what ``edo prepare`` leaves);
- ``search_reachable_queries`` (batched index queries) stores, for every reachable query, what a one-at-a-time search
  finds; a second call searches nothing;
- a stored row that is damaged (CRC), or names documents outside the shard or the wrong number of them, is not used:
  the query is searched again;
- the shard fingerprint follows the shard's documents; bad arguments are clear errors.
"""

from __future__ import annotations

import sqlite3

import gymnasium as gym
import pytest

import edo_gym  # noqa: F401  (registers the ids)
from edo_gym.config import RetrievalConfig
from edo_gym.retrieval.runtime_cache import RuntimeCache
from edo_gym.retrieval.search import query_digest
from edo_gym.world.queries import reachable_queries
from tests.exactness import assert_same, trajectory


def _env(small_world_kwargs, cache_dir, **retrieval):
    return gym.make("EDO-v0", **small_world_kwargs, retrieval={"cache_dir": str(cache_dir), **retrieval})


def _retrievers(env):
    return list({id(r): r for r in env.unwrapped.service.retrievers}.values())


def test_results_read_from_disk_give_the_same_trajectories_and_no_index_queries(tmp_path, small_world_kwargs):
    steps, seed = 600, 3
    off = _env(small_world_kwargs, tmp_path / "off", search_cache=False)
    writer = _env(small_world_kwargs, tmp_path / "on")
    # the same cache directory, another service (a different memo size): its memos start empty, as a new process's
    reader = _env(small_world_kwargs, tmp_path / "on", result_cache_size=49_999)
    try:
        assert writer.unwrapped.service is not reader.unwrapped.service
        runs = {"off": trajectory(off, steps, seed), "writer": trajectory(writer, steps, seed)}
        writer.unwrapped.service.flush()
        runs["reader"] = trajectory(reader, steps, seed)
        assert_same(runs["off"], runs["writer"], "search cache on (searched and stored)")
        assert_same(runs["off"], runs["reader"], "search cache on (read from disk)")
        assert all(r.disk is None for r in _retrievers(off))
        written = sum(r.searches for r in _retrievers(writer))
        assert written > 0 and sum(r.disk_hits for r in _retrievers(writer)) == 0
        assert sum(r.searches for r in _retrievers(reader)) == 0  # every search was stored by the writer
        assert sum(r.disk_hits for r in _retrievers(reader)) == written
        assert sum(r.searches for r in _retrievers(off)) == written
        # presearch of the canonical queries at the first reset: searched and stored by the writer, read by the reader
        # (on this cold cache the writer's presearch waits for the complete list of canonical vectors, so a query its
        # steps searched first, and stored, is read back by it too)
        presearched = sum(r.presearches + r.presearch_disk_hits for r in _retrievers(writer))
        assert sum(r.presearches for r in _retrievers(writer)) > 0
        assert sum(r.presearches for r in _retrievers(reader)) == 0
        assert sum(r.presearch_disk_hits for r in _retrievers(reader)) == presearched > 0
        for w_ret, r_ret in zip(_retrievers(writer), _retrievers(reader), strict=True):
            for (text, k), ids in list(w_ret.memo._data.items()):
                if text in w_ret.encoder.canonical:
                    assert r_ret.memo._data.get((text, k)) == ids, text
    finally:
        for env in (off, writer, reader):
            env.close()


def test_complete_all_runs_the_presearch_the_first_reset_left_for_later(tmp_path, small_world_kwargs):
    """``edo prepare``'s order on a cold cache: the first reset's presearch waits for the complete list of canonical
    vectors; ``complete_all`` builds the list, then presearches and stores the results, so that a later process's first
    reset reads every canonical query's result from disk and queries the index for none of them."""
    prep = _env(small_world_kwargs, tmp_path)
    reader = None
    try:
        prep.reset(seed=0)
        retrievers = [r for r in _retrievers(prep) if r.size]
        top_k = {w.spec.top_k for w in prep.unwrapped.workers}
        assert retrievers and all(r.presearch_pending and not r.presearched for r in retrievers)
        assert sum(r.presearches + r.presearch_disk_hits for r in retrievers) == 0
        prep.unwrapped.service.complete_all()
        assert all(not r.presearch_pending and r.presearched <= top_k and r.presearched for r in retrievers)
        searched = sum(r.presearches for r in retrievers)
        assert searched == sum(len(r.presearched) * len(r.encoder.canonical) for r in retrievers) > 0
        assert prep.unwrapped.service.run_pending_presearches() == 0  # nothing left
        prep.unwrapped.service.flush()
        # another service on the same directory (a different memo size), as a later process: all read from disk
        reader = _env(small_world_kwargs, tmp_path, result_cache_size=49_999)
        reader.reset(seed=0)
        later = [r for r in _retrievers(reader) if r.size]
        assert sum(r.presearches for r in later) == 0 and sum(r.searches for r in later) == 0
        assert sum(r.presearch_disk_hits for r in later) == searched
        for p_ret, r_ret in zip(retrievers, later, strict=True):
            for (text, k), ids in list(p_ret.memo._data.items()):
                assert r_ret.memo._data.get((text, k)) == ids, text
    finally:
        for env in (prep, reader):
            if env is not None:
                env.close()


def test_reachable_queries_searched_ahead_equal_one_at_a_time_searches(tmp_path, small_world_kwargs):
    env = _env(small_world_kwargs, tmp_path)
    try:
        base = env.unwrapped
        env.reset(seed=0)
        service = base.service
        top_k = [w.spec.top_k for w in base.workers]
        with pytest.raises(ValueError, match="one k per worker"):
            service.search_reachable_queries(top_k[:-1])
        service.embed_reachable_queries(progress=False)
        n = service.search_reachable_queries(top_k, progress=False)
        texts = service.reachable_query_texts()
        assert texts == reachable_queries(service.world, base.pool.tasks)  # the env registered its task pool
        jobs = {(id(w.retriever), w.spec.top_k) for w in base.workers if w.retriever.size}
        assert n == len(texts) * len(jobs) > 0
        assert service.search_reachable_queries(top_k, progress=False) == 0  # all stored now
        fresh = RuntimeCache(service.cache.directory, service.model_id, service.embedders[0].dim)
        assert assert_stored_as_searched(base, fresh, texts[:: max(1, len(texts) // 25)]) > 50
    finally:
        env.close()


def assert_stored_as_searched(base, cache: RuntimeCache, texts) -> int:
    """Search each of ``texts`` in each worker's shard one query at a time (as a step would, the disk cache off) and
    check that ``cache`` holds that result; the number of (text, worker) pairs checked."""
    checked = 0
    for worker in base.workers:
        retriever, k = worker.retriever, worker.spec.top_k
        if not retriever.size:
            continue
        disk, retriever.disk = retriever.disk, None
        try:
            for text in texts:
                retriever.memo.clear()
                live = retriever.search(text, k)
                stored = cache.get_search(retriever.fingerprint, k, query_digest(retriever.encoder.encode(text)))
                assert stored == live, text
                checked += 1
        finally:
            retriever.disk = disk
    return checked


def test_damaged_or_foreign_rows_are_searched_again(tmp_path, small_world_kwargs):
    env = _env(small_world_kwargs, tmp_path)
    try:
        env.reset(seed=0)
        worker = next(w for w in env.unwrapped.workers if w.retriever.size > w.spec.top_k)
        retriever, k = worker.retriever, worker.spec.top_k
        cache = retriever.disk
        assert cache is not None
        outside = next(i for i in range(len(env.unwrapped.service.doc_vectors)) if i not in retriever.indices)
        inside = sorted(retriever.indices)
        cases = {
            "a document of another shard": (outside, *inside[1:k]),
            "too few documents": tuple(inside[: k - 1]),
            "a document twice": (inside[0],) * k,
        }
        for n, (why, ids) in enumerate(cases.items()):
            text = f"Who founded Nowhere Corp {n}?"
            digest = query_digest(retriever.encoder.encode(text))
            cache.put_searches(retriever.fingerprint, k, [(digest, ids)])
            retriever.memo.clear()
            searches, hits = retriever.searches, retriever.disk_hits
            result = retriever.search(text, k)
            assert retriever.searches == searches + 1 and retriever.disk_hits == hits, why
            assert len(result) == k and set(result) <= retriever.indices, why
        # a row whose CRC does not match its ids is rejected when read
        text = "Who founded Elsewhere Corp?"
        retriever.memo.clear()
        live = retriever.search(text, k)
        cache.flush()
        digest = query_digest(retriever.encoder.encode(text))
        with sqlite3.connect(str(cache.path)) as conn:
            conn.execute("UPDATE searches SET crc = crc + 1 WHERE query = ?", (digest,))
        fresh = RuntimeCache(cache.directory, cache.model_id, cache.dim)
        assert fresh.get_search(retriever.fingerprint, k, digest) is None and fresh.rejected == 1
        retriever.disk, retriever.memo = fresh, type(retriever.memo)(10)
        assert retriever.search(text, k) == live
    finally:
        env.close()


def test_fingerprint_follows_the_shards_documents(tmp_path, small_world_kwargs):
    env = _env(small_world_kwargs, tmp_path)
    try:
        retrievers = [r for r in _retrievers(env) if r.size]
        prints = [r.fingerprint for r in retrievers]
        assert len(set(prints)) == len(prints)  # distinct shards, distinct keys
        r = retrievers[0]
        vectors = r.vectors.copy()
        vectors[min(r.indices)] *= -1.0
        clone = type(r)(None, r.encoder, r.domains, 10, factory=lambda: None, size=r.size, indices=r.indices, vectors=vectors)
        assert clone.fingerprint != r.fingerprint  # one document's vector changed
        clone2 = type(r)(
            None, r.encoder, r.domains, 10, factory=lambda: None, size=r.size, indices=r.indices, vectors=r.vectors
        )
        assert clone2.fingerprint == r.fingerprint
        with pytest.raises(RuntimeError, match="needs its vectors and indices"):
            _ = type(r)(None, r.encoder, r.domains, 10, factory=lambda: None, size=1).fingerprint
    finally:
        env.close()


def test_search_cache_config_and_runtime_rows(tmp_path):
    with pytest.raises((TypeError, ValueError), match="search_cache"):
        RetrievalConfig(search_cache="yes")  # type: ignore[arg-type]
    cache = RuntimeCache(tmp_path, "model-a", 4)
    q1, q2 = b"1" * 16, b"2" * 16
    assert cache.missing_searches("shard", 2, [q1, q2, q1]) == [q1, q2]
    cache.put_search("shard", 2, q1, (5, 3))  # buffered
    assert cache.get_search("shard", 2, q1) == (5, 3)
    assert cache.missing_searches("shard", 2, [q1, q2]) == [q2]
    cache.flush()
    reread = RuntimeCache(tmp_path, "model-a", 4)
    assert reread.get_search("shard", 2, q1) == (5, 3)
    assert reread.get_search("shard", 3, q1) is None and reread.get_search("other", 2, q1) is None
    assert reread.sizes()["searches"] == 1
    with sqlite3.connect(str(reread.path)) as conn:  # stored as little-endian int32, whatever the machine
        (blob,) = conn.execute("SELECT ids FROM searches").fetchone()
    assert blob == b"\x05\x00\x00\x00\x03\x00\x00\x00"
