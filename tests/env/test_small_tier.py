"""The ``EDO-Small-v0`` tier and the options it is made of: plans written by rules, answers linked by the entity they
mention, lookups sent without their raw inputs, a team whose context size differs."""

from __future__ import annotations

import gymnasium as gym
import pytest

from baselines.heuristics import make_heuristic
from edo_gym import SCRIPTED
from edo_gym.agents.planner import fallback_plan, rule_plan
from edo_gym.agents.protocol import LLMRequest, LLMResponse
from edo_gym.config import default_workers, small_workers
from edo_gym.retrieval.search import ShardRetriever
from edo_gym.world.extra_step import has_extra_step
from edo_gym.world.language import parse_question


def test_small_tier_settings():
    env = gym.make("EDO-Small-v0")
    try:
        cfg = env.unwrapped.config
        assert cfg.planner.mode == "rules" and cfg.entity_linking == "mentions" and cfg.lookup_inputs is False
        assert set(cfg.tasks.families) == {"multihop", "support"} and (cfg.tasks.min_hops, cfg.tasks.max_hops) == (1, 2)
        assert not cfg.enable_replan and cfg.world.distractors_per_fact == 0
        assert cfg.retrieval.identifier_match and not gym.make("EDO-v0").unwrapped.config.retrieval.identifier_match
        assert [w.top_k for w in cfg.workers] == [3, 3, 1, 1]
        # the same team otherwise: only the context size differs
        for small, default in zip(small_workers(), default_workers(), strict=True):
            assert (small.name, small.shard, small.price, small.skills) == (default.name, default.shard, default.price,
                                                                            default.skills)  # fmt: skip
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["EDO-v0", "EDO-Hard-v0"])
def test_rule_plans_are_faithful_for_every_family_and_cost_nothing(env_id):
    """In the scripted world (``SCRIPTED``: the canonical phrasings, no extra step) with ``planner_mode="rules"`` every
    task's plan is read off its text: faithful (executed on the true facts it gives the gold answer), labelled right,
    and no planner call is made or charged."""
    env = gym.make(env_id, planner_mode="rules", tasks_split="test", **SCRIPTED)
    try:
        base = env.unwrapped
        families = set()
        for task_id in range(30):
            env.reset(seed=task_id, options={"task_id": task_id})
            hidden = base.hidden_state()
            assert base.episode.plan.source == "rules", base.episode.task.text
            assert hidden["plan_faithful"] and not any(hidden["label_wrong"]), base.episode.task.text
            assert len(base.episode.plan.steps) == len(base.episode.task.subtasks)
            families.add(base.episode.task.family)
        assert families == {"support", "multihop", "analytics"}
        assert base.backend.calls == 0  # the simulated planner was never asked
        env.step(base.A_SUBMIT)
        assert base.episode.tokens == 0  # nothing charged for the plan
    finally:
        env.close()


def test_by_default_rules_read_every_training_text_and_no_held_out_one():
    """With the default phrasings and extra steps, the rules read every text of the training split to a plan labelled
    right, faithful but where the task needs the step no plan written from its text holds; every held-out phrasing of
    the test split falls back. Either way no planner call is made."""
    for split in ("train", "test"):
        env = gym.make("EDO-v0", planner_mode="rules", tasks_split=split)
        try:
            base = env.unwrapped
            extra = 0
            for task_id in range(40):
                env.reset(seed=task_id, options={"task_id": task_id})
                hidden, task = base.hidden_state(), base.episode.task
                if split == "test":
                    assert base.episode.plan.source == "fallback", task.text
                    continue
                extra += has_extra_step(task)
                assert base.episode.plan.source == "rules" and not any(hidden["label_wrong"]), task.text
                assert hidden["plan_faithful"] == (not has_extra_step(task)), task.text
            assert base.backend.calls == 0
            assert split == "test" or extra > 0
        finally:
            env.close()


def test_rule_plan_knows_only_the_task_forms():
    assert rule_plan("Tell me a joke.") is None
    assert rule_plan("What is love?") is None  # a question, but no relation chain it can read
    assert fallback_plan("Tell me a joke.").source == "fallback"


