"""Departures from the script that an episode may hold, one module each (see ``DeviationConfig``).

- :mod:`edo_gym.deviations.team`: the episode's team is drawn around the public worker profiles (skills, prices,
  shard membership); the test split holds draws outside the training range;
- :mod:`edo_gym.deviations.drift`: during an episode a worker changes its output format or stops answering.

The language deviation (many phrasings per relation, held-out ones in the test split) is drawn with the task
texts, in :mod:`edo_gym.world.phrasing`; plans that must change mid-way (a step no plan written from the task text
holds, revealed by a result) with the tasks and the world, in :mod:`edo_gym.world.extra_step`. Every draw here is
hidden: the observation shows the public profiles and what the episode has revealed;
``EDOEnv.hidden_state()["deviations"]`` tells the oracle and the tests.
"""

from edo_gym.deviations.drift import Drift, DriftingBackend, WorkerDownError, draw_drift, reformat
from edo_gym.deviations.team import TeamDraw, draw_team, public_team

__all__ = ["Drift", "DriftingBackend", "TeamDraw", "WorkerDownError", "draw_drift", "draw_team", "public_team", "reformat"]
