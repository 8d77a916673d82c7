"""EDO-v0 measures what it claims: no hidden state in what the policy sees, workers read what they retrieve,
verification is charged work, grading a real model can pass, rewards keep long tasks worth doing, and the same seeds
give the same trajectories in any process."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from baselines.evaluation import evaluate_heuristic, heldout_task_ids, make_eval_env
from baselines.heuristics import SubmitAtOnce, make_heuristic
from edo_gym import SCRIPTED
from edo_gym.agents.protocol import LLMRequest
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.config import EDOConfig, default_workers
from edo_gym.envs.edo_env import EDOEnv
from edo_gym.validation import collect, info_leak_aucs, leak_aucs, roc_auc, template_probe
from edo_gym.world.grading import grade_final
from edo_gym.world.language import question
from edo_gym.world.text import EntityLinker, answers_match, drift

#: The 0.4.0 defaults but the extra step (:mod:`edo_gym.world.extra_step`): phrasings, team draws, drift and plan
#: reviews on.
NO_EXTRA_STEP = {"tasks_extra_step_rate": 0.0}


@pytest.fixture(scope="module")
def env():
    env = gym.make("EDO-v0")
    yield env
    env.close()


@pytest.fixture(scope="module")
def base(env) -> EDOEnv:
    env.reset(seed=0)
    return env.unwrapped


def _gold_doc(base: EDOEnv, relation: str) -> tuple[int, object]:
    return next((i, d) for i, d in enumerate(base.world.documents) if d.relation == relation and not d.is_distractor)


def _simulator(base: EDOEnv, **worker_changes) -> SimulatedBackend:
    workers = [dataclasses.replace(w, **worker_changes) for w in base.config.workers]
    return SimulatedBackend(base.world, workers, base.config.planner, base.pool.tasks)


# ================================================================================================ no leaks
def test_observation_does_not_reveal_hidden_state(env):
    """A logistic regression from the observation (paid verdicts excluded) to each hidden variable stays below AUC 0.8."""
    policy = make_heuristic("rule_based")
    aucs = leak_aucs(collect(env, policy.act, policy.reset, episodes=250, seed=11), seed=11)
    # the defaults hold the deviations: the team draw, a pending drift and the extra step are probed too
    for target in ("last_result_correct", "plan_faithful", "label_wrong", "team_drawn", "drift_pending", "extra_step"):
        assert aucs[target]["n"] > 0.0, target
        assert aucs[target]["auc"] < 0.8, (target, aucs)


def test_leak_probe_catches_a_planted_leak(env):
    """The probe is not blind: a feature that copies hidden correctness is found (AUC near 1)."""
    policy = make_heuristic("rule_based")
    rows = collect(env, policy.act, policy.reset, episodes=60, seed=3)
    planted = dict(rows)
    planted["x"] = [
        np.append(x, 0.0 if np.isnan(y) else y) for x, y in zip(rows["x"], rows["last_result_correct"], strict=True)
    ]
    assert leak_aucs(planted, seed=3)["last_result_correct"]["auc"] > 0.95


@pytest.mark.parametrize("scripted", [True, False], ids=["scripted", "default"])
def test_worker_skills_and_memories_do_not_change_what_the_policy_sees(scripted):
    """Two teams that differ only in hidden competence give identical observations and info at reset. In the scripted
    world the weak team also has no per-domain skills; on the defaults it keeps the same skill names (the team draw
    moves each named skill, so their number, not their values, sets how many random numbers a draw takes)."""
    kwargs = SCRIPTED if scripted else {}
    skilled = gym.make("EDO-v0", **kwargs)
    weak_workers = [
        dataclasses.replace(
            w,
            skills=dict.fromkeys(w.skills, 0.3),
            domain_skills={} if scripted else dict.fromkeys(w.domain_skills, 0.3),
            memory_coverage=0.9,
            memory_accuracy=0.1,
        )
        for w in default_workers()
    ]
    weak = gym.make("EDO-v0", workers=weak_workers, **kwargs)
    drawn = 0
    for seed in range(8):
        a, info_a = skilled.reset(seed=seed)
        b, info_b = weak.reset(seed=seed)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        assert info_a.keys() == info_b.keys() == {"action_mask", "task_id"}
        drawn += skilled.unwrapped.hidden_state()["deviations"]["team_drawn"]
    assert (drawn > 0) == (not scripted)  # on the defaults some of the teams were drawn around the profiles


def test_info_before_the_end_carries_no_outcome_or_task_shape(env):
    obs, info = env.reset(seed=4)
    assert set(info) == {"action_mask", "task_id"}
    rng = np.random.default_rng(0)
    while True:
        obs, _, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        if terminated or truncated:
            break
        assert not info["episode_stats"]["ended"] and not info["episode_stats"]["success"]
        assert "hops" not in info and "hops" not in info["episode_stats"]
    assert info["episode_stats"]["ended"] and "hops" not in info["episode_stats"]
    assert {"success", "tokens", "calls", "latency_s", "family"} <= set(info["episode_stats"])


@pytest.mark.parametrize("kwargs", [SCRIPTED, NO_EXTRA_STEP], ids=["scripted", "default-no-extra-step"])
def test_planner_confidence_is_informative_but_not_separating(kwargs):
    """The planner's confidence tells its own errors apart, not perfectly. (A plan that lacks the extra step is
    unfaithful by the task, unknown to the planner: such tasks are left out of the default distribution here.)"""
    env = gym.make("EDO-v0", **kwargs)
    base = env.unwrapped
    conf, faithful = [], []
    for seed in range(400):
        env.reset(seed=seed)
        conf.append(base.episode.plan.confidence)
        faithful.append(base.hidden_state()["plan_faithful"])
    auc = roc_auc(np.asarray(conf), np.asarray(faithful))
    assert 0.55 < auc < 0.8, auc
    assert 0.05 < 1 - np.mean(faithful) < 0.5


def test_shape_keeping_planner_errors_occur(env, base):
    """Some unfaithful plans have exactly the gold plan's length and no step reading a later one."""
    kept_shape = 0
    for seed in range(300):
        env.reset(seed=seed)
        hidden = base.hidden_state()
        same_len = len(base.episode.plan.steps) == len(base.episode.task.subtasks)
        ordered = all(d < i for i, s in enumerate(base.episode.plan.steps) for d in s.deps)
        kept_shape += (not hidden["plan_faithful"]) and same_len and ordered
    assert kept_shape >= 10


