"""Batch occupancy and the decode "tail": the busy GPU time that does little work.

A hand-computed case (constant lengths: every sequence of a step runs from its prefill to the
last iteration, so the batch is full for the whole decode), a long-tailed case where the batch
empties while the longest responses finish, and the event-skipping engine against the
iteration-level reference (drains commit finishes in bulk; the batch they record must match).
"""

from __future__ import annotations

import pytest
from random_scenarios import agent_scenario, partial_scenario, pressured_scenario, queued_scenario
from reference_engine import ReferenceEngine
from small_scenarios import make

from rlsim.metrics.summary import TAIL_BATCH_FRACTION, summarize
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.engine import Engine
from rlsim.simulator.run import simulate


def _metrics(over: dict, reference: bool = False):
    return summarize(simulate(resolve(make(over)), engine_cls=ReferenceEngine if reference else Engine))


def test_constant_lengths_fill_the_batch_they_have():
    # 4 prompts x 4 completions on 2 engines of tp 1: 8 sequences each, max_batch 16 -> 50%
    m = _metrics(
        {
            "workload": {
                "prompt_tokens": {"kind": "constant", "value": 64},
                "response_tokens": {"kind": "constant", "value": 100},
            },
            "pipeline": {"inference": {"max_batch": 16}},
        }
    )
    assert m.decode_occupancy == pytest.approx(8 / 16)
    assert m.tail_gpu_seconds == 0.0  # 8 >= 25% of 16
    m = _metrics(
        {
            "workload": {
                "prompt_tokens": {"kind": "constant", "value": 64},
                "response_tokens": {"kind": "constant", "value": 100},
            },
            "pipeline": {"inference": {"max_batch": 64}},
        }
    )
    assert m.decode_occupancy == pytest.approx(8 / 64)
    decode = m.gpu_seconds_by_state["decode"]
    assert 8 < TAIL_BATCH_FRACTION * 64 and m.tail_gpu_seconds == pytest.approx(decode)
    assert m.tail_fraction == pytest.approx(decode / sum(m.gpu_seconds_by_state.values()))


def test_long_tailed_responses_leave_a_tail():
    m = _metrics({"pipeline": {"inference": {"max_batch": 8}}})  # lognormal sigma 0.8
    decode = m.gpu_seconds_by_state["decode"]
    assert 0 < m.tail_gpu_seconds < decode
    assert 0 < m.decode_occupancy < 1


@pytest.mark.parametrize("mode", ["sync", "async", "streaming", "colocated"])
def test_event_skipping_and_reference_record_the_same_batch(mode: str):
    over = {"pipeline": {"mode": mode, "inference": {"max_batch": 8}}, "steps": 4}
    fast, ref = _metrics(over), _metrics(over, reference=True)
    assert fast.decode_occupancy == pytest.approx(ref.decode_occupancy, rel=1e-9)
    assert fast.tail_gpu_seconds == pytest.approx(ref.tail_gpu_seconds, rel=1e-9)


def _step_function(times: list[float], sizes: list[int]) -> list[tuple[float, int]]:
    """The running log as the step function the metrics integrate: the last size logged at each
    time, and only where it changes (an engine may log the same size again)."""
    assert times == sorted(times)  # the integration needs it in time order
    out: list[tuple[float, int]] = []
    for t, n in dict(zip(times, sizes)).items():
        if not out or out[-1][1] != n:
            out.append((t, n))
    return out


def _planned_and_span_by_span(sc, monkeypatch):
    planned = simulate(sc)
    with monkeypatch.context() as m:
        m.setattr(Engine, "drains", False)
        stepped = simulate(sc)
    return planned, stepped


def _assert_same_batch(sc, monkeypatch) -> None:
    """The planned engine's running batch is the span-by-span engine's, at the same times, and so are
    the occupancy and tail metrics integrated from it."""
    planned, stepped = _planned_and_span_by_span(sc, monkeypatch)
    close = {"rel": 1e-12, "abs": 0}  # (a plan's times are the engine's sums, but for a rounding here and there)
    assert [s.end_s for s in planned.recorder.steps] == pytest.approx(
        [s.end_s for s in stepped.recorder.steps], **close
    )
    fast, slow = planned.recorder.running_samples, stepped.recorder.running_samples
    assert fast.keys() == slow.keys()
    for engine in fast:
        mine, theirs = _step_function(*fast[engine]), _step_function(*slow[engine])
        assert [n for _, n in mine] == [n for _, n in theirs], engine
        assert [t for t, _ in mine] == pytest.approx([t for t, _ in theirs], **close), engine
    a, b = summarize(planned), summarize(stepped)  # (sums over other samples: equal to rounding)
    assert a.decode_occupancy == pytest.approx(b.decode_occupancy, **close)
    assert a.tail_gpu_seconds == pytest.approx(b.tail_gpu_seconds, **close)


@pytest.mark.parametrize("mode", ["colocated", "sync", "one_step_off", "async", "streaming"])
def test_planned_refills_record_the_span_by_span_batch_on_long_cot(mode: str, monkeypatch):
    """Long-cot's KV-bound engines preempt and readmit throughout, committed step by step and in
    bulk: each finish, admission and preemption shows in the batch at its step's time, not the
    commit's."""
    _assert_same_batch(load_scenario("long-cot", ["steps=4"]).with_mode(mode), monkeypatch)


@pytest.mark.parametrize("i", range(0, 30, 2))
def test_planned_refills_record_the_span_by_span_batch_when_queue_or_kv_bound(i: int, monkeypatch):
    _assert_same_batch(queued_scenario(i), monkeypatch)


@pytest.mark.parametrize("i", range(0, 10, 3))
def test_planned_refills_record_the_span_by_span_batch_under_kv_pressure(i: int, monkeypatch):
    _assert_same_batch(pressured_scenario(i), monkeypatch)


@pytest.mark.parametrize("i", range(0, 20, 2))
def test_planned_refills_record_the_span_by_span_batch_with_partial_rollouts_and_agents(i: int, monkeypatch):
    """A step's end takes the batch away mid-plan; an agent turn keeps its cache over a tool call."""
    _assert_same_batch(partial_scenario(i), monkeypatch)
    _assert_same_batch(agent_scenario(i), monkeypatch)
