"""Which envs share a retrieval service: those with the same world, shards and the whole ``RetrievalConfig``.

- the registry key of ``RetrievalService.get`` changes with every field of ``RetrievalConfig`` (each field given a
  valid alternative value here; a field added to the config without one fails the test, so none can be left out);
- equal configs share one service;
- ``get`` builds another service for a setting the shared one was not built with (the fields a hand-written key once
  left out), and that service follows it: with the ``shuffled`` ablation, no presearch and no search results on disk.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import pytest

from edo_gym.config import RetrievalConfig, WorldConfig, default_workers
from edo_gym.envs.edo_env import shared_world
from edo_gym.retrieval import RetrievalService

#: A valid value other than the default for each field of ``RetrievalConfig``.
ALTERNATIVES: dict[str, Any] = {
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "mode": "per_worker",
    "cache_dir": "another-cache",
    "chroma_dir": "another-chroma",
    "query_cache_size": 19_999,
    "result_cache_size": 49_999,
    "task_embedding_dim": 16,
    "latency_s": 0.1,
    "ablation": "shuffled",
    "presearch": False,
    "index_at_reset": False,
    "lazy_embeddings": False,
    "runtime_cache": False,
    "search_cache": False,
    "encoder": "static",
    "identifier_match": True,
}
SHARDS = [w.shard for w in default_workers()]


@pytest.fixture
def world(small_world_kwargs):
    return shared_world(WorldConfig(**small_world_kwargs["world"]))


@pytest.mark.parametrize("name", [f.name for f in fields(RetrievalConfig)])
def test_configs_differing_in_one_field_have_different_registry_keys(name, world):
    assert name in ALTERNATIVES, f"give RetrievalConfig.{name} an alternative value in ALTERNATIVES"
    base = RetrievalConfig()
    other = replace(base, **{name: ALTERNATIVES[name]})
    assert getattr(other, name) != getattr(base, name)
    key = RetrievalService.registry_key
    assert key(world, other, SHARDS) != key(world, base, SHARDS)
    assert key(world, replace(other), SHARDS) == key(world, other, SHARDS)  # equal configs: one key


@pytest.mark.parametrize("name", ["ablation", "latency_s", "task_embedding_dim", "index_at_reset"])
def test_get_builds_another_service_for_another_setting(name, world, tmp_path, monkeypatch):
    monkeypatch.setattr(RetrievalService, "_registry", {})  # this test's services only
    base = RetrievalConfig(cache_dir=str(tmp_path))
    other = replace(base, **{name: ALTERNATIVES[name]})
    service = RetrievalService.get(world, base, SHARDS)
    assert RetrievalService.get(world, replace(base), SHARDS) is service
    assert RetrievalService.get(world, other, SHARDS) is not service
    assert RetrievalService.get(world, other, SHARDS).config == other


def test_the_shuffled_ablation_gets_a_service_built_for_it(world, tmp_path, monkeypatch):
    monkeypatch.setattr(RetrievalService, "_registry", {})
    base = RetrievalConfig(cache_dir=str(tmp_path))
    searched = RetrievalService.get(world, base, SHARDS)
    shuffled = RetrievalService.get(world, replace(base, ablation="shuffled"), SHARDS)
    assert all(r.presearched is not None and r.disk is not None for r in searched.retrievers)
    assert all(r.presearched is None and r.disk is None for r in shuffled.retrievers)
