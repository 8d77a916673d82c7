"""The static (model2vec) retrieval encoder and the exact piece-wise token count.

- ``retrieval.encoder="static"`` distils a model2vec model from the default all-MiniLM-L6-v2 once (real
  distillation, about a minute on two cores; kept in the test session's embedding cache), then every query is
  embedded by it and searched in chromadb: the fast single-query path gives ``StaticModel.encode`` bit for bit,
  retrieval still finds the facts' documents, token counts (costs) equal the default mode's, the env runs
  deterministically under it, and search results kept in the run-time disk cache (searched ahead as ``edo prepare``
  does, or stored by another process) leave trajectories unchanged;
- a bad encoder name is a clear error;
- counting a text's tokens as the sum of its space-separated pieces gives the tokenizer's count of the whole text,
  on texts the env produces and on adversarial strings (control characters, accents, CJK, special tokens).
"""

from __future__ import annotations

import json
import random
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401  (registers the ids)
from edo_gym.config import RetrievalConfig
from edo_gym.retrieval.embedder import space_decomposable
from edo_gym.retrieval.service import RetrievalService
from edo_gym.retrieval.static import StaticEmbedder


@pytest.fixture(scope="module")
def static_env() -> Any:
    env = gym.make("EDO-v0", retrieval={"encoder": "static"})
    yield env.unwrapped
    env.close()


def _steps(env: Any, n: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = []
    for _ in range(n):
        legal = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(legal[rng.integers(len(legal))]))
        out.append((reward, terminated, truncated, obs["task"].tobytes(), repr(info.get("cost"))))
        if terminated or truncated:
            obs, info = env.reset()
    return out


def test_a_bad_encoder_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="encoder.*'transformer', 'static'"):
        RetrievalConfig(encoder="onnx")


def test_without_model2vec_the_static_encoder_says_what_to_install(monkeypatch, tmp_path) -> None:
    import sys

    from edo_gym.retrieval.static import StaticModelUnavailableError

    monkeypatch.setitem(sys.modules, "model2vec", None)  # as if not installed
    with pytest.raises(StaticModelUnavailableError, match=r"edo-gym\[static\]"):
        StaticEmbedder("default", tmp_path)


def test_static_mode_builds_every_list_at_start(static_env, tmp_path) -> None:
    _copy_static_model(static_env, tmp_path)  # an empty embedding cache but for the distilled model
    env = gym.make("EDO-v0", retrieval={"encoder": "static", "cache_dir": str(tmp_path)})
    try:
        env.reset(seed=0)
        service = env.unwrapped.service
        assert not service.lazy and service._lazy and all(lazy.complete for lazy in service._lazy.values())
        assert service.encoders[0].lazy_canonical.complete  # so presearch can run at the first search
    finally:
        env.close()


def test_static_single_query_path_is_model2vec_encode_bit_for_bit(static_env) -> None:
    embedder = static_env.service.embedders[0]
    assert isinstance(embedder, StaticEmbedder) and embedder.model_id.startswith("static-m2v-pca256:")
    texts = static_env.world.canonical_queries()[:50] + [
        "",
        "   ",
        "Who is the mentor of (missing)?",
        "Zo\u00eb [MASK] \u4e2d",
    ]
    reference = embedder.static.encode(texts, use_multiprocessing=False)
    for text, ref in zip(texts, reference, strict=True):
        got = embedder.encode_one(text)
        assert got.dtype == np.float32 and np.array_equal(got, ref.astype(np.float32)), text
    assert np.array_equal(embedder.encode(texts), reference.astype(np.float32))


def test_static_retrieval_still_finds_the_facts_documents(static_env) -> None:
    from edo_gym.world.generator import RELATIONS

    world = static_env.world
    gold = {(d.subject, d.relation): i for i, d in enumerate(world.documents) if not d.is_distractor}
    hits = n = 0
    for retriever in {id(r): r for r in static_env.service.retrievers}.values():
        facts = [f for f in world.facts if RELATIONS[f[1]].domain in retriever.domains][:60]
        for subject, rel in facts:
            ids = retriever.search(RELATIONS[rel].question.format(x=subject), 3)
            hits += gold[(subject, rel)] in ids
            n += 1
    assert n > 100 and hits / n > 0.5, f"static recall@3 {hits / n:.2f} over {n} canonical queries"


