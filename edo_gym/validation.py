"""Checks that the observation does not leak hidden state.

:func:`collect` runs episodes under a behaviour policy (a mix of a competent observation-only policy and random
legal actions, so that both good and bad results, faithful and broken plans occur), and logs, for every decision
point, the flattened observation next to the hidden variables of that moment. :func:`leak_aucs` fits a small
classifier (logistic regression on standardised features) from the observation to each hidden variable on one half
of the episodes and reports its ROC AUC on the other half:

- ``last_result_correct``: whether a result is right, logged when it has just come back (among answered results:
  an abstention is visibly not an answer);
- ``plan_faithful``: whether executing the plan perfectly would answer the task, logged when the plan has just been
  made (before any step ran);
- ``label_wrong``: whether the current step's type or domain label differs from the truth, logged before each dispatch.

Each variable is logged at the decision point where a policy would want it and has not yet paid to learn it: once
steps run, their answers (abstentions, odd values) legitimately tell a broken plan apart, which is evidence the
policy earned. ``plan_faithful_any_point`` (every decision point) is reported beside it for transparency. Verdicts of
verifications the policy paid for are excluded from the features (a verdict is meant to be informative); everything
else the policy sees is included. An AUC near 1 means the variable can be read off the observation: a leak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edo_gym.envs import observation as O

HIDDEN_TARGETS: tuple[str, ...] = ("last_result_correct", "plan_faithful", "label_wrong", "plan_faithful_any_point")


def verdict_mask(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Boolean masks, per observation key, of the features that carry paid verification verdicts."""
    masks = {k: np.zeros(v.shape, dtype=bool) for k, v in obs.items()}
    masks["subtasks"][:, [O.C_OK, O.C_FLAG, O.C_UNSURE, O.C_NVERIFY]] = True
    masks["plan"][[O.P_LAST_OK, O.P_LAST_FLAG, O.P_LAST_UNSURE]] = True
    masks["workers"][:, [O.W_FLAGGED, O.W_CONFIRMED, O.W_VERIFIED]] = True
    return masks


def flatten(obs: dict[str, np.ndarray], exclude_verdicts: bool = True) -> np.ndarray:
    """The observation as one vector (keys in sorted order), without the verdict features when asked."""
    masks = verdict_mask(obs) if exclude_verdicts else None
    parts = []
    for key in sorted(obs):
        x = np.asarray(obs[key], dtype=np.float32)
        parts.append(x[~masks[key]] if masks is not None else x.ravel())
    return np.concatenate([p.ravel() for p in parts])


def collect(
    env: Any,
    act: Callable[[dict[str, np.ndarray], dict[str, Any]], int],
    reset_hook: Callable[[dict[str, np.ndarray], dict[str, Any]], None],
    episodes: int,
    seed: int = 0,
    random_share: float = 0.3,
) -> dict[str, list]:
    """Log ``(episode, features, hidden targets)`` at every decision point of ``episodes`` episodes.

    With probability ``random_share`` an action is a random legal one instead of ``act``'s.
    """
    base = env.unwrapped
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"episode": [], "x": [], **{t: [] for t in HIDDEN_TARGETS}}
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        reset_hook(obs, info)
        while True:
            hidden = base.hidden_state()
            current = base.current_step
            last = base.done_stack[-1] if base.done_stack else -1
            record = base.results[last] if last >= 0 else None
            rows["episode"].append(ep)
            rows["x"].append(flatten(obs))
            fresh_plan = not base.done_stack
            just_answered = (
                record is not None and not record.abstained and not base.verdicts[last] and info.get("event") == "dispatch"
            )
            rows["plan_faithful"].append(float(hidden["plan_faithful"]) if fresh_plan else np.nan)
            rows["plan_faithful_any_point"].append(float(hidden["plan_faithful"]))
            rows["label_wrong"].append(float(hidden["label_wrong"][current]) if current >= 0 else np.nan)
            rows["last_result_correct"].append(float(bool(hidden["correct"][last])) if just_answered else np.nan)
            if rng.random() < random_share:
                action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            else:
                action = act(obs, info)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    return rows


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by the rank statistic (ties get half credit); 0.5 when one class is absent."""
    labels = labels.astype(bool)
    pos, neg = scores[labels], scores[~labels]
    if len(pos) == 0 or len(neg) == 0:
        return 0.5
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order), dtype=float)
    allv = np.concatenate([pos, neg])[order]
    # average ranks for ties
    i = 0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1] == allv[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2.0) / (len(pos) * len(neg)))


def leak_aucs(rows: dict[str, list], seed: int = 0) -> dict[str, dict[str, float]]:
    """Held-out AUC of a logistic regression from the logged features to each hidden target.

    Episodes are split in two halves (train on one, score the other), so that a classifier cannot memorise an
    episode. Returns ``{target: {"auc": ..., "n": ..., "positive_rate": ...}}``.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.stack(rows["x"])
    episodes = np.asarray(rows["episode"])
    rng = np.random.default_rng(seed)
    ids = np.unique(episodes)
    test_eps = set(rng.choice(ids, size=len(ids) // 2, replace=False).tolist())
    is_test = np.array([e in test_eps for e in episodes])
    out: dict[str, dict[str, float]] = {}
    for target in HIDDEN_TARGETS:
        y = np.asarray(rows[target], dtype=float)
        ok = ~np.isnan(y)
        train, test = ok & ~is_test, ok & is_test
        if len(np.unique(y[train])) < 2 or len(np.unique(y[test])) < 2:
            out[target] = {"auc": 0.5, "n": float(ok.sum()), "positive_rate": float(np.nanmean(y)) if ok.any() else 0.0}
            continue
        model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
        model.fit(x[train], y[train])
        scores = model.predict_proba(x[test])[:, 1]
        out[target] = {"auc": roc_auc(scores, y[test]), "n": float(ok.sum()), "positive_rate": float(y[ok].mean())}
    return out
