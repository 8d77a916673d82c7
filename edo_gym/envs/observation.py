"""The fixed-size numeric observation of EDO-v0 (a ``Dict`` of ``Box`` spaces, usable by SB3's MultiInputPolicy).

It holds only what a real orchestrator knows: features of the task text, the plan *as the planner wrote it*, what
each worker returned and how it said it, the verdicts of verifications the policy paid for, public facts about
the workers (size, price, shard, context size), its own history and budget. Never: true step types, gold answers,
correctness, the true hop count, plan faithfulness or worker skills (see ``EDOEnv.hidden_state``).

Keys and shapes (``S`` = max subtasks, ``W`` = workers, ``A`` = actions, ``H`` = history length, ``E`` = task
embedding dims):

- ``task`` ``(E + 3,)``: task-text embedding projected to ``E`` dims in [-1, 1], family one-hot (the family is
  plain from the task text);
- ``plan`` ``(13,)``: plan length / S, planner confidence, confidence given, current step / S, all steps done,
  replans used / max, fallback plan, repaired plan, last result's confidence, its confidence given, last result's
  latest verdict ok / flagged / unsure;
- ``subtasks`` ``(S, 25)``: labelled type one-hot (3), labelled domain one-hot (7), present, done, current,
  inputs done, reads a later step, confidence, confidence given, verdict ok, flagged, unsure, verifications / 4,
  retrieved, attempts / 4, abstained, answer names a known entity or number;
- ``workers`` ``(W, 18)``: size one-hot (3), price / 4, shard domains (7), shard documents / corpus, top-k / 10,
  then this episode: calls, abstentions, results flagged by a verifier, results confirmed by a verifier,
  verifications performed (each / step limit);
- ``budget`` ``(5,)``: tokens / token budget, calls / step limit, latency / latency budget, steps / step limit,
  illegal actions / step limit (each clipped to 1);
- ``history`` ``(H, A)``: one-hot of the last ``H`` actions (omitted when ``H = 0``);
- with ``EDOConfig.text_features`` (off by default), what an orchestrator computes from the text it reads (the task
  and the plan as written; :func:`plan_text_features`): ``step_text`` ``(S, 2)``, per plan step the share of the
  names and identifiers its instruction mentions that the task text does not, and the share of its longer words
  that the task text does not contain; ``plan_text`` ``(2,)``, the share of the task's names and identifiers that no
  step mentions, and the same for its longer words;
- with ``EDOConfig.plan_check`` (off by default; privileged, for diagnostics: where task texts come from known templates
  it is a free plan oracle), the comparison of the plan with a rule-based planner's (:func:`plan_check_features`): ``step_check`` ``(S,)``, 1 for a written step that is not the step a rule-based
  planner writes from the task text at that position; ``plan_check`` ``(2,)``: the written plan differs from that
  plan, and the task text is of no form the rule-based planner reads (then ``step_check`` is all 0);
- the pointer-free view (``EDOConfig.focus_view``, on by default since 0.4.0), the same facts at fixed positions so
  that a network need not find the marked row: ``current`` ``(25,)``, the row of the step a dispatch would run (zeros
  when all are done); ``last`` ``(25,)``, the row of the last finished step (the one ``verify`` and ``rollback`` act
  on; zeros when none); ``tried`` ``(W, 7)``: per worker, its dispatches of the current step without and with
  retrieval (each / 4), whether one of them abstained, whether it wrote the last finished step's result, and its
  verdict on that result (ok / flagged / unsure), all since the plan was made;
- with ``EDOConfig.enable_plan_review``, ``plan_review`` ``(4,)``: the latest ``verify_plan`` verdict on the current
  plan (ok / flagged / unsure, one-hot; zeros before any) and the number of critiques of it / workers; a paid,
  fallible critique, not a check of the plan for free;
- ``action_mask`` ``(A,)``: 1 for legal actions.

Text (task, plan, outputs) never enters the observation; it is available through ``render()``.

:data:`FOCUS_KEYS` names the keys of the pointer-free view; :func:`observation_layout` tells from a saved space which
layout it is.
"""

from __future__ import annotations

import re

import numpy as np
from gymnasium import spaces

from edo_gym.config import DOMAINS, FAMILIES, MODEL_SIZES, SUBTASK_TYPES, EDOConfig