def test_static_mode_counts_tokens_as_the_default_mode_and_is_deterministic(static_env, small_world_kwargs) -> None:
    default = gym.make("EDO-v0").unwrapped
    texts = [d.text for d in default.world.documents[:200]] + [t.text for t in default.pool.tasks[:100]]
    assert static_env.service.embedders[0].count_tokens(texts) == default.service.embedders[0].count_tokens(texts)
    assert np.array_equal(static_env.service.doc_tokens, default.service.doc_tokens)
    first = _steps(gym.make("EDO-v0", retrieval={"encoder": "static"}), 300, seed=5)
    again = _steps(gym.make("EDO-v0", retrieval={"encoder": "static"}), 300, seed=5)
    assert first == again
    # the task embedding in the observation comes from the static model: not the default mode's
    assert first[0][3] != _steps(gym.make("EDO-v0"), 1, seed=5)[0][3]


def _copy_static_model(static_env: Any, cache_dir: Any) -> None:
    """Put the session's distilled model into ``cache_dir`` (copied, not distilled again)."""
    import shutil

    model_dir = static_env.service.embedders[0].directory
    shutil.copytree(model_dir, cache_dir / model_dir.relative_to(static_env.service.cache.directory))


def test_static_mode_keeps_search_results_on_disk_with_the_same_trajectories(static_env, tmp_path, small_world_kwargs):
    """The run-time cache keeps search results (and token counts) for the static encoder too, in a database of its
    own, not its query vectors: trajectories are equal with it off, searched and stored, and read back by another
    service, which then queries no index; ``search_reachable_queries`` stores what one-at-a-time searches find."""
    from tests.exactness import assert_same, trajectory
    from tests.retrieval.test_search_cache import assert_stored_as_searched

    for name in ("off", "on"):
        _copy_static_model(static_env, tmp_path / name)

    def make(name: str, **retrieval: Any) -> Any:
        return gym.make(
            "EDO-v0", **small_world_kwargs, retrieval={"encoder": "static", "cache_dir": str(tmp_path / name), **retrieval}
        )

    off, writer = make("off", runtime_cache=False), make("on")
    reader = make("on", result_cache_size=49_999)  # another service on the same directory: its memos start empty
    envs = (off, writer, reader)
    try:
        assert off.unwrapped.service.runtime is None
        service = writer.unwrapped.service
        assert service.runtime is not None and service.vector_runtime is None and service.encoders[0].runtime is None
        assert "static-m2v" in service.runtime.model_id and service.runtime.dim == 256
        runs = {"off": trajectory(off, 600, 3), "writer": trajectory(writer, 600, 3)}
        service.flush()
        runs["reader"] = trajectory(reader, 600, 3)
        assert_same(runs["off"], runs["writer"], "static, search cache on (searched and stored)")
        assert_same(runs["off"], runs["reader"], "static, search cache on (read from disk)")

        def retrievers(env: Any) -> list[Any]:
            return list({id(r): r for r in env.unwrapped.service.retrievers}.values())

        written = sum(r.searches for r in retrievers(writer))
        assert written > 0 and sum(r.searches for r in retrievers(off)) == written
        assert sum(r.searches for r in retrievers(reader)) == 0  # every search was stored by the writer
        assert sum(r.disk_hits for r in retrievers(reader)) == written
        sizes = service.runtime.sizes()
        assert sizes["vectors"] == 0 and sizes["searches"] > 0  # no static vectors stored

        # what ``edo prepare --retrieval-encoder static`` does: no vectors embedded ahead, the searches stored
        base = writer.unwrapped
        assert service.embed_reachable_queries(progress=False) == 0
        top_k = [w.spec.top_k for w in base.workers]
        assert service.search_reachable_queries(top_k, progress=False) > 0
        assert service.search_reachable_queries(top_k, progress=False) == 0
        texts = service.reachable_query_texts()
        assert assert_stored_as_searched(base, service.runtime, texts[:: max(1, len(texts) // 10)]) > 20
    finally:
        for env in envs:
            env.close()


def test_edo_prepare_with_the_static_encoder_searches_ahead_once(static_env, capsys) -> None:
    from edo_gym.cli import main

    assert main(["prepare", "--retrieval-encoder", "static"]) == 0  # the default world on the suite's cache
    assert main(["prepare", "--retrieval-encoder", "static"]) == 0
    out = capsys.readouterr().out
    assert "reachable queries: not embedded ahead (the static encoder embeds a query in microseconds)" in out
    assert "\n  0 (query, shard) searches of them run ahead of use" in out  # the second run found them all stored
    assert static_env.service.runtime.sizes()["searches"] >= 28_000  # the default world's 7,081 x 4 shards


def test_a_distilled_model_is_reused_not_rebuilt(static_env, monkeypatch) -> None:
    import edo_gym.retrieval.static as static

    monkeypatch.setattr(static, "distill_static_model", lambda *a, **k: pytest.fail("distilled again"))
    again = StaticEmbedder("default", static_env.service.cache.directory)
    assert again.directory == static_env.service.embedders[0].directory
    assert np.array_equal(
        again.encode_one("Who is the mentor of Mara Quell?"),
        static_env.service.embedders[0].encode_one("Who is the mentor of Mara Quell?"),
    )


def test_piece_wise_token_counts_equal_whole_text_counts() -> None:
    env = gym.make("EDO-v0").unwrapped
    service = env.service
    assert service.piece_tokens is not None  # the default model's WordPiece pipeline qualifies
    assert space_decomposable(service.embedders[0].token_counter())
    seen: list[str] = []
    original = RetrievalService.count_tokens

    def spy(self: RetrievalService, text: str) -> int:
        seen.append(text)
        return original(self, text)

    try:
        RetrievalService.count_tokens = spy  # type: ignore[method-assign]
        _steps(env, 1500, seed=3)
    finally:
        RetrievalService.count_tokens = original  # type: ignore[method-assign]
    rng = random.Random(0)
    alphabet = "ab Z\u00e9\u0301 \t\n\x1c\x00\ufffd\u4e2d,.'[MASK][SEP]##  xyz\u200b\u00a0"
    weird = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(1500)]
    texts = list(dict.fromkeys(seen)) + weird
    assert len(texts) > 1700
    service.token_memo.clear()
    service.piece_tokens.clear()
    got = [service._count_by_pieces(t) for t in texts]
    assert got == service.embedders[0].count_tokens(texts)


def test_cli_trains_and_evaluates_with_the_static_encoder(tmp_path, capsys, static_env) -> None:
    from baselines.cli import build_parser, main

    assert build_parser().parse_args(["train"]).retrieval_encoder == "transformer"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--retrieval-encoder", "onnx"])
    assert "invalid choice" in capsys.readouterr().err
    out = tmp_path / "runs"
    argv = ["--timesteps", "64", "--n-envs", "2", "--net-arch", "16", "--group-size", "2", "--groups-per-rollout", "2",
            "--batch-size", "all", "--output-dir", str(out), "--eval-episodes", "2", "--no-progress"]  # fmt: skip
    assert main(["train", *argv, "--retrieval-encoder", "static"]) == 0
    text = capsys.readouterr().out
    assert "| grpo |" in text
    path = out / "grpo_EDO-v0_0.zip"
    assert json.loads(path.with_suffix(".json").read_text())["config"]["env_kwargs"] == {"retrieval": {"encoder": "static"}}
    assert main(["evaluate", str(path), "--episodes", "2", "--no-heuristics", "--retrieval-encoder", "static"]) == 0
    assert "| grpo |" in capsys.readouterr().out


def test_a_damaged_static_model_is_distilled_again_with_a_warning(static_env, tmp_path, monkeypatch) -> None:
    import shutil

    import edo_gym.retrieval.static as static
    from edo_gym.retrieval.cache import CacheWarning

    good = static_env.service.embedders[0].directory
    target = static.static_model_dir(tmp_path, static_env.service.embedders[0].model_id.split(":", 1)[1])
    shutil.copytree(good, target)
    (target / "model.safetensors").write_bytes(b"not a safetensors file")
    rebuilt = []

    def distil(base_path, directory):  # the real distillation is tested above; here: that a damaged file triggers it
        rebuilt.append(directory)
        shutil.rmtree(directory)
        shutil.copytree(good, directory)

    monkeypatch.setattr(static, "distill_static_model", distil)
    with pytest.warns(CacheWarning, match="could not be loaded"):
        again = StaticEmbedder("default", tmp_path)
    assert rebuilt == [target]
    assert np.array_equal(
        again.encode_one("Who is the mentor of Mara Quell?"),
        static_env.service.embedders[0].encode_one("Who is the mentor of Mara Quell?"),
    )
