"""Plans that must change mid-way (``edo_gym.world.extra_step``): a support task whose carrier sets its refund
window by the customer's membership tier needs two steps no plan written from its text holds.

Off, the world and the pool are as they were; on, the share of support tasks with the extra step follows the rate,
the first plan lacks the steps and a static pipeline fails, a run that replans after the tier rule came back succeeds,
the replan request carries the results found so far, ``hidden_state`` reports the extra step, and the reset observation
does not tell a task with it from one without.
"""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

from baselines.evaluation import evaluate_heuristic
from baselines.heuristics import OraclePolicy, StaticPipeline
from edo_gym import SCRIPTED
from edo_gym.agents.planner import PLAN_INSTRUCTION, REPLAN_INSTRUCTION, rule_plan
from edo_gym.agents.protocol import LLMRequest
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.config import EDOConfig, PlannerConfig, TaskConfig, WorldConfig, default_workers
from edo_gym.world.extra_step import has_extra_step, reveals, scripted_subtasks, states_tier_rule
from edo_gym.world.generator import MEMBERSHIP_TIER, TIER_RELATIONS, TIER_RULE, TIER_WINDOW_RELATIONS, TIERS, World
from edo_gym.world.grading import grade, is_correct
from edo_gym.world.language import (
    parse_document,
    parse_note,
    parse_question,
    question,
    reply_instruction,
    result_notes,
    tier_window_question,
)
from edo_gym.world.tasks import TaskPool, apply_op

ON = {"world_tiered_refunds": True, "tasks_extra_step_rate": 0.5}
#: The scripted world's corpus hash and a digest of its pool (texts, gold answers, hops, split; ``SCRIPTED``: tiers,
#: extra steps and phrasings off): what the stored 0.3.0 trajectory digests were recorded on. Tiers off must leave both
#: as they are.
SCRIPTED_CORPUS_HASH = "1d199c6d50dbae30"
SCRIPTED_POOL_DIGEST = "83866ec4e1c721f6"
_SCRIPTED = EDOConfig.from_kwargs(None, **SCRIPTED)
#: The world without tiers and a pool without extra steps (the other deviations at their defaults).
PLAIN_WORLD = WorldConfig(tiered_refunds=False)
PLAIN_TASKS = TaskConfig(extra_step_rate=0.0)