N_TYPES, N_DOMAINS = len(SUBTASK_TYPES), len(DOMAINS)
# subtask table columns
C_TYPE = 0
C_DOMAIN = N_TYPES
_C = C_DOMAIN + N_DOMAINS
(
    C_PRESENT, C_DONE, C_CURRENT, C_DEPS, C_LATER, C_CONF, C_CONF_GIVEN, C_OK, C_FLAG, C_UNSURE, C_NVERIFY, C_RETR,
    C_ATTEMPTS, C_ABSTAIN, C_LINKED,
) = range(_C, _C + 15)  # fmt: skip
SUBTASK_FEATURES = _C + 15
# plan vector
(
    P_LEN, P_CONF, P_CONF_GIVEN, P_CURRENT, P_ALL_DONE, P_REPLANS, P_FALLBACK, P_REPAIRED, P_LAST_CONF, P_LAST_CONF_GIVEN,
    P_LAST_OK, P_LAST_FLAG, P_LAST_UNSURE,
) = range(13)  # fmt: skip
PLAN_FEATURES = 13
# worker table columns
W_SIZE = 0
W_PRICE = len(MODEL_SIZES)
W_SHARD = W_PRICE + 1
W_DOCS = W_SHARD + N_DOMAINS
W_TOPK = W_DOCS + 1
W_CALLS, W_ABSTAINED, W_FLAGGED, W_CONFIRMED, W_VERIFIED = range(W_TOPK + 1, W_TOPK + 6)
WORKER_FEATURES = W_TOPK + 6
BUDGET_FEATURES = 5
# ``tried`` columns (the pointer-free view)
T_NO_RETRIEVAL, T_RETRIEVAL, T_ABSTAINED, T_PRODUCED, T_OK, T_FLAG, T_UNSURE = range(7)
TRIED_FEATURES = 7
#: ``plan_review``: the latest critique of the current plan (ok / flagged / unsure) and the critiques made / workers.
PLAN_REVIEW_FEATURES = 4
TYPE_INDEX = {t: i for i, t in enumerate(SUBTASK_TYPES)}
DOMAIN_INDEX = {d: i for i, d in enumerate(DOMAINS)}
FAMILY_INDEX = {f: i for i, f in enumerate(FAMILIES)}


def observation_space(config: EDOConfig, n_actions: int) -> spaces.Dict:
    S, W = config.max_subtasks, len(config.workers)
    E = config.retrieval.task_embedding_dim
    d = {
        "task": spaces.Box(-1.0, 1.0, (E + len(FAMILIES),), np.float32),
        "plan": spaces.Box(0.0, 1.0, (PLAN_FEATURES,), np.float32),
        "subtasks": spaces.Box(0.0, 1.0, (S, SUBTASK_FEATURES), np.float32),
        "workers": spaces.Box(0.0, 1.0, (W, WORKER_FEATURES), np.float32),
        "budget": spaces.Box(0.0, 1.0, (BUDGET_FEATURES,), np.float32),
    }
    if config.history_len > 0:
        d["history"] = spaces.Box(0.0, 1.0, (config.history_len, n_actions), np.float32)
    if config.text_features:
        d["step_text"] = spaces.Box(0.0, 1.0, (S, 2), np.float32)
        d["plan_text"] = spaces.Box(0.0, 1.0, (2,), np.float32)
    if config.plan_check:
        d["step_check"] = spaces.Box(0.0, 1.0, (S,), np.float32)
        d["plan_check"] = spaces.Box(0.0, 1.0, (2,), np.float32)
    if config.enable_plan_review:
        d["plan_review"] = spaces.Box(0.0, 1.0, (PLAN_REVIEW_FEATURES,), np.float32)
    if config.focus_view:
        d["current"] = spaces.Box(0.0, 1.0, (SUBTASK_FEATURES,), np.float32)
        d["last"] = spaces.Box(0.0, 1.0, (SUBTASK_FEATURES,), np.float32)
        d["tried"] = spaces.Box(0.0, 1.0, (W, TRIED_FEATURES), np.float32)
    d["action_mask"] = spaces.Box(0.0, 1.0, (n_actions,), np.float32)
    return spaces.Dict(d)


