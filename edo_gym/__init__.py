"""EDO-Gym: learned orchestration of multi-agent LLM systems as a Gymnasium environment.

``import edo_gym`` registers ``EDO-v0`` and its variants (see ``edo_gym.registration.VARIANTS``);
``gym.make("edo_gym:EDO-v0")`` works in any fresh process. The env's hot modules run compiled where ``edo compile``
has built them from their current source (see ``edo_gym.compiled``; ``EDO_GYM_COMPILED=off`` runs pure Python).
"""

from edo_gym.compiled import install_finder

install_finder()  # before the env's modules are imported: a stale or unlisted build never runs

from edo_gym.config import (  # noqa: E402
    EDOConfig,
    PlannerConfig,
    RetrievalConfig,
    RewardConfig,
    TaskConfig,
    WorkerSpec,
    WorldConfig,
    default_workers,
)
from edo_gym.envs.edo_env import EDOEnv  # noqa: E402
from edo_gym.registration import VARIANTS, register_edo_envs  # noqa: E402

__version__ = "0.3.0"

register_edo_envs()

__all__ = [
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