def _pool_digest(pool: TaskPool) -> str:
    return hashlib.sha256(repr(pool.tasks).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def tiered_world() -> World:
    return World(WorldConfig(tiered_refunds=True))


@pytest.fixture(scope="module")
def env():
    e = gym.make("EDO-Support-v0", **ON)
    yield e.unwrapped
    e.close()


def _ids(base, extra: bool, n: int) -> list[int]:
    return [k for k in range(base.num_tasks) if has_extra_step(base.pool.tasks[int(base.pool.ids[k])]) == extra][:n]


# -- the world and the pool -----------------------------------------------------------------------------------------
def test_off_the_corpus_and_the_pool_are_as_they_were():
    assert WorldConfig().tiered_refunds and TaskConfig().extra_step_rate == 0.5  # on by default
    world = World(_SCRIPTED.world)
    assert world.corpus_hash == SCRIPTED_CORPUS_HASH
    assert not world.tiered_carriers and "tier" not in world.entities
    assert not any(rel in TIER_RELATIONS for _, rel in world.facts)
    pool = TaskPool(world, _SCRIPTED.tasks)
    assert _pool_digest(pool) == SCRIPTED_POOL_DIGEST
    assert not any(has_extra_step(t) for t in pool.tasks)


def test_tiers_restate_only_the_tiered_carriers_policies(tiered_world):
    plain = World(PLAIN_WORLD)
    carriers = plain.entities["carrier"]
    assert 0 < len(tiered_world.tiered_carriers) < len(carriers)
    for key, value in plain.facts.items():
        restated = key[1] == "refund_window" and key[0] in tiered_world.tiered_carriers
        assert tiered_world.facts[key] == (TIER_RULE if restated else value)
    # the documents written before the tiers' own are the same, but the tiered carriers' general policy
    for old, new in zip(plain.documents, tiered_world.documents, strict=False):
        if not (old.relation == "refund_window" and old.subject in tiered_world.tiered_carriers):
            assert (old.doc_id, old.text) == (new.doc_id, new.text)
    for carrier in tiered_world.tiered_carriers:
        windows = [int(tiered_world.facts[(carrier, TIER_WINDOW_RELATIONS[t])].split()[0]) for t in TIERS]
        assert windows == sorted(windows) and len(set(windows)) == len(TIERS)  # a higher tier never waits less
    for shipment in tiered_world.entities["shipment"]:
        assert tiered_world.facts[(shipment, MEMBERSHIP_TIER)] in TIERS


def test_every_document_and_question_of_a_tiered_world_reads_back(tiered_world):
    from edo_gym.world.generator import RELATIONS

    for doc in tiered_world.documents:
        assert parse_document(doc.text) == (doc.subject, doc.relation, doc.value), doc.text
    for subject, relation in tiered_world.facts:
        assert parse_question(RELATIONS[relation].question.format(x=subject)) == ((relation,), subject)
    for tier, relation in TIER_WINDOW_RELATIONS.items():
        assert parse_question(tier_window_question("Swiftline", tier)) == ((relation,), "Swiftline")
    # near-duplicate distractors are written for the tier facts too
    assert any(d.is_distractor and d.relation == MEMBERSHIP_TIER for d in tiered_world.documents)


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.5, 1.0])
def test_the_share_of_support_tasks_with_the_extra_step_follows_the_rate(tiered_world, rate):
    plain = TaskPool(World(PLAIN_WORLD), PLAIN_TASKS)
    pool = TaskPool(tiered_world, TaskConfig(extra_step_rate=rate))
    support = [t for t in pool.tasks if t.family == "support"]
    share = np.mean([has_extra_step(t) for t in support])
    assert abs(share - rate) < 0.06
    assert not any(has_extra_step(t) for t in pool.tasks if t.family != "support")
    # the other families' tasks and the split do not move
    for a, b in zip(plain.tasks, pool.tasks, strict=True):
        if a.family != "support":
            assert a == b
    assert np.array_equal(plain.test_ids, pool.test_ids)


def test_a_task_with_the_extra_step_holds_it_in_its_gold_steps(tiered_world):
    pool = TaskPool(tiered_world, TaskConfig(families=("support",), extra_step_rate=1.0))
    for task in pool.tasks[:200]:
        relations = [s.relation for s in task.subtasks]
        assert MEMBERSHIP_TIER in relations and relations[-2] in TIER_WINDOW_RELATIONS.values()
        lookups = sum(s.kind == "lookup" for s in task.subtasks)
        assert task.hops == lookups + 1  # the policy lookup that reveals the rule, then the two extra ones
        assert task.answer == task.subtasks[-1].answer and states_tier_rule(task.answer) is False
        # the text names an order or a shipment (the customer is found from the shipment), never a carrier alone
        assert task.subtasks[0].relation in ("shipment", "carrier") and task.subtasks[0].literal is not None
        carrier = task.subtasks[[s.relation for s in task.subtasks].index("carrier")].answer
        assert carrier in tiered_world.tiered_carriers


def test_rule_plan_reads_the_text_only_and_writes_the_usual_plan(tiered_world):
    pool = TaskPool(tiered_world, TaskConfig(families=("support",), extra_step_rate=1.0, phrasing_rate=0.5))
    for task in [t for t in pool.tasks if t.task_id in set(pool.train_ids.tolist())][:100]:
        plan = rule_plan(task.text)
        if plan is None:
            continue
        assert len(plan.steps) == len(scripted_subtasks(task))
        assert not any("membership" in s.instruction for s in plan.steps)


def test_configuration_is_validated_with_a_clear_error():
    with pytest.raises(ValueError, match="tiered_refunds"):
        EDOConfig.from_kwargs(world_tiered_refunds=False, tasks_extra_step_rate=0.5)
    with pytest.raises(ValueError, match="extra_step_rate"):
        TaskConfig(extra_step_rate=1.5)
    with pytest.raises(ValueError, match="tiered"):
        TaskPool(World(PLAIN_WORLD), TaskConfig(extra_step_rate=0.5))


