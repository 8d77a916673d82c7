"""The Planner: decomposes a task into an ordered plan of steps, imperfectly.

With probability ``PlannerConfig.error_rate`` a plan carries one error: a step is *dropped* (a hop goes
missing and its dependent reads the wrong input), two chained lookups are *merged* into one hard step, two
dependent steps are *reordered* (a step runs before its input exists), or a step is *mislabelled* (wrong type
or domain shown to the orchestrator). ``replan`` samples a fresh decomposition.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from edo_gym.config import DOMAINS, PLANNER_ERRORS, SUBTASK_TYPES, PlannerConfig
from edo_gym.world.generator import World
from edo_gym.world.tasks import Task, apply_op


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan.

    ``kind``/``domain`` are the truth; ``label``/``domain_label`` are what the planner wrote and what the
    orchestrator observes. ``expected`` is the answer the step gives when every step before it is right.
    """

    kind: str  # lookup | merged | compute | write
    label: str
    domain: str
    domain_label: str
    relations: tuple[str, ...]
    op: str | None
    deps: tuple[int, ...]
    literal: str | None
    expected: str = ""


@dataclass(frozen=True)
class Plan:
    steps: tuple[PlanStep, ...]
    error: str | None  # hidden: which planner error this plan carries, if any
    confidence: float  # the planner's own (noisy) confidence, observable

    @property
    def is_faithful(self) -> bool:
        """``True`` when executing this plan perfectly answers the task (a mislabel does not break it)."""
        return self.error in (None, "mislabel")


class Planner:
    """Seeded, imperfect task decomposition (see module docstring)."""

    def __init__(self, world: World, config: PlannerConfig) -> None:
        self.world = world
        self.config = config
        weights = np.asarray(config.error_weights, dtype=float)
        self._error_p = weights / weights.sum()

    def decompose(self, task: Task, rng: np.random.Generator) -> Plan:
        steps = [
            PlanStep(s.kind, s.kind, s.domain, s.domain, (s.relation,) if s.relation else (), s.op, s.deps, s.literal)
            for s in task.subtasks
        ]
        error = None
        if rng.random() < self.config.error_rate:
            error = str(PLANNER_ERRORS[int(rng.choice(len(PLANNER_ERRORS), p=self._error_p))])
            steps, error = self._corrupt(steps, error, rng)
        steps = self._with_expected(steps)
        if error in (None, "mislabel"):
            confidence = rng.normal(0.8, 0.1)
        else:
            confidence = rng.normal(0.55, 0.15)
        return Plan(tuple(steps), error, float(min(1.0, max(0.0, confidence))))

    # -- errors -------------------------------------------------------------------------------------------------
    def _corrupt(self, steps: list[PlanStep], error: str, rng: np.random.Generator) -> tuple[list[PlanStep], str]:
        n = len(steps)
        if error == "drop":
            candidates = [j for j in range(n - 1) if any(j in s.deps for s in steps)]
            if candidates:
                return self._drop(steps, int(rng.choice(candidates))), error
        elif error == "merge":
            candidates = [
                j
                for j in range(n - 1)
                if steps[j].kind == "lookup" and steps[j + 1].kind == "lookup" and steps[j + 1].deps == (j,)
            ]
            if candidates:
                return self._merge(steps, int(rng.choice(candidates))), error
        elif error == "reorder":
            candidates = [j for j in range(n - 1) if j in steps[j + 1].deps]
            if candidates:
                return self._swap(steps, int(rng.choice(candidates))), error
        return self._mislabel(steps, rng), "mislabel"

    @staticmethod
    def _reindex(steps: list[PlanStep], mapping: dict[int, tuple[int, ...]]) -> list[PlanStep]:
        out = []
        for s in steps:
            deps: list[int] = []
            for d in s.deps:
                for nd in mapping[d]:
                    if nd not in deps:
                        deps.append(nd)
            out.append(replace(s, deps=tuple(deps)))
        return out

    def _drop(self, steps: list[PlanStep], j: int) -> list[PlanStep]:
        dropped = steps[j]
        kept = [s for i, s in enumerate(steps) if i != j]
        new_index = {i: (i if i < j else i - 1,) for i in range(len(steps)) if i != j}
        new_index[j] = tuple(new_index[d][0] for d in dropped.deps)
        out = self._reindex(kept, new_index)
        if not dropped.deps:  # the dependents of a first hop now start from its literal
            out = [
                replace(s, literal=dropped.literal) if s.kind == "lookup" and not s.deps and s.literal is None else s
                for s in out
            ]
        return out

    def _merge(self, steps: list[PlanStep], j: int) -> list[PlanStep]:
        a, b = steps[j], steps[j + 1]
        merged = PlanStep("merged", "lookup", a.domain, a.domain_label, a.relations + b.relations, None, a.deps, a.literal)
        kept = steps[:j] + [merged] + steps[j + 2 :]
        mapping = {i: (i if i <= j else i - 1,) for i in range(len(steps))}
        return self._reindex(kept, mapping)

    def _swap(self, steps: list[PlanStep], j: int) -> list[PlanStep]:
        order = list(range(len(steps)))
        order[j], order[j + 1] = order[j + 1], order[j]
        new_pos = {old: new for new, old in enumerate(order)}
        return self._reindex([steps[i] for i in order], {i: (new_pos[i],) for i in range(len(steps))})

    def _mislabel(self, steps: list[PlanStep], rng: np.random.Generator) -> list[PlanStep]:
        j = int(rng.integers(len(steps)))
        s = steps[j]
        label = str(rng.choice([t for t in SUBTASK_TYPES if t != s.label]))
        domain_label = str(rng.choice([d for d in DOMAINS if d != s.domain_label])) if rng.random() < 0.5 else s.domain_label
        out = list(steps)
        out[j] = replace(s, label=label, domain_label=domain_label)
        return out

    # -- gold execution -----------------------------------------------------------------------------------------
    def _with_expected(self, steps: list[PlanStep]) -> list[PlanStep]:
        """Fill ``expected`` by executing the plan on the true facts, following dependencies."""
        expected: dict[int, str] = {}
        facts = self.world.facts

        def value(i: int, depth: int = 0) -> str:
            if i in expected:
                return expected[i]
            s = steps[i]
            if depth > len(steps):
                return ""
            if s.kind in ("lookup", "merged"):
                subject = s.literal if not s.deps else value(s.deps[0], depth + 1)
                for rel in s.relations:
                    subject = facts.get((subject, rel), "")
                out = subject
            else:
                out = apply_op(s.op or "", [value(d, depth + 1) for d in s.deps]) or ""
            expected[i] = out
            return out

        return [replace(s, expected=value(i)) for i, s in enumerate(steps)]
