"""Batch occupancy and the decode "tail": the busy GPU time that does little work.

A hand-computed case (constant lengths: every sequence of a step runs from its prefill to the
last iteration, so the batch is full for the whole decode), a long-tailed case where the batch
empties while the longest responses finish, and the event-skipping engine against the
iteration-level reference (drains commit finishes in bulk; the batch they record must match).
"""

from __future__ import annotations

import pytest
from reference_engine import ReferenceEngine
from small_scenarios import make

from rlsim.metrics.summary import TAIL_BATCH_FRACTION, summarize
from rlsim.placement import resolve
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
