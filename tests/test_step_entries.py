"""Refills committed step by step (planned.py `_commit_steps`) log what the span-by-span engine
logs, though the states and batch samples of an engine's consecutive commits are logged once.

Under KV pressure a plan is committed step by step (its steps preempt or readmit preempted
work), at every flush of the ledger, a few steps each. Each commit adds its entries to the
engine's deferred `StepEntries` (`Recorder.defer`), logged before the engine's next entry of
its own, another plan's deferred entries, or at the run's end: the tracks, the batch samples
and the token and preemption counts must come out as the engine stepping span by span writes
them. (The running batch's log is the engine's own, not deferred, and may repeat times and
values: tests/test_occupancy.py compares its metrics.)
"""

from __future__ import annotations

import pytest
from random_scenarios import pressured_scenario, record

from rlsim.scenario import load_scenario
from rlsim.simulator import planned
from rlsim.simulator.engine import Engine
from rlsim.simulator.run import simulate


def _counted(monkeypatch) -> tuple[list[int], list[int]]:
    """(step-by-step commits, deferred entries settled) of the runs that follow."""
    commits, settled = [0], [0]
    commit, settle = planned._commit_steps, planned.StepEntries.settle

    def counting_commit(*args):
        commits[0] += 1
        return commit(*args)

    def counting_settle(self):
        settled[0] += 1
        return settle(self)

    monkeypatch.setattr(planned, "_commit_steps", counting_commit)
    monkeypatch.setattr(planned.StepEntries, "settle", counting_settle)
    return commits, settled


@pytest.mark.parametrize("mode", ["sync", "async", "streaming"])
def test_step_commits_log_what_the_span_by_span_engine_logs(mode: str, monkeypatch) -> None:
    """long-cot (KV-bound: preemption chains, readmissions) on its own queues and a shared one."""
    sc = load_scenario("long-cot", ["steps=2"]).with_mode(mode)
    commits, settled = _counted(monkeypatch)
    fast = simulate(sc)
    assert commits[0] > 100 and settled[0] > 0  # the path under test was taken
    assert commits[0] > 2 * settled[0]  # logged once per run of commits, not per commit
    monkeypatch.setattr(Engine, "drains", False)
    slow = simulate(sc)
    assert record(fast) == record(slow)


@pytest.mark.parametrize("i", range(0, 30, 5))
def test_step_commits_on_random_pressured_scenarios(i: int, monkeypatch) -> None:
    sc = pressured_scenario(i)
    fast = simulate(sc)
    monkeypatch.setattr(Engine, "drains", False)
    assert record(fast) == record(simulate(sc))