# ================================================================================================ workers read documents
def test_a_worker_answers_from_the_document_text_it_read(base):
    sim = _simulator(base, domain_skills={}, skills={"lookup": 1.0, "compute": 1.0, "write": 1.0})
    spec = sim.specs["wiki_agent"]
    _, doc = _gold_doc(base, "mentor")
    ask = question(("mentor",), doc.subject)
    answers = {sim.read(spec, ask, (), (doc.text,), np.random.default_rng(s)).text for s in range(5)}
    assert answers == {doc.value}
    forged = doc.text.replace(doc.value, "Zed Nobody")
    answers = {sim.read(spec, ask, (), (forged,), np.random.default_rng(s)).text for s in range(5)}
    assert answers == {"Zed Nobody"}


def test_without_documents_a_worker_answers_from_a_fixed_memory(base):
    sim = _simulator(base, memory_coverage=1.0, memory_accuracy=1.0)
    spec = sim.specs["generalist"]
    _, doc = _gold_doc(base, "employer")
    ask = question(("employer",), doc.subject)
    assert {sim.read(spec, ask, (), (), np.random.default_rng(s)).text for s in range(5)} == {doc.value}
    forgetful = _simulator(base, memory_coverage=0.0, abstain_rate=1.0)
    assert forgetful.read(forgetful.specs["generalist"], ask, (), (), np.random.default_rng(0)).source == "abstain"


def test_a_near_duplicate_document_can_mislead_a_careless_reader(base):
    docs = base.world.documents
    # a distractor is written right after the fact it imitates: same relation, a near-duplicate name, another value
    j = next(j for j, d in enumerate(docs) if d.is_distractor and d.relation == "mentor" and docs[j - 1].relation == "mentor")
    twin, gold = docs[j], docs[j - 1]
    ask = question(("mentor",), gold.subject)
    for skill, low, high in ((0.3, 20, 190), (1.0, 0, 60)):
        sim = _simulator(base, domain_skills={}, skills={"lookup": skill, "compute": 1.0, "write": 1.0}, memory_coverage=0.0)
        answers = [
            sim.read(sim.specs["wiki_agent"], ask, (), (twin.text, gold.text), np.random.default_rng(s)).text
            for s in range(200)
        ]
        misled = sum(a == twin.value for a in answers)
        assert low <= misled <= high, (skill, misled)
        assert gold.value in answers


def test_the_simulator_never_reads_the_fact_table(base, monkeypatch):
    sim = _simulator(base)
    monkeypatch.setattr(base.world, "facts", {})  # any access at answer time would now fail to find the fact
    _, doc = _gold_doc(base, "founder")
    spec = dataclasses.replace(sim.specs["analyst"], domain_skills={}, skills={"lookup": 1.0, "compute": 1.0, "write": 1.0})
    reading = sim.read(spec, question(("founder",), doc.subject), (), (doc.text,), np.random.default_rng(0))
    assert reading.text == doc.value and reading.source == "document"


