"""
What GRPO changes in SB3's ``OnPolicyAlgorithm`` besides the algorithm itself: :class:`GroupOnPolicyAlgorithm`.

GRPO subclasses ``OnPolicyAlgorithm`` for its set-up, logging, saving and ``learn`` loop, but

* ``n_steps`` (a rollout is whole groups, not a fixed number of steps per env), ``gae_lambda`` and ``vf_coef``
  (there is no critic) do not exist: they are not parameters, and the attributes the base class sets are removed
  (``UNUSED_ON_POLICY_ATTRIBUTES``), so reading one raises ``AttributeError`` and saving leaves them out;
* envs passed as a ``gym.Env`` or an id are wrapped in a :class:`~baselines.grpo.wrappers.GroupStartWrapper` (under
  SB3's Monitor), so that every episode starts once (:mod:`baselines.grpo.scheduling`);
* the RNG that draws group seeds / task ids is seeded with the others and saved with the model: a loaded model
  continues the sequence instead of replaying it from the seed;
* the progress remaining is clamped at 0 (a rollout of whole groups may end past ``total_timesteps``);
* ``learn(progress_bar=True)`` counts recorded steps;
* the frozen reference policy of the KL penalty is kept here (copied from the policy, saved with the model, and
  evaluated on a rollout's kept steps).
"""

import copy
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback
from stable_baselines3.common.vec_env import VecEnv

from baselines.grpo.buffers import GroupRolloutBuffer
from baselines.grpo.callbacks import RecordedStepsProgressBar
from baselines.grpo.policies import GRPOPolicy
from baselines.grpo.wrappers import GroupStartWrapper

#: ``OnPolicyAlgorithm`` attributes with no meaning in GRPO (a rollout is groups of whole episodes, not ``n_steps`` per
#: env; there is no critic, so no GAE and no value loss): removed from the instance, so that reading or saving one
#: fails or leaves it out instead of holding a placeholder
UNUSED_ON_POLICY_ATTRIBUTES = ("n_steps", "gae_lambda", "vf_coef", "rollout_buffer_class", "rollout_buffer_kwargs")


class GroupOnPolicyAlgorithm(OnPolicyAlgorithm):
    """``OnPolicyAlgorithm`` adapted to rollouts of groups of whole episodes (see the module docstring)."""

    policy: GRPOPolicy  # type: ignore[assignment]
    rollout_buffer: GroupRolloutBuffer  # type: ignore[assignment]
    ref_policy: GRPOPolicy | None
    _group_rng: np.random.Generator
    _group_rng_state: dict[str, Any] | None
    batch_size: int | None

    def _remove_unused_on_policy_attributes(self) -> None:
        """Remove the ``OnPolicyAlgorithm`` attributes GRPO has no use for (``UNUSED_ON_POLICY_ATTRIBUTES``)."""
        for name in UNUSED_ON_POLICY_ATTRIBUTES:
            self.__dict__.pop(name, None)

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        """SB3's wrapping (Monitor, DummyVecEnv), plus a GroupStartWrapper so that every episode starts once."""
        if not isinstance(env, VecEnv) and not is_wrapped(env, GroupStartWrapper):
            if monitor_wrapper and not is_wrapped(env, Monitor):
                env = Monitor(env)
            env = GroupStartWrapper(env)
        return BaseAlgorithm._wrap_env(env, verbose, monitor_wrapper)

    def set_random_seed(self, seed: int | None = None) -> None:
        """
        Set the seed of the pseudo-random generators (python, numpy, pytorch, gym, action_space)
        and of the RNG that draws group seeds / task ids.

        :param seed: Seed; None leaves the global generators untouched and re-seeds the group RNG from entropy
        """
        super().set_random_seed(seed)
        self._group_rng = np.random.default_rng(seed)

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        """
        Progress remaining, from 1 to 0, **clamped at 0**: a rollout of whole groups may end past
        ``total_timesteps``, and a negative progress would give a negative learning rate (gradient ascent) or clip
        range with SB3's linear schedules.

        :param num_timesteps: current number of timesteps
        :param total_timesteps: total number of timesteps of the ``learn()`` call
        """
        self._current_progress_remaining = max(0.0, 1.0 - float(num_timesteps) / float(total_timesteps))

    def _init_callback(self, callback: MaybeCallback, progress_bar: bool = False) -> BaseCallback:
        """SB3's callback setup, with a progress bar that counts recorded steps (not ``n_envs`` per step)."""
        callback = super()._init_callback(callback, progress_bar=False)
        if progress_bar:
            callback = CallbackList([callback, RecordedStepsProgressBar()])
            callback.init_callback(self)
        return callback

    # ------------------------------------------------------------------ saving
    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """
        Save the model (see ``BaseAlgorithm.save``), including the group RNG state: a loaded model continues the
        sequence of group seeds / tasks instead of replaying it from the seed.
        """
        self._group_rng_state = self._group_rng.bit_generator.state
        try:
            super().save(path, exclude=exclude, include=include)
        finally:
            self._group_rng_state = None

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "ref_policy", "_group_rng", "_use_masking_now"]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts = ["policy", "policy.optimizer"]
        if self.ref_policy is not None:
            state_dicts.append("ref_policy")
        return state_dicts, []

    # ------------------------------------------------------------------ reference policy (KL penalty)
    def _update_reference(self) -> None:
        """Make the reference policy a frozen copy of the current policy."""
        if self.ref_policy is None:
            ref_policy = copy.deepcopy(self.policy)
            ref_policy.optimizer = None  # type: ignore[assignment]  # never trained, keep no optimizer
            ref_policy.requires_grad_(False)
            self.ref_policy = ref_policy
        else:
            self.ref_policy.load_state_dict(self.policy.state_dict())
        self.ref_policy.set_training_mode(False)

    def _compute_reference_log_probs(self, features: th.Tensor | None = None) -> None:
        """
        Store the reference policy's log-probabilities of all kept actions in the buffer.

        :param features: The kept steps' features from ``GRPO._static_features`` (the reference policy's extractor is
            a copy of the policy's, so they are its features too); None = extract them per minibatch
        """
        assert self.ref_policy is not None
        self.ref_policy.set_training_mode(False)
        if not self.ref_policy.has_static_features:
            features = None
        evaluate = self.ref_policy.evaluate_actions if features is None else self.ref_policy.evaluate_features
        with th.no_grad():
            for data in self.rollout_buffer.get(self.batch_size, shuffle=False, features=features):
                ref_log_prob, _ = evaluate(
                    data.observations,  # type: ignore[arg-type]
                    data.actions,
                    action_masks=data.action_masks,
                )
                self.rollout_buffer.set_ref_log_probs(data.positions, ref_log_prob)

    # ------------------------------------------------------------------ API
    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """
        Get the policy action from an observation.

        :param observation: the input observation
        :param state: The last hidden states (unused, no recurrence)
        :param episode_start: The last episode starts (unused, no recurrence)
        :param deterministic: Whether or not to return deterministic actions.
        :param action_masks: Action masks to apply to the action distribution (True = allowed)
        :return: the model's action and the next hidden state (unchanged)
        """
        return self.policy.predict(observation, state, episode_start, deterministic, action_masks=action_masks)


__all__ = ["UNUSED_ON_POLICY_ATTRIBUTES", "GroupOnPolicyAlgorithm"]
