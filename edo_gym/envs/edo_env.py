"""``EDOEnv``: the RL agent is the orchestrator of a multi-agent LLM system (see the class docstring).

The module holds the env's transitions only: episode and plan state live in :mod:`edo_gym.envs.state`, the
observation's layout and features in :mod:`edo_gym.envs.observation`, the text trace in :mod:`edo_gym.envs.render`.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections import deque
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from edo_gym.agents.backend import RetryPolicy
from edo_gym.agents.planner import (
    PLAN_FORMAT,
    PLAN_INSTRUCTION,
    PLANNER_SYSTEM,
    REPAIR_INSTRUCTION,
    REPLAN_INSTRUCTION,
    Plan,
    PlanError,
    fallback_plan,
    parse_plan,
    plan_schema,
    plan_to_json,
    rule_plan,
)
from edo_gym.agents.protocol import LLMBackend
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.agents.worker import AgentCaller, CallCost, Worker, plan_request
from edo_gym.config import EDOConfig, TaskConfig, WorldConfig
from edo_gym.deviations import Drift, DriftingBackend, TeamDraw, draw_drift, draw_team, public_team
from edo_gym.envs import observation as O
from edo_gym.envs.render import render_trace
from edo_gym.envs.state import (
    C_ABSTAINED,
    C_CALLS,
    C_CONFIRMED,
    C_FLAGGED,
    C_VERIFICATIONS,
    NO_CALL,
    VERDICT_CODE,
    WORKER_COUNTS,
    EpisodeState,
    PlanState,
)
from edo_gym.envs.viewer import draw_trace
from edo_gym.retrieval import embedder as embedder_lib
from edo_gym.retrieval.service import RetrievalService
from edo_gym.world import extra_step
from edo_gym.world.generator import World
from edo_gym.world.grading import StepTruth, entity_index, execute_plan, grade_final, is_correct
from edo_gym.world.language import fill, parse_question, result_notes
from edo_gym.world.tasks import TaskPool
from edo_gym.world.text import first_number

#: The package version whose dynamics this module implements (``EDOEnv.metadata["edo_gym_version"]``).
ENV_VERSION = "0.4.0"
RESET_OPTION_KEYS = frozenset({"task_id"})
MAX_SEED = 2**31 - 1
#: Price multiplier of planner tokens and of an outside decision-maker's tokens (``charge``).
PLANNER_PRICE = 2.0
PLANNER_SIZE = "medium"


@functools.lru_cache(maxsize=8)
def shared_world(config: WorldConfig) -> World:
    """The world of ``config``, built once per process (the envs of a process share it; it is never changed)."""
    return World(config)


@functools.lru_cache(maxsize=32)
def shared_task_pool(world_config: WorldConfig, task_config: TaskConfig) -> TaskPool:
    """The task pool of ``task_config`` over that world, built once per process."""
    return TaskPool(shared_world(world_config), task_config)


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


class PlannerReply(NamedTuple):
    """What one request for a plan gave: the plan, its cost, ``info``'s call fields, and the retries and failed
    calls it took (an invalid reply is asked again once, then the fallback plan is used)."""

    plan: Plan
    cost: CallCost
    call_status: dict[str, Any]
    retries: int
    failed_calls: int
    fallback_error: str | None


class EDOEnv(gym.Env):
    """The orchestrator of a multi-agent LLM system, as a Gymnasium env.

    ## Description

    One episode is one task from a seeded synthetic world (customer support, multi-hop encyclopedia questions,
    analytics). At ``reset`` the Planner decomposes the task into a plan of steps (a model call); each ``step`` is one
    decision of the orchestrator: which worker runs the current step, with or without a query to its own retriever
    (a sentence-transformers embedding search over its knowledge shard in chromadb), whether to have a result
    verified, rolled back or the task replanned, and when to submit. Planner, workers and verifiers are calls to an
    :class:`~edo_gym.agents.protocol.LLMBackend`: a seeded simulator by default, any OpenAI-compatible server
    otherwise (:mod:`edo_gym.llm`).

    ## Action Space

    ``Discrete(A)``, dispatches first, then one verify per worker, then one plan review per worker, then rollback,
    replan, submit (``action_names`` spells them out; ``decode_action`` gives ``(kind, worker, retrieve)``):

    - ``dispatch(w, retrieve)`` (``w * 2 + retrieve``): run the current plan step on worker ``w``, with or without
      retrieval; with ``retrieval_decider="worker"`` only ``dispatch(w)`` exists (index ``w``) and the worker decides;
    - ``verify(w)``: worker ``w`` re-checks the last result against its own evidence; a real call, charged like a
      dispatch; its verdict is ``ok``, ``flagged`` or ``unsure``;
    - ``verify_plan(w)`` (with ``enable_plan_review``, the default): worker ``w`` critiques the plan as written against
      the task text; charged like a call, as fallible as the worker's ``plan_skill``; its verdict is in ``plan_review``;
    - ``rollback``: discard the last result and make its step current again (the discarded work stays charged, plus
      ``rollback_tokens`` of coordination);
    - ``replan``: ask the Planner for a new decomposition (a call; the progress on the old plan is discarded);
    - ``submit``: return the last plan step's output as the final answer; ends the episode.

    ``action_masks()`` (sb3-contrib) and ``info["action_mask"]`` (Gymnasium) give the legal actions. An illegal action
    is penalised and changes nothing (``illegal_action="penalize"``, the default) or raises (``"raise"``); an
    out-of-range action always raises ``ValueError``.

    ## Observation Space

    A ``Dict`` of fixed-size ``Box`` arrays (SB3's ``MultiInputPolicy``): the task text's embedding and family, the
    plan as written, one row per plan step (labels, status, confidence, verdicts), one row per worker (public profile,
    this episode's counts), the budget used, the recent actions, the pointer-free view of the current and last steps,
    and the action mask; see :mod:`edo_gym.envs.observation` for every key. It holds only what a real orchestrator
    knows. Hidden ground truth is reachable only through :meth:`hidden_state`, for oracles and tests; a policy reads
    neither it nor ``env.world`` / ``env.pool`` (with ``info["task_id"]`` the pool would tell the gold answer).

    ## Rewards

    The task score at submit (``RewardConfig.task_score``: a correct final answer states the key value the task asks
    for, :mod:`edo_gym.world.grading`) minus the collaboration cost of every step: tokens times the worker's price,
    calls and simulated latency, each weighted by :class:`~edo_gym.config.RewardConfig`, and a penalty per illegal
    action. ``info["reward_terms"]`` is the breakdown and sums to the reward.

    ## Starting State

    A task drawn uniformly from the pool (or ``options={"task_id": k}``) and the planner's plan for it; the
    planner's cost is charged to the first step.

    ## Episode End

    Terminated by ``submit`` or when the episode's tokens exceed the token budget (a failure); truncated at the step
    limit (``max_steps``, by default ``4 * max_subtasks + 4``). ``info["episode_stats"]`` holds the outcome, final
    once ``ended`` is true; ``info["is_success"]`` follows SB3's convention.

    ``info`` holds only plain values (numbers, bools, strings, fixed-dtype arrays, dicts of those), with the same keys
    and types on every step (docs/environment.md). Faults of the backend or the retriever never end an episode:
    ``call_failed``, ``call_error``, ``backend_attempts`` and ``retrieval_fallback`` report them.

    ## Arguments

    :param config: a full :class:`~edo_gym.config.EDOConfig`; keyword arguments override its fields (flat
        ``reward_token_weight=0.1`` or nested ``reward={"token_weight": 0.1}``), see ``EDOConfig.from_kwargs``.
    :param render_mode: ``"ansi"`` (``render()`` returns the episode trace as text), ``"human"`` (prints it) or
        ``"rgb_array"`` (returns it drawn as a fixed-size ``uint8`` image, see :mod:`edo_gym.envs.viewer`).
    :param backend: the language-model backend of planner, workers and verifiers (an
        :class:`~edo_gym.agents.protocol.LLMBackend`); default :class:`~edo_gym.agents.simulator.SimulatedBackend`.

    ``gym.make("EDO-v0", **kwargs)`` passes ``kwargs`` on; the registered variants are in
    :data:`edo_gym.registration.VARIANTS`.

    ## Version History

    Figures measured on different versions are not comparable; ``env.metadata["edo_gym_version"]`` carries the
    package version, and result files record it.

    - 0.4.0: the deviations from the script are part of the default task distribution, each behind its own rate, in
      every registered id but ``EDO-Small-v0`` (which keeps 0.3.0's scripted world, the one its recorded model calls
      were made in): every task text is phrased from parts (``TaskConfig.phrasing_rate=1.0``; the test split uses
      held-out phrasings), half the episodes draw their team around the public profiles
      (``DeviationConfig.team_rate=0.5``; held-out draws in the test split), a quarter hold a drift
      (``drift_rate=0.25``: a worker changes its output format or stops answering mid-episode), and half the support
      tasks need a step no plan written from their text holds (``WorldConfig.tiered_refunds=True``,
      ``TaskConfig.extra_step_rate=0.5``). ``verify_plan(w)`` actions and the ``plan_review`` observation key are on
      (``enable_plan_review=True``), so the action space has ``W`` more actions. A model saved on 0.3.0 is refused
      with an error that says so. ``gym.make(id, **edo_gym.SCRIPTED)`` (those rates at 0, ``tiered_refunds=False``,
      ``enable_plan_review=False``) gives 0.3.0's dynamics (the stored seeded digests of the test suite check it).
    - 0.3.0: answers are graded on the key value the task asks for (a reply's refund window, a name, a year, an
      amount, :mod:`edo_gym.world.grading`), for the reward, ``hidden_state()`` and the simulated verifiers of replies
      (a reply in the gold template with another window used to pass at token F1 0.86); ``RewardConfig.partial_credit``
      and ``write_f1_threshold`` are gone. ``info["anchor_key"]`` is removed (with the task pool it identified altered
      plans); GiGPO groups states by the observation. ``hidden_state()["plan_faithful"]`` is false for a plan with a
      step that reads a later one (it cannot be executed in order). The oracle replans such plans and mislabelled
      ones and stops paying once the answer cannot be right. The observation gains the pointer-free view
      (``current``, ``last``, ``tried``): the same dynamics and rewards, more keys; ``focus_view=False`` gives the
      earlier observation space, and a model trained on it is refused by an env without that setting, with an error
      that says so. Opt-in observation entries, off by default, computed from the task and plan text:
      ``text_features=True`` (``step_text``, ``plan_text``) and ``plan_check=True`` (``step_check``, ``plan_check``).
      New tier ``EDO-Small-v0`` (tasks within a small local model's reach) and the options it is made of, all off in
      the other ids: ``PlannerConfig.mode="rules"``, ``entity_linking="mentions"``, ``lookup_inputs=False``,
      ``WorkerSpec.verdict_rate``, ``greedy``, ``bare_window_rate``, ``verbosity``, ``prompt_token_scale``,
      ``RetrievalConfig.identifier_match``. An entity answer that names several entities is graded on those of the
      kind asked for; a multi-hop final answer may name the entity its last hop asks about.
      Opt-in, off in every registered id: the deviations from the script, each
      behind its own rate (``TaskConfig.phrasing_rate``: task texts phrased from parts, held-out phrasings in the test
      split; ``DeviationConfig.team_rate``: the episode's team drawn around the public profiles, held-out draws in the
      test split; ``DeviationConfig.drift_rate``: a worker changes its output format or stops answering mid-episode;
      ``WorldConfig.tiered_refunds`` with ``TaskConfig.extra_step_rate``: a refund window set by the customer's
      membership tier, a step no plan written from the task text holds), and ``enable_plan_review`` (``verify_plan(w)``
      actions and the ``plan_review`` observation key). ``plan_check=True`` is privileged: it compares the plan with a
      rule-based planner's, a check a real orchestrator cannot make for free; it is for diagnostics only.
    - 0.2.0: one text-only LLM protocol; workers read the documents they retrieve; ``verify(w)`` is a charged call per
      worker; the planner makes shape-keeping errors; no hidden state in the observation or ``info``; answers
      normalised for real-model phrasing; ``info["anchor_key"]`` added.
    - 0.1.0: first release.
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
        # the world, its tasks and the team
        self.world = shared_world(cfg.world)
        self.pool = shared_task_pool(cfg.world, cfg.tasks)
        self.num_tasks = int(len(self.pool.ids))
        task_texts = [t.text for t in self.pool.tasks]
        # the task texts are embedded (on a cold cache) in one go with the corpus and the canonical queries
        self.service = RetrievalService.get(
            self.world, cfg.retrieval, [w.shard for w in cfg.workers], extra_texts={"tasks": task_texts}
        )
        self.service.add_tasks(self.pool.tasks)  # their compute steps' queries are among the reachable ones
        self.backend: LLMBackend = backend or SimulatedBackend(self.world, cfg.workers, cfg.planner, self.pool.tasks)
        self.retry_policy = RetryPolicy(cfg.backend_retries, cfg.backend_backoff_s, cfg.backend_timeout_s)
        # the drift deviation acts on requests, behind the backend interface (any backend)
        self._drifting = DriftingBackend(self.backend) if cfg.deviations.drift_rate > 0 else None
        self.caller = AgentCaller(self._drifting or self.backend, self.service, self.retry_policy)
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
        self._public_team = public_team(cfg.workers)
        #: Each domain's documents (what a worker's index lacks when a team draw drops that domain from its shard).
        self._domain_docs = {dom: frozenset(ids) for dom, ids in by_domain.items()}
        # the action layout
        W = len(cfg.workers)
        self.retrieve_flag = cfg.retrieval_decider == "orchestrator"
        self.n_dispatch = 2 * W if self.retrieve_flag else W
        self.A_VERIFY = self.n_dispatch  # first verify(w) action
        self.A_VERIFY_PLAN = self.n_dispatch + W  # first verify_plan(w) action (when enable_plan_review)
        n_review = W if cfg.enable_plan_review else 0
        first = self.A_VERIFY_PLAN + n_review
        self.A_ROLLBACK, self.A_REPLAN, self.A_SUBMIT = range(first, first + 3)
        self.n_actions = first + 3
        self.action_space = gym.spaces.Discrete(self.n_actions)
        self.observation_space = O.observation_space(cfg, self.n_actions)
        self.action_names = self._action_names()
        self._decoded = [self.decode_action(a) for a in range(self.n_actions)]
        self._actions = {
            "dispatch": self._dispatch,
            "verify": self._verify,
            "verify_plan": self._verify_plan,
            "rollback": self._rollback,
            "replan": self._replan,
            "submit": self._submit,
        }
        self.step_limit = cfg.step_limit
        self.token_budget = cfg.episode_token_budget
        self._replan_limit = cfg.max_replans if cfg.enable_replan else 0  # replan is legal while replans < this
        # the constant parts of the observation
        self._task_vectors = self.service.lazy_texts("tasks", task_texts)
        self._task_features, self._task_ready = self._known_task_features()
        self._worker_static = O.worker_static_features(cfg, [len(s) for s in shard_indices], len(self.doc_texts))
        #: Action masks by the state they depend on (see ``_mask_entry``): read-only arrays.
        self._mask_memo: dict[tuple, np.ndarray] = {}
        self._retrieval_prepared = False
        self._gold_docs: dict[tuple[str, str], int] | None = None
        #: The episode under way (``None`` before the first reset).
        self.episode: EpisodeState | None = None

    # -- set-up helpers -----------------------------------------------------------------------------------------
    def _known_task_features(self) -> tuple[np.ndarray, np.ndarray]:
        """Task features (projected embedding, family one-hot) of every task whose embedding is known now, and which
        rows those are; the others are filled by :meth:`_task_row` when a reset first draws them."""
        E = self.config.retrieval.task_embedding_dim
        n = len(self.pool.tasks)
        fam = np.zeros((n, len(O.FAMILY_INDEX)), dtype=np.float32)
        for i, t in enumerate(self.pool.tasks):
            fam[i, O.FAMILY_INDEX[t.family]] = 1.0
        lazy = self._task_vectors
        if lazy.complete:
            return np.concatenate([O.project_task_embeddings(lazy.full(), E), fam], axis=1), np.ones(n, dtype=bool)
        return np.concatenate([np.zeros((n, E), dtype=np.float32), fam], axis=1), np.zeros(n, dtype=bool)

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
        if self.config.enable_plan_review:
            names += [f"verify_plan({w.name})" for w in self.config.workers]
        return names + ["rollback", "replan", "submit"]

    def decode_action(self, action: int) -> tuple[str, int, bool]:
        """``(kind, worker, retrieve)`` of an action index; ``worker`` is -1 for rollback/replan/submit."""
        if action < self.n_dispatch:
            if self.retrieve_flag:
                return "dispatch", action // 2, bool(action % 2)
            return "dispatch", action, False
        if action < self.A_VERIFY_PLAN:
            return "verify", action - self.A_VERIFY, False
        if action < self.A_ROLLBACK:
            return "verify_plan", action - self.A_VERIFY_PLAN, False
        return ("rollback", "replan", "submit")[action - self.A_ROLLBACK], -1, False

    def _seed(self) -> int:
        """A seed for one model call, drawn from the env's generator."""
        rng = self._np_random  # the np_random property without its call (it only fills in a missing generator)
        return int((rng if rng is not None else self.np_random).integers(MAX_SEED))

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

    # -- Gymnasium API ------------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        task_id = self._task_id_option(options)
        if task_id is None:
            task_id = int(self.np_random.integers(self.num_tasks))
        if not self._retrieval_prepared:
            self._prepare_retrieval()
        task = self.pool.tasks[int(self.pool.ids[task_id])]
        self._task_obs = self._task_row(task.task_id)
        cfg = self.config
        team, drift = self._draw_deviations()
        reply = self._ask_planner(task.text)
        W = len(self.workers)
        self.episode = ep = EpisodeState(
            task_id=task_id,
            task=task,
            team=team,
            drift=drift,
            plan=self._plan_state(reply.plan, task.text),
            call_retries=reply.retries,
            failed_calls=reply.failed_calls,
            worker_counts=np.zeros((W, len(WORKER_COUNTS)), dtype=np.float32),
            worker_table=self._worker_static.copy(),
            count_scale=float(np.float32(1.0 / float(self.step_limit))),
            history=deque(maxlen=max(cfg.history_len, 1)),
            history_onehot=np.zeros((cfg.history_len, self.n_actions), dtype=np.float32) if cfg.history_len > 0 else None,
            trace=[("reset", task_id)],
        )
        ep.charge_later(reply.cost, PLANNER_PRICE)
        if reply.fallback_error is not None:
            ep.trace.append(("plan_fallback", reply.fallback_error))
        ep.trace.append(("plan", reply.plan))
        obs = self._observation()
        info = {"action_mask": obs["action_mask"].copy(), "task_id": task_id}
        if cfg.info_text:
            info["text"] = self.state_text()
        return obs, info

    def _draw_deviations(self) -> tuple[TeamDraw, Drift | None]:
        """This episode's team and drift (:mod:`edo_gym.deviations`), put in force. Draws from the env's generator
        only when a deviation is switched on, so that runs without any are as they were."""
        dev = self.config.deviations
        team, drift = self._public_team, None
        if dev.any:
            rng = self.np_random
            if dev.team_rate > 0 and rng.random() < dev.team_rate:
                team = draw_team(self.config.workers, dev, self.config.tasks.split == "test", rng)
            if dev.drift_rate > 0:
                drift = draw_drift([w.name for w in self.config.workers], self.step_limit, dev, rng)
        if self._drifting is not None:
            self._drifting.active = None
        if dev.team_rate > 0:
            use_team = getattr(self.backend, "use_team", None)  # skills are the simulator's; prices and shards any
            if use_team is not None:
                use_team(team.specs)
            for worker, missing in zip(self.workers, team.missing_domains, strict=True):
                worker.unavailable = self._domain_docs[missing[0]] if missing else frozenset()
        return team, drift

    def _task_id_option(self, options: dict[str, Any] | None) -> int | None:
        """``options["task_id"]``, checked; ``None`` when no task is asked for."""
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if not options:
            return None
        unknown = set(options) - RESET_OPTION_KEYS
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; allowed: {sorted(RESET_OPTION_KEYS)}")
        task_id = options.get("task_id")
        if task_id is None:
            return None
        if isinstance(task_id, (bool, np.bool_)) or not isinstance(task_id, (int, np.integer)):
            raise TypeError(f"options['task_id'] must be an int, got {type(task_id).__name__}")
        if not 0 <= task_id < self.num_tasks:
            raise ValueError(f"options['task_id'] must be in [0, {self.num_tasks - 1}], got {task_id}")
        return int(task_id)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        ep = self.episode
        if ep is None:
            raise RuntimeError("EDOEnv.step() called before reset(); call env.reset() first")
        if ep.ended:
            raise RuntimeError("EDOEnv.step() called after the episode ended (terminated or truncated); call env.reset()")
        a = self._check_action(action)
        cfg = self.config
        if ep.drift is not None and ep.steps == ep.drift.onset and self._drifting is not None:
            self._drifting.active = ep.drift
        # this step's cost: what was pending (the planner at reset, an outside policy's charge), then the action's
        pending, priced = ep.take_pending()
        prompt, completion, calls, latency = pending.prompt_tokens, pending.completion_tokens, pending.calls, pending.latency_s
        penalty = 0.0
        ep.call_status = NO_CALL
        kind, w, retrieve = self._decoded[a]
        legal = bool(self._mask_entry(ep.plan.current_step)[a])
        if legal:
            event = kind
            step_cost, price = self._actions[kind](w, retrieve)
            if step_cost is not None:
                step_prompt, step_completion = step_cost.prompt_tokens, step_cost.completion_tokens
                prompt += step_prompt
                completion += step_completion
                calls += step_cost.calls
                latency += step_cost.latency_s
                priced += price * (step_prompt + step_completion)
        else:
            if cfg.illegal_action == "raise":
                raise ValueError(
                    f"illegal action {a} ({self.action_names[a]}) in this state; legal: {np.flatnonzero(self._mask()).tolist()}"
                )
            ep.illegal_actions += 1
            penalty = cfg.reward.illegal_action_penalty
            event = "illegal"
            ep.trace.append(("illegal", a, self.action_names[a]))
        ep.record_action(a)
        tokens = prompt + completion
        ep.tokens += tokens
        ep.calls += calls
        ep.latency_s += latency
        terminated = event == "submit"
        rw = cfg.reward
        terms = {
            "success": float(ep.score) if terminated else 0.0,
            "tokens": -rw.token_weight * priced / 1000.0,
            "calls": -rw.call_weight * calls,
            "latency": -rw.latency_weight * latency,
            "illegal": -penalty,
        }
        if not terminated and ep.tokens > self.token_budget:
            terminated = True
            ep.budget_exhausted = True
            ep.trace.append(("budget", ep.tokens))
        truncated = not terminated and ep.steps >= self.step_limit
        ep.ended = terminated or truncated
        reward = float(terms["success"] + terms["tokens"] + terms["calls"] + terms["latency"] + terms["illegal"])
        obs = self._observation()
        return obs, reward, terminated, truncated, self._step_info(obs, terms, tokens, calls, latency, event, legal)

    def _step_info(
        self,
        obs: dict[str, np.ndarray],
        terms: dict[str, float],
        tokens: int,
        calls: int,
        latency: float,
        event: str,
        legal: bool,
    ) -> dict[str, Any]:
        ep = self.episode
        assert ep is not None
        info: dict[str, Any] = {
            "action_mask": obs["action_mask"].copy(),
            "reward_terms": terms,
            "cost": {"tokens": int(tokens), "calls": int(calls), "latency_s": float(latency)},
            "event": event,
            "illegal_action": bool(not legal),
            "task_id": int(ep.task_id),
            # SB3's convention (its success-rate logging; GRPO's filter_on="success"): final once the episode ended
            "is_success": bool(ep.ended and ep.success),
            **ep.call_status,
        }
        if self.config.info_text:
            info["text"] = self.state_text()
        # on every step, with the same keys and types (strict replay buffers fill a late key with None); the outcome
        # is final when ``ended`` is true
        info["episode_stats"] = {
            "ended": bool(ep.ended),
            "success": bool(ep.success),
            "score": float(ep.score),
            "tokens": int(ep.tokens),
            "calls": int(ep.calls),
            "latency_s": float(ep.latency_s),
            "steps": int(ep.steps),
            "family": ep.task.family,
            "budget_exhausted": bool(ep.budget_exhausted),
            "failed_calls": int(ep.failed_calls),
            "worker_down_calls": int(ep.down_calls),
            "call_retries": int(ep.call_retries),
            "retrieval_fallbacks": int(ep.retrieval_fallbacks),
        }
        return info

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

    def charge(self, tokens: int = 0, calls: int = 0, latency_s: float = 0.0) -> None:
        """Charge an outside decision-maker's cost (e.g. an LLM router's call per decision) to the next step.

        It goes on the same ledger as the team's calls: ``tokens`` (priced at ``PLANNER_PRICE``), ``calls`` and
        simulated ``latency_s`` (seconds) appear in the next step's ``info["cost"]`` and reward terms.
        """
        for name, value in (("tokens", tokens), ("calls", calls), ("latency_s", latency_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0:
                raise ValueError(f"charge({name}=...) must be a non-negative number, got {value!r}")
        if self.episode is None:
            raise RuntimeError("EDOEnv.charge() called before reset(); call env.reset() first")
        self.episode.charge_later(
            CallCost(prompt_tokens=int(tokens), calls=int(calls), latency_s=float(latency_s)), PLANNER_PRICE
        )

    # -- actions: each returns the cost it made and the price of its tokens -------------------------------------
    def _dispatch(self, w: int, retrieve: bool) -> tuple[CallCost, float]:
        """Run the current step on worker ``w``; a failed call is charged and leaves the step undone."""
        ep = self._ep
        plan = ep.plan
        i = plan.current_step
        step = plan.steps[i]
        worker = self.workers[w]
        if not self.retrieve_flag:
            retrieve = worker.wants_retrieval(step.label, step.domain_label)
        instruction, inputs = self._filled(i)
        record = worker.run(ep.task.text, step.label, instruction, inputs, retrieve, self.np_random, self._seed())
        plan.note_dispatch(i, w, retrieve)
        ep.count(w, C_CALLS)
        if record.failed:
            self._count_failure(w)
        else:
            record.linked = self._answer_linked(record.text, record.instruction)
            plan.set_result(i, w, record)
            if record.abstained:
                ep.count(w, C_ABSTAINED)
        ep.call_retries += record.attempts - 1
        ep.retrieval_fallbacks += record.retrieval_fallback
        ep.call_status = {
            "call_failed": record.failed,
            "call_error": record.error,
            "backend_attempts": int(record.attempts),
            "retrieval_fallback": record.retrieval_fallback,
        }
        ep.trace.append(("dispatch", i, w, record))
        return record.cost, ep.team.specs[w].price

    def _verify(self, w: int, retrieve: bool = False) -> tuple[CallCost, float]:
        """Worker ``w`` checks the last result; a failed call gives no verdict (the same worker may be asked again)."""
        ep = self._ep
        plan = ep.plan
        i = plan.last_done
        record = plan.results[i]
        assert record is not None
        check = self.workers[w].verify(ep.task.text, plan.steps[i].label, i, record, self.np_random, self._seed())
        ep.count(w, C_VERIFICATIONS)
        plan.dirty.add(i)
        ep.retrieval_fallbacks += check.retrieval_fallback
        if check.failed:
            self._count_failure(w)
        else:
            plan.add_verdict(i, w, check.verdict)
            if check.verdict == "flagged":
                ep.count(record.worker, C_FLAGGED)
            elif check.verdict == "ok":
                ep.count(record.worker, C_CONFIRMED)
        ep.call_retries += check.attempts - 1
        ep.call_status = {
            "call_failed": check.failed,
            "call_error": check.error,
            "backend_attempts": int(check.attempts),
            "retrieval_fallback": check.retrieval_fallback,
        }
        ep.trace.append(("verify", check))
        return check.cost, ep.team.specs[w].price

    def _verify_plan(self, w: int, retrieve: bool = False) -> tuple[CallCost, float]:
        """Worker ``w`` critiques the plan as written against the task text (a paid call, as fallible as the worker);
        a failed call gives no verdict (the same worker may be asked again)."""
        ep = self._ep
        plan = ep.plan
        if plan.json_text is None:
            plan.json_text = plan_json(plan.plan)
        check = self.workers[w].verify_plan(ep.task.text, plan.json_text, self._seed())
        if check.failed:
            self._count_failure(w)
        else:
            plan.reviews.append(check.verdict)
            plan.reviewed_by.add(w)
        ep.call_retries += check.attempts - 1
        ep.call_status = {
            "call_failed": check.failed,
            "call_error": check.error,
            "backend_attempts": int(check.attempts),
            "retrieval_fallback": False,
        }
        ep.trace.append(("verify_plan", check))
        return check.cost, ep.team.specs[w].price

    def _count_failure(self, w: int) -> None:
        """Count a failed call to worker ``w``; one to a worker the episode's drift has stopped also in ``down_calls``."""
        ep = self._ep
        ep.failed_calls += 1
        drift = self._drifting.active if self._drifting is not None else None
        if drift is not None and drift.kind == "failure" and drift.agent == self.config.workers[w].name:
            ep.down_calls += 1

    def _rollback(self, w: int = -1, retrieve: bool = False) -> tuple[CallCost, float]:
        """Discard the last result; only the coordination tokens are charged (the discarded work already was)."""
        ep = self._ep
        i = ep.plan.discard_last()
        ep.trace.append(("rollback", i))
        return CallCost(prompt_tokens=self.config.rollback_tokens), 1.0

    def _replan(self, w: int = -1, retrieve: bool = False) -> tuple[CallCost, float]:
        """Ask the planner again; the progress on the old plan is discarded."""
        ep = self._ep
        ep.replans += 1
        reply = self._ask_planner(ep.task.text, self._results_so_far())
        ep.call_retries += reply.retries
        ep.failed_calls += reply.failed_calls
        ep.call_status = reply.call_status
        if reply.fallback_error is not None:
            ep.trace.append(("plan_fallback", reply.fallback_error))
        ep.plan = self._plan_state(reply.plan, ep.task.text)
        ep.trace.append(("replan", reply.plan))
        return reply.cost, PLANNER_PRICE

    def _submit(self, w: int = -1, retrieve: bool = False) -> tuple[None, float]:
        """The last plan step's output is the final answer, graded on the key value the task asks for (a reply's
        refund window, a name, a year, an amount). Costs nothing."""
        ep = self._ep
        results = ep.plan.results
        last = results[-1] if results else None
        ep.final_answer = last.text if last is not None else ""
        ep.success = grade_final(self.world, ep.task, ep.final_answer)
        ep.score = self.config.reward.task_score(ep.task.hops) if ep.success else 0.0
        ep.trace.append(("submit", ep.final_answer, ep.score))
        return None, 1.0

    @property
    def _ep(self) -> EpisodeState:
        ep = self.episode
        assert ep is not None, "no episode: call reset() first"
        return ep

    # -- the planner --------------------------------------------------------------------------------------------
    def _ask_planner(self, task_text: str, results: tuple[str, ...] = ()) -> PlannerReply:
        """Ask the planner for a plan (one repair attempt, then the fallback plan); every attempt is charged. With
        ``PlannerConfig.mode == "rules"`` the plan is :func:`rule_plan`'s (the fallback plan where it has none), free.
        ``results``: what the episode found so far (:meth:`_results_so_far`), carried as the request's inputs."""
        total = CallCost()
        if self.config.planner.mode == "rules":
            plan = rule_plan(task_text) or fallback_plan(task_text)
            return PlannerReply(plan, total, _planner_status(0, "", failed=False), 0, 0, None)
        error = ""
        attempts = retries = failed = 0
        call_error = ""
        for attempt in range(2):
            first = REPLAN_INSTRUCTION if results else PLAN_INSTRUCTION
            instruction = first if attempt == 0 else REPAIR_INSTRUCTION.format(error=error)
            request = plan_request(
                task_text, instruction, PLAN_FORMAT, self._seed(), PLANNER_SYSTEM, plan_schema(self.config.max_subtasks),
                results,
            )  # fmt: skip
            response, outcome, cost = self.caller.call(request, PLANNER_SIZE)
            total.prompt_tokens += cost.prompt_tokens
            total.completion_tokens += cost.completion_tokens
            total.calls += cost.calls
            total.latency_s += cost.latency_s
            retries += outcome.attempts - 1
            attempts += outcome.attempts
            if response is None:
                failed += 1
                error = call_error = outcome.error or "the call failed"
                continue
            try:
                steps = parse_plan(response.text, self.config.max_subtasks)
            except PlanError as exc:
                error = str(exc)
                continue
            plan = Plan(steps, response.confidence, "planner" if attempt == 0 else "repaired")
            return PlannerReply(plan, total, _planner_status(attempts, call_error, failed=False), retries, failed, None)
        status = _planner_status(attempts, call_error, failed=bool(call_error))
        return PlannerReply(fallback_plan(task_text), total, status, retries, failed, error)

    def _results_so_far(self) -> tuple[str, ...]:
        """What a replan request carries with the extra-step deviation on (:mod:`edo_gym.world.extra_step`): the
        answers the episode's dispatches got, as written (:func:`result_notes`). None with it off: requests as before."""
        if self.config.tasks.extra_step_rate <= 0:
            return ()
        return result_notes(
            (e[3].instruction, e[3].text)
            for e in self._ep.trace
            if e[0] == "dispatch" and not e[3].failed and not e[3].abstained
        )

    def _plan_state(self, plan: Plan, task_text: str) -> PlanState:
        """A fresh :class:`PlanState` for ``plan``, with the opt-in text features of the plan as written."""
        cfg = self.config
        text_features = check_features = None
        if cfg.text_features or cfg.plan_check:
            instructions = tuple([s.instruction for s in plan.steps])
            if cfg.text_features:
                text_features = _plan_features("text", task_text, instructions, cfg.max_subtasks)
            if cfg.plan_check:
                check_features = _plan_features("check", task_text, instructions, cfg.max_subtasks)
        return PlanState.new(plan, len(self.workers), cfg.max_subtasks, text_features, check_features)

    # -- dispatch helpers ---------------------------------------------------------------------------------------
    def _filled(self, i: int) -> tuple[str, tuple[str, ...]]:
        """Step ``i``'s instruction with upstream answers filled in, and those answers as written."""
        plan = self._ep.plan
        step = plan.steps[i]
        results = plan.results
        holes = plan.tables.holes[i]
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
                if linked is None and self.config.entity_linking == "mentions":
                    linked = self._mentioned(text, r.instruction)
                text = linked if linked is not None else text.rstrip(".")
            values[k] = text
        if link and not self.config.lookup_inputs:  # the question holds the linked answers: nothing else is sent
            inputs = ()
        return fill(step.instruction, values), inputs

    def _answer_linked(self, text: str, instruction: str = "") -> bool:
        """The answer names a known entity or a number (an observation cell)."""
        if self.linker.link(text) is not None or first_number(text) is not None:
            return True
        return self.config.entity_linking == "mentions" and self._mentioned(text, instruction) is not None

    def _mentioned(self, text: str, question: str) -> str | None:
        """The one entity ``text`` names that ``question`` (the step it answers) does not, or ``None``."""
        index = entity_index(self.world)
        names = index.mentions(text) - index.mentions(question)
        return next(iter(names)) if len(names) == 1 else None

    # -- action masks -------------------------------------------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        """Boolean mask of legal actions (sb3-contrib convention): a new array on each call."""
        return self._mask().astype(bool)

    def _mask(self) -> np.ndarray:
        """The action mask of the current state as a new float32 array (all zeros before reset or after the end)."""
        cur = self.episode.plan.current_step if self.episode is not None else -1
        return self._mask_entry(cur).copy()

    def _mask_entry(self, cur: int) -> np.ndarray:
        """The action mask (read-only, memoised by the state it depends on), given ``cur`` (the current step).

        Legal: dispatches while a step is undone (with retrieval only for workers whose retriever has documents),
        rollback and verify by a worker that has not verified it yet while a result is on the stack, verify_plan by a
        worker that has not critiqued the current plan yet (with ``enable_plan_review``; a failed call leaves it
        legal), replan while replans are left, submit; nothing before reset or after the end."""
        ep = self.episode
        if ep is None or ep.ended:
            key: tuple = ()
        else:
            no_docs = None
            if cur >= 0 and self.retrieve_flag:  # read each time: a worker's retriever may be replaced
                no_docs = tuple([w.retriever.size == 0 for w in self.workers])
            plan = ep.plan
            top = frozenset(plan.verified_by[plan.done_stack[-1]]) if plan.done_stack else None
            reviewed = frozenset(plan.reviewed_by) if plan.reviewed_by else None
            key = (cur >= 0, no_docs, top, ep.replans < self._replan_limit, reviewed)
        mask = self._mask_memo.get(key)
        if mask is None:
            mask = self._build_mask(key)
            if len(self._mask_memo) >= 4096:
                self._mask_memo.clear()
            self._mask_memo[key] = mask
        return mask

    def _build_mask(self, key: tuple) -> np.ndarray:
        mask = np.zeros(self.n_actions, dtype=np.float32)
        if key:
            undone, no_docs, top, replan, reviewed = key
            if undone:
                mask[: self.n_dispatch] = 1.0
                if no_docs is not None:
                    for i, empty in enumerate(no_docs):
                        if empty:
                            mask[2 * i + 1] = 0.0
            if top is not None:
                mask[self.A_ROLLBACK] = 1.0
                if self.config.enable_verify:
                    for w in range(len(self.workers)):
                        if w not in top:
                            mask[self.A_VERIFY + w] = 1.0
            if self.config.enable_plan_review:
                for w in range(len(self.workers)):
                    if reviewed is None or w not in reviewed:
                        mask[self.A_VERIFY_PLAN + w] = 1.0
            if replan:
                mask[self.A_REPLAN] = 1.0
            mask[self.A_SUBMIT] = 1.0
        mask.setflags(write=False)
        return mask

    # -- observation --------------------------------------------------------------------------------------------
    def _observation(self) -> dict[str, np.ndarray]:
        """The observation of the current state (see :mod:`edo_gym.envs.observation` for the keys)."""
        ep = self._ep
        cfg = self.config
        plan = ep.plan
        cur = plan.current_step
        n = len(plan.steps)
        sub = plan.refresh_rows().copy()
        if cur >= 0:
            sub[cur, O.C_CURRENT] = 1.0
        head = plan.head.copy()
        head[O.P_CURRENT] = (cur if cur >= 0 else n) / cfg.max_subtasks
        head[O.P_ALL_DONE] = float(cur < 0)
        head[O.P_REPLANS] = ep.replans / max(1, cfg.max_replans)
        last = plan.last_done
        if last >= 0:
            rec = plan.results[last]
            if rec is not None and rec.confidence is not None:
                head[O.P_LAST_CONF] = rec.confidence
                head[O.P_LAST_CONF_GIVEN] = 1.0
            v = plan.verdicts[last]
            if v:
                head[O.P_LAST_OK - 1 + VERDICT_CODE[v[-1]]] = 1.0
        limit = float(self.step_limit)
        budget = np.array(
            [ep.tokens / self.token_budget, ep.calls / limit, ep.latency_s / cfg.latency_budget_s, ep.steps / limit,
             ep.illegal_actions / limit],
            dtype=np.float32,
        )  # fmt: skip
        np.minimum(budget, 1.0, out=budget)
        obs = {
            "task": self._task_obs.copy(),
            "plan": head,
            "subtasks": sub,
            "workers": ep.worker_table.copy(),
            "budget": budget,
        }
        if ep.history_onehot is not None:
            obs["history"] = ep.history_onehot.copy()
        if plan.text_features is not None:
            obs["step_text"], obs["plan_text"] = plan.text_features[0].copy(), plan.text_features[1].copy()
        if plan.check_features is not None:
            obs["step_check"], obs["plan_check"] = plan.check_features[0].copy(), plan.check_features[1].copy()
        if cfg.enable_plan_review:
            review = np.zeros(O.PLAN_REVIEW_FEATURES, dtype=np.float32)
            if plan.reviews:
                review[VERDICT_CODE[plan.reviews[-1]] - 1] = 1.0
                review[3] = min(1.0, len(plan.reviews) / len(self.workers))
            obs["plan_review"] = review
        if cfg.focus_view:
            obs["current"], obs["last"], obs["tried"] = self._focus(sub, cur, last)
        obs["action_mask"] = self._mask_entry(cur).copy()
        return obs

    def _focus(self, sub: np.ndarray, cur: int, last: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pointer-free view (see :mod:`edo_gym.envs.observation`): ``current``, ``last`` and ``tried``."""
        plan = self._ep.plan
        tried = np.zeros((len(self.workers), O.TRIED_FEATURES), dtype=np.float32)
        if cur >= 0:
            current = sub[cur].copy()
            counts = plan.tried[cur]
            np.minimum(counts[:, :2] * 0.25, 1.0, out=tried[:, O.T_NO_RETRIEVAL : O.T_RETRIEVAL + 1])
            tried[:, O.T_ABSTAINED] = counts[:, 2]
        else:
            current = np.zeros(O.SUBTASK_FEATURES, dtype=np.float32)
        if last >= 0:
            last_row = sub[last].copy()
            producer = plan.producer[last]
            if producer >= 0:
                tried[producer, O.T_PRODUCED] = 1.0
            for w, verdict in plan.verdict_of[last].items():
                tried[w, O.T_OK - 1 + VERDICT_CODE[verdict]] = 1.0
        else:
            last_row = np.zeros(O.SUBTASK_FEATURES, dtype=np.float32)
        return current, last_row, tried

    # -- humans and oracles -------------------------------------------------------------------------------------
    def render(self) -> str | np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi', 'human' or 'rgb_array'")
            return None
        text = "EDOEnv: not reset yet" if self.episode is None else render_trace(self)
        if self.render_mode == "human":
            print(text)
            return None
        if self.render_mode == "rgb_array":
            return draw_trace(text.splitlines())
        return text

    def plan_truth(self) -> list[StepTruth]:
        """Hidden: what each step of the current plan should produce (executed on the true facts)."""
        plan = self._ep.plan
        if plan.truth is None:
            plan.truth = execute_plan(self.world, [s.instruction for s in plan.steps], [s.deps for s in plan.steps])
        return plan.truth

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
        (the workers whose simulated parametric memory holds the right value of the current single-hop lookup),
        ``deviations`` (the episode's team draw, missing shard domains, drawn prices, drift and extra step; see
        :mod:`edo_gym.deviations` and :mod:`edo_gym.world.extra_step`).
        """
        ep = self._ep
        plan = ep.plan
        truth = self.plan_truth()
        correct = [None if r is None else is_correct(self.world, t, r.text) for r, t in zip(plan.results, truth, strict=True)]
        last = truth[-1] if truth else None
        # executable in order (no step reads a later one) and, executed on the true facts, right
        executable = all(d < i for i, deps in enumerate(plan.tables.deps) for d in deps)
        faithful = executable and last is not None and bool(last.expected) and grade_final(self.world, ep.task, last.expected)
        kinds = [t.kind for t in truth]
        return {
            "plan_faithful": faithful,
            "kinds": kinds,
            "domains": [t.domain for t in truth],
            "label_wrong": [
                (("lookup" if k == "merged" else k) != s.label) or (t.domain not in ("", s.domain_label))
                for k, t, s in zip(kinds, truth, plan.steps, strict=True)
            ],
            "expected": [t.expected for t in truth],
            "correct": correct,
            "answer": ep.task.answer,
            "hops": ep.task.hops,
            "family": ep.task.family,
            "gold_retrieved_by": self._gold_retrieved_by(),
            "memory_right_by": self._memory_right_by(),
            "deviations": {
                "team_drawn": ep.team.drawn,
                "team_held_out": ep.team.held_out,
                "missing_domains": {
                    w.name: list(m) for w, m in zip(self.config.workers, ep.team.missing_domains, strict=True)
                },
                "prices": {w.name: w.price for w in ep.team.specs},
                "drift": None
                if ep.drift is None
                else {
                    "worker": ep.drift.agent,
                    "kind": ep.drift.kind,
                    "onset": ep.drift.onset,
                    "active": ep.steps >= ep.drift.onset,
                },
                "extra_step": extra_step.hidden(ep.task, truth, self._results_so_far()),
            },
            "worker_skills": {
                w.name: {
                    "types": dict(w.skills),
                    "lookup_by_domain": {d: w.lookup_skill(d) for d in O.DOMAIN_INDEX},
                    "memory_coverage": w.memory_coverage,
                    "memory_accuracy": w.memory_accuracy,
                    "greedy": w.greedy,
                }
                for w in ep.team.specs
            },
        }

    def _current_lookup(self) -> tuple[str, tuple[str, str]] | None:
        """The current step's question and its ``(subject, relation)`` when it is a single-hop lookup, else None."""
        plan = self._ep.plan
        i = plan.current_step
        if i < 0 or plan.steps[i].label != "lookup":
            return None
        query = self._filled(i)[0]
        parsed = parse_question(query)
        if parsed is None or len(parsed[0]) != 1:
            return None
        return query, (parsed[1], parsed[0][0])

    def _gold_retrieved_by(self) -> list[int]:
        """Hidden: which workers' retrievers return the gold document for the current step (memoised searches)."""
        lookup = None if self.config.retrieval.ablation != "none" else self._current_lookup()
        if lookup is None:
            return []
        query, key = lookup
        if self._gold_docs is None:
            self._gold_docs = {(d.subject, d.relation): k for k, d in enumerate(self.world.documents) if not d.is_distractor}
        doc = self._gold_docs.get(key)
        if doc is None:
            return []
        return [
            w.index
            for w in self.workers
            if w.retriever.size and doc not in w.unavailable and doc in w.retriever.search(query, w.spec.top_k)
        ]

    def _memory_right_by(self) -> list[int]:
        """Hidden: which workers' parametric memories hold the right value of the current single-hop lookup."""
        memories = getattr(self.backend, "_memories", None)
        lookup = None if memories is None else self._current_lookup()
        if lookup is None:
            return []
        truth = self.world.facts.get(lookup[1])
        return [w.index for w in self.workers if truth is not None and memories[w.spec.name].get(lookup[1]) == truth]

    def orchestrator_view(self) -> Any:
        """The state as :class:`edo_gym.llm.orchestrator.OrchestratorView`: the task text, the plan as written,
        results as written, verdicts, budget and history (plain, observable data only; no hidden state)."""
        from edo_gym.llm.orchestrator import OrchestratorView

        ep = self._ep
        plan = ep.plan
        cur = plan.current_step
        steps = [
            f"[{s.label}/{s.domain_label}] {s.instruction}" + (f" (uses steps {[d + 1 for d in s.deps]})" if s.deps else "")
            for s in plan.steps
        ]
        results = []
        for i, r in enumerate(plan.results):
            if r is None:
                continue
            who = self.config.workers[r.worker].name
            line = f"step {i + 1} by {who}: {r.text!r}"
            if r.confidence is not None:
                line += f" (confidence {r.confidence:.2f})"
            if plan.verdicts[i]:
                line += f"; verified: {', '.join(plan.verdicts[i])}"
            results.append(line)
        return OrchestratorView(
            task=ep.task.text,
            plan=steps,
            action_names=self.action_names,
            action_mask=[bool(m) for m in self._mask()],
            current_step=cur if cur >= 0 else None,
            results=results,
            budget={
                "tokens": ep.tokens,
                "token_budget": self.token_budget,
                "calls": ep.calls,
                "steps": ep.steps,
                "step_limit": self.step_limit,
            },  # fmt: skip
            history=[self.action_names[a] for a in ep.history],
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
        if self.episode is not None:
            self.episode.ended = True
        # commit what the run-time disk cache buffers: a worker process of a vector env may exit without atexit hooks
        service = getattr(self, "service", None)
        if service is not None:
            service.flush()


def plan_json(plan: Plan) -> str:
    """A plan as the planner's JSON (what a plan critic reads): type, domain, instruction and 1-based inputs per step."""
    return plan_to_json(
        [
            {"type": s.label, "domain": s.domain_label, "instruction": s.instruction, "inputs": [d + 1 for d in s.deps]}
            for s in plan.steps
        ]
    )


def _planner_status(attempts: int, error: str, failed: bool) -> dict[str, Any]:
    """``info``'s call fields of a planner call (reported on the replan step; at reset there is no step to report)."""
    return {"call_failed": failed, "call_error": error, "backend_attempts": attempts, "retrieval_fallback": False}