# ================================================================================================ verification
def _run_until_result(env, seed: int) -> int:
    """Reset and dispatch the first step with retrieval on its cheapest covering worker; returns that worker."""
    obs, info = env.reset(seed=seed)
    base = env.unwrapped
    step = base.episode.plan.steps[0]
    w = next((i for i, s in enumerate(base.config.workers) if step.domain_label in s.shard), 0)
    env.step(2 * w + 1)  # dispatch(w, retrieval)
    return w


def test_verify_is_a_charged_call(env, base):
    _run_until_result(env, seed=1)
    before = (base.episode.tokens, base.episode.calls, base.episode.latency_s)
    verifier = len(base.workers) - 1
    _, reward, _, _, info = env.step(base.A_VERIFY + verifier)
    assert info["event"] == "verify"
    assert info["cost"]["tokens"] > 50 and info["cost"]["calls"] == 1 and info["cost"]["latency_s"] > 0
    assert reward < 0
    assert (base.episode.tokens, base.episode.calls) == (before[0] + info["cost"]["tokens"], before[1] + 1)
    assert base.episode.trace[-1][0] == "verify" and base.episode.trace[-1][1].verdict in ("ok", "flagged", "unsure")


def test_verifier_judges_from_its_own_evidence(base):
    sim = _simulator(base, domain_skills={}, skills={"lookup": 1.0, "compute": 1.0, "write": 1.0})
    _, doc = _gold_doc(base, "mentor")
    ask = question(("mentor",), doc.subject)

    def verdict(answer: str, documents: tuple[str, ...], agent: str = "wiki_agent", sim=sim) -> str:
        request = LLMRequest("verifier", agent, "", "task", ask, documents=documents, answer=answer, seed=1)
        return sim.complete(request).text.split(":")[0]

    assert verdict(doc.value, (doc.text,)) == "CORRECT"
    wrong = next(p for p in base.world.entities["person"] if p != doc.value)
    assert verdict(wrong, (doc.text,)) == "INCORRECT"
    assert verdict("I don't know.", (doc.text,)) == "INCORRECT"
    # a verifier whose retrieval missed the fact and who does not remember it cannot confirm anything
    blind = _simulator(base, memory_coverage=0.0, abstain_rate=1.0)
    assert verdict(doc.value, (), sim=blind) == "UNSURE"
    # and a forged document fools it: its judgement follows the evidence it has
    forged = doc.text.replace(doc.value, wrong)
    assert verdict(wrong, (forged,)) == "CORRECT"


def test_rollback_keeps_the_discarded_work_charged_and_adds_coordination(env, base):
    _run_until_result(env, seed=2)
    tokens = base.episode.tokens
    _, reward, _, _, info = env.step(base.A_ROLLBACK)
    assert (
        info["cost"]["tokens"] == base.config.rollback_tokens and base.episode.tokens == tokens + base.config.rollback_tokens
    )
    assert reward < 0


# ================================================================================================ grading
@pytest.mark.parametrize("style", ["upper", "prefix", "trailing_period", "sentence", "hedged"])
def test_wrapped_correct_answers_pass(style):
    assert answers_match(drift("Mara Quell", style), "Mara Quell")


def test_aliases_and_real_model_phrasing_pass(base):
    person = base.world.entities["person"][0]
    first, last = person.split(" ", 1)
    for said in (f"{last}, {first}", f"The answer is {person}.", f"**{person}**", f"Answer: the {person}", f"It's {person}!"):
        assert answers_match(said, person, base.world.aliases[person]), said


def test_near_miss_entities_fail(base):
    person = base.world.entities["person"][0]
    twin = base.world.near_duplicate(person, np.random.default_rng(0))
    assert twin != person and not answers_match(twin, person, base.world.aliases[person])
    assert not answers_match("I don't know.", person)
    assert not answers_match("", person)


def test_support_replies_are_graded_on_the_window_not_the_phrasing(base):
    task = next(base.pool.tasks[i] for i in base.pool.ids if base.pool.tasks[i].family == "support")
    days = task.answer.split("within ")[1].split()[0]
    other = "7" if days != "7" else "10"
    assert grade_final(base.world, task, task.answer)
    assert grade_final(base.world, task, f"You have {days} days to request a refund.")
    assert grade_final(base.world, task, f"Refunds for late deliveries are handled case by case, usually within {days} days.")
    assert not grade_final(base.world, task, task.answer.replace(f"{days} days", f"{other} days"))
    assert not grade_final(base.world, task, f"You can request a refund within {days} or {other} days.")
    assert not grade_final(base.world, task, "Please contact our support team about a refund.")


