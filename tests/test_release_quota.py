"""verl's fully-async `staleness_threshold`: the generator's release quota, pinned by hand."""

from __future__ import annotations

import pytest
from small_scenarios import make

from rlsim.metrics.summary import summarize
from rlsim.placement import resolve
from rlsim.simulator.pipeline import build
from rlsim.simulator.release_quota import groups_allowed
from rlsim.simulator.run import simulate

B = 4  # prompts per step in the small scenario


def _async(**pipe) -> dict:
    return {"pipeline": {"mode": "async", **pipe}, "steps": 6}


def test_the_quota_is_a_lead_of_threshold_windows_renewed_at_each_sync() -> None:
    # verl: (1 + threshold) x trigger_parameter_sync_step x batch per window, less last window's excess
    assert groups_allowed(0, sync_every=1, groups_per_step=B, threshold=0.0) == B  # synchronous
    assert groups_allowed(0, sync_every=1, groups_per_step=B, threshold=0.5) == B + B // 2
    assert groups_allowed(3, sync_every=1, groups_per_step=B, threshold=0.5) == 4 * B + B // 2
    # every 2 steps: the quota does not move between syncs (versions 2 and 3 are one window)
    q = [groups_allowed(v, sync_every=2, groups_per_step=B, threshold=0.25) for v in range(5)]
    assert q == [10, 10, 18, 18, 26]  # (w + 1.25) x 2 x 4


@pytest.mark.parametrize(("threshold", "depth"), [(0.0, 0), (1.0, 1), (2.0, 2)])
def test_whole_thresholds_are_whole_buffer_depths(threshold: float, depth: int) -> None:
    """With a sync every step, threshold n releases exactly what buffer_depth n does."""
    quota = summarize(simulate(make(_async(staleness_threshold=threshold))))
    whole = summarize(simulate(make(_async(buffer_depth=depth))))
    assert quota.step_time_s == whole.step_time_s
    assert quota.staleness_max == whole.staleness_max == depth


def test_a_fraction_releases_part_of_the_next_batch_early() -> None:
    w = build(resolve(make(_async(staleness_threshold=0.5))))
    w.env.process(w.dispatcher.run())
    w.env.run(until=1e-9)  # before any engine or trainer has moved
    assert [g.batch for g in w.dispatcher.groups] == [0] * B + [1] * (B // 2)
    assert {g.min_version for g in w.dispatcher.groups} == {0}
    m = summarize(simulate(make(_async(staleness_threshold=0.5))))
    lo = summarize(simulate(make(_async(staleness_threshold=0.0))))
    hi = summarize(simulate(make(_async(staleness_threshold=1.0))))
    # the early half-batch is trained a version late: between the synchronous and the one-step lead
    assert lo.staleness_max == 0 < m.staleness_mean < hi.staleness_mean


@pytest.mark.parametrize(
    ("over", "field"),
    [
        (_async(staleness_threshold=0.5, buffer_depth=1), "staleness_threshold"),
        ({"pipeline": {"mode": "one_step_off", "staleness_threshold": 0.5}}, "staleness_threshold"),
    ],
)
def test_the_threshold_is_refused_where_it_has_no_meaning(over: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make(over)