def test_a_task_with_the_extra_step_has_four_or_five_hops_whatever_max_hops_says(tiered_world):
    pool = TaskPool(tiered_world, TaskConfig(families=("support",), min_hops=1, max_hops=1, n_tasks=200))
    extra = [t for t in pool.tasks if has_extra_step(t)]
    assert extra and all(t.hops in (4, 5) for t in extra)
    assert all(t.hops == 1 for t in pool.tasks if not has_extra_step(t))


# -- workers, verifiers, grading --------------------------------------------------------------------------------------
def test_the_rule_is_a_right_policy_answer_but_no_window(tiered_world):
    carrier = sorted(tiered_world.tiered_carriers)[0]
    from edo_gym.world.grading import execute_plan

    truth = execute_plan(tiered_world, [f"What is the refund window for deliveries by {carrier}?"], [()])[0]
    assert truth.expected == TIER_RULE
    assert is_correct(tiered_world, truth, "It depends on the customer's membership tier.")
    assert is_correct(tiered_world, truth, TIER_RULE.upper())
    assert not is_correct(tiered_world, truth, "30 days")
    assert not is_correct(tiered_world, truth, "I don't know.")
    assert apply_op("refund_reply", [TIER_RULE]) is None
    assert not grade(tiered_world, "duration", "You can request a refund within 30 days.", TIER_RULE)


def test_a_reply_to_the_rule_cannot_be_right_and_a_verifier_flags_it(tiered_world):
    pool = TaskPool(tiered_world, TaskConfig(families=("support",), extra_step_rate=1.0))
    backend = SimulatedBackend(tiered_world, default_workers(), PlannerConfig(), pool.tasks)
    instruction = reply_instruction(TIER_RULE)
    for seed in range(40):
        for spec in default_workers():
            request = LLMRequest(role="worker", agent=spec.name, system="", task="t", instruction=instruction,
                                 inputs=(TIER_RULE,), seed=seed)  # fmt: skip
            reply = backend.complete(request).text
            assert all(not grade(tiered_world, "duration", reply, f"{d} days") for d in (7, 10, 14, 21, 30, 45, 60, 90))
            check = LLMRequest(role="verifier", agent=spec.name, system="", task="t", instruction=instruction,
                               inputs=(TIER_RULE,), answer=reply, seed=seed)  # fmt: skip
            assert backend.complete(check).text.startswith("INCORRECT")


# -- the planner --------------------------------------------------------------------------------------------------
def test_the_simulated_planner_writes_the_full_plan_only_once_a_result_shows_the_rule(tiered_world):
    pool = TaskPool(tiered_world, TaskConfig(families=("support",), extra_step_rate=1.0))
    backend = SimulatedBackend(tiered_world, default_workers(), PlannerConfig(error_rate=0.0, malformed_rate=0.0), pool.tasks)
    from edo_gym.agents.planner import parse_plan

    for task in pool.tasks[:30]:
        first = parse_plan(backend.complete(_plan_request(task.text, ())).text, 8)
        assert len(first) == len(scripted_subtasks(task))
        assert not any("membership" in s.instruction for s in first)
        # results that do not show the rule change nothing
        other = result_notes([("Which carrier handles shipment TRK-X?", "Swiftline")])
        assert parse_plan(backend.complete(_plan_request(task.text, other)).text, 8) == first
        # the policy lookup's answer shows it: the full plan, reusing the answers given to the lookups before it
        chain = [s for s in task.subtasks if s.relation in ("shipment", "carrier")]
        results = []
        subject = chain[0].literal
        for s in chain:
            results.append((question((s.relation,), subject), s.answer))
            subject = s.answer
        results.append((question(("refund_window",), subject), TIER_RULE))
        notes = result_notes(results)
        assert reveals(notes)
        full = parse_plan(backend.complete(_plan_request(task.text, notes)).text, 8)
        assert len(full) == 3  # the tier, its window at the known carrier, the reply
        shipment = chain[0].answer if chain[0].relation == "shipment" else chain[0].literal
        assert full[0].instruction == question((MEMBERSHIP_TIER,), shipment)
        assert full[1].instruction == tier_window_question(subject, "{1}")
        # without the chain's answers it writes every step of the gold decomposition
        bare = parse_plan(backend.complete(_plan_request(task.text, result_notes([("q", TIER_RULE)]))).text, 8)
        assert len(bare) == len(task.subtasks)