def test_right_template_wrong_value_never_succeeds_in_any_family(base):
    """Every family and answer kind: the gold answer's template with another value is graded wrong, the right value in
    other phrasings right (``edo_gym.validation.template_probe``, also reported by ``benchmarks/env_validity.py``)."""
    probe = template_probe(base.world, [base.pool.tasks[i] for i in base.pool.ids])
    assert {k.split("/")[0] for k in probe} == {"support", "multihop", "analytics"}
    assert {"support/duration", "analytics/amount", "multihop/person", "multihop/city"} <= set(probe)
    for key, row in probe.items():
        assert row["n"] > 0, key
        assert row["wrong_value_success"] == 0.0, (key, row)
        assert row["right_value_success"] == 1.0, (key, row)


@pytest.mark.parametrize("kwargs", [SCRIPTED, NO_EXTRA_STEP, {}], ids=["scripted", "default-no-extra-step", "default"])
def test_info_with_the_task_pool_tells_no_more_about_the_plan_than_the_observation(kwargs):
    """No plan signature or gold-derived key in ``info``: with the task pool, ``info`` predicts plan faithfulness at
    reset no better than the observation or the task's public facts do (held-out AUC within 0.02). On the defaults the
    public facts tell much (a support task whose text hides the extra step has an unfaithful first plan whatever the
    planner does, and half the support tasks are such), and the pool's features of a task are those its text shows:
    without that, the pool's gold plan length would name the tasks with the extra step."""
    aucs = info_leak_aucs(gym.make("EDO-v0", **kwargs), episodes=300, seed=5)
    assert aucs["info_and_pool"] <= max(aucs["observation"], aucs["task_alone"]) + 0.02, aucs


def test_fuzzy_entity_linking_recovers_drifted_names_and_rejects_strangers():
    linker = EntityLinker(["Mara Quell", "Tobin Varga"], {"Quell, Mara": "Mara Quell"}, threshold=0.85)
    assert linker.link("MARA QUELL.") == "Mara Quell"
    assert linker.link("Quell, Mara") == "Mara Quell"
    assert linker.link("Mara Quel") == "Mara Quell"  # one letter off: linked
    assert linker.link("Somebody Else") is None
    with pytest.raises(ValueError, match="threshold"):
        EntityLinker(["x"], threshold=0.0)


# ================================================================================================ reward scale
@pytest.mark.parametrize("hops", [1, 6, 12])
def test_long_tasks_stay_worth_doing(hops):
    env = make_eval_env("EDO-v0", tasks_min_hops=hops, tasks_max_hops=hops)
    ids = heldout_task_ids(env, 25)
    oracle = evaluate_heuristic(make_heuristic("oracle"), env, ids)
    static = evaluate_heuristic(make_heuristic("static_pipeline"), env, ids)
    at_once = evaluate_heuristic(SubmitAtOnce(), env, ids)
    assert oracle.mean_return >= 0.3, oracle
    assert at_once.mean_return < static.mean_return, (at_once, static)


def test_the_token_budget_binds_for_wasteful_policies():
    env = make_eval_env("EDO-v0")
    result = evaluate_heuristic(make_heuristic("random"), env, heldout_task_ids(env, 150))
    assert result.budget_hit_rate > 0.03
    assert EDOConfig().episode_token_budget == EDOConfig().token_budget_per_subtask * EDOConfig().max_subtasks


def test_retrieval_matters_to_the_oracle():
    ids = list(range(40))
    normal = evaluate_heuristic(make_heuristic("oracle"), make_eval_env("EDO-v0"), ids)
    shuffled = evaluate_heuristic(make_heuristic("oracle"), make_eval_env("EDO-v0", retrieval_ablation="shuffled"), ids)
    assert normal.success_rate - shuffled.success_rate >= 0.3, (normal.success_rate, shuffled.success_rate)


# ================================================================================================ determinism
_DIGEST = """
import hashlib, numpy as np, gymnasium as gym, edo_gym
env = gym.make("EDO-v0")
rng = np.random.default_rng(0)
h = hashlib.sha256()
obs, info = env.reset(seed=0)
episode = 0
for t in range(1500):
    obs, r, te, tr, info = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    h.update(np.float64(r).tobytes()); h.update(str(info["task_id"]).encode())
    for k in sorted(obs): h.update(obs[k].tobytes())
    if te or tr:
        episode += 1
        obs, info = env.reset(seed=episode)
print("DIGEST", h.hexdigest(), episode)
"""


def test_two_fresh_processes_building_their_own_indexes_give_identical_trajectories(run_python):
    digests = []
    for _ in range(2):
        proc = run_python(_DIGEST, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        digests.append(next(line for line in proc.stdout.splitlines() if line.startswith("DIGEST")))
    assert digests[0] == digests[1]
