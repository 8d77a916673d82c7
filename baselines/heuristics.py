"""Hand-written orchestration policies: the two non-learned schools, a random floor and an oracle ceiling.

Every policy but the oracle is *observation-only*: it sees the observation and ``info`` that the env returns and
nothing else (no env object, no task text, no worker skills), exactly what a learned policy sees.

- :class:`RandomPolicy`: a uniformly random legal action.
- :class:`StaticPipeline`: a fixed script, the "static pipeline" school made fair: each step goes to the cheapest
  worker whose shard covers the step's labelled domain (with retrieval for lookups), abstentions are retried,
  then it submits.
- :class:`RuleBased`: the strongest observation-only policy we could write: structural and confidence checks on the
  plan (replan on suspicion), routing by label and price, verification of doubtful results by another worker whose
  shard covers the domain, rollback and retry on another worker when flagged.
- :class:`GreedyRouter`: the "dynamic LLM orchestration" school: reads the state and routes each step to the most
  capable-looking worker (largest model covering the domain), verifies doubtful results, retries flagged ones; every
  decision costs an LLM call (``decision_cost``), which the evaluation harness charges on the env's ledger with the
  public :meth:`~edo_gym.envs.edo_env.EDOEnv.charge`.
- :class:`OraclePolicy` (``uses_hidden_state = True``): reads ``EDOEnv.hidden_state()`` (true step types and
  domains, correctness of each result, plan faithfulness, worker skills): an upper bound, not a deployable policy.
  It replans every plan that cannot yield the answer (unfaithful, or a step that reads a later one) or whose labels
  would derail its execution (a plan that lacks a step only a result reveals: once that result is in), routes each
  step to the worker most likely to answer it, never pays for a verification (it knows whether a result is right),
  retries a wrong result up to ``max_tries`` times, mostly with the option most likely right (a greedy worker, which
  answers the same request the same way, is asked each request once), and submits at once when the answer can no
  longer be right.

Interface: ``reset(obs, info)`` at episode start, ``act(obs, info) -> action``; a policy with
``uses_hidden_state`` implements ``act_hidden(obs, info, hidden)`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edo_gym.config import DOMAINS, MODEL_SIZES, SUBTASK_TYPES
from edo_gym.envs import observation as O

Obs = dict[str, np.ndarray]


@dataclass(frozen=True)
class StepView:
    """One plan step as the observation shows it."""

    index: int
    label: str
    domain: str
    done: bool
    current: bool
    inputs_done: bool
    reads_later: bool
    confidence: float | None
    verdict: str  # "", "ok", "flagged", "unsure"
    verifications: int
    abstained: bool
    linked: bool
    attempts: float


class ObsView:
    """Decodes an EDO observation: the action layout, the plan as written, the workers' public profile."""

    def __init__(self, obs: Obs) -> None:
        self.obs = obs
        self.mask = obs["action_mask"]
        workers = obs["workers"]
        self.n_workers = W = workers.shape[0]
        self.n_actions = len(self.mask)
        #: ``verify_plan(w)`` actions exist (``EDOConfig.enable_plan_review``): the env then adds ``plan_review``
        self.plan_review = "plan_review" in obs
        self.retrieve_flag = self.n_actions == (4 if self.plan_review else 3) * W + 3
        self.n_dispatch = 2 * W if self.retrieve_flag else W
        self.rollback, self.replan, self.submit = self.n_actions - 3, self.n_actions - 2, self.n_actions - 1
        self.price = workers[:, O.W_PRICE] * 4.0
        self.size = np.argmax(workers[:, O.W_SIZE : O.W_SIZE + len(MODEL_SIZES)], axis=1)
        self.shards = [
            {DOMAINS[d] for d in np.flatnonzero(workers[w, O.W_SHARD : O.W_SHARD + len(DOMAINS)])} for w in range(W)
        ]
        self.top_k = workers[:, O.W_TOPK] * 10.0
        self.flagged = workers[:, O.W_FLAGGED]
        plan = obs["plan"]
        self.plan_confidence = float(plan[O.P_CONF]) if plan[O.P_CONF_GIVEN] > 0 else None
        self.fallback = bool(plan[O.P_FALLBACK] > 0)
        self.steps: list[StepView] = []
        for i, row in enumerate(obs["subtasks"]):
            if row[O.C_PRESENT] < 0.5:
                break
            verdict = ""
            for code, name in ((O.C_OK, "ok"), (O.C_FLAG, "flagged"), (O.C_UNSURE, "unsure")):
                if row[code] > 0:
                    verdict = name
            self.steps.append(
                StepView(
                    index=i,
                    label=SUBTASK_TYPES[int(np.argmax(row[O.C_TYPE : O.C_TYPE + len(SUBTASK_TYPES)]))],
                    domain=DOMAINS[int(np.argmax(row[O.C_DOMAIN : O.C_DOMAIN + len(DOMAINS)]))],
                    done=bool(row[O.C_DONE] > 0),
                    current=bool(row[O.C_CURRENT] > 0),
                    inputs_done=bool(row[O.C_DEPS] > 0),
                    reads_later=bool(row[O.C_LATER] > 0),
                    confidence=float(row[O.C_CONF]) if row[O.C_CONF_GIVEN] > 0 else None,
                    verdict=verdict,
                    verifications=int(round(row[O.C_NVERIFY] * 4)),
                    abstained=bool(row[O.C_ABSTAIN] > 0),
                    linked=bool(row[O.C_LINKED] > 0),
                    attempts=float(row[O.C_ATTEMPTS]),
                )
            )
        self.current = next((s for s in self.steps if s.current), None)
        self.any_done = any(s.done for s in self.steps)

    def dispatch(self, worker: int, retrieve: bool) -> int:
        return 2 * worker + int(retrieve) if self.retrieve_flag else worker

    def verify(self, worker: int) -> int:
        return self.n_dispatch + worker

    def verify_plan(self, worker: int) -> int:
        """``verify_plan(worker)`` (only when :attr:`plan_review`)."""
        return self.n_dispatch + self.n_workers + worker

    def legal(self, action: int) -> bool:
        return bool(self.mask[action] > 0)

    def covering(self, domain: str) -> list[int]:
        """Workers whose shard holds ``domain``, cheapest first (ties: more context first)."""
        ws = [w for w in range(self.n_workers) if domain in self.shards[w]]
        return sorted(ws, key=lambda w: (self.price[w], -self.top_k[w], w))

    def cheapest(self) -> int:
        return int(min(range(self.n_workers), key=lambda w: (self.price[w], w)))

    def largest(self, candidates: list[int] | None = None) -> int:
        pool = candidates if candidates else list(range(self.n_workers))
        return int(max(pool, key=lambda w: (self.size[w], self.top_k[w], -w)))