class SentenceBackend:
    """The simulated models, with each worker answer written as a sentence that names the question's subject too."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.requests: list[LLMRequest] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        reply = self.inner.complete(request)
        if request.role != "worker":
            return reply
        self.requests.append(request)
        parsed = parse_question(request.instruction)
        subject = parsed[1] if parsed else "it"
        return LLMResponse(f"As for {subject}, the answer is {reply.text}.", confidence=reply.confidence)


def _second_hop_request(linking: str, lookup_inputs: bool) -> tuple[LLMRequest, str]:
    env = gym.make("EDO-Small-v0", tasks_split="test", entity_linking=linking, lookup_inputs=lookup_inputs)
    try:
        base = env.unwrapped
        env.reset(seed=0)
        base.caller.backend = backend = SentenceBackend(base.backend)
        task_id = next(i for i in range(base.num_tasks) if base.pool.tasks[base.pool.ids[i]].family == "multihop"
                       and base.pool.tasks[base.pool.ids[i]].hops == 2)  # fmt: skip
        obs, info = env.reset(seed=0, options={"task_id": task_id})
        oracle = make_heuristic("oracle")
        oracle.reset(obs, info)
        done = False
        while not done and len({r.instruction for r in backend.requests}) < 2:
            obs, _, terminated, truncated, info = env.step(oracle.act_hidden(obs, info, base.hidden_state()))
            done = terminated or truncated
        first_answer = base.episode.task.subtasks[0].answer
        return backend.requests[-1], first_answer
    finally:
        env.close()


def test_mentions_linking_fills_the_next_question_with_the_named_entity():
    request, first_answer = _second_hop_request("mentions", lookup_inputs=False)
    parsed = parse_question(request.instruction)
    assert parsed is not None and parsed[1] == first_answer, request.instruction
    assert request.inputs == ()  # the question holds the answer: the raw sentence is not sent as well


def test_whole_linking_leaves_a_sentence_as_written():
    request, first_answer = _second_hop_request("whole", lookup_inputs=True)
    parsed = parse_question(request.instruction)
    assert parsed is None or parsed[1] != first_answer
    assert "the answer is" in request.instruction and len(request.inputs) == 1


def _simulator(team):
    env = gym.make("EDO-Small-v0", workers=team)
    base = env.unwrapped
    from edo_gym.agents.simulator import SimulatedBackend

    return env, SimulatedBackend(base.world, team, base.config.planner, base.pool.tasks)


def _lookup_request(env, seed: int) -> LLMRequest:
    base = env.unwrapped
    person = base.world.entities["person"][0]
    return LLMRequest("worker", "wiki_agent", "system", "task", f"Who is the mentor of {person}?", seed=seed)


def test_greedy_workers_answer_a_request_the_same_way_whatever_its_seed():
    import dataclasses

    noisy = tuple(dataclasses.replace(w, memory_coverage=0.0, abstain_rate=0.5) for w in small_workers())
    env, sim = _simulator(noisy)
    try:
        assert len({sim.complete(_lookup_request(env, seed)).text for seed in range(40)}) > 1  # fresh draws
        greedy = tuple(dataclasses.replace(w, greedy=True) for w in noisy)
        env2, sim2 = _simulator(greedy)
        assert len({sim2.complete(_lookup_request(env, seed)).text for seed in range(40)}) == 1
        env2.close()
    finally:
        env.close()


@pytest.mark.parametrize(("rate", "right"), [(0.0, False), (1.0, True)])
def test_bare_window_rate_decides_whether_a_bare_number_is_read_as_days(rate, right):
    import dataclasses

    from edo_gym.world.language import reply_instruction

    team = tuple(
        dataclasses.replace(w, skills={**w.skills, "write": 1.0}, bare_window_rate=rate, format_drift=0.0)
        for w in small_workers()
    )
    env, sim = _simulator(team)
    try:
        request = LLMRequest("worker", "support_agent", "system", "task", reply_instruction("10"), inputs=("10",))
        replies = {sim.complete(dataclasses.replace(request, seed=seed)).text for seed in range(10)}
        assert (replies == {"You can request a refund within 10 days."}) is right, replies
    finally:
        env.close()


def test_load_workers_reads_a_team_and_says_what_is_wrong(tmp_path):
    import dataclasses
    import json

    from edo_gym.config import load_workers

    path = tmp_path / "team.json"
    path.write_text(json.dumps({"workers": [dict(dataclasses.asdict(w), shard=list(w.shard)) for w in small_workers()]}))
    assert load_workers(path) == small_workers()
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        load_workers(path)
    path.write_text(json.dumps({"team": []}))
    with pytest.raises(ValueError, match='"workers" list'):
        load_workers(path)
    path.write_text(json.dumps({"workers": [{"name": "w", "size": "huge", "shard": ["orders"], "skills": {}}]}))
    with pytest.raises(ValueError, match="size"):
        load_workers(path)
    with pytest.raises(FileNotFoundError):
        load_workers(tmp_path / "missing.json")


def test_token_fields_shape_the_charged_tokens_and_their_defaults_change_nothing():
    """``verbosity`` and ``prompt_token_scale``: the same step costs what the fields say; at their defaults, what the
    size's verbosity and the estimate say (the trajectory digests test the defaults end to end)."""
    import dataclasses

    import gymnasium as gym

    from edo_gym.agents.worker import VERBOSITY

    def tokens_of_one_dispatch(team):
        env = gym.make("EDO-Small-v0", workers=team)
        try:
            env.reset(seed=3)
            _, _, _, _, info = env.step(7)  # the generalist, with retrieval
            return info["cost"]["tokens"], env.unwrapped
        finally:
            env.close()

    team = small_workers()
    base_tokens, base = tokens_of_one_dispatch(team)
    same, _ = tokens_of_one_dispatch(tuple(dataclasses.replace(w, verbosity=VERBOSITY[w.size]) for w in team))
    assert same == base_tokens
    terse, _ = tokens_of_one_dispatch(tuple(dataclasses.replace(w, verbosity=VERBOSITY[w.size] + 25) for w in team))
    assert terse == base_tokens + 25
    doubled, _ = tokens_of_one_dispatch(tuple(dataclasses.replace(w, prompt_token_scale=2.0) for w in team))
    assert base_tokens < doubled < 2 * base_tokens + 1
    with pytest.raises(ValueError, match="verbosity"):
        dataclasses.replace(team[0], verbosity=-1)
    with pytest.raises(ValueError, match="prompt_token_scale"):
        dataclasses.replace(team[0], prompt_token_scale=0.0)


