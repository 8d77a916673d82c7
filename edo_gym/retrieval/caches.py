"""Memoisation in front of the embedding model: a bounded LRU mapping, lazily built lists of vectors, the query encoder.

:class:`LRUCache` bounds every in-memory memo of retrieval (query vectors, search results, token counts).
:class:`LazyVectors` holds the embeddings of a fixed list of texts (canonical queries, task texts), built a
sentence-transformers batch at a time when a step first needs one of them (``RetrievalConfig.lazy_embeddings``).
:class:`QueryEncoder` turns a query text into its vector through those tiers: the canonical list, the memo, the
run-time disk cache, and only then the model. Every tier returns the model's own vector for the text (exact).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np

from edo_gym.retrieval.cache import EmbeddingCache, texts_hash
from edo_gym.retrieval.embedder import Embedder
from edo_gym.retrieval.runtime_cache import RuntimeCache


class TextListOwner(Protocol):
    """What holds a process's :class:`LazyVectors` (the retrieval service): an unpickled list is looked up in it."""

    def lazy_texts(self, kind: str, texts: list[str]) -> LazyVectors: ...


class LRUCache:
    """A bounded mapping that evicts the least recently used entry; counts hits and misses."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"LRUCache maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()


class LazyVectors:
    """Embeddings of a fixed list of texts (canonical queries, task texts), built a batch at a time on first use.

    The batches are sentence-transformers' own for the whole list: its order (``np.argsort`` of minus the character
    length) cut every ``batch_size`` texts. A text's vector depends only on the padded length of its batch (see
    :meth:`~edo_gym.retrieval.embedder.Embedder.encode_many`), and a batch embedded as a list of its own is padded
    to the same length, so each vector is the one-go build's bit for bit (tested). Batches built before the list is
    complete go to the run-time cache (other processes read them); the complete list goes to the disk cache file
    the one-go build writes.
    """

    def __init__(
        self,
        kind: str,
        texts: list[str],
        vectors: np.ndarray | None,
        embedder: Embedder,
        cache: EmbeddingCache,
        model_id: str,
        runtime: RuntimeCache | None,
        batch_size: int = 64,
        origin: tuple[TextListOwner, str] | None = None,
    ) -> None:
        """:param origin: ``(owner, kind)`` when an owner (the retrieval service) holds this list under ``kind``:
        a pickled list is that owner's list in the target process (``None``: the list cannot be pickled)."""
        self.kind = kind
        self.texts = list(texts)
        self.embedder = embedder
        self.cache = cache
        self.model_id = model_id
        self.runtime = runtime
        self.origin = origin
        self.list_key = f"{kind}:{texts_hash(self.texts)}:{batch_size}"
        #: Batches embedded in this process (not read from a cache).
        self.batches_built = 0
        self._full: np.ndarray | None = None
        if vectors is not None:
            self._full = np.ascontiguousarray(vectors, dtype=np.float32)
            return
        order = np.argsort([-len(t) for t in self.texts])  # sentence-transformers' order (the same call)
        self._batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
        self._batch_of = np.zeros(len(self.texts), dtype=np.int64)
        for b, rows in enumerate(self._batches):
            self._batch_of[rows] = b
        self._vectors = np.zeros((len(self.texts), embedder.dim), dtype=np.float32)
        self._have = np.zeros(len(self._batches), dtype=bool)

    def __reduce__(self) -> Any:
        # the embedder and the run-time cache's connection are per process: a pickled list is the target process's
        # own list for the same texts, from its service
        if self.origin is None:
            raise TypeError("a LazyVectors built outside a RetrievalService cannot be pickled")
        return (_lazy_of, (*self.origin, self.texts))

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def complete(self) -> bool:
        return self._full is not None

    def row(self, i: int) -> np.ndarray:
        """The vector of text ``i`` (its batch is built first if needed)."""
        if self._full is not None:
            return self._full[i]
        b = int(self._batch_of[i])
        if not self._have[b]:
            self._fill([b])
        return self._vectors[i]

    def batch_rows(self, i: int) -> np.ndarray:
        """Rows of the batch of text ``i``, built if needed (all rows once the list is complete)."""
        if self._full is not None:
            return np.arange(len(self.texts))
        b = int(self._batch_of[i])
        if not self._have[b]:
            self._fill([b])
        return self._batches[b]

    def full(self, progress: str | None = None) -> np.ndarray:
        """All vectors, shape ``(n, dim)``; the missing batches are built in one threaded pass."""
        if self._full is None:
            self._fill([b for b in range(len(self._batches)) if not self._have[b]], progress)
        assert self._full is not None
        return self._full

    def missing_batches(self) -> list[int]:
        """Batches not built yet, after reading those the run-time cache holds."""
        if self._full is not None:
            return []
        missing = []
        for b in np.flatnonzero(~self._have).tolist():
            rows = self._batches[b]
            got = self.runtime.get_batch(self.list_key, b, len(rows)) if self.runtime is not None else None
            if got is None:
                missing.append(b)
            else:
                self._vectors[rows] = got
                self._have[b] = True
        return missing

    def batch_texts(self, b: int) -> list[str]:
        return [self.texts[r] for r in self._batches[b]]

    def set_batch(self, b: int, vectors: np.ndarray, persist: bool = True) -> None:
        """Store batch ``b``'s freshly built vectors (in the run-time cache with ``persist``, and the whole list in
        the disk cache once complete)."""
        self._vectors[self._batches[b]] = vectors
        self._have[b] = True
        self.batches_built += 1
        if persist and self.runtime is not None and not self._have.all():
            self.runtime.put_batch(self.list_key, b, vectors)
        self._check_complete()

    def _check_complete(self) -> None:
        if self._full is None and self._have.all():
            self._full = self._vectors
            self.cache.store(self.kind, self.model_id, self.texts, self._full)

    def _fill(self, batches: list[int], progress: str | None = None) -> None:
        missing = [b for b in self.missing_batches() if b in set(batches)]
        if missing:
            built = self.embedder.encode_many([self.batch_texts(b) for b in missing], progress=progress)
            for b, vectors in zip(missing, built, strict=True):
                self.set_batch(b, vectors)
        self._check_complete()


