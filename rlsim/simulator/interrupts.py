"""Interrupt policies: what an engine does when new weights arrive, one small class per kind.

The process loop (engine.py) asks the same three questions of every kind: may it admit new
work while weights are pending, is the update due now (at this iteration boundary), and what
happens to the running sequences when the weights are loaded. Each kind answers them in its
own class, so that the loop holds no branch per kind and a new kind is one more class in
`POLICIES`. The engine looks its policy up once, when it is built.

- blocking: load once nothing is running and no queued work may still start on the current weights;
- soft_pause: admit nothing new, drain the running sequences, then load;
- abort_resubmit: abort running sequences now, keep their tokens, re-prefill them after loading;
- abort_discard: abort running sequences now, throw their tokens away (waste), restart them;
- in_flight: load between two iterations; running sequences continue on the new weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsim.scenario import Interrupt

if TYPE_CHECKING:
    from rlsim.simulator.engine import Engine


class InterruptPolicy:
    """The answers of one interrupt kind (the defaults are blocking's)."""

    kind: Interrupt
    at_boundary = False  # pending weights cut a decode span short at the next iteration boundary
    pauses_admission = False  # nothing new is admitted while weights are pending
    aborts = False  # the running sequences are aborted when the weights are loaded
    discards = False  # ... and their tokens thrown away

    def update_due(self, engine: Engine) -> bool:
        """Weights are pending: load them now? (Asked at every pass of the engine's loop.)"""
        return True

    def on_load(self, engine: Engine) -> None:
        """The weights are about to be loaded: what becomes of the running sequences."""
        if self.aborts and engine.batch.running:
            engine.abort_running(discard=self.discards)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Blocking(InterruptPolicy):
    kind = Interrupt.blocking

    def update_due(self, engine: Engine) -> bool:
        batch = engine.batch
        if batch.running:
            return False
        head = batch.local[0] if batch.local else engine.queue.peek()
        return head is None or head.group.min_version > engine.version


class SoftPause(InterruptPolicy):
    kind = Interrupt.soft_pause
    pauses_admission = True

    def update_due(self, engine: Engine) -> bool:
        return not engine.batch.running


class AbortResubmit(InterruptPolicy):
    kind = Interrupt.abort_resubmit
    at_boundary = aborts = True


class AbortDiscard(InterruptPolicy):
    kind = Interrupt.abort_discard
    at_boundary = aborts = discards = True


class InFlight(InterruptPolicy):
    kind = Interrupt.in_flight
    at_boundary = True


POLICIES: dict[Interrupt, InterruptPolicy] = {
    p.kind: p for p in (Blocking(), SoftPause(), AbortResubmit(), AbortDiscard(), InFlight())
}
