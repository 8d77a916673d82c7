"""The state of one EDO episode: :class:`EpisodeState` (the task, the ledger, the history) and :class:`PlanState` (the
plan being executed and the progress made on it).

``EDOEnv.reset`` builds an :class:`EpisodeState`; each ``step`` changes it through the methods below, and a replan
replaces its :class:`PlanState` whole. The observation is read from this state (:mod:`edo_gym.envs.observation`);
nothing here is hidden from a real orchestrator except :attr:`PlanState.truth`, which only
``EDOEnv.hidden_state`` reads.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edo_gym.agents.planner import Plan, PlanStep
from edo_gym.agents.worker import CallCost, CallRecord
from edo_gym.deviations import Drift, TeamDraw
from edo_gym.envs import observation as O
from edo_gym.world.grading import StepTruth
from edo_gym.world.language import placeholders
from edo_gym.world.tasks import Task

#: ``info``'s call fields of a step that made no call.
NO_CALL: dict[str, Any] = {"call_failed": False, "call_error": "", "backend_attempts": 0, "retrieval_fallback": False}
#: Per worker and episode, the counts of the observation's worker table, in its column order.
WORKER_COUNTS = ("calls", "abstained", "flagged", "confirmed", "verifications")
C_CALLS, C_ABSTAINED, C_FLAGGED, C_CONFIRMED, C_VERIFICATIONS = range(len(WORKER_COUNTS))
VERDICT_CODE = {"ok": 1, "flagged": 2, "unsure": 3}


@dataclass(frozen=True)
class PlanTables:
    """What only depends on a plan's steps: each step's inputs (``deps``), its readers (``dependents``: the steps that
    use its answer), the placeholders of its instruction (``holes``), and the subtask table of the fresh plan
    (``fresh``: types, domains, presence, the inputs-ready flag of steps without inputs; read-only)."""

    deps: tuple[tuple[int, ...], ...]
    dependents: tuple[tuple[int, ...], ...]
    holes: tuple[tuple[int, ...], ...]
    static: np.ndarray
    fresh: np.ndarray


def plan_tables(steps: tuple[PlanStep, ...], max_subtasks: int) -> PlanTables:
    """:class:`PlanTables` of a plan."""
    static = np.zeros((max_subtasks, O.SUBTASK_FEATURES), dtype=np.float32)
    for i, step in enumerate(steps):
        static[i, O.C_TYPE + O.TYPE_INDEX[step.label]] = 1.0
        static[i, O.C_DOMAIN + O.DOMAIN_INDEX[step.domain_label]] = 1.0
        static[i, O.C_PRESENT] = 1.0
        static[i, O.C_LATER] = float(any(d > i for d in step.deps))
    fresh = static.copy()
    for i, step in enumerate(steps):
        if not step.deps:
            fresh[i, O.C_DEPS] = 1.0
    static.setflags(write=False)
    fresh.setflags(write=False)
    return PlanTables(
        deps=tuple(s.deps for s in steps),
        dependents=tuple(tuple(j for j, s in enumerate(steps) if i in s.deps) for i in range(len(steps))),
        holes=tuple(tuple(placeholders(s.instruction)) for s in steps),
        static=static,
        fresh=fresh,
    )


@dataclass
class PlanState:
    """A plan as written and the progress made on it. A replan replaces it whole (its results are discarded).

    Per step ``i``: ``results[i]`` (the worker's answer record, ``None`` while undone), ``verdicts[i]`` (verdicts on
    the current result, in order), ``verified_by[i]`` (the workers that gave them), ``attempts[i]`` (dispatches),
    ``producer[i]`` (the worker whose result it holds, -1 when none), ``verdict_of[i]`` (each verifier's verdict on it),
    ``tried[i, w]`` (worker ``w``'s dispatches on the step without / with retrieval, and whether it abstained).
    ``done_stack`` holds the steps with a result, most recent last (what ``verify`` and ``rollback`` act on).
    ``rows`` is the observation's subtask table without the current-step marker, kept up to date row by row.
    """

    plan: Plan
    tables: PlanTables
    results: list[CallRecord | None]
    verdicts: list[list[str]]
    verified_by: list[set[int]]
    attempts: list[int]
    producer: list[int]
    verdict_of: list[dict[int, str]]
    tried: np.ndarray
    done_stack: list[int] = field(default_factory=list)
    #: ``verify_plan`` critiques of this plan, in order, and the workers that gave them.
    reviews: list[str] = field(default_factory=list)
    reviewed_by: set[int] = field(default_factory=set)
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, O.SUBTASK_FEATURES), dtype=np.float32))
    #: The plan row's constant part (length, planner confidence, fallback or repaired plan).
    head: np.ndarray = field(default_factory=lambda: np.zeros(O.PLAN_FEATURES, dtype=np.float32))
    #: ``EDOConfig.text_features`` / ``plan_check``: ``(per step, whole plan)`` arrays of the plan as written, or None.
    text_features: tuple[np.ndarray, np.ndarray] | None = None
    check_features: tuple[np.ndarray, np.ndarray] | None = None
    #: Rows of ``rows`` to recompute before the next observation (their step's result, verdicts or attempts changed).
    dirty: set[int] = field(default_factory=set)
    #: Hidden: what each step should produce, executed on the true facts (``EDOEnv.hidden_state``; computed lazily).
    truth: list[StepTruth] | None = None
    #: The plan as the planner's JSON, what a plan critic reads (``EDOEnv``'s ``plan_json``; computed lazily).
    json_text: str | None = None

    @classmethod
    def new(
        cls,
        plan: Plan,
        n_workers: int,
        max_subtasks: int,
        text_features: tuple[np.ndarray, np.ndarray] | None = None,
        check_features: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> PlanState:
        """The state of ``plan`` before any step is done."""
        n = len(plan.steps)
        tables = plan_tables(plan.steps, max_subtasks)
        head = np.zeros(O.PLAN_FEATURES, dtype=np.float32)
        head[O.P_LEN] = n / max_subtasks
        if plan.confidence is not None:
            head[O.P_CONF] = plan.confidence
            head[O.P_CONF_GIVEN] = 1.0
        head[O.P_FALLBACK] = float(plan.source == "fallback")
        head[O.P_REPAIRED] = float(plan.source == "repaired")
        return cls(
            plan=plan,
            tables=tables,
            results=[None] * n,
            verdicts=[[] for _ in range(n)],
            verified_by=[set() for _ in range(n)],
            attempts=[0] * n,
            producer=[-1] * n,
            verdict_of=[{} for _ in range(n)],
            tried=np.zeros((n, n_workers, 3), dtype=np.float32),
            rows=tables.fresh.copy(),
            head=head,
            text_features=text_features,
            check_features=check_features,
        )

    @property
    def steps(self) -> tuple[PlanStep, ...]:
        return self.plan.steps

    @property
    def confidence(self) -> float | None:
        """The planner's confidence in the plan (``None`` when the backend gives none)."""
        return self.plan.confidence

    @property
    def source(self) -> str:
        """Where the plan came from: ``"planner"``, ``"repaired"`` (after one invalid reply) or ``"fallback"``."""
        return self.plan.source

    @property
    def current_step(self) -> int:
        """Index of the step a dispatch would run (the first step without a result), or -1 when all are done."""
        for i, r in enumerate(self.results):
            if r is None:
                return i
        return -1

    @property
    def last_done(self) -> int:
        """The step whose result is the most recent (what verify and rollback act on), or -1."""
        return self.done_stack[-1] if self.done_stack else -1

    def note_dispatch(self, i: int, w: int, retrieve: bool) -> None:
        """Worker ``w`` was dispatched on step ``i`` (counted whatever came back)."""
        self.attempts[i] += 1
        self.tried[i, w, 1 if retrieve else 0] += 1.0
        self.dirty.add(i)

    def set_result(self, i: int, w: int, record: CallRecord) -> None:
        """Step ``i`` now holds worker ``w``'s answer ``record`` (unverified), on top of the done stack."""
        self.results[i] = record
        self._clear_checks(i)
        self.producer[i] = w
        self.done_stack.append(i)
        if record.abstained:
            self.tried[i, w, 2] = 1.0
        self._changed(i)

    def add_verdict(self, i: int, w: int, verdict: str) -> None:
        """Worker ``w`` checked step ``i``'s result and said ``verdict``."""
        self.verified_by[i].add(w)
        self.verdicts[i].append(verdict)
        self.verdict_of[i][w] = verdict
        self.dirty.add(i)

    def discard_last(self) -> int:
        """Rollback: remove the most recent result; its step becomes undone again. Returns the step."""
        i = self.done_stack.pop()
        self.results[i] = None
        self._clear_checks(i)
        self.producer[i] = -1
        self._changed(i)
        return i

    def _clear_checks(self, i: int) -> None:
        self.verdicts[i] = []
        self.verified_by[i] = set()
        self.verdict_of[i] = {}

    def _changed(self, i: int) -> None:
        """Step ``i``'s result changed: its row is recomputed before the next observation, and in the rows of the
        steps that read it the one cell that depends on it, the inputs-ready flag, is set here."""
        self.dirty.add(i)
        results, deps = self.results, self.tables.deps
        for j in self.tables.dependents[i]:
            self.rows[j, O.C_DEPS] = 1.0 if all(results[d] is not None for d in deps[j]) else 0.0

    def refresh_rows(self) -> np.ndarray:
        """The subtask table (without the current-step marker), its changed rows recomputed."""
        for i in self.dirty:
            self._row(i)
        self.dirty.clear()
        return self.rows

    def _row(self, i: int) -> None:
        row = self.rows[i]
        row[:] = self.tables.static[i]
        r = self.results[i]
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
            row[O.C_OK - 1 + VERDICT_CODE[v[-1]]] = 1.0
            row[O.C_NVERIFY] = min(1.0, len(v) / 4.0)
        attempts = self.attempts[i]
        if attempts:
            row[O.C_ATTEMPTS] = min(1.0, attempts / 4.0)
        deps = self.tables.deps[i]
        if not deps or all(self.results[d] is not None for d in deps):
            row[O.C_DEPS] = 1.0


@dataclass
class EpisodeState:
    """Everything one episode changes: the task, the plan (:class:`PlanState`), the cost ledger, the worker counts,
    the action history, the outcome and the trace that ``render()`` prints. Built by ``EDOEnv.reset``."""

    task_id: int
    task: Task
    plan: PlanState
    #: Hidden: the episode's team (:mod:`edo_gym.deviations.team`; the public profiles when none was drawn) and its
    #: drift (:mod:`edo_gym.deviations.drift`, ``None`` when none).
    team: TeamDraw
    drift: Drift | None = None
    #: Tokens, calls and simulated latency (seconds) spent so far, and env steps taken.
    tokens: int = 0
    calls: int = 0
    latency_s: float = 0.0
    steps: int = 0
    replans: int = 0
    illegal_actions: int = 0
    failed_calls: int = 0
    #: Of ``failed_calls``, those to a worker that stopped answering (a drift of kind ``failure``): a deviation of the
    #: task distribution, not a fault of the backend.
    down_calls: int = 0
    call_retries: int = 0
    retrieval_fallbacks: int = 0
    budget_exhausted: bool = False
    ended: bool = False
    #: Cost charged on the next step (the planner's at reset, an outside decision-maker's ``charge``) and its
    #: price-weighted tokens.
    pending: CallCost = field(default_factory=CallCost)
    pending_price: float = 0.0
    #: ``info``'s call fields of the last step (see :data:`NO_CALL`).
    call_status: dict[str, Any] = field(default_factory=lambda: NO_CALL)
    #: ``(n_workers, len(WORKER_COUNTS))`` counts of this episode, columns as :data:`WORKER_COUNTS`.
    worker_counts: np.ndarray = field(default_factory=lambda: np.zeros((0, len(WORKER_COUNTS)), dtype=np.float32))
    #: The observation's worker table: the public profile, and this episode's counts each as ``min(1, count / step
    #: limit)``; :meth:`count` keeps both up to date.
    worker_table: np.ndarray = field(default_factory=lambda: np.zeros((0, O.WORKER_FEATURES), dtype=np.float32))
    #: ``1 / step limit`` as a float32 value (the scale of the worker table's counts).
    count_scale: float = 1.0
    history: deque[int] = field(default_factory=deque)
    #: The observation's one-hot of the last actions, most recent first (``None`` when ``history_len`` is 0).
    history_onehot: np.ndarray | None = None
    final_answer: str = ""
    success: bool = False
    score: float = 0.0
    #: What happened, in order, for ``render()``: ``("reset", task_id)``, ``("plan", plan)``, ``("dispatch", step,
    #: worker, record)``, ``("verify", check)``, ``("rollback", step)``, ``("replan", plan)``, ``("illegal", action,
    #: name)``, ``("budget", tokens)``, ``("submit", answer, score)``, ``("plan_fallback", error)``.
    trace: list[tuple] = field(default_factory=list)

    def count(self, w: int, column: int) -> None:
        """Add one to worker ``w``'s count ``column`` (:data:`WORKER_COUNTS`) and set its worker-table cell."""
        counts = self.worker_counts
        # in Python floats with float32 results: a float32 count plus one is exact up to 2**24, and the product of two
        # float32 values is exact in a double, so storing it rounds to the float32 product
        value = counts.item(w, column) + 1.0
        if value > 16777216.0:
            value = float(np.float32(value))
        counts[w, column] = value
        v = value * self.count_scale
        self.worker_table[w, O.W_CALLS + column] = v if v < 1.0 else 1.0

    def record_action(self, action: int) -> None:
        """Count a step and put ``action`` at the head of the history."""
        self.steps += 1
        self.history.append(action)
        onehot = self.history_onehot
        if onehot is not None:  # shift the rows down (numpy copies overlapping slices safely), newest on top
            onehot[1:] = onehot[:-1]
            onehot[0] = 0.0
            onehot[0, action] = 1.0

    def charge_later(self, cost: CallCost, price: float) -> None:
        """Add ``cost`` (at ``price`` per token) to what the next step charges."""
        pending = self.pending
        pending.prompt_tokens += cost.prompt_tokens
        pending.completion_tokens += cost.completion_tokens
        pending.calls += cost.calls
        pending.latency_s += cost.latency_s
        self.pending_price += price * cost.tokens

    def take_pending(self) -> tuple[CallCost, float]:
        """What was charged for the next step, now taken (the pending ledger starts again at zero)."""
        pending, price = self.pending, self.pending_price
        if pending.prompt_tokens or pending.completion_tokens or pending.calls or pending.latency_s or price:
            self.pending, self.pending_price = CallCost(), 0.0
        return pending, price
