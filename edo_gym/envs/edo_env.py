"""``EDOEnv``: the RL agent is the orchestrator of a multi-agent LLM system.

One episode is one task. At ``reset`` a task is drawn (or chosen with ``options={"task_id": k}``) and the
Planner decomposes it into a plan (a model call, charged to the first step). Each ``step`` takes one decision:

- ``dispatch(w, retrieve)``: run the current plan step on worker ``w``, with or without a query to ``w``'s own
  retriever (in ``retrieval_decider="worker"`` mode only ``dispatch(w)`` exists and the worker decides);
- ``verify(w)``: worker ``w`` re-checks the last result against its own evidence (its own retrieval and
  knowledge); a real call, charged like a dispatch; verdict ``ok``, ``flagged`` or ``unsure``;
- ``rollback``: discard the last result and make its step current again (the discarded work stays charged, plus
  ``rollback_tokens`` of coordination);
- ``replan``: ask the Planner for a new decomposition (a call; progress is discarded);
- ``submit``: return the final answer (the last plan step's output) and end the episode.

Action indices: dispatches first (``w * 2 + retrieve``, or ``w``), then ``verify(w)`` for each worker, then
rollback, replan, submit; see ``action_names``. Reward = task score at submit (``RewardConfig.task_score``) minus
per-step collaboration cost (tokens times the worker's price, calls, simulated latency), each weighted by
``RewardConfig``; ``info["reward_terms"]`` is the breakdown and sums to the reward. Illegal actions
(``action_masks()`` / ``info["action_mask"]``) are penalised and change nothing (default) or raise; an
out-of-range action always raises ``ValueError``.

The observation and ``info`` hold only what a real orchestrator knows (see :mod:`edo_gym.envs.observation`);
hidden ground truth is reachable only through :meth:`EDOEnv.hidden_state`, for oracles and tests. ``info`` holds
only plain values (numbers, bools, strings, fixed-dtype arrays, dicts of those), the same keys and types on
every step; see docs/environment.md. Faults of the backend or the retriever never end an episode: ``call_failed``,
``call_error`` (``""`` when none), ``backend_attempts`` and ``retrieval_fallback`` report them. A policy may read
neither :meth:`EDOEnv.hidden_state` nor the world and task generators (``env.world``, ``env.pool``): with
``info["task_id"]`` the task pool would tell it the gold answer.

Version History
---------------
Figures measured on different versions are not comparable; ``env.metadata["edo_gym_version"]`` carries the
package version, and result files record it.

- 0.3.0: answers are graded on the key value the task asks for (a reply's refund window, a name, a year, an amount,
  :mod:`edo_gym.world.grading`), for the reward, ``hidden_state()`` and the simulated verifiers of replies (a reply in
  the gold template with another window used to pass at token F1 0.86); ``RewardConfig.partial_credit`` and
  ``write_f1_threshold`` are gone. ``info["anchor_key"]`` is removed (with the task pool it identified altered
  plans); GiGPO groups states by the observation. ``hidden_state()["plan_faithful"]`` is false for a plan with a
  step that reads a later one (it cannot be executed in order). The oracle replans such plans and mislabelled ones
  and stops paying once the answer cannot be right.
  The observation gains the pointer-free view (``current``, ``last``, ``tried``; see
  :mod:`edo_gym.envs.observation`): the same dynamics and rewards, more keys. ``focus_view=False`` gives the earlier
  observation space; a model trained on it is refused by an env without that setting, with an error that says so.
  Opt-in observation entries, off by default, computed from the task and plan text an orchestrator reads:
  ``text_features=True`` (``step_text``, ``plan_text``) and ``plan_check=True`` (``step_check``, ``plan_check``).
  New tier ``EDO-Small-v0`` (tasks within a small local model's reach) and the options it is made of, all off in the
  other ids: ``PlannerConfig.mode="rules"`` (plans read off the task text, no planner call), ``entity_linking=
  "mentions"`` (a sentence answer fills the next question with the entity it names), ``lookup_inputs=False``,
  ``WorkerSpec.verdict_rate`` (a verifier that often gives no verdict), ``greedy``, ``bare_window_rate``,
  ``verbosity`` and ``prompt_token_scale`` (for simulators calibrated to a real model; their defaults change nothing),
  ``RetrievalConfig.identifier_match`` (a question naming a code gets the documents that contain it first).
  An entity answer that names several entities is graded on those of the kind asked for ("the birthplace of Elsa
  Novak is Morven" states the city Morven); the other ids' trajectories are unchanged (their stored digests pass).
  A multi-hop final answer may name the entity its last hop asks about ("The mentor of Elsa Novak is Dario Quell."),
  as a step's answer may name its question's subject; no simulated answer names it, so only real replies change.
- 0.2.0: one text-only LLM protocol; workers read the documents they retrieve; ``verify(w)`` is a charged call per
  worker; the planner makes shape-keeping errors; no hidden state in the observation or ``info``; answers
  normalised for real-model phrasing; ``info["anchor_key"]`` added.
- 0.1.0: first release.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from edo_gym.agents.backend import RetryPolicy
from edo_gym.agents.planner import (
    PLAN_FORMAT,
    PLAN_INSTRUCTION,
    PLANNER_SYSTEM,
    REPAIR_INSTRUCTION,
    Plan,
    PlanError,
    PlanStep,
    fallback_plan,
    parse_plan,
    plan_schema,
    rule_plan,
)
from edo_gym.agents.protocol import LLMBackend
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.agents.worker import AgentCaller, CallCost, CallRecord, Worker, plan_request
from edo_gym.config import EDOConfig, TaskConfig, WorldConfig
from edo_gym.envs import observation as O
from edo_gym.envs.render import render_trace
from edo_gym.envs.viewer import draw_trace
from edo_gym.retrieval import embedder as embedder_lib
from edo_gym.retrieval.service import RetrievalService
from edo_gym.world.generator import World
from edo_gym.world.grading import StepTruth, entity_index, execute_plan, grade_final, is_correct
from edo_gym.world.language import fill, parse_question, placeholders
from edo_gym.world.tasks import Task, TaskPool
from edo_gym.world.text import first_number

#: The package version whose dynamics this module implements (``EDOEnv.metadata["edo_gym_version"]``).
ENV_VERSION = "0.3.0"
RESET_OPTION_KEYS = frozenset({"task_id"})
MAX_SEED = 2**31 - 1
#: Price multiplier of planner tokens and of an outside decision-maker's tokens (``charge``).
PLANNER_PRICE = 2.0
PLANNER_SIZE = "medium"
_NO_CALL: dict[str, Any] = {"call_failed": False, "call_error": "", "backend_attempts": 0, "retrieval_fallback": False}
_VERDICT_CODE = {"ok": 1, "flagged": 2, "unsure": 3}


@functools.lru_cache(maxsize=8)
def _world(config: WorldConfig) -> World:
    return World(config)


@functools.lru_cache(maxsize=32)
def _task_pool(world_config: WorldConfig, task_config: TaskConfig) -> TaskPool:
    return TaskPool(_world(world_config), task_config)


@functools.lru_cache(maxsize=20_000)
def _plan_tables(
    steps: tuple[PlanStep, ...], max_subtasks: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...], np.ndarray, tuple[tuple[int, ...], ...], np.ndarray]:
    """What only depends on a plan's steps (memoised; the arrays are read-only): each step's inputs, each step's
    readers (the steps that use its answer), the static subtask table, the placeholders of each step's instruction,
    and the subtask table of the fresh plan (no result, verdict or attempt yet: the static table with the inputs-ready
    flag of the steps without inputs, as ``EDOEnv._subtask_row`` gives).

    About 2.5 kB per plan, so at most ~50 MB when full."""
    # tuples of ints, not lists: the garbage collector stops tracking them, so a growing memo does not make its full
    # passes (which visit every tracked object) more frequent and longer
    deps = tuple([s.deps for s in steps])
    dependents = tuple([tuple([j for j, s in enumerate(steps) if i in s.deps]) for i in range(len(steps))])
    sub = np.zeros((max_subtasks, O.SUBTASK_FEATURES), dtype=np.float32)
    for i, step in enumerate(steps):
        sub[i, O.C_TYPE + O.TYPE_INDEX[step.label]] = 1.0
        sub[i, O.C_DOMAIN + O.DOMAIN_INDEX[step.domain_label]] = 1.0
        sub[i, O.C_PRESENT] = 1.0
        sub[i, O.C_LATER] = float(any(d > i for d in step.deps))
    fresh = sub.copy()
    for i, step in enumerate(steps):
        if not step.deps:
            fresh[i, O.C_DEPS] = 1.0
    sub.setflags(write=False)
    fresh.setflags(write=False)
    holes = tuple([tuple(placeholders(s.instruction)) for s in steps])
    return deps, dependents, sub, holes, fresh


@functools.lru_cache(maxsize=20_000)
def _plan_features(
    kind: str, task_text: str, instructions: tuple[str, ...], max_subtasks: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~edo_gym.envs.observation.plan_text_features` (``kind="text"``) or
    :func:`~edo_gym.envs.observation.plan_check_features` (``kind="check"``), memoised (read-only arrays)."""
    compute = O.plan_text_features if kind == "text" else O.plan_check_features
    step, plan = compute(task_text, instructions, max_subtasks)
    step.setflags(write=False)
    plan.setflags(write=False)
    return step, plan


