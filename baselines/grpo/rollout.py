"""
Collection of one GRPO rollout: the vectorized step loop that runs the members a
:class:`~baselines.grpo.scheduling.GroupScheduler` hands out and stores each member's complete episode in the
:class:`~baselines.grpo.buffers.GroupRolloutBuffer`.

:meth:`GRPO.collect_rollouts <baselines.grpo.grpo.GRPO.collect_rollouts>` builds the scheduler and calls
:func:`run_episodes`; which env runs which member, and how its episode starts, is the scheduler's job
(:mod:`baselines.grpo.scheduling`). At every vectorized step :func:`run_episodes`

* reads the action masks (:func:`step_action_masks`: the envs' ``action_masks()``, or the observation key
  ``action_mask_key``, checked against the envs' own at the first step of every rollout),
* copies the recorded envs' observations and masks into row stores (:class:`~baselines.grpo.buffers.StepStore`;
  an episode keeps its row numbers, and the buffer gathers all rows in one go when the rollout is complete),
* samples one action per env (:func:`sample_actions`; envs without a member are stepped but never recorded),
* shows the step to the callbacks and to ``ep_info_buffer``, restricted to the recorded envs: in
  ``callback.locals``, ``infos``, ``dones``, ``rewards``, ``actions`` and ``new_obs`` hold the recorded envs' entries
  (in env order), ``env_indices`` their indices in the VecEnv and ``wave_members`` their
  :class:`~baselines.grpo.scheduling.Member`; ``recorded`` is ``range(len(infos))``,
* adds an episode to the buffer when it ends, or when ``max_episode_steps`` cuts it (stored as truncated).

Only the recorded envs' steps count in ``num_timesteps``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from baselines.grpo.buffers import GroupRolloutBuffer, StepRows, StepStore
from baselines.grpo.masks import check_action_mask_key, check_observed_masks
from baselines.grpo.policies import GRPOPolicy
from baselines.grpo.scheduling import GroupScheduler

if TYPE_CHECKING:
    from baselines.grpo.grpo import GRPO


def resolve_masking(model: GRPO, env: VecEnv, use_masking: bool | None) -> bool:
    """
    Whether a ``learn()`` call samples with action masks.

    :param model: The algorithm
    :param env: The training env
    :param use_masking: None = when the env has ``action_masks()`` (and the action space supports masks);
        True = required; False = never
    :return: Whether to use masks
    """
    supported = is_masking_supported(env)
    if use_masking is None:
        use_masking = supported and model.policy.supports_masking
    elif use_masking:
        if not supported:
            raise ValueError(
                "use_masking=True but the env has no `action_masks()` method "
                "(sb3-contrib convention); pass use_masking=False or None"
            )
        if not model.policy.supports_masking:
            raise ValueError(f"use_masking=True but {type(model.action_space).__name__} action spaces do not support masks")
    key = model.__dict__.get("action_mask_key")  # a model saved before the option existed has none
    if use_masking and key is not None:
        check_action_mask_key(key, model.observation_space, model.action_space)
    return bool(use_masking)


def step_action_masks(model: GRPO, env: VecEnv, obs: Any, check_mask_key: bool) -> np.ndarray | None:
    """
    This step's action masks (None without masking): the envs' ``action_masks()``, or the observations'
    ``action_mask_key``, checked against the envs' own if ``check_mask_key`` (the first step of every rollout).
    """
    if not model._use_masking_now:
        return None
    mask_key = model.__dict__.get("action_mask_key")  # a model saved before the option existed has none
    if mask_key is None:
        return get_action_masks(env)
    masks = obs[mask_key].reshape(env.num_envs, -1).astype(bool)
    if check_mask_key:
        check_observed_masks(masks, get_action_masks(env), mask_key)
    return masks


def sample_actions(
    policy: GRPOPolicy, obs: Any, action_masks: np.ndarray | None, device: th.device
) -> tuple[np.ndarray, np.ndarray]:
    """Actions (one per env) and their log-probabilities under ``policy``."""
    with th.inference_mode():
        # numpy Dict observations straight to the policy's flat features when it can (same values, same draw)
        sampled = policy.sample_from_numpy(obs, action_masks) if isinstance(obs, dict) else None
        if sampled is None:
            sampled = policy(obs_as_tensor(obs, device), action_masks=action_masks)  # type: ignore[arg-type]
    actions, log_probs = sampled
    return actions.cpu().numpy(), log_probs.cpu().numpy()


def episode_success(filter_on: str, info: dict[str, Any], done: bool) -> bool | None:
    """
    The success flag of an episode that just ended, for ``filter_on="success"`` (None otherwise): the env's
    ``info["is_success"]``; an episode cut by ``max_episode_steps`` did not succeed.
    """
    if filter_on != "success":
        return None
    if not done:
        return False
    value = info.get("is_success")
    if value is None:
        raise ValueError(
            "filter_on='success' needs info['is_success'] at the end of every episode (SB3's convention), but "
            "this env's episode ended without it; use filter_on='return' for this env"
        )
    return bool(value)


def take_rows(values: Any, indices: np.ndarray) -> Any:
    """Rows ``indices`` of ``values`` (an array, or a dict of arrays such as Dict observations), copied."""
    if isinstance(values, dict):
        return {key: value[indices] for key, value in values.items()}
    return values[indices]


def run_episodes(
    model: GRPO, env: VecEnv, callback: BaseCallback, rollout_buffer: GroupRolloutBuffer, scheduler: GroupScheduler
) -> bool:
    """
    Step the VecEnv until every member the scheduler claims has its episode stored in the buffer (see the module
    docstring).

    :param model: The algorithm (its policy samples the actions; ``num_timesteps`` and ``ep_info_buffer`` are updated)
    :param env: The training VecEnv
    :param callback: Called at every vectorized step with the recorded envs' entries
    :param rollout_buffer: Buffer that receives the complete episodes
    :param scheduler: The rollout's scheduler
    :return: False if the callback asked to stop
    """
    action_space = model.action_space
    records_anchor_keys = model._records_anchor_keys
    obs_store, mask_store = StepStore(), StepStore()
    slots = scheduler.slots
    first_step = True
    obs = scheduler.start(model._last_obs)
    while True:
        running, obs = scheduler.next_wave(obs)
        if not running:
            break
        recorded = scheduler.recorded_envs()
        action_masks = step_action_masks(model, env, obs, check_mask_key=first_step)
        first_step = False
        first_row = obs_store.append(take_rows(obs, recorded))
        if action_masks is not None:
            mask_store.append(np.asarray(action_masks[recorded], dtype=bool).reshape(len(recorded), -1))
        actions, log_probs = sample_actions(model.policy, obs, action_masks, model.device)
        clipped_actions = actions
        if isinstance(action_space, spaces.Box):
            clipped_actions = np.clip(actions, action_space.low, action_space.high)
        new_obs, rewards, dones, infos = scheduler.step(clipped_actions)

        model.num_timesteps += len(recorded)
        # Callbacks see the recorded envs only (SB3's names, restricted to those envs); as in SB3, the info buffer
        # reads the same infos and dones as the callback
        recorded_infos = [infos[i] for i in recorded]
        recorded_dones = dones[recorded]
        callback.update_locals(
            {
                "infos": recorded_infos,
                "dones": recorded_dones,
                "rewards": rewards[recorded],
                "actions": actions[recorded],
                "new_obs": take_rows(new_obs, recorded),
                "env_indices": recorded,
                "recorded": np.arange(len(recorded)),
                "wave_members": [slots[i].member for i in recorded],
            }
        )
        if not callback.on_step():
            return False
        model._update_info_buffer(recorded_infos, recorded_dones)

        row = first_row  # the next recorded env's row in the stores (recorded envs are in env order)
        for env_idx, slot in enumerate(slots):
            done = bool(dones[env_idx])
            if slot.member is None:
                scheduler.idle_env_stepped(env_idx, done)
                continue
            trajectory = slot.trajectory
            trajectory["observations"].append(row)
            row += 1
            trajectory["actions"].append(actions[env_idx])
            trajectory["log_probs"].append(log_probs[env_idx])
            trajectory["rewards"].append(rewards[env_idx])
            if records_anchor_keys:
                trajectory["anchor_keys"].append(slot.anchor_key)
                slot.anchor_key = infos[env_idx].get("anchor_key")
            slot.steps += 1
            cut = model.max_episode_steps is not None and slot.steps >= model.max_episode_steps
            if not (done or cut):
                continue
            rows = np.array(trajectory["observations"], dtype=np.int64)
            rollout_buffer.add_episode(
                group_id=slot.member.group_id,
                observations=StepRows(obs_store, rows),
                actions=trajectory["actions"],
                log_probs=trajectory["log_probs"],
                rewards=trajectory["rewards"],
                action_masks=StepRows(mask_store, rows) if action_masks is not None else None,
                truncated=bool(infos[env_idx].get("TimeLimit.truncated", False)) or not done,
                anchor_keys=trajectory["anchor_keys"] if records_anchor_keys else None,
                success=episode_success(model.filter_on, infos[env_idx], done),
            )
            scheduler.episode_ended(env_idx, done, new_obs)
        obs = scheduler.refill(new_obs)

    model._last_obs = obs  # type: ignore[assignment]
    model._last_episode_starts = np.ones((env.num_envs,), dtype=bool)
    return True


__all__ = ["episode_success", "resolve_masking", "run_episodes", "sample_actions", "step_action_masks", "take_rows"]
