"""
Actor-only policies for GRPO.

GRPO replaces the learned baseline (critic) by group statistics, so these policies build **no value
network at all**: there is a features extractor, an actor MLP and an action head, nothing else.
For the same actor ``net_arch`` this is about half of the trainable parameters (and Adam state) of an
SB3 ``ActorCriticPolicy`` with ``net_arch=dict(pi=..., vf=...)`` of equal size.

Invalid action masking is supported for ``Discrete``, ``MultiDiscrete`` and ``MultiBinary`` action
spaces (same semantics as sb3-contrib's ``MaskableActorCriticPolicy``: ``True`` = allowed).
``Box`` action spaces use a diagonal Gaussian (state-independent log std) and do not accept masks.
"""

import warnings
from functools import partial
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableDistribution, make_masked_proba_distribution
from stable_baselines3.common.distributions import DiagGaussianDistribution, Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    NatureCNN,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn

MaybeMasks = np.ndarray | th.Tensor | None
#: Logit given to masked-out actions (sb3-contrib's value)
MASKED_LOGIT = -1e8
#: Features extractor modules (exact types) without parameters, state or randomness: an extractor built only of these
#: is a fixed function of the observation (``GRPOPolicy.has_static_features``)
STATIC_EXTRACTOR_MODULES: tuple[type[nn.Module], ...] = (
    FlattenExtractor,
    CombinedExtractor,
    nn.Flatten,
    nn.ModuleDict,
    nn.Identity,
)


def categorical_log_prob_entropy(
    logits: th.Tensor, actions: th.Tensor, action_masks: MaybeMasks = None
) -> tuple[th.Tensor, th.Tensor]:
    """
    Log-probability of ``actions`` and entropy of a (masked) categorical distribution given by ``logits``.

    Equal to sb3-contrib's ``MaskableCategorical`` (masked logits set to ``-1e8``, masked actions contribute 0 to
    the entropy), computed directly from ``log_softmax``.

    :param logits: Unnormalised log-probabilities, ``(batch, n_actions)``
    :param actions: Action indices, ``(batch,)``
    :param action_masks: Boolean masks of allowed actions, ``(batch, n_actions)``; None = all allowed
    :return: log-probability ``(batch,)`` and entropy ``(batch,)`` in nats
    """
    masks = None
    if action_masks is not None:
        masks = th.as_tensor(action_masks, dtype=th.bool, device=logits.device).reshape(logits.shape)
        logits = th.where(masks, logits, MASKED_LOGIT)
    # log_softmax over the rows of the transposed view: on CPU, torch's kernel over a short last dimension (a few
    # actions) is 5-10x slower, forward and backward, than over the first dimension of the transposed layout
    log_p = th.log_softmax(logits.t(), dim=0).t()
    log_prob = log_p.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
    p_log_p = log_p.exp() * log_p
    if masks is not None:
        p_log_p = th.where(masks, p_log_p, 0.0)
    return log_prob, -p_log_p.sum(dim=-1)


def sample_masked_categorical(logits: th.Tensor, action_masks: MaybeMasks = None) -> tuple[th.Tensor, th.Tensor]:
    """
    Sample one action per row of ``logits`` and its log-probability, exactly as sb3-contrib's
    ``MaskableCategoricalDistribution`` does (``proba_distribution``, ``apply_masking``, ``sample``, ``log_prob``):
    the same operations in the same order, so the same values bit for bit and the same draw from torch's RNG, without
    building (and validating) three torch ``Categorical`` objects per call.

    :param logits: Action logits, ``(batch, n_actions)``
    :param action_masks: Boolean masks of allowed actions, ``(batch, n_actions)``; None = all allowed
    :return: actions ``(batch,)`` (int64) and their log-probabilities ``(batch,)``
    """
    logits = logits.reshape(-1, logits.shape[-1])
    # MaskableCategorical.__init__: Categorical normalises the logits; those are its "original" logits
    normalised = logits - logits.logsumexp(dim=-1, keepdim=True)
    if action_masks is None:
        masked = normalised  # apply_masking(None): the original logits, normalised again
    else:
        masks = th.as_tensor(action_masks, dtype=th.bool, device=logits.device)
        if masks.shape != normalised.shape:
            masks = masks.reshape(normalised.shape)
        # a Python scalar becomes the same value in the logits' dtype as sb3-contrib's th.tensor(-1e8, dtype=...)
        masked = th.where(masks, normalised, MASKED_LOGIT)
    log_p = masked - masked.logsumexp(dim=-1, keepdim=True)
    drawn = th.multinomial(th.softmax(log_p, dim=-1), 1, True)  # (batch, 1): Categorical.sample's draw, one per row
    return drawn.view(-1), log_p.gather(-1, drawn).view(-1)


