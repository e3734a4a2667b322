"""The engine's parts and joints: interrupt policies, the interfaces of ports.py, the wiring by
attach, and the one route every finished sequence takes (lifecycle.py)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest
from reference_engine import ReferenceEngine
from small_scenarios import make

from rlsim.placement import resolve
from rlsim.scenario import Interrupt
from rlsim.simulator import pipeline, ports
from rlsim.simulator.batch import RunningBatch
from rlsim.simulator.dispatcher import WorkQueue
from rlsim.simulator.engine import Engine
from rlsim.simulator.finishes import FinishLedger
from rlsim.simulator.interrupts import POLICIES
from rlsim.simulator.lifecycle import ToScoring
from rlsim.simulator.run import simulate
from rlsim.simulator.weight_bus import WeightBus
from rlsim.simulator.work import Group, Sequence


def test_one_policy_per_interrupt_kind_with_the_documented_answers() -> None:
    assert set(POLICIES) == set(Interrupt) and all(p.kind is kind for kind, p in POLICIES.items())
    answers = {kind: (p.at_boundary, p.pauses_admission, p.aborts, p.discards) for kind, p in POLICIES.items()}
    assert answers == {
        Interrupt.blocking: (False, False, False, False),
        Interrupt.soft_pause: (False, True, False, False),
        Interrupt.abort_resubmit: (True, False, True, False),
        Interrupt.abort_discard: (True, False, True, True),
        Interrupt.in_flight: (True, False, False, False),
    }


def _engine_state(running: int, head_min_version: int | None, version: int = 0):
    batch = RunningBatch(capacity_tokens=10_000, max_batch=8, share_prompt_prefill=True)
    group = Group(0, 0, 0, 10, size=running)
    batch.admit(deque(Sequence(group, i, 10, 5, 15) for i in range(running)), 0)
    head = None
    if head_min_version is not None:
        head = Sequence(Group(1, 1, head_min_version, 10, size=1), 0, 10, 5, 15)
    return SimpleNamespace(batch=batch, version=version, queue=SimpleNamespace(peek=lambda: head))


@pytest.mark.parametrize(
    ("running", "head", "due"),
    [
        (2, None, {Interrupt.abort_resubmit, Interrupt.abort_discard, Interrupt.in_flight}),
        (0, 0, {Interrupt.abort_resubmit, Interrupt.abort_discard, Interrupt.in_flight, Interrupt.soft_pause}),
        (0, 1, set(Interrupt)),  # the head waits for the new weights: blocking loads too
        (0, None, set(Interrupt)),
    ],
)
def test_when_each_policy_loads_pending_weights(running: int, head: int | None, due: set) -> None:
    engine = _engine_state(running, head)
    assert {kind for kind, p in POLICIES.items() if p.update_due(engine)} == due


@pytest.mark.parametrize("running", [0, 2])
def test_what_each_policy_does_with_running_sequences_on_load(running: int) -> None:
    calls = {}
    for kind, policy in POLICIES.items():
        engine = _engine_state(running, None)
        engine.abort_running = lambda discard, kind=kind: calls.setdefault(kind, discard)
        policy.on_load(engine)
    expected = {Interrupt.abort_resubmit: False, Interrupt.abort_discard: True} if running else {}
    assert calls == expected


def _members(proto: type) -> set[str]:
    names = set(getattr(proto, "__annotations__", {}))
    names |= {n for n in vars(proto) if not n.startswith("_")}
    return names


@pytest.mark.parametrize(
    ("impl", "proto"),
    [
        (WorkQueue, ports.WorkSource),
        (FinishLedger, ports.FinishSink),
        (WeightBus, ports.WeightSource),
        (Engine, ports.QueueListener),
        (Engine, ports.PlanHolder),
        (Engine, ports.WeightReceiver),
        (ReferenceEngine, ports.QueueListener),
        (ReferenceEngine, ports.PlanHolder),
        (ReferenceEngine, ports.WeightReceiver),
    ],
)
def test_the_actors_have_every_member_of_their_interfaces(impl: type, proto: type) -> None:
    engine_cls = ReferenceEngine if impl is ReferenceEngine else Engine
    wiring = pipeline.build(resolve(make({"pipeline": {"mode": "async"}})), engine_cls=engine_cls)
    instances = {
        WorkQueue: wiring.dispatcher.queues[0],
        FinishLedger: wiring.ledger,
        WeightBus: wiring.trainer.bus,
        engine_cls: wiring.engines[0],
    }
    missing = {m for m in _members(proto) if not hasattr(instances[impl], m)}
    assert not missing, f"{impl.__name__} lacks {missing} of {proto.__name__}"


@pytest.mark.parametrize("engine_cls", [Engine, ReferenceEngine])
def test_engines_attach_themselves_to_their_queue_ledger_and_bus(engine_cls) -> None:
    wiring = pipeline.build(resolve(make({"pipeline": {"mode": "async"}})), engine_cls=engine_cls)
    engines = wiring.engines
    assert len(engines) == 2 and all(isinstance(e, engine_cls) for e in engines)
    assert wiring.ledger.engines == engines and wiring.trainer.bus.engines == engines
    assert [q.engines for q in wiring.dispatcher.queues] == [[engines[0]], [engines[1]]]


def test_every_finished_sequence_takes_the_route_once(monkeypatch) -> None:
    """Span by span, from drains and from refills across two engines, every finish reaches the
    route, once, in order of finish time; routing through a wrapper changes nothing."""
    sc = make(
        {
            "pipeline": {"mode": "async", "inference": {"max_batch": 4}},
            "algorithm": {"prompts_per_step": 6},
            "steps": 4,
        }
    )
    plain = simulate(sc)
    routed: list[list[Sequence]] = []

    class Recording(ToScoring):
        def __init__(self, score) -> None:
            def finished(seqs: list[Sequence]) -> None:
                routed.append(list(seqs))
                score(seqs)

            self.finished = finished

    monkeypatch.setattr(pipeline, "ToScoring", Recording)
    result = simulate(sc)
    seqs = [s for batch in routed for s in batch]
    assert len(seqs) == len(set(map(id, seqs))) > 0
    assert all(s.generated == s.response_tokens and s.finish_s >= 0 for s in seqs)
    assert all(b == sorted(b, key=lambda s: s.finish_s) for b in routed)
    assert result.recorder.end_s == plain.recorder.end_s
    assert result.recorder.generated_tokens == plain.recorder.generated_tokens
    per_group: dict = {}
    for s in seqs:
        per_group[s.group] = per_group.get(s.group, 0) + 1
    trained = [g for g in per_group if g.status == "trained"]
    assert len(trained) == 4 * 6 and all(per_group[g] == g.size for g in trained)  # every member, once
