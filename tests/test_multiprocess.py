"""Many processes: several processes building one embedding cache at once, and vectorised EDO-v0 envs.

- ``EmbeddingCache.load_or_build`` called by several spawned processes at the same moment leaves exactly one
  valid file, built once (file lock + atomic rename), and every process gets the same vectors;
- SB3 ``SubprocVecEnv`` (``spawn``, ``forkserver``) and ``gym.make_vec(..., vectorization_mode="async")`` step
  thousands of times without deadlock, and each worker process loads the embedding model exactly once
  (``EDOEnv.process_info()["model_loads"]``, read through ``env_method`` / ``call``).

The 8-process runs are ``slow`` (each process loads the model: ~30 s on 2 cores); a 2-process smoke run is fast.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401  (registers EDO-v0)
from edo_gym.retrieval.cache import CacheWarning, EmbeddingCache, texts_hash

try:
    from tests.reliability_helpers import det_vectors
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from reliability_helpers import det_vectors  # type: ignore[no-redef]

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


# -- fork after chromadb started ------------------------------------------------------------------------------------
def _search_in_forked_child(queue, queries) -> None:
    """Forked child: a new service for the default world (the model object is inherited, not reloaded)."""
    try:
        import edo_gym.retrieval.store as store
        from edo_gym.config import RetrievalConfig, WorldConfig, default_workers
        from edo_gym.envs.edo_env import _world

        parent = next(iter(store.RetrievalService._registry.values()))
        store.Embedder = lambda model="default", **kw: parent.embedders[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            service = store.RetrievalService.get(
                _world(WorldConfig()), RetrievalConfig(), [w.shard for w in default_workers()]
            )
        results = [[r.search(q, 3) for r in service.retrievers] for q in queries]
        kinds = [w.category.__name__ for w in caught]
        queue.put((service.search_backend, service is parent, kinds, results, None))
    except BaseException as exc:
        queue.put((None, None, [], None, repr(exc)))


@pytest.mark.timeout(120)
def test_a_process_forked_after_chromadb_started_searches_exactly_instead_of_hanging():
    from edo_gym.config import RetrievalConfig, WorldConfig, default_workers
    from edo_gym.envs.edo_env import _world
    from edo_gym.retrieval.store import RetrievalService

    world = _world(WorldConfig())
    parent = RetrievalService.get(world, RetrievalConfig(), [w.shard for w in default_workers()])
    assert parent.search_backend == "chromadb"  # chromadb has started in this process
    queries = world.canonical_queries()[::40]
    expected = [[r.search(q, 3) for r in parent.retrievers] for q in queries]
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
    pairs = [(a, b) for ra, rb in zip(results, expected, strict=True) for a, b in zip(ra, rb, strict=True)]
    assert all(a[0] == b[0] for a, b in pairs)  # the nearest document always agrees with chromadb's HNSW index
    assert sum(a == b for a, b in pairs) >= 0.95 * len(pairs)


def test_exact_collection_is_an_exact_top_k():
    from edo_gym.retrieval.store import ExactCollection

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
