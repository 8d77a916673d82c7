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
- ``action_mask`` ``(A,)``: 1 for legal actions.

Text (task, plan, outputs) never enters the observation; it is available through ``render()``.
"""

from __future__ import annotations

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
