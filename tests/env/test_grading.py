"""The answer grader reads the key value: numbers with units and scale words, names with titles and punctuation, and
nothing else (``edo_gym.world.grading``)."""

from __future__ import annotations

import pytest

from edo_gym.config import WorldConfig
from edo_gym.world.generator import World
from edo_gym.world.grading import amounts, durations, grade, years


@pytest.fixture(scope="module")
def world() -> World:
    return World(WorldConfig())


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("You can request a refund within 30 days.", {30}),
        ("You have 90 days to request a refund.", {90}),
        ("a 30-day window", {30}),
        ("Refunds are accepted for thirty days.", {30}),
        ("within 2 weeks", {14}),
        ("30", {30}),
        ("Order ORD-VARBEL-37 was late; you have 14 days.", {14}),
        ("Please contact our support team about a refund.", set()),
        ("within 45 days, or 30 days for some items", {45, 30}),
    ],
)
def test_durations_in_days(text, days):
    assert durations(text) == days


@pytest.mark.parametrize(
    "text", ["978", "978 thousand", "$978k", "978K", "$978,000", "0.978 million", "Revenue was 978 thousand dollars."]
)
def test_amounts_with_scale_words_read_in_thousands(text):
    assert amounts(text) == {978.0}


def test_amounts_and_years_ignore_identifiers():
    assert amounts("TRK-VARBEL-123") == set()
    assert years("founded in 1923.") == {1923.0} and years("TRK-ABC-1923") == set()


def test_entities_pass_with_titles_and_phrasing_and_fail_as_near_misses(world):
    person = world.entities["person"][0]
    first, last = person.split(" ", 1)
    question = f"Who is the mentor of {world.entities['person'][1]}?"
    for said in (person, f"Dr. {person}", f"The mentor is {person}.", f"{last}, {first}", f"**{person}**", f"Mayor {person}"):
        assert grade(world, "person", said, person, question), said
    twin = person[:-1] + ("a" if person[-1] != "a" else "e")
    assert not grade(world, "person", twin, person, question)
    assert not grade(world, "person", f"{person} or {world.entities['person'][2]}", person, question)
    assert not grade(world, "person", "I don't know.", person, question)


def test_the_subject_of_the_question_is_not_taken_for_the_answer(world):
    subject, answer = world.entities["person"][:2]
    question = f"Who is the mentor of {subject}?"
    assert grade(world, "person", f"The mentor of {subject} is {answer}.", answer, question)
    assert not grade(world, "person", f"The mentor of {subject} is unknown.", answer, question)


def test_numbers_must_match_exactly_once(world):
    assert grade(world, "amount", "The combined revenue is 1,234 thousand.", "1234")
    assert not grade(world, "amount", "500 + 734 = 1234", "1234")  # three values stated: which one is the answer?
    assert not grade(world, "amount", "1235", "1234")
    assert grade(world, "year", "It was founded in 1923.", "1923") and not grade(world, "year", "1924", "1923")
    assert grade(world, "duration", "within 45 days", "45 days") and not grade(world, "duration", "within 44 days", "45 days")


def test_unknown_value_kind_is_a_clear_error(world):
    with pytest.raises(ValueError, match="unknown value kind 'colour'; allowed"):
        grade(world, "colour", "red", "red")


def test_env_metadata_carries_the_package_version():
    import gymnasium as gym

    import edo_gym

    assert gym.make("EDO-v0").unwrapped.metadata["edo_gym_version"] == edo_gym.__version__


def test_a_final_answer_may_name_the_entity_the_last_hop_asks_about():
    """``grade_final`` does not take the last step's input (the bridge entity of a multi-hop task) for the answer, as a
    step's grade does not take its question's subject: the bridge with the gold answer is right, either alone or with
    another candidate is not."""
    import gymnasium as gym

    import edo_gym  # noqa: F401
    from edo_gym.world.grading import grade_final

    env = gym.make("EDO-v0", tasks_split="test")
    try:
        base = env.unwrapped
        task = next(t for t in base.pool.tasks if t.family == "multihop" and t.hops == 2)
        bridge, gold = task.subtasks[0].answer, task.answer
        kind = base.world.kind_of[gold]  # another candidate of the kind asked for, so that it is read as one
        other = next(e for e in base.world.entities[kind] if e not in (bridge, gold) and e not in task.text)
        assert grade_final(base.world, task, gold)
        assert grade_final(base.world, task, f"The answer for {bridge} is {gold}.")
        assert not grade_final(base.world, task, bridge)
        assert not grade_final(base.world, task, f"The answer for {bridge} is {other}.")
        assert not grade_final(base.world, task, f"{gold} or {other}")
    finally:
        env.close()
