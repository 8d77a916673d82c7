"""Experience from recorded orchestration runs: episodes stored as a Minari dataset, and behaviour cloning on them.

The warm start of a learned orchestrator: record episodes of a policy (a hand-written one, the oracle, a trained
model) on the *training* split of an EDO id as a `Minari <https://minari.farama.org>`_ dataset, pre-train a policy on
them by behaviour cloning (maximum likelihood of the recorded actions under the action mask), then fine-tune it with
GRPO/GiGPO or PPO. The dataset stores what the policy saw (observations, actions, rewards) and, in its metadata, who
acted; a policy trained on it still sees only the observation at run time, whoever the demonstrator was. The oracle
acts on hidden state: cloning it is learning from a privileged teacher, which the dataset's ``algorithm_name`` says.

- :func:`record_dataset` (``edo record-dataset``): run a policy and write the dataset.
- :func:`load_demonstrations`: a dataset's steps as stacked arrays (:class:`Demonstrations`).
- :func:`behaviour_clone`: fit an SB3 policy (GRPO's, PPO's, MaskablePPO's) to them.
- :func:`warm_start`: both for ``edo train --warm-start`` (``TrainConfig.warm_start``): a hand-written policy's
  episodes are recorded once per env, settings and EDO-Gym version, then reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from tqdm.auto import tqdm

from baselines.algorithms import load_model
from baselines.heuristics import HEURISTICS

#: Datasets live where Minari keeps them: ``~/.minari/datasets`` unless ``MINARI_DATASETS_PATH`` says otherwise.
DATASET_ID_HELP = "a Minari id 'namespace/name-vN', e.g. 'edo/rule_based-v0'"


def _dataset_path(dataset_id: str) -> str:
    from minari.storage import get_dataset_path

    return str(get_dataset_path(dataset_id))


def dataset_exists(dataset_id: str) -> bool:
    """Whether a local Minari dataset ``dataset_id`` exists."""
    import minari

    return dataset_id in minari.list_local_datasets()


def _check_dataset_id(dataset_id: str) -> None:
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        namespace, name, version = parse_dataset_id(dataset_id)
    except (ValueError, TypeError) as exc:  # TypeError: an id without a version
        raise ValueError(f"dataset id {dataset_id!r} is not {DATASET_ID_HELP}") from exc
    if namespace is None or not name:
        raise ValueError(f"dataset id {dataset_id!r} has no namespace; use {DATASET_ID_HELP}")


def record_dataset(
    dataset_id: str,
    policy: str = "rule_based",
    episodes: int = 1000,
    env_id: str = "EDO-v0",
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> str:
    """Run ``policy`` for ``episodes`` episodes of ``env_id`` (its training split, tasks drawn by the env) and store
    them as the Minari dataset ``dataset_id``.

    :param policy: a hand-written policy's name (:func:`demonstrators`: ``HEURISTICS``, where ``oracle`` acts on
        ``hidden_state()``, and the probes; a text-reading probe gets an env made with ``info_text=True``) or the path
        of a saved model (``.zip``, its algorithm inferred as by ``edo evaluate``)
    :param seed: the first episode's reset seed (episode ``k`` is reset with ``seed + k``)
    :param overwrite: replace an existing dataset of that id (else an existing one is an error)
    :return: the dataset's directory
    """
    import minari

    import edo_gym  # noqa: F401 - registers the ids

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
    _check_dataset_id(dataset_id)
    if dataset_exists(dataset_id):
        if not overwrite:
            raise FileExistsError(
                f"a Minari dataset {dataset_id!r} exists at {_dataset_path(dataset_id)}; pass overwrite=True "
                "(--overwrite) to replace it, or choose another id"
            )
        minari.delete_dataset(dataset_id)
    from minari.data_collector.episode_buffer import EpisodeBuffer

    act, uses_hidden, name = _policy_fn(policy, env_id, env_kwargs)
    make_kwargs = dict(env_kwargs or {})
    if reads_text(policy):  # the text is offered in info; the observation and the dynamics are the same
        make_kwargs["info_text"] = True
    env = gym.make(env_id, **make_kwargs)
    base = env.unwrapped
    buffers = []
    try:
        for k in tqdm(range(episodes), desc=f"record {name}", disable=not progress):
            obs, info = env.reset(seed=seed + k)
            observations = {key: [value] for key, value in obs.items()}
            actions, rewards, terminations, truncations = [], [], [], []
            reset = getattr(act, "reset", None)
            if reset is not None:
                reset(obs, info)
            while True:
                action = act(obs, info, base)
                obs, reward, terminated, truncated, info = env.step(action)
                for key, value in obs.items():
                    observations[key].append(value)
                actions.append(action)
                rewards.append(float(reward))
                terminations.append(bool(terminated))
                truncations.append(bool(truncated))
                if terminated or truncated:
                    break
            buffers.append(
                EpisodeBuffer(
                    id=k,
                    seed=seed + k,
                    observations={key: np.stack(values) for key, values in observations.items()},
                    actions=np.asarray(actions, dtype=np.int64),
                    rewards=rewards,
                    terminations=terminations,
                    truncations=truncations,
                    infos={},
                )
            )
        description = (
            f"{episodes} EDO-Gym orchestration episodes of {env_id} (training split) acted by {name}"
            + (" (reads hidden state: a privileged teacher)" if uses_hidden else " (observation only)")
            + f"; env kwargs {env_kwargs or {}}; reset seeds {seed}..{seed + episodes - 1}; EDO-Gym "
            + str(base.metadata.get("edo_gym_version", "?"))
        )
        with warnings.catch_warnings():  # Minari asks for a contact e-mail, a code link and an evaluation env: none applies
            warnings.filterwarnings(
                "ignore", message=r"`(author_email|eval_env|code_permalink)` is set to None", category=UserWarning
            )
            minari.create_dataset_from_buffers(
                dataset_id,
                buffers,
                env=env,
                algorithm_name=name + (" (hidden state)" if uses_hidden else ""),
                author="EDO-Gym record_dataset",
                description=description,
            )
    except BaseException:
        if dataset_exists(dataset_id):  # never leave a half-written dataset behind
            minari.delete_dataset(dataset_id)
        raise
    finally:
        env.close()
    return _dataset_path(dataset_id)


class _Acting:
    """A policy as ``record_dataset`` calls it: ``act(obs, info, env)``, with an optional ``reset(obs, info)``."""

    def __init__(self, heuristic: Any = None, model: Any = None) -> None:
        self.heuristic, self.model = heuristic, model
        if heuristic is not None:
            self.reset = heuristic.reset

    def __call__(self, obs: dict[str, np.ndarray], info: dict[str, Any], env: Any) -> int:
        if self.model is not None:
            action, _ = self.model.predict(obs, deterministic=True, action_masks=obs["action_mask"] > 0)
            return int(np.asarray(action).reshape(()))
        if self.heuristic.uses_hidden_state:
            return int(self.heuristic.act_hidden(obs, info, env.hidden_state()))
        return int(self.heuristic.act(obs, info))


def demonstrators() -> dict[str, Any]:
    """Hand-written policies that can be recorded, by name: ``HEURISTICS``, then the validity benchmark's probes
    (:data:`baselines.probes.PROBES`) and text-reading probes (:data:`baselines.probes.TEXT_PROBES`)."""
    from baselines.probes import PROBES, TEXT_PROBES

    return {**HEURISTICS, **PROBES, **TEXT_PROBES}


def reads_text(policy: str) -> bool:
    """Whether the hand-written policy ``policy`` reads ``info["text"]`` (its env must be made with ``info_text=True``)."""
    from baselines.probes import TEXT_PROBES

    return policy in TEXT_PROBES


def _policy_fn(policy: str, env_id: str, env_kwargs: dict[str, Any] | None) -> tuple[_Acting, bool, str]:
    known = demonstrators()
    if policy in known:
        heuristic = known[policy]()
        return _Acting(heuristic=heuristic), bool(heuristic.uses_hidden_state), policy
    if policy.endswith(".zip") or os.path.isfile(policy):
        model = load_model(policy)
        return _Acting(model=model), False, os.path.basename(policy)
    raise ValueError(f"policy must be one of {sorted(demonstrators())} or the path of a saved model (.zip), got {policy!r}")


@dataclass
class Demonstrations:
    """A dataset's steps: observations (a dict of stacked arrays), the actions taken, and per-episode figures."""

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    episode_returns: np.ndarray
    #: the demonstrator as the dataset names it
    source: str = ""

    def __len__(self) -> int:
        return int(len(self.actions))

    @property
    def action_masks(self) -> np.ndarray | None:
        masks = self.observations.get("action_mask")
        return None if masks is None else masks > 0

    @staticmethod
    def concatenate(parts: Sequence[Demonstrations]) -> Demonstrations:
        if not parts:
            raise ValueError("no demonstrations to concatenate")
        keys = set(parts[0].observations)
        for p in parts[1:]:
            if set(p.observations) != keys:
                raise ValueError(
                    f"datasets have different observation keys: {sorted(keys)} vs {sorted(p.observations)}; record "
                    "them with the same env id and settings"
                )
        return Demonstrations(
            {k: np.concatenate([p.observations[k] for p in parts]) for k in parts[0].observations},
            np.concatenate([p.actions for p in parts]),
            np.concatenate([p.episode_returns for p in parts]),
            " + ".join(p.source for p in parts),
        )


