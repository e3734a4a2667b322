"""Refills on a shared queue (shared_refill.py): an engine pulling from the queue that all engines
share plans its own preempted work, and nothing any engine or metric sees changes.

The oracle, drain and invariant tests run streaming scenarios too (against the reference and the
span-by-span engines); these compare the whole record, bit for bit, with the engines that do not
plan on a shared queue, and count the events saved.
"""

from __future__ import annotations

import pytest
from event_count import simulate_counting_events
from random_scenarios import outcome
from small_scenarios import make

from rlsim.scenario import Scenario
from rlsim.simulator.engine import Engine
from rlsim.simulator.run import SimResult


def _pressured(engines: int, interrupt: str, verifier_s: float, kv_fraction: float, mean: int, steps: int) -> Scenario:
    """Streaming (pull dispatch) on engines whose cache holds a fraction of their batch."""
    return make(
        {
            "model": "qwen2.5-7b",
            "cluster": {"gpus_per_node": engines + 2},
            "algorithm": {"prompts_per_step": 16, "group_size": 8},
            "workload": {
                "response_tokens": {"kind": "lognormal", "mean": mean, "sigma": 0.9, "max": 3 * mean},
                "reward": {"kind": "cpu_verifier", "seconds_per_sample": verifier_s, "workers": 4},
            },
            "pipeline": {
                "mode": "streaming",
                "inference": {"gpus": engines, "max_batch": 256, "kv_memory_fraction": kv_fraction},
                "training": {"gpus": 2, "micro_batch_tokens": 16384},
                "weight_sync": {"interrupt": interrupt},
            },
            "steps": steps,
        }
    )


def _record(result: SimResult) -> dict:
    """Everything the metrics and outputs read, the running batch as the step function it is."""
    rec = result.recorder
    return {
        **outcome(result),
        "steps": rec.steps,
        "intervals": rec.actor_intervals,
        "running": {e: list(dict(zip(*log)).items()) for e, log in rec.running_samples.items()},
        "batches": rec.batch_samples,
        "reprefill": rec.reprefill_tokens,
        "syncs": rec.syncs,
        "end_s": rec.end_s,
    }


def _own_queue_only(self: Engine) -> bool:
    """`Engine._can_refill` without planning on a shared queue (the engines before shared refills)."""
    return self.pending is None and bool(self.queue.items or self.batch.local) and not self._shared


def _run(sc: Scenario, monkeypatch, shared_refills: bool) -> tuple[int, SimResult]:
    patches = () if shared_refills else ((Engine, "_can_refill", _own_queue_only),)
    return simulate_counting_events(sc, monkeypatch, patches)


CASES = [  # engines, interrupt, verifier seconds, KV memory fraction, mean response, steps
    (2, "in_flight", 0.05, 0.3, 4000, 3),
    (4, "in_flight", 0.05, 0.3, 4000, 6),
    (2, "in_flight", 0.0, 0.23, 2000, 6),
    (3, "abort_resubmit", 0.05, 0.3, 4000, 3),
    (4, "blocking", 0.01, 0.23, 4000, 6),
]


@pytest.mark.parametrize("case", CASES)
def test_a_shared_queue_refill_changes_nothing(case: tuple, monkeypatch) -> None:
    """Preempted work replanned on a shared queue: the same record, bit for bit, in fewer events."""
    sc = _pressured(*case)
    planned, fast = _run(sc, monkeypatch, shared_refills=True)
    stepped, slow = _run(sc, monkeypatch, shared_refills=False)
    assert fast.recorder.preemptions > 100  # the regime under test: KV-bound, preempting
    assert _record(fast) == _record(slow)
    assert planned < 0.6 * stepped  # 0.24-0.55 of the events here
