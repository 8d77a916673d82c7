"""The EDO orchestration environment."""

from edo_gym.envs.edo_env import EDOEnv

__all__ = ["EDOEnv"]