def load_demonstrations(dataset_id: str, max_episodes: int | None = None) -> Demonstrations:
    """The steps of the local Minari dataset ``dataset_id`` (the first ``max_episodes`` episodes; all when None)."""
    import minari

    if not dataset_exists(dataset_id):
        known = minari.list_local_datasets()
        raise FileNotFoundError(
            f"no local Minari dataset {dataset_id!r} (local ones: {sorted(known) or 'none'}); record it with "
            f"`edo record-dataset --dataset-id {dataset_id} ...`"
        )
    dataset = minari.load_dataset(dataset_id)
    n = dataset.total_episodes if max_episodes is None else min(max_episodes, dataset.total_episodes)
    obs_parts: dict[str, list[np.ndarray]] = {}
    actions, returns = [], []
    for episode in dataset.iterate_episodes(episode_indices=list(range(n))):
        observations = episode.observations
        if not isinstance(observations, dict):
            raise ValueError(f"dataset {dataset_id!r} does not hold Dict observations (not an EDO-Gym dataset)")
        for key, value in observations.items():
            obs_parts.setdefault(key, []).append(np.asarray(value)[:-1])  # the last observation has no action
        actions.append(np.asarray(episode.actions).reshape(-1))
        returns.append(float(np.sum(episode.rewards)))
    return Demonstrations(
        {k: np.concatenate(v).astype(np.float32) for k, v in obs_parts.items()},
        np.concatenate(actions).astype(np.int64),
        np.asarray(returns, dtype=np.float64),
        str(dataset.storage.metadata.get("algorithm_name") or dataset_id),
    )


