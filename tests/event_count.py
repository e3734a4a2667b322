"""Counting the SimPy events of a simulation (how much an engine plans ahead shows in them)."""

from __future__ import annotations

import simpy

from rlsim.scenario import Scenario
from rlsim.simulator.run import SimResult, simulate


def simulate_counting_events(sc: Scenario, monkeypatch, patches: tuple = ()) -> tuple[int, SimResult]:
    """(SimPy events processed, result) of simulating sc with each (target, name, value) of
    `patches` set for the run."""
    count = [0]
    step = simpy.Environment.step

    def counting(env):
        count[0] += 1
        return step(env)

    with monkeypatch.context() as m:
        m.setattr(simpy.Environment, "step", counting)
        for target, name, value in patches:
            m.setattr(target, name, value)
        result = simulate(sc)
    return count[0], result