class GRPOPolicy(BasePolicy):
    """
    Actor-only stochastic policy (no critic) with optional invalid action masking.

    :param observation_space: Observation space
    :param action_space: Action space (Discrete, MultiDiscrete, MultiBinary or Box)
    :param lr_schedule: Learning rate schedule (could be constant); ``lr_schedule(1)`` is the initial learning rate
    :param net_arch: Hidden layer sizes (number of units per layer) of the actor MLP. ``None`` gives ``[64, 64]``
        (``[]`` with a CNN features extractor). For compatibility with SB3 a dict with a ``"pi"`` key is
        accepted; any ``"vf"`` entry is ignored because no value network is built.
    :param activation_fn: Activation function class used after each hidden layer
    :param ortho_init: Whether to use orthogonal initialization (gain sqrt(2) for hidden layers, 0.01 for the action head)
    :param log_std_init: Initial value of the log standard deviation (Box action spaces only), in log action units
    :param features_extractor_class: Features extractor class
    :param features_extractor_kwargs: Keyword arguments to pass to the features extractor
    :param normalize_images: Whether to normalize images or not, dividing by 255.0 (True by default)
    :param optimizer_class: The optimizer to use, ``th.optim.Adam`` by default
    :param optimizer_kwargs: Additional keyword arguments, excluding the learning rate, to pass to the optimizer
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
        ortho_init: bool = True,
        log_std_init: float = 0.0,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
    ):
        if optimizer_kwargs is None:
            optimizer_kwargs = {}
            # Small values to avoid NaN in Adam optimizer (same default as SB3)
            if optimizer_class == th.optim.Adam:
                optimizer_kwargs["eps"] = 1e-5

        super().__init__(
            observation_space,
            action_space,
            features_extractor_class,
            features_extractor_kwargs,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
            squash_output=False,
        )

        if isinstance(net_arch, dict):
            if "vf" in net_arch:
                warnings.warn("GRPO policies have no value network: net_arch['vf'] is ignored.", UserWarning, stacklevel=2)
            net_arch = list(net_arch.get("pi", []))
        if net_arch is None:
            net_arch = [] if features_extractor_class == NatureCNN else [64, 64]

        self.net_arch: list[int] = list(net_arch)
        self.activation_fn = activation_fn
        self.ortho_init = ortho_init
        self.log_std_init = log_std_init

        self.features_extractor = self.make_features_extractor()
        self.features_dim = self.features_extractor.features_dim

        if isinstance(action_space, spaces.Box):
            self.action_dist: Distribution = DiagGaussianDistribution(int(np.prod(action_space.shape)))
        else:
            self.action_dist = make_masked_proba_distribution(action_space)

        self._build(lr_schedule)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            {
                "net_arch": self.net_arch,
                "activation_fn": self.activation_fn,
                "ortho_init": self.ortho_init,
                "log_std_init": self.log_std_init,
                "lr_schedule": self._dummy_schedule,  # dummy lr schedule, not needed for loading policy alone
                "optimizer_class": self.optimizer_class,
                "optimizer_kwargs": self.optimizer_kwargs,
                "features_extractor_class": self.features_extractor_class,
                "features_extractor_kwargs": self.features_extractor_kwargs,
            }
        )
        return data

    def _build(self, lr_schedule: Schedule) -> None:
        """
        Create the actor network, the action head and the optimizer.

        :param lr_schedule: Learning rate schedule, ``lr_schedule(1)`` is the initial learning rate
        """
        layers: list[nn.Module] = []
        last_dim = self.features_dim
        for units in self.net_arch:
            layers += [nn.Linear(last_dim, units), self.activation_fn()]
            last_dim = units
        self.actor_net = nn.Sequential(*layers)
        self.latent_dim_pi = last_dim

        if isinstance(self.action_dist, DiagGaussianDistribution):
            self.action_net, self.log_std = self.action_dist.proba_distribution_net(
                latent_dim=self.latent_dim_pi, log_std_init=self.log_std_init
            )
        else:
            self.action_net = self.action_dist.proba_distribution_net(latent_dim=self.latent_dim_pi)

        if self.ortho_init:
            module_gains = {
                self.features_extractor: np.sqrt(2),
                self.actor_net: np.sqrt(2),
                self.action_net: 0.01,
            }
            for module, gain in module_gains.items():
                module.apply(partial(self.init_weights, gain=gain))

        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[call-arg]

    @property
    def supports_masking(self) -> bool:
        """Whether the action distribution accepts invalid action masks."""
        return isinstance(self.action_dist, MaskableDistribution)

    @property
    def has_static_features(self) -> bool:
        """
        Whether the features extractor is a fixed function of the observation, so that its output on a rollout can
        be computed once per update instead of once per minibatch and epoch (:meth:`static_features`).

        True when the extractor has no parameters and no buffers and is built only of modules known to be
        deterministic (SB3's ``FlattenExtractor`` and ``CombinedExtractor`` over flattened inputs, ``nn.Flatten``,
        ``nn.ModuleDict``, ``nn.Identity``; exact types, not subclasses); False for a CNN or any learned extractor.
        """
        extractor = self.features_extractor
        return (
            next(extractor.parameters(), None) is None
            and next(extractor.buffers(), None) is None
            and all(type(module) in STATIC_EXTRACTOR_MODULES for module in extractor.modules())
        )

    def static_features(self, obs: PyTorchObs) -> th.Tensor:
        """
        The features extractor's output (observation preprocessing included) on ``obs``, without autograd.

        Only valid when :attr:`has_static_features`: the features then do not depend on the policy's parameters, and
        :meth:`evaluate_features` on rows of them gives what :meth:`evaluate_actions` gives on the observations.

        :param obs: Observations (tensor or dict of tensors, already batched)
        :return: Features, ``(batch, features_dim)``
        """
        if not self.has_static_features:
            raise ValueError(
                f"{type(self.features_extractor).__name__} is not a fixed function of the observation "
                "(it has parameters or buffers, or modules of types not in STATIC_EXTRACTOR_MODULES)"
            )
        with th.no_grad():
            return self.extract_features(obs, self.features_extractor)  # type: ignore[return-value]

    def _flat_features(self, obs: PyTorchObs) -> th.Tensor | None:
        """
        The features extractor's output computed directly, when it is SB3's ``CombinedExtractor`` flattening float32
        Box observations (``MultiInputPolicy`` on EDO): then preprocessing is the identity (``.float()`` of float32)
        and the features are the flattened keys concatenated in the extractor's order, exactly. None otherwise (or
        for observations that are not float32 tensors), and the caller extracts them the usual way.
        """
        keys = self._flat_keys()
        if keys is None or not isinstance(obs, dict) or any(obs[key].dtype != th.float32 for key in keys):
            return None
        return th.cat([obs[key].flatten(1) for key in keys], dim=1)

    def sample_from_numpy(
        self, obs: dict[str, np.ndarray], action_masks: MaybeMasks = None
    ) -> tuple[th.Tensor, th.Tensor] | None:
        """
        ``forward(obs_as_tensor(obs, device), action_masks=action_masks)`` for a batch of numpy Dict observations,
        bit for bit and with the same draw, when the policy is on the CPU with a Discrete action space and the flat
        features of :meth:`_flat_features` (``MultiInputPolicy`` on EDO): the keys are concatenated in numpy and
        handed to torch as one tensor, instead of one tensor per key then ``cat``. None otherwise (use ``forward``).

        :param obs: Observations, a dict of numpy arrays with a leading batch dimension
        :param action_masks: Boolean masks of allowed actions, ``(batch, n_actions)``; None = all allowed
        :return: actions ``(batch,)`` and their log-probabilities ``(batch,)``, or None
        """
        keys = self._flat_keys()
        if keys is None or not isinstance(obs, dict):
            return None
        if not isinstance(self.action_space, spaces.Discrete) or type(self).forward is not GRPOPolicy.forward:
            return None
        # on the CPU: the action head's weight tells (BasePolicy.device walks every module for its first parameter,
        # 20-40 us a call, more than the rest of this check; a policy's parameters move together with ``to``)
        head = self.action_net
        if type(head) is not nn.Linear or head.weight.device.type != "cpu":
            return None
        parts = [obs[key] for key in keys]
        if any(type(part) is not np.ndarray or part.dtype != np.float32 for part in parts):
            return None
        n = parts[0].shape[0]
        features = th.from_numpy(np.concatenate([part.reshape(n, -1) for part in parts], axis=1))
        return sample_masked_categorical(head(self.actor_net(features)), action_masks)

    def _flat_keys(self) -> list[str] | None:
        """:meth:`_find_flat_feature_keys`, found once per policy."""
        keys = self.__dict__.get("_flat_feature_keys", False)
        if keys is False:
            keys = self._flat_feature_keys = self._find_flat_feature_keys()
        return keys

    def _find_flat_feature_keys(self) -> list[str] | None:
        extractor = self.features_extractor
        space = self.observation_space
        if type(extractor) is not CombinedExtractor or not isinstance(space, spaces.Dict):
            return None
        keys = list(extractor.extractors.keys())
        for key in keys:
            sub_extractor, sub_space = extractor.extractors[key], space.spaces.get(key)
            if type(sub_extractor) is not nn.Flatten or (sub_extractor.start_dim, sub_extractor.end_dim) != (1, -1):
                return None
            if type(sub_space) is not spaces.Box or sub_space.dtype != np.float32:
                return None
        return keys

    def _distribution_from_features(self, features: th.Tensor, action_masks: MaybeMasks = None) -> Distribution:
        """Action distribution given the features extractor's output, with masks applied."""
        mean_actions = self.action_net(self.actor_net(features))
        if isinstance(self.action_dist, DiagGaussianDistribution):
            if action_masks is not None:
                raise ValueError("Action masking is not supported for Box action spaces")
            return self.action_dist.proba_distribution(mean_actions, self.log_std)
        distribution = self.action_dist.proba_distribution(action_logits=mean_actions)
        if action_masks is not None:
            distribution.apply_masking(action_masks)  # type: ignore[attr-defined]
        return distribution

    def get_distribution(self, obs: PyTorchObs, action_masks: MaybeMasks = None) -> Distribution:
        """
        Action distribution for the given observations, with masks applied.

        :param obs: Observation (tensor or dict of tensors, already batched)
        :param action_masks: Boolean masks of allowed actions, shape ``(batch, sum(action_dims))``; None = no masking
        :return: The action distribution
        """
        features = self.extract_features(obs, self.features_extractor)
        return self._distribution_from_features(features, action_masks)  # type: ignore[arg-type]

    def forward(  # type: ignore[override]
        self,
        obs: PyTorchObs,
        deterministic: bool = False,
        action_masks: MaybeMasks = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """
        Sample actions (there is no value output: GRPO has no critic).

        :param obs: Observation
        :param deterministic: Whether to sample or use deterministic actions
        :param action_masks: Action masks to apply to the action distribution
        :return: actions (shape ``(batch, *action_space.shape)``) and their log probability (shape ``(batch,)``)
        """
        if isinstance(self.action_space, spaces.Discrete) and not deterministic:
            features = self._flat_features(obs)
            if features is None:
                features = self.extract_features(obs, self.features_extractor)
            logits = self.action_net(self.actor_net(features))
            return sample_masked_categorical(logits, action_masks)
        distribution = self.get_distribution(obs, action_masks)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        actions = actions.reshape((-1, *self.action_space.shape))  # type: ignore[misc]
        return actions, log_prob

    def evaluate_actions(
        self,
        obs: PyTorchObs,
        actions: th.Tensor,
        action_masks: MaybeMasks = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """
        Log probability and entropy of given actions under the current policy.

        :param obs: Observation
        :param actions: Actions (long for discrete spaces), shape ``(batch, *action_space.shape)``
        :param action_masks: Action masks to apply to the action distribution
        :return: log likelihood of the actions (shape ``(batch,)``) and entropy of the distribution (shape ``(batch,)``)
        """
        features = self.extract_features(obs, self.features_extractor)
        return self.evaluate_features(features, actions, action_masks)  # type: ignore[arg-type]

    def evaluate_features(
        self,
        features: th.Tensor,
        actions: th.Tensor,
        action_masks: MaybeMasks = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """
        :meth:`evaluate_actions` given the features extractor's output instead of the observations.

        :param features: Output of the features extractor, ``(batch, features_dim)`` (e.g. rows of
            :meth:`static_features`)
        :param actions: Actions (long for discrete spaces), shape ``(batch, *action_space.shape)``
        :param action_masks: Action masks to apply to the action distribution
        :return: log likelihood of the actions (shape ``(batch,)``) and entropy of the distribution (shape ``(batch,)``)
        """
        if isinstance(self.action_space, spaces.Discrete):
            # Same values as the masked Categorical distribution, without building one (a third of the update time
            # of a small MLP went into constructing and validating torch distributions)
            logits = self.action_net(self.actor_net(features))
            return categorical_log_prob_entropy(logits, actions, action_masks)
        distribution = self._distribution_from_features(features, action_masks)
        log_prob = distribution.log_prob(actions)
        entropy = distribution.entropy()
        assert entropy is not None
        return log_prob, entropy

    def _predict(  # type: ignore[override]
        self,
        observation: PyTorchObs,
        deterministic: bool = False,
        action_masks: MaybeMasks = None,
    ) -> th.Tensor:
        """
        Get the action according to the policy for a given observation.

        :param observation: Observation
        :param deterministic: Whether to use stochastic or deterministic actions
        :param action_masks: Action masks to apply to the action distribution
        :return: Taken action according to the policy
        """
        return self.get_distribution(observation, action_masks).get_actions(deterministic=deterministic)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """
        Get the policy action from an observation (and optional hidden state).

        :param observation: the input observation (single or batched, Gym or VecEnv style)
        :param state: The last states (unused, no recurrence; returned as is)
        :param episode_start: The last episode starts (unused, no recurrence)
        :param deterministic: Whether or not to return deterministic actions
        :param action_masks: Action masks to apply to the action distribution
        :return: the model's action and the next state (unchanged)
        """
        self.set_training_mode(False)

        if isinstance(observation, tuple) and len(observation) == 2 and isinstance(observation[1], dict):
            raise ValueError(
                "You have passed a tuple to the predict() function instead of a Numpy array or a Dict. "
                "You are probably mixing Gym API with SB3 VecEnv API: `obs, info = env.reset()` (Gym) "
                "vs `obs = vec_env.reset()` (SB3 VecEnv)."
            )

        obs_tensor, vectorized_env = self.obs_to_tensor(observation)

        with th.no_grad():
            actions = self._predict(obs_tensor, deterministic=deterministic, action_masks=action_masks)
            actions = actions.cpu().numpy().reshape((-1, *self.action_space.shape))  # type: ignore[assignment, misc, arg-type]

        if isinstance(self.action_space, spaces.Box):
            actions = np.clip(actions, self.action_space.low, self.action_space.high)  # type: ignore[assignment, arg-type]

        if not vectorized_env:
            assert isinstance(actions, np.ndarray)
            actions = actions.squeeze(axis=0)

        return actions, state  # type: ignore[return-value]


class GRPOCnnPolicy(GRPOPolicy):
    """
    Actor-only CNN policy (NatureCNN features extractor by default).

    :param observation_space: Observation space
    :param action_space: Action space
    :param lr_schedule: Learning rate schedule (could be constant)
    :param net_arch: Hidden layer sizes of the actor MLP after the CNN (default ``[]``)
    :param activation_fn: Activation function
    :param ortho_init: Whether to use orthogonal initialization
    :param log_std_init: Initial value of the log standard deviation (Box only)
    :param features_extractor_class: Features extractor to use
    :param features_extractor_kwargs: Keyword arguments to pass to the features extractor
    :param normalize_images: Whether to normalize images or not, dividing by 255.0
    :param optimizer_class: The optimizer to use
    :param optimizer_kwargs: Additional keyword arguments, excluding the learning rate, to pass to the optimizer
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
        ortho_init: bool = True,
        log_std_init: float = 0.0,
        features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
    ):
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch,
            activation_fn,
            ortho_init,
            log_std_init,
            features_extractor_class,
            features_extractor_kwargs,
            normalize_images,
            optimizer_class,
            optimizer_kwargs,
        )


class MultiInputGRPOPolicy(GRPOPolicy):
    """
    Actor-only policy for ``Dict`` observation spaces (CombinedExtractor by default).

    :param observation_space: Observation space (Dict)
    :param action_space: Action space
    :param lr_schedule: Learning rate schedule (could be constant)
    :param net_arch: Hidden layer sizes of the actor MLP (default ``[64, 64]``)
    :param activation_fn: Activation function
    :param ortho_init: Whether to use orthogonal initialization
    :param log_std_init: Initial value of the log standard deviation (Box only)
    :param features_extractor_class: Features extractor to use
    :param features_extractor_kwargs: Keyword arguments to pass to the features extractor
    :param normalize_images: Whether to normalize images or not, dividing by 255.0
    :param optimizer_class: The optimizer to use
    :param optimizer_kwargs: Additional keyword arguments, excluding the learning rate, to pass to the optimizer
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
        ortho_init: bool = True,
        log_std_init: float = 0.0,
        features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
    ):
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch,
            activation_fn,
            ortho_init,
            log_std_init,
            features_extractor_class,
            features_extractor_kwargs,
            normalize_images,
            optimizer_class,
            optimizer_kwargs,
        )


MlpPolicy = GRPOPolicy
CnnPolicy = GRPOCnnPolicy
MultiInputPolicy = MultiInputGRPOPolicy