def check_compatible(policy: Any, demos: Demonstrations) -> None:
    """Raise a ``ValueError`` naming the difference when ``demos`` were not recorded with ``policy``'s observations."""
    space = policy.observation_space
    if not isinstance(space, gym.spaces.Dict):
        raise ValueError(f"behaviour cloning needs a Dict observation space (an EDO env), got {type(space).__name__}")
    missing = set(space.spaces) ^ set(demos.observations)
    if missing:
        raise ValueError(
            f"the dataset's observation keys {sorted(demos.observations)} differ from the policy's {sorted(space.spaces)} "
            "(recorded with another EDO version or focus_view setting?); record it again with the policy's env"
        )
    for key, sub in space.spaces.items():
        if demos.observations[key].shape[1:] != sub.shape:
            raise ValueError(
                f"observation {key!r} has shape {demos.observations[key].shape[1:]} in the dataset and {sub.shape} in "
                "the policy's env; record the dataset with the same env id and settings"
            )


def behaviour_clone(
    policy: Any,
    demos: Demonstrations,
    epochs: int = 10,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
    ent_coef: float = 0.0,
) -> dict[str, float]:
    """Fit ``policy`` (an SB3 policy: GRPO's, PPO's or MaskablePPO's) to the demonstrated actions.

    Minimises the negative log-likelihood of each recorded action under the policy's (masked, where the policy
    supports masks) action distribution, minus ``ent_coef`` times its entropy, with its own Adam optimiser; a value
    head, if any, is left as it is. A positive ``ent_coef`` keeps some probability on the actions the teacher never
    took: a clone of a near-deterministic teacher (a fixed pipeline) otherwise leaves RL nothing to compare, since
    every episode of a group takes the same actions.

    :return: ``loss`` (mean NLL of the last epoch) and ``accuracy`` (share of steps whose most likely action is the
        demonstrated one, last epoch)
    """
    if len(demos) == 0:
        raise ValueError("the dataset holds no steps")
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
    if not ent_coef >= 0:
        raise ValueError(f"ent_coef must be >= 0, got {ent_coef!r}")
    check_compatible(policy, demos)
    device = policy.device
    masks_np = demos.action_masks
    uses_masks = masks_np is not None and _supports_masks(policy)
    obs = {k: th.as_tensor(v, device=device) for k, v in demos.observations.items()}
    actions = th.as_tensor(demos.actions, device=device)
    masks = th.as_tensor(masks_np, device=device) if uses_masks else None
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = th.optim.Adam(params, lr=learning_rate)
    generator = th.Generator().manual_seed(seed)
    n = len(demos)
    loss_sum = correct = 0.0
    policy.set_training_mode(True)
    for _ in tqdm(range(epochs), desc="behaviour cloning", disable=not progress):
        order = th.randperm(n, generator=generator)
        loss_sum = correct = 0.0
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size].to(device)
            batch = {k: v[idx] for k, v in obs.items()}
            if uses_masks:
                dist = policy.get_distribution(batch, action_masks=masks[idx])  # type: ignore[index]
            else:
                dist = policy.get_distribution(batch)
            log_prob = dist.log_prob(actions[idx])
            loss = -log_prob.mean()
            if ent_coef > 0:
                loss = loss - ent_coef * dist.entropy().mean()
            optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            loss_sum += float(loss.detach()) * len(idx)
            with th.no_grad():
                correct += float((dist.get_actions(deterministic=True) == actions[idx]).sum())
    policy.set_training_mode(False)
    return {"loss": loss_sum / n, "accuracy": correct / n, "steps": float(n)}


