"""The indexes a shard is searched in: chromadb collections, and exact numpy search where chromadb cannot run.

Fork safety: chromadb's native runtime does not survive ``fork()``; in a child forked from a process that had
started chromadb, every chromadb call blocks forever. :func:`chroma_client` records the process that started it, and
:func:`chroma_usable` tells a forked child so. The retrieval service builds in-memory collections at the first reset
(or, with ``RetrievalConfig.index_at_reset=False``, the first search), not at env construction: a parent that only
builds an env (as ``gym.make_vec(..., vectorization_mode="async")`` does on Linux with the default ``fork`` context,
to read the spaces) never starts chromadb, and its children use chromadb normally. A child forked from a process that
*had* reset or searched searches its shards with :class:`ExactCollection` instead (exact cosine top-k in numpy over the
same vectors; it agrees with chromadb's HNSW index on >99.9% of queries) and warns once (:class:`ForkedChromaWarning`).
The ``spawn`` and ``forkserver`` start methods always keep chromadb.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Process id in which this module started chromadb (inherited, unchanged, by forked children).
_CHROMA_PID: int | None = None


class ForkedChromaWarning(RuntimeWarning):
    """This process was forked after chromadb started in its parent: shards are searched exactly in numpy."""


def chroma_usable() -> bool:
    """``False`` in a process forked after chromadb started in its parent (chromadb calls would block forever)."""
    return _CHROMA_PID is None or os.getpid() == _CHROMA_PID


def warn_forked(stacklevel: int = 1) -> None:
    """Warn (:class:`ForkedChromaWarning`) that this process searches exactly in numpy, since chromadb cannot run here.

    :param stacklevel: as for :func:`warnings.warn`, counted from the caller of this function.
    """
    warnings.warn(
        f"this process (pid {os.getpid()}) was forked after chromadb started in process {_CHROMA_PID}; "
        "chromadb cannot run here (its calls would hang), so shards are searched exactly in numpy instead. "
        "Use the 'spawn' or 'forkserver' start method to keep chromadb.",
        ForkedChromaWarning,
        stacklevel=stacklevel + 1,
    )


class ExactCollection:
    """Exact cosine top-k over unit vectors, with the two chromadb collection methods ``ShardRetriever`` uses."""

    def __init__(self, vectors: np.ndarray, indices: Sequence[int]) -> None:
        self.ids = np.asarray(indices, dtype=np.int64)
        self.matrix = np.ascontiguousarray(vectors[self.ids], dtype=np.float32)

    def count(self) -> int:
        return len(self.ids)

    def query(self, query_embeddings: np.ndarray, n_results: int, include: Any = None) -> dict[str, list[list[str]]]:
        out = []
        for query in np.asarray(query_embeddings, dtype=np.float32).reshape(-1, self.matrix.shape[1]):
            scores = self.matrix @ query
            k = min(n_results, len(scores))
            top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            out.append([str(int(i)) for i in self.ids[top]])
        return {"ids": out}


def chroma_client(chroma_dir: str | None) -> Any:
    """A chromadb client: persistent in ``chroma_dir``, in memory when it is ``None``. Records this process as the one
    that started chromadb (see :func:`chroma_usable`)."""
    global _CHROMA_PID
    import chromadb

    settings = chromadb.Settings(anonymized_telemetry=False, allow_reset=False)
    if chroma_dir is None:
        client = chromadb.EphemeralClient(settings=settings)
    else:
        client = chromadb.PersistentClient(path=chroma_dir, settings=settings)
    _CHROMA_PID = os.getpid()
    return client


def build_lock(chroma_dir: str | None) -> Any:
    """An inter-process lock around collection builds in a persistent directory (a no-op in memory)."""
    if chroma_dir is None:
        return contextlib.nullcontext()
    from filelock import FileLock

    os.makedirs(chroma_dir, exist_ok=True)
    return FileLock(os.path.join(chroma_dir, ".edo-build.lock"), timeout=600)


# Two HNSW builds of the same vectors need not give the same graph (even single-threaded, in chromadb 1.5), and a
# search with a small ``ef_search`` then returns different neighbours in different processes. Shards here hold at
# most a few thousand documents, so each collection is searched with ``ef_search`` >= its size: the search visits
# the whole graph, and its candidates are re-ranked exactly (see ``ShardRetriever.search``). Measured: 0 of 816
# queries differ from exact numpy search over 4 builds of the largest default shard (1,212 documents), at 1-2 ms.
_HNSW = {"hnsw": {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32, "num_threads": 1}}


def _hnsw_config(size: int) -> dict[str, dict[str, Any]]:
    return {"hnsw": {**_HNSW["hnsw"], "ef_search": max(200, size)}}


def build_collection(client: Any, name: str, vectors: np.ndarray, indices: Sequence[int], persistent: bool) -> Any:
    """Get or (re)build collection ``name`` holding ``vectors[indices]`` with ids ``str(index)``.

    A collection is marked complete in its metadata only after every vector was added, so a build killed
    half-way (in a persistent directory) is detected at the next start and redone.
    """
    expected = len(indices)
    if persistent:
        try:
            existing = client.get_collection(name)
            meta = existing.metadata or {}
            if meta.get("edo_complete") and meta.get("edo_count") == expected and existing.count() == expected:
                return existing
            warnings.warn(f"chromadb collection {name} is incomplete (interrupted build?); rebuilding it", stacklevel=2)
            client.delete_collection(name)
        except Exception as exc:  # chromadb raises NotFoundError / ValueError depending on version
            if "does not exist" not in str(exc) and "not found" not in str(exc).lower():
                raise
    collection = client.create_collection(
        name,
        embedding_function=None,
        configuration=_hnsw_config(expected),
        metadata={"edo_complete": False, "edo_count": expected},
    )
    batch = max(1, min(5000, client.get_max_batch_size()))
    idx = list(indices)
    for start in range(0, len(idx), batch):
        part = idx[start : start + batch]
        collection.add(ids=[str(i) for i in part], embeddings=vectors[part])
    collection.modify(metadata={"edo_complete": True, "edo_count": expected})
    return collection
