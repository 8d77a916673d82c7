"""Many processes: several processes building one embedding cache at once, the same episode in any process, and
vectorised EDO-v0 envs.

- ``EmbeddingCache.load_or_build`` called by several spawned processes at the same moment leaves exactly one
  valid file, built once (file lock + atomic rename), and every process gets the same vectors;
- same seed, same result, in any process: fresh processes, each building its own chromadb index, replay
  identical trajectories (observations, rewards, info, the text trace with every retrieved document) under the
  same seeds and actions, because every search returns the exact top k (the index's candidates are re-ranked
  exactly); a process forked after chromadb started searches exactly in numpy and gets the same results;
- SB3 ``SubprocVecEnv`` (``spawn``, ``forkserver``) and ``gym.make_vec(..., vectorization_mode="async")`` step
  thousands of times without deadlock, and each worker process loads the embedding model exactly once
  (``EDOEnv.process_info()["model_loads"]``, read through ``env_method`` / ``call``).

The 8-process runs and the 20,000-step replay are ``slow`` (each process loads the model: ~30 s on 2 cores); a
2-process smoke run and a shorter replay are fast.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401  (registers EDO-v0)
from edo_gym.config import default_workers
from edo_gym.retrieval import backends
from edo_gym.retrieval.cache import CacheWarning, EmbeddingCache, texts_hash
from tests.reliability_helpers import det_vectors

TEXTS = [f"text {i}: {w}" for i, w in enumerate(["apples", "pears", "plums", "figs"] * 5)]
MODEL = "det-model==1"


# -- processes building one cache -----------------------------------------------------------------------------------
def _build_in_child(directory: str, markers: str, barrier, queue, real_model: bool) -> None:
    """Child process: wait for the others, then load-or-build; report (pid, vectors, warnings)."""
    try:
        if real_model:
            from edo_gym.retrieval.embedder import Embedder

            embedder = Embedder("default")
            model_id = embedder.model_id

            def build(texts):
                Path(markers, str(os.getpid())).touch()
                return embedder.encode(texts)
        else:
            model_id = MODEL

            def build(texts):
                Path(markers, str(os.getpid())).touch()
                time.sleep(0.5)  # a slow build, so the others pile up on the lock
                return det_vectors(texts)

        barrier.wait(timeout=300)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            vectors = EmbeddingCache(directory).load_or_build("corpus", model_id, TEXTS, build)
        queue.put((os.getpid(), vectors, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)], None))
    except BaseException as exc:  # report, never hang the parent
        queue.put((os.getpid(), None, [], repr(exc)))


def _run_builders(tmp_path: Path, n: int, real_model: bool = False, timeout: float = 120.0):
    ctx = mp.get_context("spawn")
    directory, markers = tmp_path / "cache", tmp_path / "markers"
    markers.mkdir()
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_build_in_child, args=(str(directory), str(markers), barrier, queue, real_model)) for _ in range(n)
    ]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=timeout) for _ in range(n)]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    errors = [r[3] for r in results if r[3]]
    assert not errors, errors
    return directory, sorted(markers.iterdir()), results


def _assert_one_valid_cache(directory: Path, model_id: str, expected: np.ndarray) -> None:
    files = sorted(p.name for p in directory.iterdir())
    npz = [f for f in files if f.endswith(".npz")]
    assert len(npz) == 1 and not [f for f in files if f.endswith(".tmp")], files
    path = EmbeddingCache(directory).path_for("corpus", model_id, texts_hash(TEXTS))
    assert npz == [path.name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = EmbeddingCache(directory).load_or_build("corpus", model_id, TEXTS, lambda t: pytest.fail("rebuilt"))
    np.testing.assert_array_equal(loaded, expected)


@pytest.mark.timeout(300)
def test_processes_building_one_cache_at_once_leave_one_valid_file(tmp_path):
    directory, builders, results = _run_builders(tmp_path, 4)
    assert len(builders) == 1  # the lock makes the others wait, then load what the first one wrote
    for _, vectors, caught, _ in results:
        np.testing.assert_array_equal(vectors, det_vectors(TEXTS))
        assert caught == []
    _assert_one_valid_cache(directory, MODEL, det_vectors(TEXTS))


@pytest.mark.timeout(300)
def test_processes_meeting_a_corrupted_cache_rebuild_it_once(tmp_path):
    directory = tmp_path / "cache"
    directory.mkdir()
    path = EmbeddingCache(directory).path_for("corpus", MODEL, texts_hash(TEXTS))
    path.write_bytes(b"PK\x03\x04 truncated zip")
    directory, builders, results = _run_builders(tmp_path, 3)
    assert len(builders) == 1
    for _, vectors, _, _ in results:
        np.testing.assert_array_equal(vectors, det_vectors(TEXTS))
    assert any("ignoring embedding cache" in m for r in results for m in r[2])  # at least the first one warned
    _assert_one_valid_cache(directory, MODEL, det_vectors(TEXTS))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_processes_building_one_cache_with_the_real_model(tmp_path):
    directory, builders, results = _run_builders(tmp_path, 3, real_model=True, timeout=500)
    assert len(builders) == 1
    first = results[0][1]
    for _, vectors, _, _ in results:
        np.testing.assert_allclose(vectors, first, atol=1e-6)
    from edo_gym.retrieval.embedder import resolve_model

    _assert_one_valid_cache(directory, resolve_model("default")[1], first)


# -- exact search -----------------------------------------------------------------------------------------------------
def _exact_top_k(vectors: np.ndarray, indices: list[int], query: np.ndarray, k: int) -> tuple[int, ...]:
    """The documented search result: top ``k`` of the shard by cosine (rounded to 6 decimals), ties by corpus index."""
    ids = np.asarray(indices, dtype=np.int64)
    scores = np.round(vectors[ids] @ np.asarray(query, dtype=np.float32), 6)
    return tuple(int(i) for i in ids[np.lexsort((ids, -scores))][:k])


# -- fork after chromadb started ------------------------------------------------------------------------------------
def _search_in_forked_child(queue, queries) -> None:
    """Forked child: a new service for the default world (the model object is inherited, not reloaded)."""
    try:
        import edo_gym.retrieval.service as service_mod
        from edo_gym.config import RetrievalConfig, WorldConfig, default_workers
        from edo_gym.envs.edo_env import shared_world

        parent = next(iter(service_mod.RetrievalService._registry.values()))
        service_mod.Embedder = lambda model="default", **kw: parent.embedders[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            service = service_mod.RetrievalService.get(
                shared_world(WorldConfig()), RetrievalConfig(), [w.shard for w in default_workers()]
            )
        results = [[r.search(q, 3) for r in service.retrievers] for q in queries]
        kinds = [w.category.__name__ for w in caught]
        queue.put((service.search_backend, service is parent, kinds, results, None))
    except BaseException as exc:
        queue.put((None, None, [], None, repr(exc)))


@pytest.mark.timeout(120)
def test_a_process_forked_after_chromadb_started_searches_exactly_instead_of_hanging():
    from edo_gym.config import RetrievalConfig, WorldConfig, default_workers
    from edo_gym.envs.edo_env import shared_world
    from edo_gym.retrieval.service import RetrievalService

    world = shared_world(WorldConfig())
    parent = RetrievalService.get(world, RetrievalConfig(), [w.shard for w in default_workers()])
    # a query no cache holds is searched in the index: chromadb starts in this process (searches of prepared queries
    # may all be answered by the run-time cache, which starts nothing)
    for retriever in parent.retrievers:
        retriever.search(f"a question no process asked before {os.getpid()} {time.time()}", 3)
    assert parent.search_backend == "chromadb" and backends.chroma_usable() and os.getpid() == backends._CHROMA_PID
    queries = world.canonical_queries()[::40]
    expected = [[r.search(q, 3) for r in parent.retrievers] for q in queries]
    by_domain = world.documents_by_domain()
    shards = [sorted(i for dom in w.shard for i in by_domain[dom]) for w in default_workers()]
    vectors = parent.encoders[0]
    exact = [[_exact_top_k(parent.doc_vectors, shard, vectors.encode(q), 3) for shard in shards] for q in queries]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_search_in_forked_child, args=(queue, queries))
    proc.start()
    try:
        backend, same, kinds, results, error = queue.get(timeout=90)  # a chromadb call here would hang forever
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    assert error is None, error
    assert backend == "exact" and not same and "ForkedChromaWarning" in kinds
    assert results == exact  # the child's numpy search is exact
    pairs = [(a, b) for ra, rb in zip(results, expected, strict=True) for a, b in zip(ra, rb, strict=True)]
    assert all(a[0] == b[0] for a, b in pairs)  # the nearest document always agrees with chromadb's HNSW index
    assert sum(a == b for a, b in pairs) >= 0.95 * len(pairs)


# -- same seed, same result, in any process ---------------------------------------------------------------------------
def _index_build_misses(worker_names: set[str], relations: set[str] | None, builds: int) -> list[tuple[int, str, str]]:
    """``(build, worker, query)`` of every search that does not return the exact top k.

    Builds ``builds`` fresh in-memory collections of each named worker's shard with the env's own ``build_collection``
    and searches each through a ``ShardRetriever`` (candidates from the index, exact re-ranking), for every canonical
    query (of ``relations``, or all).
    """
    from edo_gym.config import RetrievalConfig, WorldConfig
    from edo_gym.envs.edo_env import shared_world
    from edo_gym.retrieval.backends import build_collection, chroma_client
    from edo_gym.retrieval.search import ShardRetriever
    from edo_gym.retrieval.service import RetrievalService

    world = shared_world(WorldConfig())
    workers = default_workers()
    service = RetrievalService.get(world, RetrievalConfig(), [w.shard for w in workers])
    encoder = service.encoders[0]
    queries = [
        q for q, (_, rel) in zip(world.canonical_queries(), world.facts, strict=True) if relations is None or rel in relations
    ]
    client = chroma_client(None)
    by_domain = world.documents_by_domain()
    misses = []
    for spec in (w for w in workers if w.name in worker_names):
        shard = sorted(i for dom in spec.shard for i in by_domain[dom])
        exact = [_exact_top_k(service.doc_vectors, shard, encoder.encode(q), spec.top_k) for q in queries]
        for build in range(builds):
            name = f"test-build-{spec.name}-{build}-{os.getpid()}-{time.monotonic_ns()}"
            collection = build_collection(client, name, service.doc_vectors, shard, False)
            retriever = ShardRetriever(collection, encoder, spec.shard, 10, vectors=service.doc_vectors)
            misses += [
                (build, spec.name, q) for q, e in zip(queries, exact, strict=True) if retriever.search(q, spec.top_k) != e
            ]
            client.delete_collection(name)
    return misses


#: Why searches differ between processes (a genuine env bug, reported to the env's maintainers).


def test_every_index_build_returns_the_exact_top_k():
    """Ten builds of the smallest default shard, searched with the queries about people (off its domains, where
    similarities are flat and an approximate graph misses most): every search must return the exact top k."""
    misses = _index_build_misses({"support_agent"}, {"birth_city", "mentor", "employer"}, builds=10)
    assert misses == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_index_build_of_every_shard_returns_the_exact_top_k_for_every_canonical_query():
    misses = _index_build_misses({w.name for w in default_workers()}, None, builds=10)
    assert misses == []


def _episode_digests(env: Any, episodes: int, seed: int, max_steps: int = 10**9) -> list[str]:
    """Per episode: SHA-256 of everything reset/step returned (observations, rewards, info) and the text trace.

    Actions are seeded random legal ones that submit with probability 0.1 (or when nothing else is legal).
    """
    rng = np.random.default_rng(seed)
    out, steps = [], 0
    for episode in range(episodes):
        h = hashlib.sha256()
        obs, info = env.reset(seed=seed + episode)
        done = False
        while True:
            for key in sorted(obs):
                h.update(key.encode() + np.ascontiguousarray(obs[key]).tobytes())
            h.update(
                json.dumps(
                    {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in info.items()}, sort_keys=True
                ).encode()
            )
            if done or steps >= max_steps:
                break
            legal = np.flatnonzero(obs["action_mask"])
            submit = env.unwrapped.A_SUBMIT
            others = legal[legal != submit]
            a = int(rng.choice(others)) if len(others) and rng.random() >= 0.1 else submit
            obs, reward, terminated, truncated, info = env.step(a)
            h.update(repr(float(reward)).encode())
            steps += 1
            done = terminated or truncated
        h.update(env.unwrapped.render().encode())  # every dispatch with its retrieved documents, answers, verdicts
        out.append(h.hexdigest())
        if steps >= max_steps:
            break
    return out


_REPLAY = """
import hashlib, json, os, sys
from typing import Any
import numpy as np
import gymnasium as gym
{digests}
# search_cache off: each process queries its own index (none reads another's results from the run-time disk cache)
env = gym.make("edo_gym:EDO-v0", render_mode="ansi", retrieval={{"search_cache": False}})
digests = _episode_digests(env, episodes={episodes}, seed={seed}, max_steps={max_steps})
service = env.unwrapped.service
# single searches plus canonical queries searched in batches (RetrievalConfig.presearch): all real chromadb queries
searches = sum(r.searches + r.presearches for r in {{id(r): r for r in service.retrievers}}.values())
print("RESULT " + json.dumps({{"pid": os.getpid(), "backend": service.search_backend, "searches": searches,
                               "digests": digests}}))
