"""A static (model2vec) embedder distilled locally from the configured sentence-transformers model.

``RetrievalConfig(encoder="static")`` replaces the transformer forward pass of every query by a table look-up: the
model2vec library (``model2vec.distill``) runs the configured model (by default all-MiniLM-L6-v2) once over each
token of its own vocabulary, reduces the token vectors to :data:`PCA_DIMS` dimensions with PCA and weights them
(SIF, the library's defaults); a text's vector is then the normalised mean of its tokens' rows. That takes about
a minute on two cores the first time (with a progress bar), and the result is written to the embedding cache
directory (``static/<key>/``), so later processes load it in well under a second. Nothing is downloaded.

It is not exact: vectors differ from the transformer's, so retrieval results (and the task embedding in the
observation) differ from the default mode, and recall@k is lower; ``benchmarks/study_retriever.py`` and
``benchmarks/env_throughput.py --encoder static`` report both side by side. What stays the same: every query is
still embedded (by this model) and searched in chromadb, and token counts (hence costs and rewards) come from the
base model's own tokenizer, exactly as in the default mode.

Search results and token counts are kept in the run-time disk cache as in the default mode (a database of its own,
keyed by this model's id; see :mod:`edo_gym.retrieval.runtime_cache`), and ``edo prepare --retrieval-encoder static``
searches the reachable queries ahead; query vectors are not stored there (a look-up is cheaper than a read).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edo_gym.retrieval.cache import CacheWarning
from edo_gym.retrieval.embedder import (
    INSTALL_HINT,
    EmbeddingModelNotFoundError,
    count_with,
    resolve_model,
    scoped_torch_threads,
)

#: Dimensions the distilled token vectors are reduced to (model2vec's default).
PCA_DIMS = 256
_MODEL_FILE = "model.safetensors"


class StaticModelUnavailableError(RuntimeError):
    """The static encoder cannot be built here (the ``model2vec`` package or its distillation needs are missing)."""


def _lock(path: Path) -> Any:
    """An exclusive file lock (processes building the same static model wait for the first one)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock; the atomic rename below still keeps the cache whole
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    return held()


def static_model_dir(cache_root: Path, base_model_id: str) -> Path:
    """Where the static model distilled from ``base_model_id`` is kept under the embedding cache ``cache_root``."""
    key = hashlib.sha256(f"{base_model_id}|pca{PCA_DIMS}|float32".encode()).hexdigest()[:16]
    return cache_root / "static" / key


def distill_static_model(base_path: str, target: Path) -> None:
    """Distill a model2vec static model from the sentence-transformers model at ``base_path`` into ``target``.

    Written to a temporary directory next to ``target`` and renamed into place, so an interrupted build leaves no
    half-written model behind.
    """
    try:
        import torch  # noqa: F401  (model2vec's distillation needs it: say so here, before any work)
        from model2vec.distill import distill
    except ImportError as exc:
        raise StaticModelUnavailableError(
            f"retrieval.encoder='static' needs the model2vec package and its distillation requirements "
            f'(`pip install "edo-gym[static]"`): {exc}'
        ) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        with scoped_torch_threads(max(1, min(4, os.cpu_count() or 1))):
            print(f"EDO-Gym: distilling a static (model2vec) embedder from {base_path}; cached in {target}", flush=True)
            model = distill(base_path, pca_dims=PCA_DIMS, quantize_to="float32")
            model.save_pretrained(str(tmp))
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class StaticEmbedder:
    """The :class:`~edo_gym.retrieval.embedder.Embedder` interface over a model2vec static model.

    :param model: the base model, as for :class:`~edo_gym.retrieval.embedder.Embedder` (``"default"``, a local
        directory, or a name in the local Hugging Face cache).
    :param cache_root: the embedding cache directory; the distilled model lives in ``static/<key>/`` below it.
    """

    def __init__(self, model: str, cache_root: Path) -> None:
        base_path, base_id = resolve_model(model)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from model2vec import StaticModel
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise StaticModelUnavailableError(
                f"retrieval.encoder='static' needs the model2vec package (`pip install \"edo-gym[static]\"`): {exc}"
            ) from exc
        directory = static_model_dir(Path(cache_root), base_id)
        with _lock(directory.parent / f"{directory.name}.lock"):
            if not (directory / _MODEL_FILE).is_file():
                distill_static_model(base_path, directory)
            try:
                self.static = StaticModel.from_pretrained(str(directory))
            except Exception as exc:  # a damaged file (the library raises several types): distil again, once
                warnings.warn(f"the static model in {directory} could not be loaded ({exc}); distilling it again",
                              CacheWarning, stacklevel=2)  # fmt: skip
                distill_static_model(base_path, directory)
                self.static = StaticModel.from_pretrained(str(directory))
        self.model_id = f"static-m2v-pca{PCA_DIMS}:{base_id}"
        self.directory = directory
        self.dim = int(self.static.dim)
        self._embedding = np.ascontiguousarray(self.static.embedding, dtype=np.float32)
        if self.static.token_mapping is not None or self.static.weights is not None:  # not what distill_static_model writes
            raise StaticModelUnavailableError(f"the static model in {directory} uses vocabulary quantization; rebuild it")
        self._unk = self.static.unk_token_id
        self._max_length = self.static.max_length
        self._tokenizer = self.static.tokenizer
        # token counts (costs) come from the base model's own tokenizer, as in the default mode
        tokenizer_file = Path(base_path) / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise EmbeddingModelNotFoundError(f"{base_path} has no tokenizer.json for counting tokens. {INSTALL_HINT}")
        self._counter = Tokenizer.from_file(str(tokenizer_file))
        self._counter.no_truncation()
        self._counter.no_padding()
        self.model_calls = 0

    def encode_one(self, text: str) -> np.ndarray:
        """The unit vector of one text: ``StaticModel.encode([text])[0]`` bit for bit, without its batching overhead."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        if self._unk is not None:
            ids = [i for i in ids if i != self._unk]
        if self._max_length is not None:
            ids = ids[: self._max_length]
        if not ids:
            return np.zeros(self.dim, dtype=np.float32)
        out = self._embedding[np.array([ids], dtype=np.int64)].mean(axis=1)
        norm = np.linalg.norm(out, axis=1, keepdims=True) + 1e-32
        return (out / norm)[0]

    def encode(self, texts: list[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        """Unit-norm float32 vectors, shape ``(len(texts), dim)`` (``batch_size`` has no effect on static vectors)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.static.encode(list(texts), show_progress_bar=show_progress_bar, use_multiprocessing=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode_many(
        self,
        lists: Sequence[list[str]],
        batch_size: int = 64,
        singles: bool = False,
        progress: str | None = None,
        threads: int | None = None,
    ) -> list[np.ndarray]:
        """:meth:`encode` of each list (static vectors do not depend on batching, so ``singles`` changes nothing)."""
        return [self.encode(list(texts)) for texts in lists]

    def token_counter(self) -> Any:
        """The base model's Rust tokenizer that :meth:`count_tokens` uses (truncation and padding off)."""
        return self._counter

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Token count of each text under the base model's tokenizer (special tokens excluded)."""
        return count_with(self._counter, texts) if texts else []
