"""Registered environment ids. ``register_edo_envs()`` runs at ``import edo_gym`` and is idempotent."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from edo_gym.config import small_workers

ENTRY_POINT = "edo_gym.envs.edo_env:EDOEnv"

#: ``gym.make`` keyword arguments that switch the deviations from the script off (every rate at 0, no tiered refunds)
#: and the ``verify_plan(w)`` actions with them: the dynamics and spaces of EDO-Gym 0.3.0, e.g.
#: ``gym.make("EDO-v0", **SCRIPTED)``.
SCRIPTED: dict[str, Any] = {
    "tasks_phrasing_rate": 0.0,
    "tasks_extra_step_rate": 0.0,
    "world_tiered_refunds": False,
    "deviations_team_rate": 0.0,
    "deviations_drift_rate": 0.0,
    "enable_plan_review": False,
}

#: id -> keyword arguments for ``EDOEnv`` (see ``EDOConfig.from_kwargs``). Flat ``section_field`` keys, so that
#: ``gym.make(id, tasks={...})`` (which gymnasium merges shallowly into these) overrides single fields only.
VARIANTS: dict[str, dict[str, Any]] = {
    "EDO-v0": {},
    "EDO-Easy-v0": {"tasks_min_hops": 1, "tasks_max_hops": 2, "planner_error_rate": 0.05},
    "EDO-Hard-v0": {"tasks_min_hops": 3, "tasks_max_hops": 6, "planner_error_rate": 0.5},
    "EDO-LongHorizon-v0": {"tasks_families": ("multihop", "analytics"), "tasks_min_hops": 8, "tasks_max_hops": 12},
    "EDO-Support-v0": {"tasks_families": ("support",)},
    "EDO-MultiHop-v0": {"tasks_families": ("multihop",)},
    "EDO-Analytics-v0": {"tasks_families": ("analytics",)},
    # within a small local model's reach: one- and two-hop lookups and refund replies (no arithmetic), plans read off
    # the task text by rules (a 135M model cannot write one), one document per retrieval, answers in sentences linked
    # by the entity they name, shipments found by their tracking number
    "EDO-Small-v0": {
        "tasks_families": ("multihop", "support"),
        "tasks_min_hops": 1,
        "tasks_max_hops": 2,
        "planner_mode": "rules",
        "enable_replan": False,
        "entity_linking": "mentions",
        "lookup_inputs": False,
        "world_distractors_per_fact": 0,
        "retrieval_identifier_match": True,
        "workers": small_workers(),
        # the scripted world of 0.3.0: its recorded model calls were made there
        **SCRIPTED,
    },
}


def register_edo_envs() -> None:
    """Register every id in ``VARIANTS`` that is not registered yet."""
    for env_id, kwargs in VARIANTS.items():
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs=kwargs, disable_env_checker=False)