"""


def _run_concurrently(codes: list[str], timeout: float) -> list[dict]:
    """Run each ``python -c code`` in its own fresh process, all at once; the JSON each prints after ``RESULT``."""
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=dict(os.environ))
        for code in codes
    ]  # fmt: skip
    outputs = []
    deadline = time.monotonic() + timeout
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if proc.returncode != 0:  # not an AssertionError: an xfail on diverging trajectories must not hide a crash
                raise RuntimeError(f"replay process failed:\n{err[-3000:]}")
            outputs.append(json.loads(out.split("RESULT ", 1)[1]))
    except subprocess.TimeoutExpired:
        pytest.fail(f"a replay process did not finish within {timeout} s")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return outputs


def _assert_same_trajectories_in_fresh_processes(n_processes: int, episodes: int, max_steps: int, timeout: float) -> None:
    code = _REPLAY.format(digests=inspect.getsource(_episode_digests), episodes=episodes, seed=0, max_steps=max_steps)
    results = _run_concurrently([code] * n_processes, timeout)
    # preconditions (RuntimeError, not AssertionError: see the xfail markers): distinct processes, each of which built
    # its own chromadb index and really searched it, over many episodes
    if len({r["pid"] for r in results}) != n_processes:
        raise RuntimeError(f"expected {n_processes} distinct processes, got {[r['pid'] for r in results]}")
    if any(r["backend"] != "chromadb" or r["searches"] < 100 for r in results) or len(results[0]["digests"]) < 10:
        raise RuntimeError(f"not a real replay: {[(r['backend'], r['searches'], len(r['digests'])) for r in results]}")
    reference = results[0]["digests"]
    for r in results[1:]:
        diverged = next((k for k, (a, b) in enumerate(zip(reference, r["digests"], strict=True)) if a != b), None)
        assert diverged is None, f"episode {diverged} differs between processes {results[0]['pid']} and {r['pid']}"
    # and this process, whose index was built earlier by other tests, agrees too
    import gymnasium as gym

    env = gym.make("edo_gym:EDO-v0", render_mode="ansi")
    try:
        assert _episode_digests(env, episodes=episodes, seed=0, max_steps=max_steps) == reference
    finally:
        env.close()


@pytest.mark.timeout(300)
def test_fresh_processes_building_their_own_index_replay_identical_trajectories():
    _assert_same_trajectories_in_fresh_processes(n_processes=2, episodes=10**6, max_steps=1000, timeout=240)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_three_fresh_processes_replay_20000_identical_steps():
    """The issue's reproduction: 20,000 steps of seeded random legal actions gave two digests in three processes."""
    _assert_same_trajectories_in_fresh_processes(n_processes=3, episodes=10**6, max_steps=20_000, timeout=800)