def _carrier_questions(base) -> list[tuple[str, int]]:
    """``(question, corpus index of the document stating its answer)`` for every shipment's carrier."""
    docs = base.world.documents
    return [
        (f"Which carrier handles shipment {d.subject}?", k)
        for k, d in enumerate(docs)
        if d.relation == "carrier" and not d.is_distractor
    ]


def test_identifier_match_finds_a_shipment_by_its_tracking_number():
    """The embedding search alone rarely ranks the document of the shipment a question names first (codes look alike to
    a sentence encoder); with ``identifier_match`` a worker whose shard holds it always gets it first, and a query that
    names no identifier gets what the embedding search gives."""
    hits = {}
    for match in (False, True):
        env = gym.make("EDO-Small-v0", retrieval_identifier_match=match)
        try:
            base = env.unwrapped
            env.reset(seed=0)
            generalist = next(w for w in base.workers if w.spec.name == "generalist")  # shipping in its shard, top_k 1
            questions = _carrier_questions(base)
            hits[match] = sum(generalist.retriever.search(q, 1) == (k,) for q, k in questions) / len(questions)
            plain = "Who is the mentor of " + base.world.entities["person"][0] + "?"
            assert generalist.retriever.search(plain, 3) == ShardRetriever.search(generalist.retriever, plain, 3)
            if match:  # a shard without the document, and a code no document holds, are left to the embedding search
                wiki = next(w for w in base.workers if w.spec.name == "wiki_agent")
                assert wiki.retriever.search(questions[0][0], 3) == ShardRetriever.search(wiki.retriever, questions[0][0], 3)
                unknown = "Which carrier handles shipment TRK-NOSUCH-000?"
                assert generalist.retriever.search(unknown, 2) == ShardRetriever.search(generalist.retriever, unknown, 2)
        finally:
            env.close()
    assert hits[True] == 1.0 and hits[False] < 0.75, hits  # 0.52 with embeddings alone


def test_identifier_index_reads_whole_codes_only():
    from edo_gym.retrieval.search import identifier_index

    index = identifier_index(
        {3: "Order ORD-AB-12 shipped as TRK-CD-345.", 1: "Shipment TRK-CD-345: carrier X.", 2: "TRK-CD-3456"}
    )
    assert index == {"ORD-AB-12": (3,), "TRK-CD-345": (1, 3), "TRK-CD-3456": (2,)}
    assert identifier_index({0: "Mara Quell, Pirafen Logistics, 45 days, A-1"}) == {}


def test_config_rejects_a_non_boolean_identifier_match():
    with pytest.raises(TypeError, match="identifier_match"):
        gym.make("EDO-Small-v0", retrieval_identifier_match="yes")


class CountingBackend:
    """The env's simulated models, counting the worker requests it is sent (without their sampling seed)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.asked: list[tuple] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        if request.role == "worker":
            self.asked.append((request.agent, request.instruction, request.inputs, request.documents))
        return self.inner.complete(request)


@pytest.mark.parametrize("greedy", [False, True])
def test_the_oracle_asks_a_greedy_worker_each_request_once(greedy):
    """A greedy worker answers the same request the same way, so the oracle never asks it again; a sampling worker may
    be asked again (its next answer can differ)."""
    import dataclasses

    team = tuple(dataclasses.replace(w, greedy=greedy, memory_coverage=0.0) for w in small_workers())
    env = gym.make("EDO-Small-v0", workers=team, tasks_split="test")
    try:
        base = env.unwrapped
        oracle = make_heuristic("oracle")
        repeats = 0
        for task_id in range(40):
            obs, info = env.reset(seed=task_id, options={"task_id": task_id})
            base.caller.backend = backend = CountingBackend(base.backend)
            oracle.reset(obs, info)
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(oracle.act_hidden(obs, info, base.hidden_state()))
                done = terminated or truncated
            repeats += len(backend.asked) - len(set(backend.asked))
        assert (repeats == 0) is greedy, repeats
    finally:
        env.close()
