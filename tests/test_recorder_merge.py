"""The recorder's priority merge of actor tracks (colocated GPUs) on interval arrays gives exactly
the intervals of the plain per-piece merge it replaced, kept here as the reference."""

from __future__ import annotations

import random

import pytest
from small_scenarios import make

from rlsim.simulator.recorder import Interval, _merge
from rlsim.simulator.run import simulate
from rlsim.simulator.states import ALL_STATES, BUSY_STATES


def _reference_merge(tracks: list[list[Interval]]) -> list[Interval]:
    cuts = sorted({iv.start_s for tr in tracks for iv in tr} | {tr[-1].end_s for tr in tracks if tr})
    out: list[Interval] = []
    idx = [0] * len(tracks)
    for a, b in zip(cuts, cuts[1:]):
        chosen = None
        for i, tr in enumerate(tracks):
            if not tr:
                continue
            while idx[i] < len(tr) - 1 and tr[idx[i]].end_s <= a:
                idx[i] += 1
            iv = tr[idx[i]]
            if chosen is None:
                chosen = iv
            if iv.state in BUSY_STATES:
                chosen = iv
                break
        if out and out[-1].state == chosen.state and out[-1].step == chosen.step and out[-1].end_s == a:
            out[-1] = Interval(chosen.state, out[-1].start_s, b, chosen.step, chosen.version)
        else:
            out.append(Interval(chosen.state, a, b, chosen.step, chosen.version))
    return out


def _track(rng: random.Random, end: float, grid: list[float]) -> list[Interval]:
    cuts = sorted({0.0, end, *rng.sample(grid, rng.randint(0, len(grid) // 2))})
    states = sorted(ALL_STATES)
    return [Interval(rng.choice(states), a, b, rng.randint(0, 2), rng.randint(0, 2)) for a, b in zip(cuts, cuts[1:])]


@pytest.mark.parametrize("seed", range(40))
def test_merge_matches_the_reference_on_random_tracks(seed):
    rng = random.Random(seed)
    grid = [round(rng.uniform(0.1, 9.9), 1) for _ in range(30)]  # shared cut points: ties between tracks
    tracks = [_track(rng, 10.0, grid) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.2:
        tracks.insert(rng.randint(0, len(tracks)), [])
    assert _merge(tracks) == _reference_merge(tracks)


@pytest.mark.parametrize("tp", [1, 2])
def test_merge_matches_the_reference_on_colocated_runs(tp):
    rec = simulate(make(overrides=["pipeline.mode=colocated", f"pipeline.inference.tp={tp}"])).recorder
    shared = [g for g, actors in rec.gpu_actors.items() if len(actors) > 1]
    assert shared
    for gpu in shared:
        tracks = [rec.actor_intervals[a] for a in rec.gpu_actors[gpu]]
        assert rec.gpu_timeline(gpu) == _reference_merge(tracks)