def _supports_masks(policy: Any) -> bool:
    import inspect

    try:
        return "action_masks" in inspect.signature(policy.get_distribution).parameters
    except (TypeError, ValueError):
        return False


def _dataset_lock(dataset_id: str) -> Any:
    """An inter-process lock for recording ``dataset_id`` (a file beside Minari's datasets directory)."""
    from filelock import FileLock

    root = Path(_dataset_path(dataset_id)).parent
    root.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in dataset_id)
    return FileLock(str(root / f".{name}.lock"), timeout=3600)


def warm_start_dataset_id(policy: str, episodes: int, env_id: str, env_kwargs: dict[str, Any] | None = None) -> str:
    """The id under which :func:`warm_start` keeps ``episodes`` episodes of the hand-written ``policy`` on ``env_id``
    made with ``env_kwargs``: it names the policy and the episodes, and a digest of the env, its settings (those given
    and, where it has any, those the id is registered with) and the EDO-Gym version (a dataset of another version or
    setting is not reused)."""
    import gymnasium as gym

    from edo_gym.envs.edo_env import ENV_VERSION

    fields: dict[str, Any] = {
        "env_id": env_id, "env_kwargs": env_kwargs or {}, "policy": policy, "episodes": episodes, "version": ENV_VERSION,
    }  # fmt: skip
    registered = gym.spec(env_id).kwargs if env_id in gym.registry else {}
    if registered:  # (an id registered without settings keeps the digest it had before they were part of it)
        fields["registered"] = registered
    key = json.dumps(fields, sort_keys=True, default=repr)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    env_name = "".join(c if c.isalnum() else "_" for c in env_id)
    return f"edo_gym/{env_name}_{policy}_{episodes}_{digest}-v0"


def warm_start(
    policy: Any,
    source: str,
    env_id: str = "EDO-v0",
    env_kwargs: dict[str, Any] | None = None,
    episodes: int = 2000,
    epochs: int = 20,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
    ent_coef: float = 0.0,
) -> dict[str, Any]:
    """Pre-train ``policy`` by behaviour cloning on ``source``: a hand-written policy's name (its episodes are
    recorded first, see :func:`warm_start_dataset_id`) or a local Minari dataset id.

    :return: what was done: ``dataset``, ``source``, ``recorded`` (whether it was recorded now), ``steps``, the last
        epoch's ``loss`` and ``accuracy``, and ``wall_s``
    """
    t0 = time.perf_counter()
    recorded = False
    if source in demonstrators():
        dataset_id = warm_start_dataset_id(source, episodes, env_id, env_kwargs)
        # several processes may warm-start from the same source at once (parallel benchmark runs): one records the
        # dataset, the others wait for it and load it
        with _dataset_lock(dataset_id):
            if not dataset_exists(dataset_id):
                record_dataset(dataset_id, source, episodes, env_id, seed=0, env_kwargs=env_kwargs, progress=progress)
                recorded = True
    elif "/" in source:
        dataset_id = source
    else:
        raise ValueError(
            f"warm start source must be a hand-written policy ({sorted(demonstrators())}) or a Minari dataset id "
            f"({DATASET_ID_HELP}), got {source!r}"
        )
    demos = load_demonstrations(dataset_id)
    stats = behaviour_clone(policy, demos, epochs, batch_size, learning_rate, seed=seed, progress=progress, ent_coef=ent_coef)
    return {
        "dataset": dataset_id,
        "source": demos.source,
        "recorded": recorded,
        "episodes": int(len(demos.episode_returns)),
        "steps": len(demos),
        "loss": stats["loss"],
        "accuracy": stats["accuracy"],
        "wall_s": time.perf_counter() - t0,
    }
