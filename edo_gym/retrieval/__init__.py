"""Mini-RAG: embedder, on-disk embedding cache, chromadb shard retrievers."""

from edo_gym.retrieval.cache import CacheWarning, EmbeddingCache, default_cache_dir
from edo_gym.retrieval.embedder import Embedder, EmbeddingModelNotFoundError, resolve_model
from edo_gym.retrieval.store import LRUCache, RetrievalService, ShardRetriever

__all__ = [
    "CacheWarning",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingModelNotFoundError",
    "LRUCache",
    "RetrievalService",
    "ShardRetriever",
    "default_cache_dir",
    "resolve_model",
]
