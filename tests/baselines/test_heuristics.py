"""The hand-written policies on EDO-v0's held-out tasks order as designed: random < static pipeline < rule-based
<= oracle in success rate (the greedy router above the static pipeline), the oracle's return beats the static
pipeline's by a wide margin, and only the oracle reads hidden state."""

from __future__ import annotations

import pytest

from baselines.evaluation import EvalResult, evaluate_heuristic, heldout_task_ids, make_eval_env
from baselines.heuristics import HEURISTICS, make_heuristic

N_TASKS = 200


@pytest.fixture(scope="module")
def eval_env():
    env = make_eval_env("EDO-v0")
    yield env
    env.close()


@pytest.fixture(scope="module")
def results(eval_env) -> dict[str, EvalResult]:
    task_ids = heldout_task_ids(eval_env, N_TASKS)
    return {name: evaluate_heuristic(make_heuristic(name), eval_env, task_ids, seed=0) for name in HEURISTICS}


def test_eval_env_is_the_held_out_split(eval_env):
    base = eval_env.unwrapped
    assert base.config.tasks.split == "test"
    assert set(base.pool.ids.tolist()).isdisjoint(base.pool.train_ids.tolist())
    assert len(heldout_task_ids(eval_env, N_TASKS)) == N_TASKS


def test_every_policy_ran_every_task(results):
    assert {name: r.episodes for name, r in results.items()} == dict.fromkeys(HEURISTICS, N_TASKS)


def test_success_rates_are_ordered(results):
    rate = {name: r.success_rate for name, r in results.items()}
    assert rate["random"] < rate["static_pipeline"] < rate["rule_based"] <= rate["oracle"], rate
    assert rate["static_pipeline"] < rate["greedy_router"] <= rate["oracle"], rate


def test_only_the_oracle_reads_hidden_state(results):
    assert {name for name, r in results.items() if r.uses_hidden_state} == {"oracle"}


def test_observation_only_policies_never_receive_the_env(eval_env):
    """They are called with (obs, info) only: a policy object that would try to reach the env has nothing to reach."""
    import inspect

    from baselines.probes import PROBES

    for name, cls in {**HEURISTICS, **PROBES}.items():
        if cls.uses_hidden_state:
            continue
        params = list(inspect.signature(cls.act).parameters)
        assert params == ["self", "obs", "info"], (name, params)


def test_the_greedy_router_pays_for_its_decisions(eval_env, results):
    router = make_heuristic("greedy_router")
    assert router.decision_cost[0] > 0 and router.decision_cost[1] == 1
    # charged through the env's public ledger: it uses more calls per episode than it dispatches
    assert results["greedy_router"].calls > results["rule_based"].calls


def test_oracle_return_beats_static_pipeline_by_a_wide_margin(results):
    margin = results["oracle"].mean_return - results["static_pipeline"].mean_return
    assert margin >= 0.3, {name: r.mean_return for name, r in results.items()}


def test_evaluation_is_reproducible(eval_env, results):
    task_ids = heldout_task_ids(eval_env, N_TASKS)
    again = evaluate_heuristic(make_heuristic("greedy_router"), eval_env, task_ids, seed=0)
    assert again == results["greedy_router"]
