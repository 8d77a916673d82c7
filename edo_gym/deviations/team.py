"""Teams that differ: an episode's workers drawn around their public profiles.

A real team is not its spec sheet: a model update shifts what a worker is good at, a price changes, an index misses
a domain it is listed with. With probability ``DeviationConfig.team_rate`` an episode's team is drawn:

- each skill (per type and per lookup domain) moves by an offset ``d`` with a random sign (clipped to [0.02, 0.98]);
- each price is multiplied by ``1 + d`` (another offset);
- with probability ``shard_drop_rate`` a worker whose shard holds two domains or more lacks one of them this episode
  (its retriever returns no document of that domain).

Training draws (``held_out=False``) take ``|d|`` uniform in ``[0, team_spread]``; held-out draws (the test split)
in ``[team_spread, team_held_out_spread]``: no training episode shows a team that far from its profile. The
observation keeps showing the public profiles; only the episode's outcomes (answers, abstentions, verdicts, costs)
reveal the draw.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from edo_gym.config import DeviationConfig, WorkerSpec

SKILL_FLOOR, SKILL_CEILING = 0.02, 0.98


@dataclass(frozen=True)
class TeamDraw:
    """The team of one episode (hidden): each worker's drawn spec and the shard domains its index lacks."""

    specs: tuple[WorkerSpec, ...]
    missing_domains: tuple[tuple[str, ...], ...]
    #: Whether the team was drawn (``False``: the public profiles, unchanged).
    drawn: bool = False
    #: Whether the draw was a held-out one (outside the training range).
    held_out: bool = False


def public_team(workers: tuple[WorkerSpec, ...]) -> TeamDraw:
    """The team as its public profiles say (no deviation)."""
    return TeamDraw(specs=workers, missing_domains=tuple(() for _ in workers))


def _offset(config: DeviationConfig, held_out: bool, rng: np.random.Generator) -> float:
    low, high = (config.team_spread, config.team_held_out_spread) if held_out else (0.0, config.team_spread)
    size = float(rng.uniform(low, high))
    return size if rng.random() < 0.5 else -size


def _skill(value: float, offset: float) -> float:
    return float(min(SKILL_CEILING, max(SKILL_FLOOR, value + offset)))


def draw_team(workers: tuple[WorkerSpec, ...], config: DeviationConfig, held_out: bool, rng: np.random.Generator) -> TeamDraw:
    """Draw an episode's team around the public profiles ``workers`` (see the module docstring)."""
    specs = []
    missing = []
    for spec in workers:
        skills = {k: _skill(v, _offset(config, held_out, rng)) for k, v in sorted(spec.skills.items())}
        domains = {k: _skill(v, _offset(config, held_out, rng)) for k, v in sorted(spec.domain_skills.items())}
        price = max(0.01, spec.price * (1.0 + _offset(config, held_out, rng)))
        specs.append(dataclasses.replace(spec, skills=skills, domain_skills=domains, price=price))
        lacks: tuple[str, ...] = ()
        if len(spec.shard) >= 2 and rng.random() < config.shard_drop_rate:
            lacks = (spec.shard[int(rng.integers(len(spec.shard)))],)
        missing.append(lacks)
    return TeamDraw(specs=tuple(specs), missing_domains=tuple(missing), drawn=True, held_out=held_out)