def _plan_request(text: str, inputs: tuple[str, ...]) -> LLMRequest:
    return LLMRequest(role="planner", agent="planner", system="", task=text,
                      instruction=REPLAN_INSTRUCTION if inputs else PLAN_INSTRUCTION, inputs=inputs, seed=3)  # fmt: skip


def test_result_notes_keep_the_latest_answer_per_instruction():
    notes = result_notes([("a?", "1"), ("b?", "2"), ("a?", "3")])
    assert notes == ("b? -> 2", "a? -> 3")
    assert [parse_note(n) for n in notes] == [("b?", "2"), ("a?", "3")]


# -- the environment ------------------------------------------------------------------------------------------------
def test_the_first_plan_lacks_the_steps_and_hidden_state_reports_them(env):
    revealing = 0
    for k in _ids(env, True, 20):
        env.reset(seed=k, options={"task_id": k})
        hidden = env.hidden_state()
        extra = hidden["deviations"]["extra_step"]
        task = env.episode.task
        assert extra is not None and extra["tier"] in TIERS and extra["window"] in task.answer
        assert not extra["in_plan"] and not extra["revealed"]
        assert not any("membership" in s.instruction for s in env.episode.plan.steps)
        if extra["reveal_step"] is not None:  # its policy step answers with the rule, and no reply can follow from it
            revealing += 1
            assert hidden["expected"][extra["reveal_step"]] == TIER_RULE
            assert not hidden["plan_faithful"] and task.answer not in hidden["expected"]
    assert revealing >= 10  # (the others carry a planner error before the policy step)
    for k in _ids(env, False, 5):
        env.reset(seed=k, options={"task_id": k})
        assert env.hidden_state()["deviations"]["extra_step"] is None


def test_the_static_pipeline_fails_them_and_the_oracle_replans_and_solves_them(env):
    extra = _ids(env, True, 80)
    # the static pipeline's plan never looks the tier up: it succeeds only where a misread window happens to be the tier's
    static_extra = evaluate_heuristic(StaticPipeline(), env, extra, seed=0).success_rate
    oracle_extra = evaluate_heuristic(OraclePolicy(), env, extra, seed=0).success_rate
    assert static_extra < 0.2
    assert oracle_extra > static_extra + 0.3


def test_a_run_that_replans_after_the_rule_succeeds():
    """Dispatch the worker whose retrieval finds each step's document (others in turn while it has none), roll a wrong
    result back, replan once the rule came back, then run the new plan: the task is solved, with a faultless planner
    and room in the budget."""
    env = gym.make(
        "EDO-Support-v0", planner_error_rate=0.0, planner_malformed_rate=0.0, token_budget=20_000, max_steps=80, **ON
    ).unwrapped
    ids = _ids(env, True, 12)
    solved = 0
    for k in ids:
        env.reset(seed=k, options={"task_id": k})
        ended, replanned, info = False, False, {}
        while not ended:
            hidden = env.hidden_state()
            extra = hidden["deviations"]["extra_step"]
            plan = env.episode.plan
            if extra["revealed"] and not extra["in_plan"]:
                action, replanned = env.A_REPLAN, True
            elif plan.done_stack and hidden["correct"][plan.done_stack[-1]] is False:
                action = env.A_ROLLBACK
            elif plan.current_step < 0:
                action = env.A_SUBMIT
            else:
                tries = int(plan.tried[plan.current_step][:, :2].sum())
                gold = hidden["gold_retrieved_by"]
                w = gold[tries % len(gold)] if gold else tries % len(env.workers)
                action = 2 * w + int(bool(gold) or (env.workers[w].retriever.size > 0 and tries < len(env.workers)))
            _, _, terminated, truncated, info = env.step(action)
            ended = terminated or truncated
        solved += bool(info["is_success"] and replanned)
    env.close()
    assert solved >= 0.75 * len(ids)


