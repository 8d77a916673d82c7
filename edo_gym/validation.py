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
- ``label_wrong``: whether the current step's type or domain label differs from the truth, logged before each dispatch;
- ``team_drawn``: whether the episode's team was drawn away from the public profiles (``DeviationConfig.team_rate``),
  logged when the plan has just been made;
- ``drift_pending``: whether a worker will drift later in the episode (``DeviationConfig.drift_rate``), logged at
  every decision point before the drift's onset (after it, the drifted answers are evidence the policy earned);
- ``extra_step``: whether a support task needs the step its text does not show (``TaskConfig.extra_step_rate``),
  logged when the plan has just been made, on support tasks only (the family is public: over all tasks it would
  tell support tasks apart, not the extra step).

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

HIDDEN_TARGETS: tuple[str, ...] = (
    "last_result_correct",
    "plan_faithful",
    "label_wrong",
    "plan_faithful_any_point",
    "team_drawn",
    "drift_pending",
    "extra_step",
)


def verdict_mask(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Boolean masks, per observation key, of the features that carry paid verification verdicts."""
    masks = {k: np.zeros(v.shape, dtype=bool) for k, v in obs.items()}
    masks["subtasks"][:, [O.C_OK, O.C_FLAG, O.C_UNSURE, O.C_NVERIFY]] = True
    masks["plan"][[O.P_LAST_OK, O.P_LAST_FLAG, O.P_LAST_UNSURE]] = True
    masks["workers"][:, [O.W_FLAGGED, O.W_CONFIRMED, O.W_VERIFIED]] = True
    for key in ("current", "last"):  # the pointer-free view's copies of subtask rows
        if key in masks:
            masks[key][[O.C_OK, O.C_FLAG, O.C_UNSURE, O.C_NVERIFY]] = True
    if "tried" in masks:
        masks["tried"][:, [O.T_OK, O.T_FLAG, O.T_UNSURE]] = True
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
            current = base.episode.plan.current_step
            last = base.episode.plan.done_stack[-1] if base.episode.plan.done_stack else -1
            record = base.episode.plan.results[last] if last >= 0 else None
            rows["episode"].append(ep)
            rows["x"].append(flatten(obs))
            fresh_plan = not base.episode.plan.done_stack
            just_answered = (
                record is not None
                and not record.abstained
                and not base.episode.plan.verdicts[last]
                and info.get("event") == "dispatch"
            )
            rows["plan_faithful"].append(float(hidden["plan_faithful"]) if fresh_plan else np.nan)
            rows["plan_faithful_any_point"].append(float(hidden["plan_faithful"]))
            rows["label_wrong"].append(float(hidden["label_wrong"][current]) if current >= 0 else np.nan)
            rows["last_result_correct"].append(float(bool(hidden["correct"][last])) if just_answered else np.nan)
            deviations = hidden["deviations"]
            rows["team_drawn"].append(float(deviations["team_drawn"]) if fresh_plan else np.nan)
            drift = deviations["drift"]
            rows["drift_pending"].append(float(drift is not None) if drift is None or not drift["active"] else np.nan)
            support = base.episode.task.family == "support"
            rows["extra_step"].append(float(deviations["extra_step"] is not None) if fresh_plan and support else np.nan)
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


def info_pool_features(info: dict[str, Any], pool: Any) -> np.ndarray:
    """What a policy could compute from ``info`` alone with the task pool in hand: every plain value of ``info`` (numbers
    as they are, strings and arrays by a checksum), and for ``info["task_id"]`` the pool's task as its text shows it
    (:func:`public_task_features`). The features of :func:`info_leak_aucs`."""
    import zlib

    values: list[float] = []
    for key in sorted(info):
        value = info[key]
        if isinstance(value, (bool, int, float, np.integer, np.floating)):
            values.append(float(value))
        elif isinstance(value, str):
            values.append(zlib.crc32(value.encode()) / 2**32)
        elif isinstance(value, np.ndarray):
            values.append(zlib.crc32(np.ascontiguousarray(value).tobytes()) / 2**32)
    return np.concatenate([np.asarray(values, dtype=np.float64), public_task_features(info, pool)])


def public_task_features(info: dict[str, Any], pool: Any) -> np.ndarray:
    """The pool's task of ``info["task_id"]`` as its text shows it: family, hop count and plan length; for a task with
    the hidden extra step, those of the plan its text asks for (the extra step itself is hidden state, like the gold
    answer the pool also holds)."""
    from edo_gym.world.extra_step import has_extra_step, scripted_subtasks

    task = pool.tasks[int(pool.ids[int(info["task_id"])])]
    family = [float(task.family == f) for f in ("support", "multihop", "analytics")]
    steps = scripted_subtasks(task) if has_extra_step(task) else task.subtasks
    hops = task.hops - (len(task.subtasks) - len(steps))
    return np.asarray([*family, float(hops), float(len(steps))], dtype=np.float64)


def info_leak_aucs(env: Any, episodes: int, seed: int = 0) -> dict[str, float]:
    """How well plan faithfulness at reset is told from ``info`` with the task pool, against from the observation.

    Resets ``env`` ``episodes`` times and fits, as :func:`leak_aucs` does (episode halves), one logistic regression on
    :func:`info_pool_features` and one on the observation (verdicts excluded). ``info`` must add nothing: its AUC should
    not exceed the observation's by more than noise. Returns ``{"info_and_pool": auc, "observation": auc, "n": n,
    "unfaithful_rate": rate}``."""
    base = env.unwrapped
    info_x: list[np.ndarray] = []
    task_x: list[np.ndarray] = []
    obs_x: list[np.ndarray] = []
    faithful: list[float] = []
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        info_x.append(info_pool_features(info, base.pool))
        task_x.append(public_task_features(info, base.pool))
        obs_x.append(flatten(obs))
        faithful.append(float(base.hidden_state()["plan_faithful"]))
    out: dict[str, float] = {"n": float(episodes), "unfaithful_rate": 1.0 - float(np.mean(faithful))}
    for name, x in (("info_and_pool", info_x), ("task_alone", task_x), ("observation", obs_x)):
        rows = {"episode": list(range(episodes)), "x": x, **{t: [np.nan] * episodes for t in HIDDEN_TARGETS}}
        rows["plan_faithful"] = faithful
        out[name] = leak_aucs(rows, seed=seed)["plan_faithful"]["auc"]
    return out


def template_probe(world: Any, tasks: Any, seed: int = 0) -> dict[str, dict[str, float]]:
    """Grade, for every task, its gold answer's template with the key value changed (must fail) and the right value in
    other phrasings (must pass), with the env's grader (:func:`edo_gym.world.grading.grade_final`).

    Returns, per ``"<family>/<value kind>"``, ``{"n", "wrong_value_success", "right_value_success"}``: the share of
    wrong-value variants graded right (must be 0) and of right-value rephrasings graded right (should be 1).
    """
    from edo_gym.world.generator import DURATION_DAYS
    from edo_gym.world.grading import durations, grade_final, task_value_kind

    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, list[float]]] = {}
    for task in tasks:
        kind = task_value_kind(task)
        gold = task.answer
        if kind == "duration":
            days = int(next(iter(durations(gold))))
            other = int(rng.choice([d for d in DURATION_DAYS if d != days]))
            wrong = [gold.replace(f"{days} days", f"{other} days"), f"You have {other} days to request a refund."]
            right = [f"You have {days} days to request a refund.", f"Refunds are possible within {days} days of delivery."]
        elif kind == "amount":
            value = int(gold)
            other = value + int(rng.choice([-1, 1])) * int(rng.integers(1, 200))
            wrong = [str(other), f"{other} thousand", f"${other}k"]
            right = [f"{value} thousand", f"${value}k", f"${value * 1000:,}", f"The answer is {value}."]
        else:
            relation = task.subtasks[-1].relation
            other = world.plausible_value(relation, rng, gold)
            wrong = [other, f"The answer is {other}.", f"{other}."]
            right = [f"The answer is {gold}.", f"**{gold}**", f"{gold}."]
        entry = out.setdefault(f"{task.family}/{kind}", {"wrong": [], "right": []})
        entry["wrong"] += [float(grade_final(world, task, text)) for text in wrong if text != gold]
        entry["right"] += [float(grade_final(world, task, text)) for text in right]
    return {
        key: {"n": float(len(v["wrong"])), "wrong_value_success": float(np.mean(v["wrong"])),
              "right_value_success": float(np.mean(v["right"]))}
        for key, v in sorted(out.items())
    }  # fmt: skip
