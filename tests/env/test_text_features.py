"""Features an orchestrator computes from the text it reads (``text_features=True``: ``step_text``, ``plan_text``)."""

from __future__ import annotations

import numpy as np
import pytest

from edo_gym.envs.observation import names_and_words, plan_text_features


def test_names_are_identifiers_and_capitalised_words_inside_sentences():
    names, words = names_and_words("Customer message: 'Shipment TRK-DORBEL-595 is late. How long can I claim a refund?'")
    assert names == {"trk-dorbel-595"}  # "Customer", "Shipment", "How" open a sentence or a quote; "I" is one letter
    assert {"shipment", "refund", "claim"} <= words and "is" not in words
    names, _ = names_and_words("What was the revenue of the Dogwood store in May?")
    assert names == {"dogwood", "may"}
    assert names_and_words("Which carrier handles shipment {1}?")[0] == set()  # a placeholder is not a name


def test_a_plan_naming_another_entity_strays_from_the_task():
    task = "What was the combined revenue of the Birch and Cedar stores in January, in thousands?"
    right = ("What was the revenue of the Birch store in January?", "What was the revenue of the Cedar store in January?",
             "Compute the sum of these revenue figures (in thousands): {1}, {2}.")  # fmt: skip
    wrong = (right[0], "What was the revenue of the Juniper store in January?", right[2])
    step, plan = plan_text_features(task, right, 6)
    assert step[:, 0].max() == 0.0 and plan[0] == 0.0
    step, plan = plan_text_features(task, wrong, 6)
    assert step[1, 0] == pytest.approx(0.5)  # juniper of {juniper, january}
    assert plan[0] == pytest.approx(1 / 3)  # cedar is mentioned by no step (birch, cedar, january)
    assert not step[3:].any()  # rows the plan does not have


def test_off_by_default_and_in_the_space_when_on(make_env):
    assert "step_text" not in make_env("EDO-v0").observation_space.spaces
    env = make_env("EDO-v0", text_features=True)
    rng = np.random.default_rng(0)
    for episode in range(5):
        obs, _ = env.reset(seed=episode)
        base = env.unwrapped
        while True:
            assert env.observation_space.contains(obs)
            step, plan = plan_text_features(base.episode.task.text, tuple(s.instruction for s in base.episode.plan.steps), 6)
            np.testing.assert_array_equal(obs["step_text"], step)  # follows replans
            np.testing.assert_array_equal(obs["plan_text"], plan)
            obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            if terminated or truncated:
                break