class HeuristicPolicy:
    """Base class of the hand-written policies (see module docstring).

    :cvar uses_hidden_state: ``True`` only for the oracle.
    :cvar decision_cost: ``(tokens, calls, latency_s)`` the policy's own decision-making costs per step; the
        evaluation harness charges it with ``EDOEnv.charge`` before each step.
    """

    name = "heuristic"
    uses_hidden_state = False
    decision_cost: tuple[int, int, float] = (0, 0, 0.0)

    def reset(self, obs: Obs, info: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Called after ``env.reset()`` with its observation and info."""

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        raise NotImplementedError


class RandomPolicy(HeuristicPolicy):
    """A uniformly random legal action (seeded)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        return int(self.rng.choice(np.flatnonzero(obs["action_mask"])))


class SubmitAtOnce(HeuristicPolicy):
    """Submits at the first step (the floor every useful policy must beat)."""

    name = "submit_at_once"

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        return ObsView(obs).submit


class StaticPipeline(HeuristicPolicy):
    """Route by label to the cheapest covering worker, retrieve for lookups, retry abstentions, submit at the end."""

    name = "static_pipeline"

    def __init__(self, max_retries: int = 3) -> None:
        self.max_retries = max_retries

    def reset(self, obs: Obs, info: dict[str, Any]) -> None:
        self.retries = 0

    @staticmethod
    def route(v: ObsView, step: StepView) -> tuple[int, bool]:
        """The cheapest worker covering the step's labelled domain (else the cheapest), retrieval for lookups."""
        covering = v.covering(step.domain)
        w = covering[0] if covering else v.cheapest()
        return w, step.label == "lookup" and step.domain in v.shards[w]

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        last = last_done(v)
        if last is not None and last.abstained and self.retries < self.max_retries and v.legal(v.rollback):
            self.retries += 1
            return v.rollback
        if v.current is None:
            return v.submit
        w, retrieve = self.route(v, v.current)
        return v.dispatch(w, retrieve)


def last_done(v: ObsView) -> StepView | None:
    """The most recent result: the done step just before the current one (or the last step when all are done)."""
    if v.current is None:
        return v.steps[-1] if v.steps and v.steps[-1].done else None
    i = v.current.index - 1
    return v.steps[i] if i >= 0 and v.steps[i].done else None


class RuleBased(HeuristicPolicy):
    """The strongest observation-only policy we could write (see module docstring).

    :param verify_below: verify a result whose confidence is below this (or that gives none), and always the last step.
    :param replan_below: replan a fresh plan whose planner confidence is below this.
    :param max_tries: dispatches per step before accepting what it has.
    """

    name = "rule_based"

    def __init__(self, verify_below: float = 0.75, replan_below: float = 0.5, max_tries: int = 3) -> None:
        self.verify_below = verify_below
        self.replan_below = replan_below
        self.max_tries = max_tries

    def reset(self, obs: Obs, info: dict[str, Any]) -> None:
        self.tried: dict[int, list[int]] = {}
        self.verifiers: dict[int, list[int]] = {}

    def _order(self, v: ObsView, step: StepView) -> list[int]:
        """Workers to try for a step, best guess first: covering workers by price, then the rest by size."""
        covering = v.covering(step.domain)
        if step.label != "lookup":
            # compute/write: the cheapest covering worker first, then the largest model
            rest = sorted(set(range(v.n_workers)) - set(covering), key=lambda w: (-v.size[w], v.price[w]))
            return covering + rest
        rest = sorted(set(range(v.n_workers)) - set(covering), key=lambda w: (-v.size[w], v.price[w]))
        return covering + rest

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        if not v.any_done and v.legal(v.replan):
            suspicious = v.fallback or any(s.reads_later for s in v.steps)
            if suspicious or (v.plan_confidence is not None and v.plan_confidence < self.replan_below):
                self.tried, self.verifiers = {}, {}
                return v.replan
        last = last_done(v)
        if last is not None:
            tries = self.tried.get(last.index, [])
            bad = last.abstained or last.verdict == "flagged" or not last.linked
            if bad and len(tries) < self.max_tries and v.legal(v.rollback):
                return v.rollback
            needs_check = (
                last.verdict in ("", "unsure")
                and (last.confidence is None or last.confidence < self.verify_below or v.current is None)
                and last.verifications < 2
            )
            if needs_check:
                producer = tries[-1] if tries else -1
                done_by = self.verifiers.setdefault(last.index, [])
                for w in [w for w in v.covering(last.domain) if w != producer] + [v.largest()]:
                    if w not in done_by and w != producer and v.legal(v.verify(w)):
                        done_by.append(w)
                        return v.verify(w)
        step = v.current
        if step is None:
            return v.submit
        tries = self.tried.setdefault(step.index, [])
        self.verifiers[step.index] = []
        order = self._order(v, step)
        w = next((w for w in order if w not in tries), order[len(tries) % len(order)])
        tries.append(w)
        retrieve = step.label == "lookup" and step.domain in v.shards[w]
        return v.dispatch(w, retrieve)


class GreedyRouter(HeuristicPolicy):
    """Dynamic LLM-style routing, charged per decision (see module docstring).

    :param router_tokens: tokens one routing decision costs (reading the state, writing the choice).
    :param router_latency_s: simulated latency of one routing decision, seconds.
    :param verify_below: verify results whose confidence is below this.
    """

    name = "greedy_router"

    def __init__(
        self, router_tokens: int = 150, router_latency_s: float = 0.6, verify_below: float = 0.65, max_retries: int = 2
    ) -> None:
        self.decision_cost = (router_tokens, 1, router_latency_s)
        self.verify_below = verify_below
        self.max_retries = max_retries

    def reset(self, obs: Obs, info: dict[str, Any]) -> None:
        self.tried: dict[int, list[int]] = {}

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        v = ObsView(obs)
        if not v.any_done and v.legal(v.replan) and (v.fallback or any(s.reads_later for s in v.steps)):
            self.tried = {}
            return v.replan
        last = last_done(v)
        if last is not None:
            tries = self.tried.get(last.index, [])
            if (last.verdict == "flagged" or last.abstained) and len(tries) <= self.max_retries and v.legal(v.rollback):
                return v.rollback
            if last.verdict == "" and last.confidence is not None and last.confidence < self.verify_below:
                w = v.largest()
                if v.legal(v.verify(w)):
                    return v.verify(w)
        step = v.current
        if step is None:
            return v.submit
        tries = self.tried.setdefault(step.index, [])
        covering = v.covering(step.domain) or list(range(v.n_workers))
        ranked = sorted(covering, key=lambda w: (-v.size[w], -v.top_k[w], w))
        w = next((w for w in ranked if w not in tries), ranked[0])
        tries.append(w)
        return v.dispatch(w, step.label == "lookup" and step.domain in v.shards[w])


class OraclePolicy(HeuristicPolicy):
    """Upper bound that reads ``EDOEnv.hidden_state()`` (see module docstring)."""

    name = "oracle"
    uses_hidden_state = True

    def __init__(self, max_tries: int = 8) -> None:
        self.max_tries = max_tries

    def reset(self, obs: Obs, info: dict[str, Any]) -> None:
        self.tries: dict[int, int] = {}
        #: per step, the ``(worker, retrieve)`` options already asked with the step's current inputs
        self.asked: dict[int, set[tuple[int, bool]]] = {}

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        raise TypeError("OraclePolicy needs hidden state: call act_hidden(obs, info, env.unwrapped.hidden_state())")

    def _ranked(self, v: ObsView, hidden: dict[str, Any], kind: str, domain: str) -> list[tuple[int, bool]]:
        """``(worker, retrieve)`` options, most likely right first (by the hidden skills and memories)."""
        options = []
        deviations = hidden.get("deviations") or {}
        drift = deviations.get("drift")
        missing = deviations.get("missing_domains", {})
        for w, name in enumerate(hidden["worker_skills"]):
            skills = hidden["worker_skills"][name]
            # a worker whose drift is in force answers in a format its readers misread, or not at all: asked last
            drifted = -2.0 if drift is not None and drift["active"] and drift["worker"] == name else 0.0
            if kind in ("lookup", "merged"):
                if domain in v.shards[w] and domain not in missing.get(name, ()):
                    # a retriever that returns the right document beats one that does not, whatever the skill
                    found = 1.0 if w in hidden.get("gold_retrieved_by", ()) else 0.0
                    skill = skills["lookup_by_domain"].get(domain, 0.0)
                    options.append((drifted + found + skill - 0.01 * v.price[w], w, True))
                remembers = 1.0 if w in hidden.get("memory_right_by", ()) else 0.0
                prior = skills["memory_coverage"] * skills["memory_accuracy"]
                options.append((drifted + remembers + prior - 0.01 * v.price[w], w, False))
            else:
                options.append((drifted + skills["types"].get(kind, 0.0) - 0.01 * v.price[w], w, False))
        options.sort(reverse=True)
        return [(w, r) for _, w, r in options]

    def act_hidden(self, obs: Obs, info: dict[str, Any], hidden: dict[str, Any]) -> int:
        v = ObsView(obs)
        # a plan that cannot yield the answer (unfaithful, or a step reading a later one) or whose labels would make its
        # execution go wrong (a lookup labelled otherwise is not entity-linked, and vice versa) is replanned at once
        doomed = not hidden["plan_faithful"]
        # a plan that lacks a step no plan written from the task text holds (edo_gym.world.extra_step) is run up to
        # the step whose answer shows it, then replanned: the planner can write the full plan only once it has seen it
        extra = (hidden.get("deviations") or {}).get("extra_step")
        if doomed and extra is not None and not extra["in_plan"] and not extra["revealed"]:
            doomed = extra["reveal_step"] is None
        mislabelled = any(
            wrong and (kind in ("lookup", "merged")) != (step.label == "lookup")
            for wrong, kind, step in zip(hidden["label_wrong"], hidden["kinds"], v.steps, strict=False)
        )
        if (doomed or mislabelled) and v.legal(v.replan):
            self.tries, self.asked = {}, {}
            return v.replan
        if doomed:  # no replan left: nothing it does can succeed, so it stops paying
            return v.submit
        last = last_done(v)
        if last is not None:
            correct = hidden["correct"]
            if correct[last.index] is False:
                if self.tries.get(last.index, 0) < self.max_tries and v.legal(v.rollback):
                    return v.rollback
                return v.submit  # a wrong result it may not retry: the answer cannot be right any more
        step = v.current
        if step is None:
            return v.submit
        n = self.tries.get(step.index, 0)
        self.tries[step.index] = n + 1
        kind, domain = hidden["kinds"][step.index], hidden["domains"][step.index]
        ranked = self._ranked(v, hidden, kind if kind != "unknown" else step.label, domain or step.domain)
        # a greedy worker answers the same request the same way: asking it again gains nothing, so the oracle asks each
        # such option once with the step's current inputs (a redone earlier step changes them)
        for later in [i for i in self.asked if i > step.index]:
            del self.asked[later]
        asked = self.asked.setdefault(step.index, set())
        greedy = {w for w, name in enumerate(hidden["worker_skills"]) if hidden["worker_skills"][name].get("greedy", False)}
        fresh = [(w, r) for w, r in ranked if w not in greedy or (w, r) not in asked]
        if not fresh:  # every option has given its one answer, and none was right: the answer cannot be right
            return v.submit
        if len(fresh) < len(ranked):  # the best option not asked yet
            w, retrieve = fresh[0]
        else:  # mostly the best option (reading is noisy: each ask is a fresh draw), now and then the next ones
            w, retrieve = ranked[min((0, 0, 1, 0, 2, 0, 0, 3)[min(n, 7)], len(ranked) - 1)]
        asked.add((w, retrieve))
        return v.dispatch(w, retrieve)


HEURISTICS: dict[str, type[HeuristicPolicy]] = {
    "random": RandomPolicy,
    "static_pipeline": StaticPipeline,
    "rule_based": RuleBased,
    "greedy_router": GreedyRouter,
    "oracle": OraclePolicy,
}


def make_heuristic(name: str, **kwargs: Any) -> HeuristicPolicy:
    """A heuristic policy by name (one of ``HEURISTICS``)."""
    if name not in HEURISTICS:
        raise ValueError(f"unknown heuristic policy {name!r}; choose from {sorted(HEURISTICS)}")
    return HEURISTICS[name](**kwargs)
