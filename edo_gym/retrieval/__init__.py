"""Mini-RAG: embedder, on-disk embedding cache, chromadb shard retrievers, and the per-process service over them.

Modules, each one job (data flows down the list): :mod:`~edo_gym.retrieval.service` (the service: builds everything
below, counts tokens), :mod:`~edo_gym.retrieval.search` (shard retrievers), :mod:`~edo_gym.retrieval.backends`
(chromadb collections, exact numpy search, fork detection), :mod:`~edo_gym.retrieval.caches` (bounded memo, lazily
built vector lists, the query encoder), :mod:`~edo_gym.retrieval.embedder` / :mod:`~edo_gym.retrieval.static` (the
models), :mod:`~edo_gym.retrieval.cache` / :mod:`~edo_gym.retrieval.runtime_cache` (on-disk caches).
"""

from edo_gym.retrieval.backends import ExactCollection, ForkedChromaWarning
from edo_gym.retrieval.cache import CacheWarning, EmbeddingCache, default_cache_dir
from edo_gym.retrieval.caches import LazyVectors, LRUCache, QueryEncoder
from edo_gym.retrieval.embedder import Embedder, EmbeddingModelNotFoundError, resolve_model
from edo_gym.retrieval.search import IdentifierRetriever, ShardRetriever
from edo_gym.retrieval.service import RetrievalService

__all__ = [
    "CacheWarning",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingModelNotFoundError",
    "ExactCollection",
    "ForkedChromaWarning",
    "IdentifierRetriever",
    "LRUCache",
    "LazyVectors",
    "QueryEncoder",
    "RetrievalService",
    "ShardRetriever",
    "default_cache_dir",
    "resolve_model",
]