def worker_static_features(config: EDOConfig, shard_sizes: list[int], corpus_size: int) -> np.ndarray:
    """The public, constant part of the worker table: size, price, shard domains, shard size, context size."""
    W = len(config.workers)
    table = np.zeros((W, WORKER_FEATURES), dtype=np.float32)
    for i, w in enumerate(config.workers):
        table[i, W_SIZE + MODEL_SIZES.index(w.size)] = 1.0
        table[i, W_PRICE] = min(1.0, w.price / 4.0)
        for dom in w.shard:
            table[i, W_SHARD + DOMAIN_INDEX[dom]] = 1.0
        table[i, W_DOCS] = shard_sizes[i] / max(1, corpus_size)
        table[i, W_TOPK] = min(1.0, w.top_k / 10.0)
    return table


def project_task_embeddings(vectors: np.ndarray, dim: int) -> np.ndarray:
    """Fixed seeded random projection of unit task embeddings to ``dim`` values in [-1, 1]."""
    rng = np.random.default_rng(12345)
    proj = rng.standard_normal((vectors.shape[1], dim)).astype(np.float32)
    return np.clip(vectors @ proj / 3.0, -1.0, 1.0).astype(np.float32)


#: Columns of the subtask table that identify an orchestration state: labels, presence, progress and the latest
#: verdict (not the noisy confidences, attempt counts or flags that differ between runs of the same state).
ANCHOR_SUBTASK_COLUMNS: tuple[int, ...] = (
    *range(C_TYPE, C_DOMAIN + N_DOMAINS), C_PRESENT, C_DONE, C_CURRENT, C_OK, C_FLAG, C_UNSURE,
)  # fmt: skip
#: Columns of the plan vector that identify an orchestration state.
ANCHOR_PLAN_COLUMNS: tuple[int, ...] = (P_LEN, P_CURRENT, P_ALL_DONE, P_REPLANS, P_FALLBACK, P_REPAIRED)


