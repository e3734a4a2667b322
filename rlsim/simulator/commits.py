"""Committing an engine's plan: a drain's or a refill's steps applied to its batch as they end.

A plan (drain.py, refill.py) says in advance what the engine's batch does step by step; the
engine does not wake for each step. When the ledger (finishes.py) flushes to a time t, the
steps that end by t are applied here to the engine's real state in one go: the batch's
iteration count and cache, its finishers (stamped with the time of their step's end), the
admissions and preemptions a refill planned (through the batch's own `preempt_newest` and the
queue, checked against the plan), and what the recorder logs at each step. Returns the
finishers, which the ledger hands on in time order across engines. Times in seconds.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from rlsim.simulator import states
from rlsim.simulator.drain import Drain
from rlsim.simulator.refill import PREFILL, SPAN, Refill
from rlsim.simulator.work import Sequence

if TYPE_CHECKING:
    from rlsim.simulator.engine import Engine


def commit_drain(engine: Engine, d: Drain, t: float) -> list[Sequence]:
    """The drain's spans that end by t are done: update the batch; returns their finishers."""
    batch = engine.batch
    first = d.pos
    pos = d.pos = bisect.bisect_right(d.end_s, t, first)
    d.next_end_s = d.end_s[pos] if pos < d.spans else math.inf
    batch.iters, batch.kv = d.iters[pos - 1], d.kv_end[pos - 1]
    engine.rec.on_tokens(d.tokens[pos] - d.tokens[first])
    lo, hi = d.bounds[first], d.bounds[pos]
    if lo == hi:
        return []
    running, version = batch.running, engine.version
    finishers = d.finishers[lo:hi]
    times = d.finish_s[lo:hi]
    for order, seq, finish_s in zip(d.orders[lo:hi], finishers, times):
        del running[order]
        seq.generated = seq.response_tokens
        seq.version_end = version
        seq.finish_s = finish_s
    left = len(running) + len(times)  # the batch loses one finisher at a time, at its finish
    engine._batch_times.extend(times)
    engine._batch_sizes.extend(range(left - 1, left - 1 - len(times), -1))
    engine._report_load()
    return finishers


def commit_refill(engine: Engine, r: Refill, t: float) -> list[Sequence]:
    """The refill's steps that end by t are done; returns their finishers.

    At each step's end its finishers leave; then the next step starts as planned: a span
    with the engine's own `_preempt_newest`, a prefill with what `RunningBatch.admit` does (the
    plan names the sequences; taking any other is a bug in the plan).
    """
    j, last, end_s = r.pos, r.last, r.end_s
    if j > last or end_s[j] > t:
        return []
    batch = engine.batch
    running, version, steps, finishers, orders, admits = (
        batch.running,
        engine.version,
        r.steps,
        r.finishers,
        r.orders,
        r.admits,
    )
    name, on_batch, on_state = engine.name, engine.rec.on_batch, engine.rec.on_state
    local, items, order, hint = batch.local, engine.queue.items, batch.order, engine.step_hint
    first = lo = steps[j - 1][6] if j else 0
    tokens = 0
    while j <= last and end_s[j] <= t:
        e = end_s[j]
        kind, k, _, _, iters, kv, hi, a_lo, _ = steps[j]
        if kind == SPAN:
            tokens += k * len(running)
        for i in range(lo, hi):
            seq = finishers[i]
            del running[orders[i]]
            seq.generated = seq.response_tokens
            seq.version_end = version
            seq.finish_s = e
        lo = hi
        if kind == PREFILL:
            on_batch(name, e, len(running))
        j += 1
        if j > last:
            break
        kind, _, preempts, decode, _, _, _, a_hi, from_local = steps[j]
        if kind == SPAN:
            if preempts:
                batch.iters, batch.kv = iters, kv
                for _ in range(preempts):
                    engine._preempt_newest()
                kv = batch.kv
            if decode:
                on_state(name, states.DECODE, e, hint, version)
            continue
        for i in range(a_lo, a_hi):
            seq, generated, finish = admits[i]
            if (local.popleft() if i - a_lo < from_local else items.popleft()) is not seq:
                raise AssertionError(f"{name}: a refill admitted other work than it planned")
            if seq.version_start < 0:
                seq.version_start = version
            seq.generated = seq.generated_at_admit = generated
            seq.admit_iter = iters
            seq.finish_iter = finish
            running[order] = seq
            order += 1
            kv += seq.prompt_tokens + generated
        tokens += a_hi - a_lo
        hint = seq.group.batch
        on_state(name, states.PREFILL, e, hint, version)
    batch.iters, batch.kv, batch.order, engine.step_hint = iters, kv, order, hint
    r.pos = j
    r.next_end_s = end_s[j] if j <= last else math.inf
    engine.rec.on_tokens(tokens)
    engine._report_load()
    return finishers[first:hi]
