"""The fixed-size numeric observation of EDO-v0 (a ``Dict`` of ``Box`` spaces, usable by SB3's MultiInputPolicy).

Keys and shapes (``S`` = max subtasks, ``W`` = workers, ``A`` = actions, ``H`` = history length):

- ``task`` ``(E + 4,)``: task-text embedding projected to ``E`` dims in [-1, 1], family one-hot, hops / max hops;
- ``plan`` ``(8,)``: plan length / S, planner confidence, current step / S, all steps done, replans used,
  last result's confidence, last result verified ok, last result flagged;
- ``subtasks`` ``(S, 21)``: labelled type one-hot (3), labelled domain one-hot (7), present, done, current,
  dependencies satisfied, confidence, verified ok, flagged, retrieved, attempts / 4, abstained;
- ``workers`` ``(W, 17)``: skills per type (3), shard domains (7), size one-hot (3), parametric knowledge,
  calls / step limit, flagged results / step limit, abstentions / step limit;
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

SUBTASK_FEATURES = len(SUBTASK_TYPES) + len(DOMAINS) + 11
WORKER_FEATURES = len(SUBTASK_TYPES) + len(DOMAINS) + len(MODEL_SIZES) + 4
PLAN_FEATURES = 8
BUDGET_FEATURES = 5

# column offsets in the subtask table
_C_TYPE = 0
_C_DOMAIN = len(SUBTASK_TYPES)
_C = _C_DOMAIN + len(DOMAINS)
C_PRESENT, C_DONE, C_CURRENT, C_DEPS, C_CONF, C_OK, C_FLAG, C_RETR, C_ATTEMPTS, C_ABSTAIN = range(_C, _C + 10)
TYPE_INDEX = {t: i for i, t in enumerate(SUBTASK_TYPES)}
DOMAIN_INDEX = {d: i for i, d in enumerate(DOMAINS)}
FAMILY_INDEX = {f: i for i, f in enumerate(FAMILIES)}


def observation_space(config: EDOConfig, n_actions: int) -> spaces.Dict:
    S, W = config.max_subtasks, len(config.workers)
    E = config.retrieval.task_embedding_dim
    d = {
        "task": spaces.Box(-1.0, 1.0, (E + len(FAMILIES) + 1,), np.float32),
        "plan": spaces.Box(0.0, 1.0, (PLAN_FEATURES,), np.float32),
        "subtasks": spaces.Box(0.0, 1.0, (S, SUBTASK_FEATURES), np.float32),
        "workers": spaces.Box(0.0, 1.0, (W, WORKER_FEATURES), np.float32),
        "budget": spaces.Box(0.0, 1.0, (BUDGET_FEATURES,), np.float32),
    }
    if config.history_len > 0:
        d["history"] = spaces.Box(0.0, 1.0, (config.history_len, n_actions), np.float32)
    d["action_mask"] = spaces.Box(0.0, 1.0, (n_actions,), np.float32)
    return spaces.Dict(d)


def worker_static_features(config: EDOConfig) -> np.ndarray:
    """The constant part of the worker table (profile, shard, size)."""
    W = len(config.workers)
    table = np.zeros((W, WORKER_FEATURES), dtype=np.float32)
    for i, w in enumerate(config.workers):
        table[i, : len(SUBTASK_TYPES)] = w.skill_vector()
        for dom in w.shard:
            table[i, len(SUBTASK_TYPES) + DOMAIN_INDEX[dom]] = 1.0
        table[i, len(SUBTASK_TYPES) + len(DOMAINS) + MODEL_SIZES.index(w.size)] = 1.0
        table[i, len(SUBTASK_TYPES) + len(DOMAINS) + len(MODEL_SIZES)] = w.parametric_knowledge
    return table


def project_task_embeddings(vectors: np.ndarray, dim: int) -> np.ndarray:
    """Fixed seeded random projection of unit task embeddings to ``dim`` values in [-1, 1]."""
    rng = np.random.default_rng(12345)
    proj = rng.standard_normal((vectors.shape[1], dim)).astype(np.float32)
    return np.clip(vectors @ proj / 3.0, -1.0, 1.0).astype(np.float32)