def test_exact_collection_is_an_exact_top_k():
    from edo_gym.retrieval.backends import ExactCollection

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((50, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    indices = list(range(5, 45, 2))
    col = ExactCollection(vectors, indices)
    assert col.count() == 20
    for _ in range(20):
        q = vectors[rng.integers(50)]
        for k in (1, 3, 20, 30):
            got = [int(i) for i in col.query(query_embeddings=q[None, :], n_results=k, include=[])["ids"][0]]
            order = sorted(indices, key=lambda i: -float(vectors[i] @ q))[:k]
            assert got == order


# -- vectorised envs ------------------------------------------------------------------------------------------------
def _make_edo(seed: int):
    def thunk():
        env = gym.make("edo_gym:EDO-v0")  # the module prefix registers EDO-v0 in a fresh (spawned) process
        env.reset(seed=seed)
        return env

    return thunk


def _random_actions(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(len(masks), dtype=np.int64)
    for i, m in enumerate(masks):
        legal = np.flatnonzero(m)
        out[i] = rng.choice(legal) if len(legal) else 0  # all-zero mask: a finished env about to be reset
    return out


def _check_process_info(infos, n: int) -> None:
    pids = [i["pid"] for i in infos]
    assert len(set(pids)) == n and os.getpid() not in pids
    assert [i["model_loads"] for i in infos] == [1] * n, infos


def _run_sb3(start_method: str, n_envs: int, n_steps: int) -> dict:
    from stable_baselines3.common.vec_env import SubprocVecEnv  # imported here: spawned children import this module

    vec = SubprocVecEnv([_make_edo(i) for i in range(n_envs)], start_method=start_method)
    try:
        space = vec.observation_space
        obs = vec.reset()
        rng = np.random.default_rng(0)
        episodes = 0
        for _ in range(n_steps):
            obs, rewards, dones, infos = vec.step(_random_actions(obs["action_mask"], rng))
            assert np.isfinite(rewards).all()
            episodes += int(dones.sum())
            for i in np.flatnonzero(dones):
                assert "episode_stats" in infos[i] and "terminal_observation" in infos[i]
        for i in range(n_envs):
            assert space.contains({k: v[i] for k, v in obs.items()})
        _check_process_info(vec.env_method("process_info"), n_envs)
        return {"episodes": episodes}
    finally:
        vec.close()


@pytest.mark.timeout(300)
def test_subproc_vec_env_smoke():
    out = _run_sb3("spawn", n_envs=2, n_steps=300)
    assert out["episodes"] > 10


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_subproc_vec_env_8_processes(start_method):
    out = _run_sb3(start_method, n_envs=8, n_steps=1000)  # 8,000 env steps
    assert out["episodes"] > 200


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("context", [None, "spawn"])
def test_gym_async_vector_env_8_processes(context):
    kwargs = {} if context is None else {"vector_kwargs": {"context": context}}
    vec = gym.make_vec("EDO-v0", num_envs=8, vectorization_mode="async", **kwargs)
    try:
        obs, infos = vec.reset(seed=0)
        rng = np.random.default_rng(1)
        episodes = 0
        for _ in range(1000):
            obs, rewards, terminated, truncated, infos = vec.step(_random_actions(obs["action_mask"], rng))
            assert np.isfinite(rewards).all()
            episodes += int((terminated | truncated).sum())
        assert episodes > 200
        _check_process_info(vec.call("process_info"), 8)
    finally:
        vec.close()


@pytest.mark.timeout(180)
def test_fork_based_async_vector_env_keeps_chromadb_when_the_parent_never_searched():
    """gymnasium builds one env in the parent before forking; collections start lazily, so children keep chromadb."""
    code = textwrap.dedent(
        """
        import json, numpy as np, gymnasium as gym, edo_gym
        envs = gym.make_vec("EDO-v0", num_envs=2, vectorization_mode="async")  # default context: fork on Linux
        obs, info = envs.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(200):
            acts = np.array([int(rng.choice(np.flatnonzero(m))) if m.any() else 0 for m in info["action_mask"]])
            obs, r, te, tr, info = envs.step(acts)
        print(json.dumps([s.search_backend for s in envs.call("service")]))
        envs.close()
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=170, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["chromadb", "chromadb"]
