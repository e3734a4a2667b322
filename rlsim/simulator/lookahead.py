"""Queue look-ahead: when a decoding engine would take its queue's head, without stepping to it.

A span-by-span engine looks at its queue after every span; one that skips events does not, so
when the queue changes it works out here whether, and at which iteration boundary, its
admission (`RunningBatch.admit`) would take the new head: only the head matters (admission
stops at the first that does not fit), it fits at a boundary if the cache the batch still has
room for by then holds it, and it cannot start before its weights arrive. The queue
(dispatcher.py) asks every engine taking from it, and cuts short the one that reaches its
boundary first. Times in seconds, sizes in tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsim.models.decode import IterationCost
from rlsim.simulator.finishes import timeout_at

if TYPE_CHECKING:
    from rlsim.simulator.drain import Drain
    from rlsim.simulator.engine import Engine


def admission_time(engine: Engine) -> float | None:
    """The queue changed: when this decoding engine would take its head, if it can now.

    It can be taken at the end of the iteration in progress if it fits then; a head waiting
    for newer weights cannot start before they arrive (which interrupts on its own), nor can
    any while new weights are to be loaded first. A span-by-span engine looks at its queue
    again where its span ends; a drain does not, so if the head does not fit it stops at the
    end of the current span instead. None: nothing to do now.
    """
    if not (engine._listening and engine._listen_queue):
        return None
    if engine.pending is not None and (engine.policy.at_boundary or engine.policy.pauses_admission):
        return None  # it loads weights first, or admits nothing new until it has
    if engine.batch.local:
        return None  # its own preempted work goes first
    items = engine.queue.items
    if not items or items[0].group.min_version > engine.version:
        return None
    head = items[0]
    d = engine.drain
    if d is None:
        return _boundary_if_fits(engine, head.prompt_tokens + head.generated, engine._span, False)
    engine.ledger.flush(engine.env.now)
    j = d.pos
    if j >= d.spans:
        return None  # its last span ends now: the drain returns and looks at the queue
    span = (d.k[j], engine.costs.iteration(len(engine.batch.running)), d.span_start_s(j))
    t = _boundary_if_fits(engine, head.prompt_tokens + head.generated, span, True)
    if t is None and j < d.spans - 1 and d.stop_at > j:
        d.stop_at = j
        env = engine.env
        stop = timeout_at(env, d.end_s[j])
        stop.callbacks.append(lambda _ev: _stop_drain(engine, d))
    return t


def _stop_drain(engine: Engine, d: Drain) -> None:
    """End the drain at a span boundary, where a span-by-span engine looks at its queue."""
    if engine.drain is d and engine._listening:
        engine._listening = False
        d.stopped = True
        engine.process.interrupt()


def _boundary_if_fits(
    engine: Engine, context: int, span: tuple[int, IterationCost, float], draining: bool
) -> float | None:
    """The end of the iteration in progress, if the batch's admission would then take this context."""
    k, cost, start = span
    batch = engine.batch
    b, kv = len(batch.running), batch.kv
    room = batch.capacity - context - b - 2 - kv  # cache the batch may still grow by
    if room < b:  # not even after one more iteration
        return None
    elapsed = engine.env.now - start
    if (int(elapsed / cost.at(kv + (k - 1) * b)) + 1) * b > room:  # at least this many done
        return None
    n = cost.iterations_within(kv, elapsed, k)
    if n >= k:  # the span ends now; a span-by-span engine looks at its queue there anyway
        return start + cost.span_s(kv, k) if draining and k * b <= room else None
    return start + cost.span_s(kv, n + 1) if (n + 1) * b <= room else None
