"""Refills committed in bulk (planned.py) log what the span-by-span engine logs, bit for bit.

A bulk commit defers its log entries (`BulkEntries`, through `Recorder.defer`) and the plan
logs them once, before the engine's next entry of its own or at the run's end; the tracks, the
batch samples and every token count must come out as the engine stepping span by span writes
them, on queue-bound scenarios (the regime where refills are planned and committed in bulk).
"""

from __future__ import annotations

import pytest
from event_count import simulate_counting_events
from random_scenarios import queued_scenario, record

from rlsim.scenario import load_scenario
from rlsim.simulator import planned
from rlsim.simulator.engine import Engine


def _bulk_settled(monkeypatch) -> list[int]:
    """Counts the deferred entries settled (the bulk path taken) in a run."""
    settled = [0]
    settle = planned.BulkEntries.settle

    def counting(self):
        settled[0] += 1
        return settle(self)

    monkeypatch.setattr(planned.BulkEntries, "settle", counting)
    return settled


CASES = [("queued", i) for i in range(4)] + [("default", m) for m in ("colocated", "sync", "async")]


@pytest.mark.parametrize("case", CASES)
def test_bulk_commits_log_what_the_span_by_span_engine_logs(case, monkeypatch) -> None:
    kind, arg = case
    if kind == "queued":
        sc = queued_scenario(arg)
    else:  # 4,096 sequences per step on engines of 256 slots (4, or 8 colocated): slot-bound
        over = ["algorithm.prompts_per_step=256", "algorithm.group_size=16", "steps=2"]
        sc = load_scenario("default", over).with_mode(arg)
    settled = _bulk_settled(monkeypatch)
    planned_events, fast = simulate_counting_events(sc, monkeypatch)
    assert settled[0] > 0  # the path under test was taken
    stepped_events, slow = simulate_counting_events(sc, monkeypatch, ((Engine, "drains", False),))
    assert planned_events < stepped_events
    assert record(fast) == record(slow)


def test_a_plans_entries_are_logged_once_not_per_commit(monkeypatch) -> None:
    """The default at 256 x 16: hundreds of bulk commits, a few deferred entries per engine."""
    sc = load_scenario("default", ["algorithm.prompts_per_step=256", "algorithm.group_size=16", "steps=1"])
    commits = [0]
    bulk = planned._commit_bulk

    def counting(*args):
        commits[0] += 1
        return bulk(*args)

    monkeypatch.setattr(planned, "_commit_bulk", counting)
    settled = _bulk_settled(monkeypatch)
    simulate_counting_events(sc.with_mode("sync"), monkeypatch)
    assert settled[0] > 0
    assert commits[0] > 20 * settled[0]
