"""An actor's track: its intervals (state, start, end, RL step, policy version) kept as columns.

A run records about two intervals per sequence (each admission's prefill cuts the engine's
decode in two); kept as `Interval` objects, with a float object for each time, they were the
largest thing a simulation holds (~130 bytes each). Here each is one entry of five columns
(~40 bytes): the state names (shared strings), start and end times in seconds (`array('d')`,
exactly the floats written), steps and versions (`array('q')`). `intervals()` builds the
objects for whoever wants them; metrics read the columns. A `SampleLog` does the same for a
step function sampled at every change ((time, value) pairs: an engine's batch size).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass


@dataclass(slots=True, unsafe_hash=True)
class Interval:
    """One state of an actor from start_s to end_s (never changed once made: not frozen only
    because a frozen dataclass takes ~5x as long to build)."""

    state: str
    start_s: float
    end_s: float
    step: int
    version: int


class Track:
    """An actor's intervals in time order, as five columns of equal length."""

    __slots__ = ("states", "start_s", "end_s", "steps", "versions")

    def __init__(self) -> None:
        self.states: list[str] = []
        self.start_s = array("d")
        self.end_s = array("d")
        self.steps = array("q")
        self.versions = array("q")

    @classmethod
    def of(cls, intervals: list[Interval]) -> Track:
        track = cls()
        for iv in intervals:
            track.append(iv.state, iv.start_s, iv.end_s, iv.step, iv.version)
        return track

    def append(self, state: str, start_s: float, end_s: float, step: int, version: int) -> None:
        self.states.append(state)
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.steps.append(step)
        self.versions.append(version)

    def __len__(self) -> int:
        return len(self.states)

    def intervals(self) -> list[Interval]:
        return list(map(Interval, self.states, self.start_s, self.end_s, self.steps, self.versions))

    def durations(self) -> Iterator[tuple[str, float]]:
        """(state, end - start) of each interval, in order."""
        return zip(self.states, [e - s for s, e in zip(self.start_s, self.end_s)])


class IntervalView(Mapping):
    """actor -> its intervals as a list of `Interval` (built at each look-up; read-only)."""

    def __init__(self, tracks: dict[str, Track]) -> None:
        self._tracks = tracks

    def __getitem__(self, actor: str) -> list[Interval]:
        return self._tracks[actor].intervals()

    def __iter__(self) -> Iterator[str]:
        return iter(self._tracks)

    def __len__(self) -> int:
        return len(self._tracks)


class SampleLog:
    """(time, value) samples of a step function as two columns (seconds, integer values)."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times = array("d")
        self.values = array("q")

    def append(self, t: float, value: int) -> None:
        self.times.append(t)
        self.values.append(value)

    def extend(self, times: list[float], values: list[int]) -> None:
        self.times.fromlist(times)  # a list's items without the iterator protocol (3x `extend`)
        self.values.fromlist(values)

    def pairs(self) -> list[tuple[float, int]]:
        return list(zip(self.times, self.values))


class SampleView(Mapping):
    """actor -> its samples as a list of (time, value) pairs (built at each look-up; read-only)."""

    def __init__(self, logs: dict[str, SampleLog]) -> None:
        self._logs = logs

    def __getitem__(self, actor: str) -> list[tuple[float, int]]:
        return self._logs[actor].pairs()

    def __iter__(self) -> Iterator[str]:
        return iter(self._logs)

    def __len__(self) -> int:
        return len(self._logs)
