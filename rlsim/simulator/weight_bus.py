"""The weight bus: the trainer's published versions, and their delivery to every engine.

A broadcast in the SimPy sense: the trainer publishes (version, engine cost) once; each engine
receives it in its own mailbox and applies it when its interrupt model allows. The dispatcher
and anyone gated on the trainer's progress wait on `changed()`.
"""

from __future__ import annotations

import simpy

from rlsim.simulator.ports import WeightReceiver


class WeightBus:
    """Trainer progress (for gating) and weight versions pushed to engines."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.trainer_version = 0  # completed trainer steps
        self.engines: list[WeightReceiver] = []
        self._waiters: list[simpy.Event] = []

    def attach(self, engine: WeightReceiver) -> None:
        """An engine that receives every published version."""
        self.engines.append(engine)

    def changed(self) -> simpy.Event:
        ev = self.env.event()
        self._waiters.append(ev)
        return ev

    def advance(self, version: int) -> None:
        """The trainer finished the step that made `version`; gated work may proceed."""
        self.trainer_version = version
        waiters, self._waiters = self._waiters, []
        for ev in waiters:
            ev.succeed()

    def publish(self, version: int, engine_cost_s: float) -> None:
        """Send `version` to every engine; applying it costs each engine `engine_cost_s`."""
        for engine in self.engines:
            engine.deliver(version, engine_cost_s)