_WORD = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:]\s+|['\"]\s*)$")


def names_and_words(text: str) -> tuple[set[str], set[str]]:
    """Names and identifiers of ``text`` (tokens with a digit, or capitalised ones not opening a sentence or a quote),
    and its longer words (4+ letters), all in lower case; ``{k}`` placeholders are not words."""
    text = re.sub(r"\{\d+\}", " ", text)
    names, words = set(), set()
    for m in _WORD.finditer(text):
        token = m.group(0)
        low = token.lower()
        if len(low) >= 4:
            words.add(low)
        if any(c.isdigit() for c in token) or (
            len(token) > 1 and token[0].isupper() and not _SENTENCE_START.search(text[: m.start()])
        ):
            names.add(low)
    return names, words


def plan_text_features(task_text: str, instructions: tuple[str, ...], max_subtasks: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``step_text`` ``(max_subtasks, 2)`` and ``plan_text`` ``(2,)`` observation entries (see the module
    docstring): how far each plan step's words stray from the task text, and how much of the task no step mentions.
    A function of the two texts only, as an orchestrator reading them could compute it."""
    task_names, task_words = names_and_words(task_text)
    step = np.zeros((max_subtasks, 2), dtype=np.float32)
    plan_names: set[str] = set()
    plan_words: set[str] = set()
    for i, instruction in enumerate(instructions[:max_subtasks]):
        names, words = names_and_words(instruction)
        plan_names |= names
        plan_words |= words
        if names:
            step[i, 0] = len(names - task_names) / len(names)
        if words:
            step[i, 1] = len(words - task_words) / len(words)
    plan = np.zeros(2, dtype=np.float32)
    if task_names:
        plan[0] = len(task_names - plan_names) / len(task_names)
    if task_words:
        plan[1] = len(task_words - plan_words) / len(task_words)
    return step, plan


def plan_check_features(task_text: str, instructions: tuple[str, ...], max_subtasks: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``step_check`` ``(max_subtasks,)`` and ``plan_check`` ``(2,)`` observation entries (see the module docstring):
    the written plan's instructions against those of :func:`edo_gym.agents.planner.rule_plan`, the plan a rule-based
    planner writes from the task text (the world's public templates). A function of the two texts only: what an
    orchestrator that reads its prompt carefully can check (the ``plan_check_text`` probe makes the same check).
    A written plan may differ from the rule-based one and still work (an equivalent wording); nothing says so here."""
    from edo_gym.agents.planner import rule_plan  # (the planner imports nothing of the env)

    step = np.zeros(max_subtasks, dtype=np.float32)
    plan = np.zeros(2, dtype=np.float32)
    reference = rule_plan(task_text)
    if reference is None:
        plan[1] = 1.0
        return step, plan
    expected = [s.instruction for s in reference.steps]
    for i, instruction in enumerate(instructions[:max_subtasks]):
        step[i] = float(i >= len(expected) or instruction != expected[i])
    plan[0] = float(list(instructions) != expected)
    return step, plan


#: The keys the pointer-free view adds (0.4.0).
FOCUS_KEYS: tuple[str, ...] = ("current", "last", "tried")


def observation_layout(space: spaces.Space) -> str:
    """``"0.4"`` for an EDO observation space with the pointer-free view, ``"0.3"`` for one without (``focus_view=False``,
    the layout of 0.3.0 and earlier), ``""`` for a space that is not an EDO observation space."""
    if not is_edo_observation_space(space):
        return ""
    assert isinstance(space, spaces.Dict)
    return "0.4" if set(FOCUS_KEYS) <= set(space.spaces) else "0.3"


def space_mismatch(saved: spaces.Space, current: spaces.Space) -> str | None:
    """``None`` when a policy built for the observation space ``saved`` reads observations of ``current``; else why
    not, in words a user can act on (a model saved before the pointer-free view, an env made without it, keys or
    shapes that differ)."""
    if saved == current:
        return None
    old, new = observation_layout(saved), observation_layout(current)
    keys = ", ".join(repr(k) for k in FOCUS_KEYS)
    if old == "0.3" and new == "0.4":
        return (
            f"it was trained on an observation without the pointer-free view ({keys}), which EDO-Gym 0.3.0 added to "
            "the default observation (see the Version History in edo_gym.envs.edo_env); retrain it, or run it on an "
            "env made with focus_view=False"
        )
    if old == "0.4" and new == "0.3":
        return f"it was trained with the pointer-free view ({keys}) and this env was made with focus_view=False; make it with focus_view=True"
    if (
        isinstance(saved, spaces.Dict)
        and isinstance(current, spaces.Dict)
        and ("plan_review" in saved.spaces) != ("plan_review" in current.spaces)
    ):
        if "plan_review" in current.spaces:
            return (
                "it was trained on an observation without 'plan_review': before EDO-Gym 0.4.0 made verify_plan(w) actions "
                "and the deviations from the script part of the default env (see the Version History in "
                "edo_gym.envs.edo_env); retrain it, or run it on an env made with enable_plan_review=False"
            )
        return "it was trained with verify_plan(w) actions ('plan_review'); make the env with enable_plan_review=True"
    if isinstance(saved, spaces.Dict) and isinstance(current, spaces.Dict):
        a, b = saved.spaces, current.spaces
        diff = [f"key {k!r} only in the model's space" for k in sorted(set(a) - set(b))]
        diff += [f"key {k!r} only in the env's space" for k in sorted(set(b) - set(a))]
        diff += [f"{k!r}: {a[k]} (model) vs {b[k]} (env)" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
        if diff:
            return "its observation space differs from the env's: " + "; ".join(diff)
    return f"its observation space {saved} differs from the env's {current}"


def is_edo_observation_space(space: spaces.Space) -> bool:
    """Whether ``space`` has this module's layout (the ``task``, ``plan`` and ``subtasks`` keys, their widths)."""
    if not isinstance(space, spaces.Dict) or not {"task", "plan", "subtasks"} <= set(space.spaces):
        return False
    plan, sub = space.spaces["plan"], space.spaces["subtasks"]
    return plan.shape == (PLAN_FEATURES,) and len(sub.shape) == 2 and sub.shape[1] == SUBTASK_FEATURES


def anchor_view(observations: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The part of (stacked or single) observations that identifies the orchestration state, for grouping steps taken
    in the same state (GiGPO's anchor states): the task features, the plan's shape and progress, and per plan step its
    labels, progress and latest verdict. Computed from the observation only, so it reveals nothing hidden."""
    return {
        "task": observations["task"],
        "plan": observations["plan"][..., list(ANCHOR_PLAN_COLUMNS)],
        "subtasks": observations["subtasks"][..., list(ANCHOR_SUBTASK_COLUMNS)],
    }
