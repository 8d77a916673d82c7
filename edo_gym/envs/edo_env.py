"""``EDOEnv``: the RL agent is the orchestrator of a multi-agent LLM system.

One episode is one task. At ``reset`` a task is drawn (or chosen with ``options={"task_id": k}``) and the
Planner decomposes it. Each ``step`` takes one orchestration decision:

- ``dispatch(w, retrieve)``: run the current plan step on worker ``w``, with or without a query to ``w``'s
  own retriever (in ``retrieval_decider="worker"`` mode only ``dispatch(w)`` exists and the worker decides);
- ``verify``: check the last result (one call; flags most bad results, not all);
- ``rollback``: discard the last result and make its step current again;
- ``replan``: ask the Planner for a new decomposition (one call; progress is discarded);
- ``submit``: return the final answer (the last plan step's output) and end the episode.

Action indices: dispatches first (``w * 2 + retrieve``, or ``w``), then verify, rollback, replan, submit; see
``action_names``. Reward = task score at submit minus per-step collaboration cost (tokens, calls, simulated
latency), each weighted by ``RewardConfig``; ``info["reward_terms"]`` is the breakdown and sums to the reward.
Illegal actions (``action_masks()`` / ``info["action_mask"]``) are penalised and change nothing (default) or
raise; an out-of-range action always raises ``ValueError``.

Faults of the backend or the retriever never end an episode. Every ``info`` carries ``call_failed`` (the
step's backend call failed after ``backend_attempts`` tries; ``call_error`` says how), ``backend_attempts``
(0 when the step called no backend) and ``retrieval_fallback`` (retrieval was requested, failed, and the worker
answered without it). A failed dispatch is charged (``backend_attempts`` calls) but leaves its step undone; a
failed verify leaves the result unchecked. Per-episode counters ``failed_calls``, ``call_retries`` and
``retrieval_fallbacks`` (reset by ``reset``) also appear in ``info["episode_stats"]``.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from edo_gym.agents.backend import GenerationBackend, RetryPolicy, SimulatedBackend, call_backend, validate_verdict
from edo_gym.agents.planner import Plan, Planner
from edo_gym.agents.worker import CallRecord, Worker
from edo_gym.config import EDOConfig, TaskConfig, WorldConfig
from edo_gym.envs import observation as obs_lib
from edo_gym.envs.render import render_trace
from edo_gym.envs.viewer import draw_trace
from edo_gym.retrieval import embedder as embedder_lib
from edo_gym.retrieval.store import RetrievalService
from edo_gym.world.generator import World
from edo_gym.world.tasks import Task, TaskPool
from edo_gym.world.text import normalize

#: Simulated cost of one verifier call and one planner call.
VERIFY_OVERHEAD_TOKENS = 40
VERIFY_LATENCY_S = 0.5
PLANNER_LATENCY_S = 1.0
RESET_OPTION_KEYS = frozenset({"task_id"})
_NO_CALL: dict[str, Any] = {"call_failed": False, "call_error": None, "backend_attempts": 0, "retrieval_fallback": False}


@functools.lru_cache(maxsize=8)
def _world(config: WorldConfig) -> World:
    return World(config)


@functools.lru_cache(maxsize=32)
def _task_pool(world_config: WorldConfig, task_config: TaskConfig) -> TaskPool:
    return TaskPool(_world(world_config), task_config)


class EDOEnv(gym.Env):
    """Orchestration environment (see module docstring).

    :param config: a full :class:`~edo_gym.config.EDOConfig`; keyword arguments override its fields (flat
        ``reward_token_weight=0.1`` or nested ``reward={"token_weight": 0.1}``), see ``EDOConfig.from_kwargs``.
    :param render_mode: ``"ansi"`` (``render()`` returns the episode trace as text), ``"human"`` (prints it) or
        ``"rgb_array"`` (returns it drawn as a fixed-size ``uint8`` image, see :mod:`edo_gym.envs.viewer`).
    :param backend: the generation backend of the workers; default :class:`SimulatedBackend`.
    """

    metadata = {"render_modes": ["ansi", "human", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        config: EDOConfig | None = None,
        render_mode: str | None = None,
        backend: GenerationBackend | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.config = cfg = EDOConfig.from_kwargs(config, **kwargs)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        if backend is not None and not isinstance(backend, GenerationBackend):
            raise TypeError(f"backend must implement GenerationBackend (generate, verify), got {type(backend).__name__}")
        self.render_mode = render_mode
        self.world = _world(cfg.world)
        self.pool = _task_pool(cfg.world, cfg.tasks)
        self.num_tasks = int(len(self.pool.ids))
        self.service = RetrievalService.get(self.world, cfg.retrieval, [w.shard for w in cfg.workers])
        self.backend: GenerationBackend = backend or SimulatedBackend(self.world, cfg.verify_recall, cfg.verify_false_alarm)
        self.planner = Planner(self.world, cfg.planner)
        self.retry_policy = RetryPolicy(cfg.backend_retries, cfg.backend_backoff_s, cfg.backend_timeout_s)
        self.workers = [
            Worker(i, spec, self.service.retrievers[i], self.service, self.backend, self.retry_policy)
            for i, spec in enumerate(cfg.workers)
        ]
        task_vectors = self.service.embed_texts("tasks", [t.text for t in self.pool.tasks])
        self._task_features = self._make_task_features(task_vectors)

        W = len(cfg.workers)
        self.retrieve_flag = cfg.retrieval_decider == "orchestrator"
        self.n_dispatch = 2 * W if self.retrieve_flag else W
        self.A_VERIFY, self.A_ROLLBACK, self.A_REPLAN, self.A_SUBMIT = range(self.n_dispatch, self.n_dispatch + 4)
        self.n_actions = self.n_dispatch + 4
        self.action_space = gym.spaces.Discrete(self.n_actions)
        self.observation_space = obs_lib.observation_space(cfg, self.n_actions)
        self.action_names = self._action_names()
        self.step_limit = cfg.step_limit
        self._worker_static = obs_lib.worker_static_features(cfg)
        self._started = False
        self._ended = False
        self._overhead = [0, 0, 0.0]  # tokens, calls, latency charged by an outside policy (e.g. an LLM router)

    # -- set-up helpers -----------------------------------------------------------------------------------------
    def _make_task_features(self, vectors: np.ndarray) -> np.ndarray:
        E = self.config.retrieval.task_embedding_dim
        proj = obs_lib.project_task_embeddings(vectors, E)
        fam = np.zeros((len(self.pool.tasks), len(obs_lib.FAMILY_INDEX) + 1), dtype=np.float32)
        for i, t in enumerate(self.pool.tasks):
            fam[i, obs_lib.FAMILY_INDEX[t.family]] = 1.0
            fam[i, -1] = t.hops / self.config.tasks.max_hops
        return np.concatenate([proj, fam], axis=1)

    def _action_names(self) -> list[str]:
        names = []
        for w in self.config.workers:
            if self.retrieve_flag:
                names += [f"dispatch({w.name}, no_retrieval)", f"dispatch({w.name}, retrieval)"]
            else:
                names.append(f"dispatch({w.name})")
        return names + ["verify", "rollback", "replan", "submit"]

    def decode_action(self, action: int) -> tuple[str, int, bool]:
        """``(kind, worker, retrieve)`` of an action index; ``worker``/``retrieve`` only matter for dispatches."""
        if action < self.n_dispatch:
            if self.retrieve_flag:
                return "dispatch", action // 2, bool(action % 2)
            return "dispatch", action, False
        return ("verify", "rollback", "replan", "submit")[action - self.n_dispatch], -1, False

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
        self.task_id = task_id
        self.task: Task = self.pool.tasks[int(self.pool.ids[task_id])]
        self._task_obs = self._task_features[self.task.task_id]
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
        self._call_status = _NO_CALL
        self.worker_calls = np.zeros(W, dtype=np.int32)
        self.worker_flagged = np.zeros(W, dtype=np.int32)
        self.worker_abstained = np.zeros(W, dtype=np.int32)
        self.history: deque[int] = deque(maxlen=max(self.config.history_len, 1))
        self.final_answer: str | None = None
        self.success = False
        self._overhead = [0, 0, 0.0]
        self.trace: list[tuple] = []
        self._set_plan(self.planner.decompose(self.task, self.np_random))
        self.trace.append(("reset", self.task, self.plan))
        self._started = True
        self._ended = False
        obs = self._observation()
        return obs, {
            "action_mask": obs["action_mask"].copy(),
            "task_id": self.task_id,
            "family": self.task.family,
            "hops": self.task.hops,
        }

    def _set_plan(self, plan: Plan) -> None:
        self.plan = plan
        n = len(plan.steps)
        if n > self.config.max_subtasks:  # cannot happen with the built-in planner; guards custom planners
            raise RuntimeError(f"plan has {n} steps, more than max_subtasks={self.config.max_subtasks}")
        self.results: list[CallRecord | None] = [None] * n
        self.verified = [0] * n  # 0 not checked, 1 ok, 2 flagged
        self.attempts = [0] * n
        self.done_stack: list[int] = []

    @property
    def current_step(self) -> int:
        """Index of the plan step a dispatch would run (the first step without a result), or -1 when all are done."""
        for i, r in enumerate(self.results):
            if r is None:
                return i
        return -1

    def action_masks(self) -> np.ndarray:
        """Boolean mask of legal actions (sb3-contrib convention)."""
        return self._mask().astype(bool)

    def _mask(self) -> np.ndarray:
        mask = np.zeros(self.n_actions, dtype=np.float32)
        if self._ended or not self._started:
            return mask
        if self.current_step >= 0:
            mask[: self.n_dispatch] = 1.0
            if self.retrieve_flag:
                for i, w in enumerate(self.workers):
                    if w.retriever.size == 0:
                        mask[2 * i + 1] = 0.0
        if self.done_stack:
            mask[self.A_ROLLBACK] = 1.0
            if self.config.enable_verify and self.verified[self.done_stack[-1]] == 0:
                mask[self.A_VERIFY] = 1.0
        if self.config.enable_replan and self.replans < self.config.max_replans:
            mask[self.A_REPLAN] = 1.0
        mask[self.A_SUBMIT] = 1.0
        return mask

    def add_overhead(self, tokens: int = 0, calls: int = 0, latency_s: float = 0.0) -> None:
        """Charge an outside decision-maker's cost (e.g. an LLM router) to the next step, on the same ledger."""
        if tokens < 0 or calls < 0 or latency_s < 0:
            raise ValueError("overhead must be non-negative")
        self._overhead[0] += int(tokens)
        self._overhead[1] += int(calls)
        self._overhead[2] += float(latency_s)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("EDOEnv.step() called before reset(); call env.reset() first")
        if self._ended:
            raise RuntimeError("EDOEnv.step() called after the episode ended (terminated or truncated); call env.reset()")
        a = self._check_action(action)
        cfg = self.config
        tokens, calls, latency = self._overhead
        self._overhead = [0, 0, 0.0]
        penalty = 0.0
        score = 0.0
        terminated = False
        event = ""
        legal = self._mask()[a] > 0
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
            kind, w, retrieve = self.decode_action(a)
            event = kind
            if kind == "dispatch":
                t, c, lat = self._dispatch(w, retrieve)
                tokens += t
                calls += c
                latency += lat
            elif kind == "verify":
                t, c, lat = self._verify()
                tokens += t
                calls += c
                latency += lat
            elif kind == "rollback":
                i = self.done_stack.pop()
                self.results[i] = None
                self.verified[i] = 0
                self.trace.append(("rollback", i))
            elif kind == "replan":
                self.replans += 1
                plan = self.planner.decompose(self.task, self.np_random)
                self._set_plan(plan)
                tokens += self.service.count_tokens(self.task.text) + cfg.planner.overhead_tokens
                calls += 1
                latency += PLANNER_LATENCY_S
                self.trace.append(("replan", plan))
            else:  # submit
                score = self._submit()
                terminated = True
        self.steps += 1
        self.history.append(a)
        self.tokens += tokens
        self.calls += calls
        self.latency_s += latency
        rw = cfg.reward
        terms = {
            "success": score,
            "tokens": -rw.token_weight * tokens / 1000.0,
            "calls": -rw.call_weight * calls,
            "latency": -rw.latency_weight * latency,
            "illegal": -penalty,
        }
        if not terminated and self.tokens > cfg.token_budget:
            terminated = True
            self.final_answer = ""
            self.trace.append(("budget", self.tokens))
        truncated = not terminated and self.steps >= self.step_limit
        self._ended = terminated or truncated
        reward = float(terms["success"] + terms["tokens"] + terms["calls"] + terms["latency"] + terms["illegal"])
        obs = self._observation()
        info: dict[str, Any] = {
            "action_mask": obs["action_mask"].copy(),
            "reward_terms": terms,
            "cost": {"tokens": tokens, "calls": calls, "latency_s": latency},
            "event": event,
            "illegal_action": not legal,
            "task_id": self.task_id,
            **self._call_status,
        }
        if self._ended:
            info["episode_stats"] = {
                "success": self.success,
                "tokens": self.tokens,
                "calls": self.calls,
                "latency_s": self.latency_s,
                "steps": self.steps,
                "family": self.task.family,
                "hops": self.task.hops,
                "failed_calls": self.failed_calls,
                "call_retries": self.call_retries,
                "retrieval_fallbacks": self.retrieval_fallbacks,
            }
        return obs, reward, terminated, truncated, info

    def _check_action(self, action: Any) -> int:
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
    def _inputs_for(self, i: int) -> list[str | None]:
        step = self.plan.steps[i]
        out: list[str | None] = []
        for d in step.deps:
            r = self.results[d]
            out.append(r.text if r is not None else None)
        return out

    def _dispatch(self, w: int, retrieve: bool) -> tuple[int, int, float]:
        """Run the current step on worker ``w``; ``(tokens, calls, latency)`` charged."""
        i = self.current_step
        step = self.plan.steps[i]
        worker = self.workers[w]
        if not self.retrieve_flag:
            retrieve = worker.wants_retrieval(step)
        record = worker.run(step, self._inputs_for(i), retrieve, self.np_random)
        self.attempts[i] += 1
        self.worker_calls[w] += 1
        if record.failed:  # charged, but the step stays undone
            self.failed_calls += 1
        else:
            self.results[i] = record
            self.verified[i] = 0
            self.done_stack.append(i)
        if record.abstained:
            self.worker_abstained[w] += 1
        self.call_retries += record.attempts - 1
        self.retrieval_fallbacks += record.retrieval_fallback
        self._call_status = {
            "call_failed": record.failed,
            "call_error": record.error,
            "backend_attempts": record.attempts,
            "retrieval_fallback": record.retrieval_fallback,
        }
        self.trace.append(("dispatch", i, w, record))
        return record.prompt_tokens + record.completion_tokens, record.attempts, record.latency_s

    def _verify(self) -> tuple[int, int, float]:
        """Check the last result; ``(tokens, calls, latency)`` charged. Trace: ``("verify", i, flagged, attempts, error)``."""
        i = self.done_stack[-1]
        record = self.results[i]
        assert record is not None
        policy = self.retry_policy
        outcome = call_backend(
            lambda: self.backend.verify(record.query, record.text, record.correct, self.np_random), validate_verdict, policy
        )
        flagged = outcome.value
        if outcome.failed:  # the result stays unchecked
            self.failed_calls += 1
        else:
            self.verified[i] = 2 if flagged else 1
            if flagged:
                self.worker_flagged[record.worker] += 1
        self.call_retries += outcome.attempts - 1
        self._call_status = {
            "call_failed": outcome.failed,
            "call_error": outcome.error,
            "backend_attempts": outcome.attempts,
            "retrieval_fallback": False,
        }
        self.trace.append(("verify", i, flagged, outcome.attempts, outcome.error))
        tokens = self.service.count_tokens(record.query) + self.service.count_tokens(record.text) + VERIFY_OVERHEAD_TOKENS
        latency = outcome.backoff_s + sum(policy.timeout_s if k == "timeout" else VERIFY_LATENCY_S for k in outcome.failures)
        if not outcome.failed:
            latency += VERIFY_LATENCY_S
        return tokens * outcome.attempts, outcome.attempts, latency

    def _submit(self) -> float:
        last = self.results[-1] if self.results else None
        self.final_answer = last.text if last is not None else ""
        gold = normalize(self.task.answer)
        answer = normalize(self.final_answer)
        rw = self.config.reward
        if answer == gold:
            self.success = True
            score = rw.success_reward
        elif rw.partial_credit > 0 and gold and gold in answer:
            score = rw.partial_credit * rw.success_reward
        else:
            score = 0.0
        self.trace.append(("submit", self.final_answer, self.task.answer, score))
        return score

    # -- observation --------------------------------------------------------------------------------------------
    def _observation(self) -> dict[str, np.ndarray]:
        cfg = self.config
        S = cfg.max_subtasks
        mask = self._mask()
        n = len(self.plan.steps)
        cur = self.current_step
        sub = np.zeros((S, obs_lib.SUBTASK_FEATURES), dtype=np.float32)
        for i, step in enumerate(self.plan.steps):
            row = sub[i]
            row[obs_lib.TYPE_INDEX[step.label]] = 1.0
            row[obs_lib._C_DOMAIN + obs_lib.DOMAIN_INDEX[step.domain_label]] = 1.0
            row[obs_lib.C_PRESENT] = 1.0
            r = self.results[i]
            if r is not None:
                row[obs_lib.C_DONE] = 1.0
                row[obs_lib.C_CONF] = r.confidence
                row[obs_lib.C_RETR] = float(r.used_retrieval)
                row[obs_lib.C_ABSTAIN] = float(r.abstained)
            v = self.verified[i]
            if v == 1:
                row[obs_lib.C_OK] = 1.0
            elif v == 2:
                row[obs_lib.C_FLAG] = 1.0
            if i == cur:
                row[obs_lib.C_CURRENT] = 1.0
            if all(self.results[d] is not None for d in step.deps):
                row[obs_lib.C_DEPS] = 1.0
            row[obs_lib.C_ATTEMPTS] = min(1.0, self.attempts[i] / 4.0)
        last = self.done_stack[-1] if self.done_stack else -1
        last_rec = self.results[last] if last >= 0 else None
        plan = np.array(
            [
                n / S,
                self.plan.confidence,
                (cur if cur >= 0 else n) / S,
                float(cur < 0),
                self.replans / max(1, cfg.max_replans),
                last_rec.confidence if last_rec is not None else 0.0,
                float(last >= 0 and self.verified[last] == 1),
                float(last >= 0 and self.verified[last] == 2),
            ],
            dtype=np.float32,
        )
        lim = float(self.step_limit)
        workers = self._worker_static.copy()
        workers[:, -3] = np.minimum(1.0, self.worker_calls / lim)
        workers[:, -2] = np.minimum(1.0, self.worker_flagged / lim)
        workers[:, -1] = np.minimum(1.0, self.worker_abstained / lim)
        budget = np.array(
            [
                min(1.0, self.tokens / cfg.token_budget),
                min(1.0, self.calls / lim),
                min(1.0, self.latency_s / cfg.latency_budget_s),
                min(1.0, self.steps / lim),
                min(1.0, self.illegal_actions / lim),
            ],
            dtype=np.float32,
        )
        obs = {"task": self._task_obs.copy(), "plan": plan, "subtasks": sub, "workers": workers, "budget": budget}
        if cfg.history_len > 0:
            hist = np.zeros((cfg.history_len, self.n_actions), dtype=np.float32)
            for k, a in enumerate(reversed(self.history)):
                hist[k, a] = 1.0
            obs["history"] = hist
        obs["action_mask"] = mask
        return obs

    # -- humans and oracles -------------------------------------------------------------------------------------
    def render(self) -> str | np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi', 'human' or 'rgb_array'")
            return None
        if not self._started:
            text = "EDOEnv: not reset yet"
        else:
            text = render_trace(self)
        if self.render_mode == "human":
            print(text)
            return None
        if self.render_mode == "rgb_array":
            return draw_trace(text.splitlines())
        return text

    def hidden_state(self) -> dict[str, Any]:
        """Ground truth an oracle may use (never part of the observation)."""
        return {
            "plan_error": self.plan.error,
            "plan_faithful": self.plan.is_faithful,
            "kinds": [s.kind for s in self.plan.steps],
            "domains": [s.domain for s in self.plan.steps],
            "expected": [s.expected for s in self.plan.steps],
            "correct": [r.correct if r is not None else None for r in self.results],
        }

    def process_info(self) -> dict[str, int]:
        """``pid`` of the process this env lives in and how often that process loaded an embedding model
        (``model_loads``); call it through ``VecEnv.env_method`` / ``VectorEnv.call``."""
        return {"pid": os.getpid(), "model_loads": embedder_lib.model_load_count()}

    def close(self) -> None:
        self._started = False
