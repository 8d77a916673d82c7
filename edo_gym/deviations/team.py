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


def _skill(value: float, offset: float) -> float:
    return min(SKILL_CEILING, max(SKILL_FLOOR, value + offset))


def _with(spec: WorkerSpec, **values: object) -> WorkerSpec:
    """``spec`` with some fields replaced, without ``WorkerSpec``'s validation (a draw is in range by construction;
    validating every drawn spec at every reset would cost more than the rest of the draw)."""
    drawn = object.__new__(WorkerSpec)
    drawn.__dict__.update(spec.__dict__, **values)
    return drawn


def draw_team(workers: tuple[WorkerSpec, ...], config: DeviationConfig, held_out: bool, rng: np.random.Generator) -> TeamDraw:
    """Draw an episode's team around the public profiles ``workers`` (see the module docstring)."""
    n = sum(len(spec.skills) + len(spec.domain_skills) + 1 for spec in workers)
    # every uniform number the draw needs, in one call: per offset its size and its sign, per worker a drop and a pick
    u = rng.random(2 * n + 2 * len(workers)).tolist()
    low, high = (config.team_spread, config.team_held_out_spread) if held_out else (0.0, config.team_spread)
    offsets = iter(
        [(low + (high - low) * size) * (1.0 if sign < 0.5 else -1.0) for size, sign in zip(u[:n], u[n : 2 * n], strict=True)]
    )
    specs = []
    missing = []
    for k, spec in enumerate(workers):
        skills = {name: _skill(v, next(offsets)) for name, v in spec.skills.items()}
        domains = {name: _skill(v, next(offsets)) for name, v in spec.domain_skills.items()}
        price = max(0.01, spec.price * (1.0 + next(offsets)))
        specs.append(_with(spec, skills=skills, domain_skills=domains, price=price))
        drop, pick = u[2 * n + 2 * k], u[2 * n + 2 * k + 1]
        lacks: tuple[str, ...] = ()
        if len(spec.shard) >= 2 and drop < config.shard_drop_rate:
            lacks = (spec.shard[int(pick * len(spec.shard))],)
        missing.append(lacks)
    return TeamDraw(specs=tuple(specs), missing_domains=tuple(missing), drawn=True, held_out=held_out)
