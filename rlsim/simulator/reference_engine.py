"""The iteration-level reference engine: one SimPy event per decode iteration.

It shares every rule of `Engine` (admission, preemption, interrupts) and differs only in how
time advances: each iteration costs `IterationCost.at(K)` evaluated directly, and the engine
looks at its queue and mailbox after every single iteration. The event-skipping engine must
reproduce its timeline (tests and benchmarks compare them); it is too slow for planning.
"""

from __future__ import annotations

from rlsim.models.decode import IterationCost
from rlsim.simulator import states
from rlsim.simulator.engine import Engine


class ReferenceEngine(Engine):
    """An Engine that simulates every decode iteration as its own event."""

    drains = False  # never plans ahead: one event per iteration is the point

    def _plan_span(self) -> tuple[int, IterationCost, float] | None:
        b = len(self.running)
        if self.kv + b > self.capacity:
            self._preempt_newest()
            return None
        self._state(states.DECODE)
        return 1, self.costs.iteration(b), self.env.now  # never listens: it looks after every iteration

    def _span_s(self, cost: IterationCost, k: int) -> float:
        return cost.at(self.kv)