def test_the_replan_request_carries_the_results_found_so_far():
    requests: list[LLMRequest] = []

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def complete(self, request):
            requests.append(request)
            return self.inner.complete(request)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    cfg = EDOConfig.from_kwargs(tasks_families=("support",), planner_error_rate=0.0, planner_malformed_rate=0.0, **ON)
    base = gym.make("EDO-Support-v0", **ON).unwrapped
    recorded = gym.make(
        "EDO-Support-v0", backend=Recording(SimulatedBackend(base.world, cfg.workers, cfg.planner, base.pool.tasks)),
        planner_error_rate=0.0, planner_malformed_rate=0.0, **ON,
    ).unwrapped  # fmt: skip
    k = _ids(recorded, True, 1)[0]
    recorded.reset(seed=0, options={"task_id": k})
    first = [r for r in requests if r.role == "planner"]
    assert first[-1].inputs == () and first[-1].instruction == PLAN_INSTRUCTION
    policy = OraclePolicy()
    obs, info = recorded.reset(seed=0, options={"task_id": k})
    policy.reset(obs, info)
    ended = False
    while not ended:
        action = policy.act_hidden(obs, info, recorded.hidden_state())
        obs, _, terminated, truncated, info = recorded.step(action)
        ended = terminated or truncated
        if action == recorded.A_REPLAN:
            request = [r for r in requests if r.role == "planner"][-1]
            assert request.instruction == REPLAN_INSTRUCTION
            assert reveals(request.inputs)
            answers = [parse_note(n)[1] for n in request.inputs]
            assert answers == [r.text for r in _standing(recorded, request.inputs)]
            break
    else:
        pytest.fail("the oracle never replanned")
    # with the deviation off, a replan request is as it was: no inputs
    requests.clear()
    backend = Recording(SimulatedBackend(base.world, cfg.workers, cfg.planner, base.pool.tasks))
    off = gym.make("EDO-Support-v0", backend=backend, world_tiered_refunds=True, tasks_extra_step_rate=0.0).unwrapped
    off.reset(seed=0, options={"task_id": 0})
    off.step(0)
    off.step(off.A_REPLAN)
    replan = [r for r in requests if r.role == "planner"][-1]
    assert replan.inputs == () and replan.instruction == PLAN_INSTRUCTION
    for made in (base, recorded, off):
        made.close()


def _standing(env, notes):
    """The dispatch records whose answers the notes carry (the latest per instruction)."""
    latest = {}
    for entry in env.episode.trace:
        if entry[0] == "dispatch" and not entry[3].failed and not entry[3].abstained:
            latest.pop(entry[3].instruction, None)
            latest[entry[3].instruction] = entry[3]
    assert len(latest) == len(notes)
    return list(latest.values())


def test_the_reset_observation_does_not_tell_a_task_with_the_extra_step():
    """A leak probe: no classifier on the first observation tells a task with the extra step from one without
    (AUC < 0.8), and ``info`` has the same keys."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import cross_val_predict

    env = gym.make("EDO-Support-v0", **ON).unwrapped
    keys = [k for k in env.observation_space.spaces if k != "task"]
    x, y, info_keys = [], [], set()
    for seed in range(400):
        obs, info = env.reset(seed=seed)
        x.append(np.concatenate([obs[k].ravel() for k in keys]))
        y.append(env.hidden_state()["deviations"]["extra_step"] is not None)
        info_keys.add(tuple(sorted(info)))
    env.close()
    x, y = np.asarray(x), np.asarray(y)
    assert 0.3 < y.mean() < 0.7 and len(info_keys) == 1
    p = cross_val_predict(LogisticRegression(max_iter=2000), x, y, cv=5, method="predict_proba")[:, 1]
    assert roc_auc_score(y, p) < 0.8
