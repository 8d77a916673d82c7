"""EDO-Gym: learned orchestration of multi-agent LLM systems as a Gymnasium environment.

``import edo_gym`` registers ``EDO-v0`` and its variants (see ``edo_gym.registration.VARIANTS``);
``gym.make("edo_gym:EDO-v0")`` works in any fresh process.
"""

from edo_gym.config import (
    EDOConfig,
    PlannerConfig,
    RetrievalConfig,
    RewardConfig,
    TaskConfig,
    WorkerSpec,
    WorldConfig,
    default_workers,
)
from edo_gym.envs.edo_env import EDOEnv
from edo_gym.registration import SCRIPTED, VARIANTS, register_edo_envs

__version__ = "0.4.0"

register_edo_envs()

__all__ = [
    "SCRIPTED",
    "VARIANTS",
    "EDOConfig",
    "EDOEnv",
    "PlannerConfig",
    "RetrievalConfig",
    "RewardConfig",
    "TaskConfig",
    "WorkerSpec",
    "WorldConfig",
    "__version__",
    "default_workers",
    "register_edo_envs",
]