class QueryEncoder:
    """Query text -> unit vector: canonical queries first (built lazily, see :class:`LazyVectors`), then a bounded
    memo, then the run-time disk cache, then the model."""

    def __init__(
        self,
        embedder: Embedder,
        canonical: dict[str, int],
        canonical_vectors: LazyVectors,
        cache_size: int,
        runtime: RuntimeCache | None = None,
    ) -> None:
        self.embedder = embedder
        self.canonical = canonical
        self.lazy_canonical = canonical_vectors
        self.memo = LRUCache(cache_size)
        self.runtime = runtime
        #: Query texts embedded by the model (found in no cache), and the seconds those forward passes took.
        self.model_calls = 0
        self.model_s = 0.0

    @property
    def canonical_vectors(self) -> np.ndarray:
        """Vectors of every canonical query (built now if some are missing)."""
        return self.lazy_canonical.full()

    def encode(self, text: str) -> np.ndarray:
        row = self.canonical.get(text)
        if row is not None:
            return self.lazy_canonical.row(row)
        vec = self.memo.get(text)
        if vec is None:
            runtime = self.runtime
            vec = runtime.get_vector(text) if runtime is not None else None
            if vec is None:
                t0 = time.perf_counter()
                vec = self.embedder.encode_one(text)
                self.model_s += time.perf_counter() - t0
                self.model_calls += 1
                if runtime is not None:
                    runtime.put_vector(text, vec)
            self.memo.put(text, vec)
        return vec


def _lazy_of(owner: TextListOwner, kind: str, texts: list[str]) -> LazyVectors:
    return owner.lazy_texts(kind, texts)
