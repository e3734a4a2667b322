"""The recorder's columns (track.py): `on_states` (a refill's steps at once, whole slices when
it can) records exactly what `on_state` one entry at a time does, and the read-only views give
back the intervals and samples that were written."""

from __future__ import annotations

import random

import pytest

from rlsim.simulator.recorder import Interval, Recorder
from rlsim.simulator.track import Track

STATES = ["decode", "prefill", "idle_weights"]


def _recorders(open_state: tuple[str, float, int, int]) -> tuple[Recorder, Recorder]:
    recs = Recorder(), Recorder()
    for rec in recs:
        rec.add_actor("engine0", "inference", [0], open_state[0])
        rec.on_state("engine0", *open_state)
    return recs


def _entries(rng: random.Random, start: float, n: int, alternating: bool):
    states, times, steps = [], [], []
    t = start
    for i in range(n):
        states.append(STATES[i % 2] if alternating else rng.choice(STATES))
        t += rng.choice([0.0, 0.5, 1.0]) if not alternating else rng.uniform(0.1, 1.0)
        times.append(t)
        steps.append(rng.randint(0, 1))
    return states, times, steps


@pytest.mark.parametrize("seed", range(60))
def test_on_states_matches_on_state_one_by_one(seed):
    rng = random.Random(seed)
    open_state = (rng.choice(STATES), rng.choice([0.0, 1.0]), rng.randint(0, 1), rng.randint(0, 1))
    bulk, single = _recorders(open_state)
    t = open_state[1]
    for _ in range(rng.randint(1, 5)):  # several refill commits in a row
        version = rng.randint(0, 1)
        states, times, steps = _entries(rng, t - rng.choice([0.0, 0.5]), rng.randint(0, 8), rng.random() < 0.5)
        bulk.on_states("engine0", states, times, steps, version)
        for state, now, step in zip(states, times, steps):
            single.on_state("engine0", state, now, step, version)
        t = max([t, *times])
    end = t + 1.0
    bulk.close(end)
    single.close(end)
    assert bulk.actor_intervals["engine0"] == single.actor_intervals["engine0"]
    assert bulk._open == single._open


def test_views_give_back_what_was_written():
    rec = Recorder()
    rec.add_actor("engine0", "inference", [0], "idle_weights")
    rec.on_state("engine0", "prefill", 0.5, 1, 0)
    rec.on_state("engine0", "decode", 1.25, 1, 0)
    rec.close(2.0)
    assert rec.actor_intervals["engine0"] == [
        Interval("idle_weights", 0.0, 0.5, 0, 0),
        Interval("prefill", 0.5, 1.25, 1, 0),
        Interval("decode", 1.25, 2.0, 1, 0),
    ]
    assert list(rec.actor_intervals) == ["engine0"]
    assert list(rec.tracks["engine0"].durations()) == [("idle_weights", 0.5), ("prefill", 0.75), ("decode", 0.75)]
    rec.on_batch("engine0", 0.5, 3)
    rec.on_batches("engine0", [1.0, 1.5], [2, 1])
    assert rec.batch_samples["engine0"] == [(0.5, 3), (1.0, 2), (1.5, 1)]
    assert Track.of(rec.actor_intervals["engine0"]).intervals() == rec.actor_intervals["engine0"]


class _Later:
    """Entries deferred for one actor: logged through the recorder when settled."""

    def __init__(self, rec: Recorder, entries: list[tuple[str, float]]) -> None:
        self.rec, self.entries, self.settled = rec, entries, 0

    def settle(self) -> None:
        self.settled += 1
        for state, now in self.entries:
            self.rec.on_state("engine0", state, now)
        self.rec.on_batch("engine0", self.entries[-1][1], len(self.entries))


def _deferring() -> Recorder:
    rec = Recorder()
    for actor in ("engine0", "engine1"):
        rec.add_actor(actor, "inference", [0 if actor == "engine0" else 1], "idle_weights")
    return rec


def test_deferred_entries_are_logged_before_the_actors_next_entry():
    rec = _deferring()
    later = _Later(rec, [("prefill", 1.0), ("decode", 2.0)])
    rec.defer("engine0", later)
    rec.defer("engine0", later)  # the same entries, grown: still one
    rec.on_state("engine1", "decode", 1.5)  # another actor's entry does not settle them
    assert later.settled == 0 and rec.deferred("engine0") is later
    assert len(rec.tracks["engine0"]) == 0 and "engine0" not in rec.batch_logs
    rec.on_state("engine0", "idle_weights", 3.0)
    assert later.settled == 1 and rec.deferred("engine0") is None
    rec.close(4.0)
    assert later.settled == 1
    assert [(iv.state, iv.start_s, iv.end_s) for iv in rec.actor_intervals["engine0"]] == [
        ("idle_weights", 0.0, 1.0),
        ("prefill", 1.0, 2.0),
        ("decode", 2.0, 3.0),
        ("idle_weights", 3.0, 4.0),
    ]
    assert rec.batch_samples["engine0"] == [(2.0, 2)]


@pytest.mark.parametrize("log", ["on_states", "on_batch", "on_batches", "defer", "close"])
def test_every_way_to_log_settles_what_was_deferred_first(log):
    rec = _deferring()
    first = _Later(rec, [("prefill", 1.0)])
    rec.defer("engine0", first)
    if log == "on_states":
        rec.on_states("engine0", ["decode"], [2.0], [0], 0)
    elif log == "on_batch":
        rec.on_batch("engine0", 2.0, 7)
    elif log == "on_batches":
        rec.on_batches("engine0", [2.0], [7])
    elif log == "defer":
        rec.defer("engine0", _Later(rec, [("decode", 2.0)]))
    rec.close(3.0)
    assert first.settled == 1
    states = [iv.state for iv in rec.actor_intervals["engine0"]]
    assert states[:2] == ["idle_weights", "prefill"]
    if log in ("on_batch", "on_batches"):
        assert rec.batch_samples["engine0"] == [(1.0, 1), (2.0, 7)]
