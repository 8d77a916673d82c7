"""Agents of the multi-agent system: the LLM protocol, the simulated models, the planner, workers and verifiers."""

from edo_gym.agents.backend import RetryPolicy, TransientBackendError, call_backend
from edo_gym.agents.planner import PLAN_FORMAT, Plan, PlanError, PlanStep, parse_plan
from edo_gym.agents.protocol import LLMBackend, LLMRequest, LLMResponse
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.agents.worker import AgentCaller, CallCost, CallRecord, VerifyRecord, Worker

__all__ = [
    "PLAN_FORMAT",
    "AgentCaller",
    "CallCost",
    "CallRecord",
    "LLMBackend",
    "LLMRequest",
    "LLMResponse",
    "Plan",
    "PlanError",
    "PlanStep",
    "RetryPolicy",
    "SimulatedBackend",
    "TransientBackendError",
    "VerifyRecord",
    "Worker",
    "call_backend",
    "parse_plan",
]
