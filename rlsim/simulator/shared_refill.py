"""A refill on a shared queue: an engine replans its own preempted work, and tells the queue when it admits.

(While every engine on the queue decodes a full batch, they plan together instead: joint_refill.py.)

Engines that pull from one queue take turns at its head, so none can plan what it will take
from it. But an engine whose own preempted list (`RunningBatch.local`) is not empty admits from
that list first and stops there (vLLM's FCFS: admission stops at the first that does not fit),
so while the list holds work its future does not depend on the shared queue at all: a refill
planned on the list alone (an empty snapshot of the queue, so the plan stops when the list
empties) is the span-by-span engine's own future. Under KV pressure that is most of a long
response's life: a finish frees room, the list's head is prefilled again, the cache fills, the
newest is preempted back to the list.

What a span-by-span engine does there that reaches other engines, the planned one does at
the same times: at the end of each step that pops its finish heap it flushes the ledger (`Engine._advance`:
the other engines' planned finishes up to then are committed, their batches logged, its own
finishers handed on), and at each admission, if the shared queue holds work, it notifies the
queue (`Engine._admit`), which may cut another engine short to take the head at its next
iteration boundary. So the plan arms one wake-up per such step end (one at a time), logs its
running batch where that engine does (`Refill.logs_steps`), and arms none of the ledger's
group wake-ups (its finishes are committed as they happen): the other engines see the very
events they see beside a span-by-span engine. Times in seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import simpy

from rlsim.simulator.finishes import timeout_at
from rlsim.simulator.refill import PREFILL, Refill
from rlsim.simulator.slot_bound import KIND

if TYPE_CHECKING:
    from rlsim.simulator.engine import Engine


def as_span_by_span(engine: Engine, r: Refill) -> None:
    """Make a shared queue's refill reach the other engines as a span-by-span engine does."""
    r.logs_steps = True
    r.wake_s = []
    # the steps (not the last) whose end pops the finish heap (finishers, or sequences preempted
    # since they were pushed: `RunningBatch.advance` returns a list, empty or not) or starts a prefill
    before_prefill = np.flatnonzero(r.steps[1:, KIND] == PREFILL).tolist()
    wakes = sorted(set(before_prefill).union(j for j in r.pops if j < r.last))
    if wakes:
        _arm(engine, r, wakes, 0)


def _arm(engine: Engine, r: Refill, wakes: list[int], i: int) -> None:
    env = engine.env
    timeout_at(env, r.end_s[wakes[i]], (engine, r, wakes, i)).callbacks.append(_step_end)


def _step_end(event: simpy.Event) -> None:
    """Step j of the plan ends now: its finishers go on; if a prefill starts, the queue hears of it."""
    engine, r, wakes, i = event.value
    j = wakes[i]
    if engine.drain is not r or j >= r.last:
        return  # the plan ended or was cut back: the engine's own loop takes over at its last step's end
    engine.ledger.flush(engine.env.now)
    if r.row_list[j + 1][KIND] == PREFILL and engine.queue.items:
        engine.queue.notify()
    if i + 1 < len(wakes):
        _arm(engine, r, wakes, i + 1)