#: ``_plan_tables`` by the identity of a steps tuple, which is kept alive as the entry's first item (so its ``id`` is not
#: reused while the entry lives): ``parse_plan`` returns the same tuple for the same reply, and this skips hashing its
#: steps (a generated dataclass ``__hash__`` per step) for the lru cache. Cleared when it reaches ``_TABLES_BY_ID_SIZE``.
_TABLES_BY_ID: dict[int, tuple[tuple[PlanStep, ...], int, tuple]] = {}
_TABLES_BY_ID_SIZE = 20_000


def _plan_tables_of(steps: tuple[PlanStep, ...], max_subtasks: int) -> tuple:
    """``_plan_tables(steps, max_subtasks)``, looked up by the identity of ``steps`` first."""
    entry = _TABLES_BY_ID.get(id(steps))
    if entry is not None and entry[0] is steps and entry[1] == max_subtasks:
        return entry[2]
    tables = _plan_tables(steps, max_subtasks)
    if len(_TABLES_BY_ID) >= _TABLES_BY_ID_SIZE:
        _TABLES_BY_ID.clear()
    _TABLES_BY_ID[id(steps)] = (steps, max_subtasks, tables)
    return tables


class EDOEnv(gym.Env):
    """Orchestration environment (see module docstring).

    :param config: a full :class:`~edo_gym.config.EDOConfig`; keyword arguments override its fields (flat
        ``reward_token_weight=0.1`` or nested ``reward={"token_weight": 0.1}``), see ``EDOConfig.from_kwargs``.
    :param render_mode: ``"ansi"`` (``render()`` returns the episode trace as text), ``"human"`` (prints it) or
        ``"rgb_array"`` (returns it drawn as a fixed-size ``uint8`` image, see :mod:`edo_gym.envs.viewer`).
    :param backend: the language-model backend of planner, workers and verifiers (an
        :class:`~edo_gym.agents.protocol.LLMBackend`); default :class:`~edo_gym.agents.simulator.SimulatedBackend`.
    """

    metadata = {"render_modes": ["ansi", "human", "rgb_array"], "render_fps": 4, "edo_gym_version": ENV_VERSION}

    def __init__(
        self,
        config: EDOConfig | None = None,
        render_mode: str | None = None,
        backend: LLMBackend | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.config = cfg = EDOConfig.from_kwargs(config, **kwargs)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        if backend is not None and not isinstance(backend, LLMBackend):
            raise TypeError(f"backend must implement LLMBackend (a complete(request) method), got {type(backend).__name__}")
        self.render_mode = render_mode
        self.world = _world(cfg.world)
        self.pool = _task_pool(cfg.world, cfg.tasks)
        self.num_tasks = int(len(self.pool.ids))
        task_texts = [t.text for t in self.pool.tasks]
        # the task texts are embedded (on a cold cache) in one go with the corpus and the canonical queries
        self.service = RetrievalService.get(
            self.world, cfg.retrieval, [w.shard for w in cfg.workers], extra_texts={"tasks": task_texts}
        )
        self.service.add_tasks(self.pool.tasks)  # their compute steps' queries are among the reachable ones
        self.backend: LLMBackend = backend or SimulatedBackend(self.world, cfg.workers, cfg.planner, self.pool.tasks)
        self.retry_policy = RetryPolicy(cfg.backend_retries, cfg.backend_backoff_s, cfg.backend_timeout_s)
        self.caller = AgentCaller(self.backend, self.service, self.retry_policy)
        #: Texts of the corpus documents, by index, as the workers read them (the retrieval index is built from the
        #: world's own texts; the validity benchmark overwrites entries here to test that workers read documents).
        self.doc_texts: list[str] = [d.text for d in self.world.documents]
        by_domain = self.world.documents_by_domain()
        shard_indices = [sorted(i for dom in w.shard for i in by_domain[dom]) for w in cfg.workers]
        shuffle = cfg.retrieval.ablation == "shuffled"
        self.workers = [
            Worker(i, spec, self.service.retrievers[i], self.caller, self.doc_texts, shard_indices[i], shuffle)
            for i, spec in enumerate(cfg.workers)
        ]
        self.linker = self.world.linker(cfg.entity_link_threshold)
        self._link_mentions = cfg.entity_linking == "mentions"
        self._lookup_inputs = cfg.lookup_inputs
        self._task_vectors = self.service.lazy_texts("tasks", task_texts)
        self._task_features = self._make_task_features()

        W = len(cfg.workers)
        self.retrieve_flag = cfg.retrieval_decider == "orchestrator"
        self.n_dispatch = 2 * W if self.retrieve_flag else W
        self.A_VERIFY = self.n_dispatch  # first verify(w) action
        self.A_ROLLBACK, self.A_REPLAN, self.A_SUBMIT = range(self.n_dispatch + W, self.n_dispatch + W + 3)
        self.n_actions = self.n_dispatch + W + 3
        self.action_space = gym.spaces.Discrete(self.n_actions)
        self.observation_space = O.observation_space(cfg, self.n_actions)
        self.action_names = self._action_names()
        self._decoded = [self.decode_action(a) for a in range(self.n_actions)]  # ``decode_action`` of each action
        self.step_limit = cfg.step_limit
        self.token_budget = cfg.episode_token_budget
        self._worker_static = O.worker_static_features(cfg, [len(s) for s in shard_indices], len(self.doc_texts))
        # per-step constants of the config (a frozen dataclass; ``max_subtasks`` is a computed property)
        self._max_subtasks = cfg.max_subtasks
        self._history_len = cfg.history_len
        self._focus_view = cfg.focus_view
        self._text_features = cfg.text_features
        self._plan_check = cfg.plan_check
        self._enable_verify = cfg.enable_verify
        self._replan_limit = cfg.max_replans if cfg.enable_replan else 0  # replan is legal while replans < this
        self._replan_scale = max(1, cfg.max_replans)
        self._latency_budget_s = cfg.latency_budget_s
        self._budget_buf = np.zeros(O.BUDGET_FEATURES, dtype=np.float32)  # filled by ``_observation``, then copied
        #: Action masks by the state they depend on (see ``_mask``): read-only arrays and their values as a list.
        self._mask_memo: dict[tuple, tuple[np.ndarray, list[float]]] = {}
        self._started = False
        self._retrieval_prepared = False
        self._ended = False
        self._gold_docs: dict[tuple[str, str], int] | None = None
        self._pending = CallCost()  # charged on the next step: the planner at reset, an outside policy's decisions
        self._pending_price = 0.0  # price-weighted tokens of _pending

    # -- set-up helpers -----------------------------------------------------------------------------------------
    def _make_task_features(self) -> np.ndarray:
        """Task features (projected embedding, family one-hot) of every task whose embedding is known now; the
        others are filled by :meth:`_task_row` when a reset first draws them (``_task_ready`` marks the rows)."""
        E = self.config.retrieval.task_embedding_dim
        n = len(self.pool.tasks)
        fam = np.zeros((n, len(O.FAMILY_INDEX)), dtype=np.float32)
        for i, t in enumerate(self.pool.tasks):
            fam[i, O.FAMILY_INDEX[t.family]] = 1.0
        lazy = self._task_vectors
        if lazy.complete:
            self._task_ready = np.ones(n, dtype=bool)
            return np.concatenate([O.project_task_embeddings(lazy.full(), E), fam], axis=1)
        self._task_ready = np.zeros(n, dtype=bool)
        return np.concatenate([np.zeros((n, E), dtype=np.float32), fam], axis=1)

    def _task_row(self, i: int) -> np.ndarray:
        """Task ``i``'s features, computed with its embedding batch if not yet known. The projection multiplies the
        batch's rows placed at their own rows of an otherwise zero matrix of the pool's size: the same product, bit
        for bit, as projecting all tasks at once (a one-row product can differ in the last bits; tested)."""
        if not self._task_ready[i]:
            lazy = self._task_vectors
            rows = lazy.batch_rows(i)
            block = np.zeros((len(lazy), lazy.embedder.dim), dtype=np.float32)
            for r in rows:
                block[r] = lazy.row(int(r))
            proj = O.project_task_embeddings(block, self.config.retrieval.task_embedding_dim)
            self._task_features[rows, : proj.shape[1]] = proj[rows]
            self._task_ready[rows] = True
        return self._task_features[i]

    def _action_names(self) -> list[str]:
        names = []
        for w in self.config.workers:
            if self.retrieve_flag:
                names += [f"dispatch({w.name}, no_retrieval)", f"dispatch({w.name}, retrieval)"]
            else:
                names.append(f"dispatch({w.name})")
        names += [f"verify({w.name})" for w in self.config.workers]
        return names + ["rollback", "replan", "submit"]

    def decode_action(self, action: int) -> tuple[str, int, bool]:
        """``(kind, worker, retrieve)`` of an action index; ``worker`` is -1 for rollback/replan/submit."""
        if action < self.n_dispatch:
            if self.retrieve_flag:
                return "dispatch", action // 2, bool(action % 2)
            return "dispatch", action, False
        if action < self.A_ROLLBACK:
            return "verify", action - self.A_VERIFY, False
        return ("rollback", "replan", "submit")[action - self.A_ROLLBACK], -1, False

    def _seed(self) -> int:
        rng = self._np_random  # the np_random property without its call (it only fills in a missing generator)
        return int((rng if rng is not None else self.np_random).integers(MAX_SEED))

    # -- Gymnasium API ------------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if options:
            unknown = set(options) - RESET_OPTION_KEYS
            if unknown:
                raise ValueError(f"unknown reset option(s) {sorted(unknown)}; allowed: {sorted(RESET_OPTION_KEYS)}")
        task_id = None if not options else options.get("task_id")
        if task_id is None:
            task_id = int(self.np_random.integers(self.num_tasks))
        else:
            if isinstance(task_id, (bool, np.bool_)) or not isinstance(task_id, (int, np.integer)):
                raise TypeError(f"options['task_id'] must be an int, got {type(task_id).__name__}")
            if not 0 <= task_id < self.num_tasks:
                raise ValueError(f"options['task_id'] must be in [0, {self.num_tasks - 1}], got {task_id}")
            task_id = int(task_id)
        if not self._retrieval_prepared:
            self._prepare_retrieval()
        self.task_id = task_id
        self.task: Task = self.pool.tasks[int(self.pool.ids[task_id])]
        self._task_obs = self._task_row(self.task.task_id)
        W = len(self.config.workers)
        self.tokens = 0
        self.calls = 0
        self.latency_s = 0.0
        self.steps = 0
        self.replans = 0
        self.illegal_actions = 0
        self.failed_calls = 0
        self.call_retries = 0
        self.retrieval_fallbacks = 0
        self.budget_exhausted = False
        self._call_status = _NO_CALL
        # per worker, this episode: calls, abstentions, results flagged / confirmed by a verifier, verifications done
        # (columns of one array, in the observation's order, so the observation copies them in one operation)
        self._worker_counts = np.zeros((W, 5), dtype=np.float32)
        self.worker_calls, self.worker_abstained, self.worker_flagged, self.worker_confirmed, self.worker_verifications = (
            self._worker_counts.T
        )
        # the worker table of the observation; ``_count`` updates its cell with each count
        self._workers_obs = self._worker_static.copy()
        self._count_scale = float(np.float32(1.0 / float(self.step_limit)))  # a float32 value, as a Python float
        self.history: deque[int] = deque(maxlen=max(self.config.history_len, 1))
        # the observation's one-hot of the last actions, most recent first; ``step`` shifts it (see ``_observation``)
        self._hist_obs = np.zeros((self._history_len, self.n_actions), dtype=np.float32) if self._history_len > 0 else None
        self.final_answer = ""
        self.success = False
        self.score = 0.0
        self._pending = CallCost()
        self._pending_price = 0.0
        self.trace: list[tuple] = [("reset", self.task_id)]
        plan, cost = self._make_plan()
        self._charge_pending(cost, PLANNER_PRICE)
        self._set_plan(plan)
        self.trace.append(("plan", plan))
        self._started = True
        self._ended = False
        obs = self._observation()
        info = {"action_mask": obs["action_mask"].copy(), "task_id": self.task_id}
        if self.config.info_text:
            info["text"] = self.state_text()
        return obs, info

    def _prepare_retrieval(self) -> None:
        """At the first reset (``RetrievalConfig.index_at_reset``): build each worker's shard index and presearch its
        canonical queries for the worker's ``top_k`` now rather than at its first search. Draws nothing from any RNG.
        A retriever that fails here is left as it is, with a ``RuntimeWarning``: its first search tries again, and a
        failure there is a retrieval fallback in ``info``, as without this step."""
        self._retrieval_prepared = True
        retrieval = self.config.retrieval
        if not retrieval.index_at_reset or retrieval.ablation != "none":
            return
        for worker in self.workers:
            prepare = getattr(worker.retriever, "prepare", None)  # optional: a stand-in retriever needs only search()
            if prepare is None:
                continue
            try:
                prepare(worker.spec.top_k)
            except Exception as exc:  # chromadb raises many types; the first search tries again
                warnings.warn(
                    f"could not build the retrieval index of worker {worker.index} ({worker.spec.name}) at reset: "
                    f"{type(exc).__name__}: {exc}; it is built at the worker's first search instead",
                    RuntimeWarning,
                    stacklevel=3,
                )

    def _charge_pending(self, cost: CallCost, price: float) -> None:
        self._pending.prompt_tokens += cost.prompt_tokens
        self._pending.completion_tokens += cost.completion_tokens
        self._pending.calls += cost.calls
        self._pending.latency_s += cost.latency_s
        self._pending_price += price * cost.tokens

    def _make_plan(self) -> tuple[Plan, CallCost]:
        """Ask the planner (one repair attempt, then the fallback plan); every attempt is charged. With
        ``PlannerConfig.mode == "rules"`` the plan is :func:`rule_plan`'s (the fallback plan where it has none), free."""
        total = CallCost()
        if self.config.planner.mode == "rules":
            self._plan_status(0, "", failed=False)
            return rule_plan(self.task.text) or fallback_plan(self.task.text), total
        error = ""
        attempts = 0
        call_error = ""
        for attempt in range(2):
            instruction = PLAN_INSTRUCTION if attempt == 0 else REPAIR_INSTRUCTION.format(error=error)
            request = plan_request(
                self.task.text, instruction, PLAN_FORMAT, self._seed(), PLANNER_SYSTEM, plan_schema(self.config.max_subtasks)
            )
            response, outcome, cost = self.caller.call(request, PLANNER_SIZE)
            total.prompt_tokens += cost.prompt_tokens
            total.completion_tokens += cost.completion_tokens
            total.calls += cost.calls
            total.latency_s += cost.latency_s
            self.call_retries += outcome.attempts - 1
            attempts += outcome.attempts
            if response is None:
                self.failed_calls += 1
                error = call_error = outcome.error or "the call failed"
                continue
            try:
                steps = parse_plan(response.text, self.config.max_subtasks)
            except PlanError as exc:
                error = str(exc)
                continue
            self._plan_status(attempts, call_error, failed=False)
            return Plan(steps, response.confidence, "planner" if attempt == 0 else "repaired"), total
        self.trace.append(("plan_fallback", error))
        self._plan_status(attempts, call_error, failed=bool(call_error))
        return fallback_plan(self.task.text), total

    def _plan_status(self, attempts: int, error: str, failed: bool) -> None:
        """``info``'s call fields for a planner call (visible on the replan step; at reset they are not reported)."""
        self._call_status = {
            "call_failed": failed,
            "call_error": error,
            "backend_attempts": attempts,
            "retrieval_fallback": False,
        }

    def _set_plan(self, plan: Plan) -> None:
        self.plan = plan
        n = len(plan.steps)
        self.results: list[CallRecord | None] = [None] * n
        self.verdicts: list[list[str]] = [[] for _ in range(n)]
        self.verified_by: list[set[int]] = [set() for _ in range(n)]
        self.attempts = [0] * n
        self.done_stack: list[int] = []
        # the pointer-free view's per-step facts: dispatches per worker (without / with retrieval, abstained), the
        # worker whose result a step holds, each verifier's verdict on it
        self._tried_counts = np.zeros((n, len(self.workers), 3), dtype=np.float32)
        self._producer = [-1] * n
        self._verdict_of: list[dict[int, str]] = [{} for _ in range(n)]
        self._truth: list[StepTruth] | None = None
        self._deps, self._dependents, self._sub_static, self._holes, fresh = _plan_tables_of(plan.steps, self._max_subtasks)
        # the subtask table without the current-step marker, kept up to date row by row: a row is recomputed only
        # when its step's result, verdicts or attempts (or a result it reads) changed (see ``_touch``); it starts as
        # the fresh plan's table (what ``_subtask_row`` gives for every row before anything is done)
        self._sub_rows = fresh.copy()
        self._dirty_rows: set[int] = set()
        head = np.zeros(O.PLAN_FEATURES, dtype=np.float32)
        head[O.P_LEN] = n / self.config.max_subtasks
        if plan.confidence is not None:
            head[O.P_CONF] = plan.confidence
            head[O.P_CONF_GIVEN] = 1.0
        head[O.P_FALLBACK] = float(plan.source == "fallback")
        head[O.P_REPAIRED] = float(plan.source == "repaired")
        self._plan_static = head
        if self._text_features:
            self._step_text, self._plan_text = _plan_features(
                "text", self.task.text, tuple([s.instruction for s in plan.steps]), self._max_subtasks
            )
        if self._plan_check:
            self._step_check, self._plan_check_obs = _plan_features(
                "check", self.task.text, tuple([s.instruction for s in plan.steps]), self._max_subtasks
            )

    @property
    def current_step(self) -> int:
        """Index of the plan step a dispatch would run (the first step without a result), or -1 when all are done."""
        for i, r in enumerate(self.results):
            if r is None:
                return i
        return -1

    def action_masks(self) -> np.ndarray:
        """Boolean mask of legal actions (sb3-contrib convention): a new array on each call."""
        return self._mask_entry(self.current_step)[0].astype(bool)  # astype copies the memoised read-only mask

    def _mask(self) -> np.ndarray:
        return self._mask_entry(self.current_step)[0].copy()

    def _mask_entry(self, cur: int) -> tuple[np.ndarray, list[float]]:
        """The action mask (read-only, memoised) and its values as a list, given ``cur`` (``current_step``).

        Legal: dispatches while a step is undone (with retrieval only for workers whose retriever has documents),
        rollback and verify by a worker that has not verified it yet while a result is on the stack, replan while
        replans are left, submit; nothing before reset or after the end."""
        if self._ended or not self._started:
            key: tuple = ()
        else:
            no_docs = None
            if cur >= 0 and self.retrieve_flag:  # read each time: a worker's retriever may be replaced
                no_docs = tuple([w.retriever.size == 0 for w in self.workers])
            top = frozenset(self.verified_by[self.done_stack[-1]]) if self.done_stack else None
            key = (cur >= 0, no_docs, top, self.replans < self._replan_limit)
        entry = self._mask_memo.get(key)
        if entry is None:
            entry = self._build_mask(key)
            if len(self._mask_memo) >= 4096:
                self._mask_memo.clear()
            self._mask_memo[key] = entry
        return entry

    def _build_mask(self, key: tuple) -> tuple[np.ndarray, list[float]]:
        mask = np.zeros(self.n_actions, dtype=np.float32)
        if key:
            undone, no_docs, top, replan = key
            if undone:
                mask[: self.n_dispatch] = 1.0
                if no_docs is not None:
                    for i, empty in enumerate(no_docs):
                        if empty:
                            mask[2 * i + 1] = 0.0
            if top is not None:
                mask[self.A_ROLLBACK] = 1.0
                if self._enable_verify:
                    for w in range(len(self.workers)):
                        if w not in top:
                            mask[self.A_VERIFY + w] = 1.0
            if replan:
                mask[self.A_REPLAN] = 1.0
            mask[self.A_SUBMIT] = 1.0
        mask.setflags(write=False)
        return mask, mask.tolist()

    def charge(self, tokens: int = 0, calls: int = 0, latency_s: float = 0.0) -> None:
        """Charge an outside decision-maker's cost (e.g. an LLM router's call per decision) to the next step.

        It goes on the same ledger as the team's calls: ``tokens`` (priced at ``PLANNER_PRICE``), ``calls`` and
        simulated ``latency_s`` (seconds) appear in the next step's ``info["cost"]`` and reward terms.
        """
        for name, value in (("tokens", tokens), ("calls", calls), ("latency_s", latency_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0:
                raise ValueError(f"charge({name}=...) must be a non-negative number, got {value!r}")
        self._charge_pending(CallCost(prompt_tokens=int(tokens), calls=int(calls), latency_s=float(latency_s)), PLANNER_PRICE)

    #: Deprecated name of :meth:`charge`.
    add_overhead = charge

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("EDOEnv.step() called before reset(); call env.reset() first")
        if self._ended:
            raise RuntimeError("EDOEnv.step() called after the episode ended (terminated or truncated); call env.reset()")
        a = self._check_action(action)
        cfg = self.config
        # this step's cost: what was pending (the planner at reset, an outside policy's charge), then the action's
        pending, priced = self._pending, self._pending_price
        prompt, completion, calls, latency = pending.prompt_tokens, pending.completion_tokens, pending.calls, pending.latency_s
        if prompt or completion or calls or latency or priced:  # else the zero ledger stays as it is
            self._pending, self._pending_price = CallCost(), 0.0
        penalty = 0.0
        score = 0.0
        terminated = False
        legal = self._mask_list[a] > 0  # the mask of the observation this action answers (state unchanged since)
        self._call_status = _NO_CALL
        if not legal:
            if cfg.illegal_action == "raise":
                raise ValueError(
                    f"illegal action {a} ({self.action_names[a]}) in this state; legal: {np.flatnonzero(self._mask()).tolist()}"
                )
            self.illegal_actions += 1
            penalty = cfg.reward.illegal_action_penalty
            event = "illegal"
            self.trace.append(("illegal", a, self.action_names[a]))
        else:
            kind, w, retrieve = self._decoded[a]
            event = kind
            step_cost: CallCost | None = None
            price = 1.0
            if kind == "dispatch":
                step_cost, price = self._dispatch(w, retrieve), cfg.workers[w].price
            elif kind == "verify":
                step_cost, price = self._verify(w), cfg.workers[w].price
            elif kind == "rollback":
                i = self.done_stack.pop()
                self.results[i] = None
                self._touch(i)
                self.verdicts[i] = []
                self.verified_by[i] = set()
                self._producer[i] = -1
                self._verdict_of[i] = {}
                step_cost = CallCost(prompt_tokens=cfg.rollback_tokens)
                self.trace.append(("rollback", i))
            elif kind == "replan":
                self.replans += 1
                plan, step_cost = self._make_plan()
                price = PLANNER_PRICE
                self._set_plan(plan)
                self.trace.append(("replan", plan))
            else:  # submit (costs nothing: adding zeros would change no sum)
                score = self._submit()
                terminated = True
            if step_cost is not None:
                step_prompt, step_completion = step_cost.prompt_tokens, step_cost.completion_tokens
                prompt += step_prompt
                completion += step_completion
                calls += step_cost.calls
                latency += step_cost.latency_s
                priced += price * (step_prompt + step_completion)
        self.steps += 1
        self.history.append(a)
        hist = self._hist_obs
        if hist is not None:  # shift the one-hot rows down (numpy copies overlapping slices safely), newest on top
            hist[1:] = hist[:-1]
            hist[0] = 0.0
            hist[0, a] = 1.0
        tokens = prompt + completion
        self.tokens += tokens
        self.calls += calls
        self.latency_s += latency
        rw = cfg.reward
        t_success = float(score)
        t_tokens = -rw.token_weight * priced / 1000.0
        t_calls = -rw.call_weight * calls
        t_latency = -rw.latency_weight * latency
        t_illegal = -penalty
        terms = {"success": t_success, "tokens": t_tokens, "calls": t_calls, "latency": t_latency, "illegal": t_illegal}
        if not terminated and self.tokens > self.token_budget:
            terminated = True
            self.budget_exhausted = True
            self.trace.append(("budget", self.tokens))
        truncated = not terminated and self.steps >= self.step_limit
        self._ended = terminated or truncated
        reward = float(t_success + t_tokens + t_calls + t_latency + t_illegal)
        obs = self._observation()
        info: dict[str, Any] = {
            "action_mask": obs["action_mask"].copy(),
            "reward_terms": terms,
            "cost": {"tokens": int(tokens), "calls": int(calls), "latency_s": float(latency)},
            "event": event,
            "illegal_action": bool(not legal),
            "task_id": int(self.task_id),
            # SB3's convention (its success-rate logging; GRPO's filter_on="success"): final once the episode ended
            "is_success": bool(self._ended and self.success),
            **self._call_status,
        }
        if self.config.info_text:
            info["text"] = self.state_text()
        # on every step, with the same keys and types (strict replay buffers fill a late key with None); the outcome
        # is final when ``ended`` is true
        info["episode_stats"] = {
            "ended": bool(self._ended),
            "success": bool(self.success),
            "score": float(self.score),
            "tokens": int(self.tokens),
            "calls": int(self.calls),
            "latency_s": float(self.latency_s),
            "steps": int(self.steps),
            "family": self.task.family,
            "budget_exhausted": bool(self.budget_exhausted),
            "failed_calls": int(self.failed_calls),
            "call_retries": int(self.call_retries),
            "retrieval_fallbacks": int(self.retrieval_fallbacks),
        }
        return obs, reward, terminated, truncated, info

    def _check_action(self, action: Any) -> int:
        if type(action) is int and 0 <= action < self.n_actions:  # the common case, in one test
            return action
        if isinstance(action, np.ndarray):
            if action.size != 1:
                raise ValueError(
                    f"action must be a single integer in [0, {self.n_actions - 1}], got an array of shape {action.shape}"
                )
            action = action.reshape(()).item()
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
            raise ValueError(f"action must be an integer in [0, {self.n_actions - 1}], got {type(action).__name__} {action!r}")
        a = int(action)
        if not 0 <= a < self.n_actions:
            raise ValueError(
                f"action {a} is out of range: EDOEnv has {self.n_actions} actions, 0..{self.n_actions - 1} ({self.action_names})"
            )
        return a

    # -- transitions --------------------------------------------------------------------------------------------
    def _filled(self, i: int) -> tuple[str, tuple[str, ...]]:
        """Step ``i``'s instruction with upstream answers filled in, and those answers as written."""
        step = self.plan.steps[i]
        results = self.results
        holes = self._holes[i]
        inputs = tuple([results[d].text if results[d] is not None else "(missing)" for d in step.deps])  # type: ignore[union-attr]
        if not holes:  # nothing to fill in: fill() would return the instruction as written
            return step.instruction, inputs
        link = step.label == "lookup"
        values: dict[int, str] = {}
        for k in holes:
            d = k - 1
            r = results[d] if 0 <= d < len(results) else None
            if r is None:
                values[k] = "(missing)"
                continue
            text = r.text.strip()
            if link:  # fuzzy entity linking of the upstream answer, as the framework's parser would do
                linked = self.linker.link(text)
                if linked is None and self._link_mentions:
                    linked = self._mentioned(text, r.instruction)
                text = linked if linked is not None else text.rstrip(".")
            values[k] = text
        if link and not self._lookup_inputs:  # the question holds the linked answers: nothing else is sent
            inputs = ()
        return fill(step.instruction, values), inputs

    def _dispatch(self, w: int, retrieve: bool) -> CallCost:
        i = self.current_step
        step = self.plan.steps[i]
        worker = self.workers[w]
        if not self.retrieve_flag:
            retrieve = worker.wants_retrieval(step.label, step.domain_label)
        instruction, inputs = self._filled(i)
        record = worker.run(self.task.text, step.label, instruction, inputs, retrieve, self.np_random, self._seed())
        self.attempts[i] += 1
        self._count(w, 0)
        self._dirty_rows.add(i)
        self._tried_counts[i, w, 1 if retrieve else 0] += 1.0
        if record.failed:  # charged, but the step stays undone
            self.failed_calls += 1
        else:
            record.linked = self._answer_linked(record.text, record.instruction)
            self.results[i] = record
            self._touch(i)
            self.verdicts[i] = []
            self.verified_by[i] = set()
            self._producer[i] = w
            self._verdict_of[i] = {}
            self.done_stack.append(i)
            if record.abstained:
                self._count(w, 1)
                self._tried_counts[i, w, 2] = 1.0
        self.call_retries += record.attempts - 1
        self.retrieval_fallbacks += record.retrieval_fallback
        self._call_status = {
            "call_failed": record.failed,
            "call_error": record.error,
            "backend_attempts": int(record.attempts),
            "retrieval_fallback": record.retrieval_fallback,
        }
        self.trace.append(("dispatch", i, w, record))
        return record.cost

    def _verify(self, w: int) -> CallCost:
        i = self.done_stack[-1]
        record = self.results[i]
        assert record is not None
        check = self.workers[w].verify(self.task.text, self.plan.steps[i].label, i, record, self.np_random, self._seed())
        self._count(w, 4)
        self._dirty_rows.add(i)
        self.retrieval_fallbacks += check.retrieval_fallback
        if check.failed:  # no verdict: the same worker may be asked again
            self.failed_calls += 1
        else:
            self.verified_by[i].add(w)
            self.verdicts[i].append(check.verdict)
            self._verdict_of[i][w] = check.verdict
            if check.verdict == "flagged":
                self._count(record.worker, 2)
            elif check.verdict == "ok":
                self._count(record.worker, 3)
        self.call_retries += check.attempts - 1
        self._call_status = {
            "call_failed": check.failed,
            "call_error": check.error,
            "backend_attempts": int(check.attempts),
            "retrieval_fallback": check.retrieval_fallback,
        }
        self.trace.append(("verify", check))
        return check.cost

    def _submit(self) -> float:
        last = self.results[-1] if self.results else None
        self.final_answer = last.text if last is not None else ""
        # graded on the key value the task asks for (a reply's refund window, a name, a year, an amount)
        self.success = grade_final(self.world, self.task, self.final_answer)
        self.score = self.config.reward.task_score(self.task.hops) if self.success else 0.0
        self.trace.append(("submit", self.final_answer, self.score))
        return self.score

    # -- observation --------------------------------------------------------------------------------------------
    def _answer_linked(self, text: str, instruction: str = "") -> bool:
        if self.linker.link(text) is not None or first_number(text) is not None:
            return True
        return self._link_mentions and self._mentioned(text, instruction) is not None

    def _mentioned(self, text: str, question: str) -> str | None:
        """The one entity ``text`` names that ``question`` (the step it answers) does not, or ``None``."""
        index = entity_index(self.world)
        names = index.mentions(text) - index.mentions(question)
        return next(iter(names)) if len(names) == 1 else None

    def _count(self, w: int, column: int) -> None:
        """Add one to worker ``w``'s count ``column`` (calls, abstentions, flagged, confirmed, verifications) and to its
        observation cell, ``min(1, count / step limit)`` in float32 (as ``np.minimum(counts * (1 / limit), 1)``)."""
        counts = self._worker_counts
        # in Python floats, with the same results: a float32 count plus one is exact up to 2**24 (beyond, it is rounded
        # as the float32 sum is), and the product of two float32 values is exact in a double, so rounding it to float32
        # when stored gives the float32 product (clipping before or after that rounding gives the same cell)
        value = counts.item(w, column) + 1.0
        if value > 16777216.0:
            value = float(np.float32(value))
        counts[w, column] = value
        v = value * self._count_scale
        self._workers_obs[w, O.W_CALLS + column] = v if v < 1.0 else 1.0

    def _touch(self, i: int) -> None:
        """Step ``i``'s result changed: its row is recomputed, and in the rows of the steps that read it the one cell
        that depends on it, the inputs-ready flag, is set as ``_subtask_row`` would (they have inputs, so it is 1.0
        when all their inputs have a result, else the static row's 0.0). Call it after the change."""
        self._dirty_rows.add(i)
        results, rows, deps = self.results, self._sub_rows, self._deps
        for j in self._dependents[i]:
            rows[j, O.C_DEPS] = 1.0 if all(results[d] is not None for d in deps[j]) else 0.0

    def _subtask_row(self, i: int) -> None:
        """Recompute row ``i`` of the subtask table (all but the current-step marker) from the static row."""
        row = self._sub_rows[i]
        row[:] = self._sub_static[i]
        results = self.results
        r = results[i]
        if r is not None:
            row[O.C_DONE] = 1.0
            if r.confidence is not None:
                row[O.C_CONF] = r.confidence
                row[O.C_CONF_GIVEN] = 1.0
            row[O.C_RETR] = r.used_retrieval
            row[O.C_ABSTAIN] = r.abstained
            row[O.C_LINKED] = r.linked
        v = self.verdicts[i]
        if v:
            row[O.C_OK - 1 + _VERDICT_CODE[v[-1]]] = 1.0
            row[O.C_NVERIFY] = min(1.0, len(v) / 4.0)
        attempts = self.attempts[i]
        if attempts:
            row[O.C_ATTEMPTS] = min(1.0, attempts / 4.0)
        deps = self._deps[i]
        if not deps or all(results[d] is not None for d in deps):
            row[O.C_DEPS] = 1.0

    def _observation(self) -> dict[str, np.ndarray]:
        cur = self.current_step
        mask, self._mask_list = self._mask_entry(cur)
        n = len(self.plan.steps)
        if self._dirty_rows:
            for i in self._dirty_rows:
                self._subtask_row(i)
            self._dirty_rows.clear()
        sub = self._sub_rows.copy()
        if cur >= 0:
            sub[cur, O.C_CURRENT] = 1.0
        plan = self._plan_static.copy()
        plan[O.P_CURRENT] = (cur if cur >= 0 else n) / self._max_subtasks
        plan[O.P_ALL_DONE] = float(cur < 0)
        plan[O.P_REPLANS] = self.replans / self._replan_scale
        done_stack = self.done_stack
        if done_stack:
            last = done_stack[-1]
            rec = self.results[last]
            if rec is not None and rec.confidence is not None:
                plan[O.P_LAST_CONF] = rec.confidence
                plan[O.P_LAST_CONF_GIVEN] = 1.0
            v = self.verdicts[last]
            if v:
                plan[O.P_LAST_OK - 1 + _VERDICT_CODE[v[-1]]] = 1.0
        # each value clipped to 1 (``v if v < 1.0 else 1.0`` is ``min(1.0, v)``, NaN included), written into a buffer
        # that is then copied: cheaper than a new array from a list
        lim = float(self.step_limit)
        buf = self._budget_buf
        v = self.tokens / self.token_budget
        buf[0] = v if v < 1.0 else 1.0
        v = self.calls / lim
        buf[1] = v if v < 1.0 else 1.0
        v = self.latency_s / self._latency_budget_s
        buf[2] = v if v < 1.0 else 1.0
        v = self.steps / lim
        buf[3] = v if v < 1.0 else 1.0
        v = self.illegal_actions / lim
        buf[4] = v if v < 1.0 else 1.0
        budget = buf.copy()
        obs = {
            "task": self._task_obs.copy(),
            "plan": plan,
            "subtasks": sub,
            "workers": self._workers_obs.copy(),
            "budget": budget,
        }
        if self._hist_obs is not None:
            obs["history"] = self._hist_obs.copy()
        if self._text_features:
            obs["step_text"] = self._step_text.copy()
            obs["plan_text"] = self._plan_text.copy()
        if self._plan_check:
            obs["step_check"] = self._step_check.copy()
            obs["plan_check"] = self._plan_check_obs.copy()
        if self._focus_view:
            self._focus(obs, sub, cur, done_stack)
        obs["action_mask"] = mask.copy()
        return obs

    def _focus(self, obs: dict[str, np.ndarray], sub: np.ndarray, cur: int, done_stack: list[int]) -> None:
        """Add the pointer-free view (see :mod:`edo_gym.envs.observation`) to ``obs``."""
        tried = np.zeros((len(self.workers), O.TRIED_FEATURES), dtype=np.float32)
        if cur >= 0:
            obs["current"] = sub[cur].copy()
            counts = self._tried_counts[cur]
            np.minimum(counts[:, :2] * 0.25, 1.0, out=tried[:, O.T_NO_RETRIEVAL : O.T_RETRIEVAL + 1])
            tried[:, O.T_ABSTAINED] = counts[:, 2]
        else:
            obs["current"] = np.zeros(O.SUBTASK_FEATURES, dtype=np.float32)
        if done_stack:
            last = done_stack[-1]
            obs["last"] = sub[last].copy()
            producer = self._producer[last]
            if producer >= 0:
                tried[producer, O.T_PRODUCED] = 1.0
            for w, verdict in self._verdict_of[last].items():
                tried[w, O.T_OK - 1 + _VERDICT_CODE[verdict]] = 1.0
        else:
            obs["last"] = np.zeros(O.SUBTASK_FEATURES, dtype=np.float32)
        obs["tried"] = tried

    # -- humans and oracles -------------------------------------------------------------------------------------
    def render(self) -> str | np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi', 'human' or 'rgb_array'")
            return None
        text = "EDOEnv: not reset yet" if not self._started else render_trace(self)
        if self.render_mode == "human":
            print(text)
            return None
        if self.render_mode == "rgb_array":
            return draw_trace(text.splitlines())
        return text

    def plan_truth(self) -> list[StepTruth]:
        """Hidden: what each step of the current plan should produce (executed on the true facts)."""
        if self._truth is None:
            self._truth = execute_plan(self.world, [s.instruction for s in self.plan.steps], [s.deps for s in self.plan.steps])
        return self._truth

    def hidden_state(self) -> dict[str, Any]:
        """Ground truth for oracles and tests only (never part of the observation or ``info``).

        Keys: ``plan_faithful`` (executing this plan in order, every step right, answers the task; a plan whose step
        reads a later step's answer cannot be executed in order and is not faithful), ``kinds`` / ``domains`` (true
        step types and document domains), ``label_wrong`` (the type or domain label differs from the truth),
        ``expected`` (each step's right answer given right inputs), ``correct`` (per step: the current result is
        right, ``None`` when undone), ``answer`` (the gold answer), ``hops``, ``family``, ``worker_skills``
        (per worker: type skills, per-domain lookup skills, memory coverage and accuracy, and ``greedy``: it answers the
        same request the same way at every call), ``gold_retrieved_by``
        (the workers whose own retrieval for the current step's question returns the document stating its answer;
        empty when the current step is not a single-hop lookup or under a retrieval ablation), ``memory_right_by``
        (the workers whose simulated parametric memory holds the right value of the current single-hop lookup).
        """
        truth = self.plan_truth()
        correct = [None if r is None else is_correct(self.world, t, r.text) for r, t in zip(self.results, truth, strict=True)]
        last = truth[-1] if truth else None
        # executable in order (no step reads a later one) and, executed on the true facts, right
        executable = all(d < i for i, deps in enumerate(self._deps) for d in deps)
        faithful = (
            executable and last is not None and bool(last.expected) and grade_final(self.world, self.task, last.expected)
        )
        kinds = [t.kind for t in truth]
        return {
            "plan_faithful": faithful,
            "kinds": kinds,
            "domains": [t.domain for t in truth],
            "label_wrong": [
                (("lookup" if k == "merged" else k) != s.label) or (t.domain not in ("", s.domain_label))
                for k, t, s in zip(kinds, truth, self.plan.steps, strict=True)
            ],
            "expected": [t.expected for t in truth],
            "correct": correct,
            "answer": self.task.answer,
            "hops": self.task.hops,
            "family": self.task.family,
            "gold_retrieved_by": self._gold_retrieved_by(),
            "memory_right_by": self._memory_right_by(),
            "worker_skills": {
                w.name: {
                    "types": dict(w.skills),
                    "lookup_by_domain": {d: w.lookup_skill(d) for d in O.DOMAIN_INDEX},
                    "memory_coverage": w.memory_coverage,
                    "memory_accuracy": w.memory_accuracy,
                    "greedy": w.greedy,
                }
                for w in self.config.workers
            },
        }

    def _gold_retrieved_by(self) -> list[int]:
        """Hidden: which workers' retrievers return the gold document for the current step (memoised searches)."""
        i = self.current_step
        if i < 0 or self.config.retrieval.ablation != "none" or self.plan.steps[i].label != "lookup":
            return []
        parsed = parse_question(self._filled(i)[0])
        if parsed is None or len(parsed[0]) != 1:
            return []
        if self._gold_docs is None:
            self._gold_docs = {(d.subject, d.relation): k for k, d in enumerate(self.world.documents) if not d.is_distractor}
        doc = self._gold_docs.get((parsed[1], parsed[0][0]))
        if doc is None:
            return []
        query = self._filled(i)[0]
        return [w.index for w in self.workers if w.retriever.size and doc in w.retriever.search(query, w.spec.top_k)]

    def _memory_right_by(self) -> list[int]:
        """Hidden: which workers' parametric memories hold the right value of the current single-hop lookup."""
        i = self.current_step
        memories = getattr(self.backend, "_memories", None)
        if i < 0 or memories is None or self.plan.steps[i].label != "lookup":
            return []
        parsed = parse_question(self._filled(i)[0])
        if parsed is None or len(parsed[0]) != 1:
            return []
        key = (parsed[1], parsed[0][0])
        truth = self.world.facts.get(key)
        return [w.index for w in self.workers if truth is not None and memories[w.spec.name].get(key) == truth]

    def text_state(self) -> dict[str, Any]:
        """What a human or an LLM orchestrator sees: the task text, the plan as written, results as written.

        Everything here is observable (no hidden state); ``edo_gym.llm`` renders it as a prompt.
        """
        steps = []
        for i, s in enumerate(self.plan.steps):
            r = self.results[i]
            steps.append(
                {
                    "label": s.label,
                    "domain": s.domain_label,
                    "instruction": s.instruction,
                    "inputs": [d + 1 for d in s.deps],
                    "answer": "" if r is None else r.text,
                    "verdicts": list(self.verdicts[i]),
                }
            )
        return {
            "task": self.task.text,
            "steps": steps,
            "current_step": self.current_step,
            "tokens": self.tokens,
            "token_budget": self.token_budget,
            "calls": self.calls,
            "steps_taken": self.steps,
            "step_limit": self.step_limit,
            "legal_actions": [self.action_names[a] for a in np.flatnonzero(self._mask())],
        }

    def orchestrator_view(self) -> Any:
        """The state as :class:`edo_gym.llm.orchestrator.OrchestratorView` (plain, observable data only)."""
        from edo_gym.llm.orchestrator import OrchestratorView

        cur = self.current_step
        plan = [
            f"[{s.label}/{s.domain_label}] {s.instruction}" + (f" (uses steps {[d + 1 for d in s.deps]})" if s.deps else "")
            for s in self.plan.steps
        ]
        results = []
        for i, r in enumerate(self.results):
            if r is None:
                continue
            who = self.config.workers[r.worker].name
            line = f"step {i + 1} by {who}: {r.text!r}"
            if r.confidence is not None:
                line += f" (confidence {r.confidence:.2f})"
            if self.verdicts[i]:
                line += f"; verified: {', '.join(self.verdicts[i])}"
            results.append(line)
        return OrchestratorView(
            task=self.task.text,
            plan=plan,
            action_names=self.action_names,
            action_mask=[bool(m) for m in self._mask()],
            current_step=cur if cur >= 0 else None,
            results=results,
            budget={
                "tokens": self.tokens,
                "token_budget": self.token_budget,
                "calls": self.calls,
                "steps": self.steps,
                "step_limit": self.step_limit,
            },  # fmt: skip
            history=[self.action_names[a] for a in self.history],
        )

    def state_text(self) -> str:
        """The state as an LLM orchestrator's prompt (see :func:`edo_gym.llm.orchestrator.obs_to_text`)."""
        from edo_gym.llm.orchestrator import obs_to_text

        return obs_to_text(self.orchestrator_view())

    def process_info(self) -> dict[str, int]:
        """``pid`` of the process this env lives in and how often that process loaded an embedding model
        (``model_loads``); call it through ``VecEnv.env_method`` / ``VectorEnv.call``."""
        return {"pid": os.getpid(), "model_loads": embedder_lib.model_load_count()}

    def close(self) -> None:
        self._started = False
        # commit what the run-time disk cache buffers: a worker process of a vector env may exit without atexit hooks
        service = getattr(self, "service", None)
        if service is not None:
            service.flush()
