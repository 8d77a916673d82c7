"""Planner, workers and the generation backend interface."""

from edo_gym.agents.backend import GenerationBackend, GenerationRequest, GenerationResult, SimulatedBackend
from edo_gym.agents.planner import Plan, Planner, PlanStep
from edo_gym.agents.worker import CallRecord, Worker

__all__ = [
    "CallRecord",
    "GenerationBackend",
    "GenerationRequest",
    "GenerationResult",
    "Plan",
    "PlanStep",
    "Planner",
    "SimulatedBackend",
    "Worker",
]
