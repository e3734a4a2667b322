"""Drawing multi-turn agent episodes: turns, per-turn responses, observations and tool latencies.

An agent scenario (`workload.agent`) makes every completion of a group an episode of T turns.
Turn 0's response is the length `workload.py` already draws; the other turns' responses come
from the same distribution (sharing the group's common component, so a hard prompt makes every
turn long), each tool call's observation from `observation_tokens`, each call's seconds from
`tool_latency_s`. All of it is drawn after the single-turn draws, from the same generator, so a
scenario without `workload.agent` draws exactly what it always did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.scenario import AgentLoop, LengthDist

TURNS_FIELD = "workload.agent.turns.path"
OBSERVATION_FIELD = "workload.agent.observation_tokens.path"


@dataclass(frozen=True)
class EpisodeDraw:
    """One episode's plan: a response per turn, an observation and a call's seconds per tool call."""

    responses: tuple[int, ...]  # tokens; one per turn (turn 0's is the single-turn draw)
    observations: tuple[int, ...]  # tokens appended after each turn but the last
    tool_s: tuple[float, ...]  # seconds of each tool call


def tool_seconds(agent: AgentLoop, n: int, rng: np.random.Generator) -> np.ndarray:
    """n call durations, s: lognormal with mean `mean_s` (constant when sigma is 0), cut at max_s."""
    lat = agent.tool_latency_s
    if lat.sigma == 0 or lat.mean_s == 0:
        out = np.full(n, lat.mean_s)
    else:
        mu = math.log(lat.mean_s) - lat.sigma**2 / 2.0
        out = np.exp(mu + lat.sigma * rng.standard_normal(n))
    return np.minimum(out, lat.max_s) if lat.max_s is not None else out


def draw_episodes(
    agent: AgentLoop,
    first: np.ndarray,
    group_size: int,
    rho: float,
    rng: np.random.Generator,
    draw_lengths,
    response_dist: LengthDist,
    base_dir: Path,
) -> list[tuple[EpisodeDraw, ...]]:
    """The episodes of n groups whose turn-0 responses are `first` (shape n x G).

    `draw_lengths(dist, count, z, field)` draws lengths as workload.py does (z: standard normals).
    """
    n, g = first.shape
    m = n * g
    turns = np.maximum(1, draw_lengths(agent.turns, m, rng.standard_normal(m), TURNS_FIELD))
    later = int((turns - 1).sum())  # turns after the first, over every episode
    owner = np.repeat(np.arange(m), turns - 1)  # the episode of each later turn (episodes in order)
    common = rng.standard_normal(n)[owner // g]  # the group's component, shared by its turns
    z = math.sqrt(rho) * common + math.sqrt(1 - rho) * rng.standard_normal(later)
    responses = draw_lengths(response_dist, later, z, "workload.response_tokens.path").tolist()
    observations = draw_lengths(agent.observation_tokens, later, rng.standard_normal(later), OBSERVATION_FIELD).tolist()
    seconds = tool_seconds(agent, later, rng).tolist()
    out: list[tuple[EpisodeDraw, ...]] = []
    flat, pos = first.ravel().tolist(), 0
    counts = turns.tolist()
    for i in range(n):
        episodes = []
        for j in range(g):
            k = counts[i * g + j] - 1
            episodes.append(
                EpisodeDraw(
                    responses=(flat[i * g + j], *responses[pos : pos + k]),
                    observations=tuple(observations[pos : pos + k]),
                    tool_s=tuple(seconds[pos : pos + k]),
                )
            )
            pos += k
        out.append(tuple(episodes))
    return out
