"""The dispatcher: releases GRPO groups to the engines, no further ahead than the buffer depth.

Batch s (the B groups the trainer will use at step s) is released once the trainer has finished
step s - depth - 1 (depth 0: strictly after the previous update, i.e. synchronous). Its groups
carry `min_version`, the newest policy the engines will have been sent by then, so no engine
starts them on older weights. Groups go either to per-engine queues (a fixed split: round-robin
or least-loaded, whole groups or spread) or to one shared queue that engines pull from.
Groups dropped as stale are replaced at once by fresh ones. Under dynamic sampling
(dynamic_sampling.py) batch s starts with a gen batch of prompts instead of B, and the filter's
requests for more prompts arrive through its `requests` store, served by `refill`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

import simpy

from rlsim.scenario import Dispatch
from rlsim.simulator.ports import QueueListener
from rlsim.simulator.release_quota import groups_allowed, synced_version
from rlsim.simulator.tools import start_episodes
from rlsim.simulator.work import Group, Sequence, new_sequences
from rlsim.workload import GroupSampler


class WorkQueue:
    """FIFO of sequences waiting for an engine, with an event for the next arrival."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.items: deque[Sequence] = deque()
        self._arrival: simpy.Event | None = None
        self.engines: list[QueueListener] = []  # engines taking from this queue; woken (if listening) on arrival
        self.running = 0  # its engine's sequences, decoding or preempted (static engines; for least_loaded)

    def attach(self, engine: QueueListener) -> None:
        """An engine that takes from this queue (engines attach in engine order)."""
        self.engines.append(engine)

    @property
    def shared(self) -> bool:
        """More than one engine takes from this queue (they take turns at its head)."""
        return len(self.engines) > 1

    def __len__(self) -> int:
        return len(self.items)

    def put(self, seqs: Iterable[Sequence]) -> None:
        self.items.extend(seqs)
        self.notify()

    def notify(self) -> None:
        """Idle engines start, and the decoding engine that reaches an iteration boundary first
        with room for the head is cut short to take it there.

        Called on every change an engine could act on: an arrival, work given back to the head
        and, on a shared queue, a head left by an engine that took what it could (which notifies
        again, so the engines take their turns in the order a real one would, one per boundary).
        """
        if self._arrival is not None:
            self._arrival, ev = None, self._arrival
            ev.succeed()
        first_s, first = math.inf, []
        for engine in self.engines:
            t = engine.admission_time()
            if t is None or t > first_s:
                continue
            if t < first_s:
                first_s, first = t, []
            first.append(engine)
        for engine in first:
            engine.cut_for_queue()

    def outstanding(self) -> int:
        return len(self.items) + self.running

    def push_front(self, seqs: list[Sequence]) -> None:
        """Preempted or aborted sequences go back to the head, in their original order.

        On a shared queue another engine may take them: it hears of them as of an arrival
        (the engine that gave them back is busy, so not woken).
        """
        self.items.extendleft(reversed(seqs))
        self.notify()

    def peek(self) -> Sequence | None:
        return self.items[0] if self.items else None

    def pop(self) -> Sequence:
        return self.items.popleft()

    def arrival(self) -> simpy.Event:
        """An event that fires at the next put (shared by every idle engine waiting on it)."""
        if self._arrival is None:
            self._arrival = self.env.event()
        return self._arrival


class Dispatcher:
    """Draws groups and hands them to engine queues, gated by the trainer's progress."""

    def __init__(
        self,
        env,
        sampler: GroupSampler,
        queues: list[WorkQueue],
        bus,
        *,
        prompts_per_step: int,
        depth: int,
        steps: int,
        sync_every: int,
        policy: Dispatch,
        keep_groups_together: bool,
        schedule=None,
        ledger=None,
        sampling=None,
        staleness_threshold: float | None = None,
        kv_kept: bool = False,
    ) -> None:
        self.env, self.sampler, self.queues, self.bus = env, sampler, queues, bus
        self.B, self.depth, self.steps, self.sync_every = prompts_per_step, depth, steps, sync_every
        self.policy, self.together, self.schedule = policy, keep_groups_together, schedule
        self.ledger = ledger  # engines' loads are current only after their planned finishes commit
        self.kv_kept = kv_kept  # agent episodes keep their KV cache over tool calls (tools.py)
        self.next_gid = 0
        self._rr = 0
        self.released = 0
        self.groups: list[Group] = []  # every group released, for token accounting
        self.sampling = sampling  # DynamicSampling, or None: told of every release it did not ask for
        self.first_release = prompts_per_step if sampling is None else sampling.gen
        self.threshold = staleness_threshold  # verl's fully-async release quota instead of whole batches

    def min_version(self, batch: int) -> int:
        """Newest version the engines are sent before batch `batch` may start."""
        v = max(0, batch - self.depth)
        return v - v % self.sync_every

    def run(self):
        """Process: release batch s once the trainer's version reaches s - depth."""
        if self.threshold is not None:
            yield from self._run_quota()
            return
        if self.sampling is not None:
            self.env.process(self.refill())
        for s in range(self.steps):
            while self.bus.trainer_version < s - self.depth:
                yield self.bus.changed()
            if self.schedule is not None:
                self.sampler.set_response_mean(self.schedule(s))
            self.release(self.first_release, self.min_version(s), s)

    def _run_quota(self):
        """Process: release groups up to verl's quota (release_quota.py), renewed at each sync.

        A batch may go out in parts: its first groups as soon as the quota allows, the rest after
        the next sync. Every group carries the newest weights sent when it is released.
        """
        total, started = self.steps * self.B, 0
        while started < total:
            v = self.bus.trainer_version
            allowed = min(
                total, groups_allowed(v, sync_every=self.sync_every, groups_per_step=self.B, threshold=self.threshold)
            )
            while started < allowed:
                batch = started // self.B
                if started % self.B == 0 and self.schedule is not None:
                    self.sampler.set_response_mean(self.schedule(batch))
                n = min(allowed, (batch + 1) * self.B) - started
                self.release(n, synced_version(v, self.sync_every), batch)
                started += n
            if started < total:
                yield self.bus.changed()

    def refill(self):
        """Process: the prompts dynamic sampling asks for, on the batch's own weights."""
        while True:
            batch, n = yield self.sampling.requests.get()
            self._draw(n, self.min_version(batch), batch)

    def replace(self, n: int, batch: int) -> None:
        """Fresh groups for ones of `batch` dropped as stale, on the newest weights sent."""
        if self.sampling is not None:
            self.sampling.on_replace(batch, n)
        if self.threshold is not None:
            self.release(n, synced_version(self.bus.trainer_version, self.sync_every), batch)
            return
        self.release(n, self.min_version(self.bus.trainer_version + self.depth), batch)

    def release(self, n: int, min_version: int, batch: int) -> None:
        if self.sampling is not None:
            self.sampling.on_release(batch, n)
        self._draw(n, min_version, batch)

    def _draw(self, n: int, min_version: int, batch: int) -> None:
        for draw in self.sampler.draw_many(n):
            p, responses = draw.prompt_tokens, draw.response_tokens
            group = Group(self.next_gid, batch, min_version, p, size=len(responses))
            self.next_gid += 1
            self.groups.append(group)
            group.sequences = new_sequences(group, p, responses)
            if draw.episodes is not None:
                start_episodes(group, draw.episodes, self.kv_kept, self.env.now)
            self._assign(group)
        self.released += n

    def _assign(self, group: Group) -> None:
        if len(self.queues) == 1:
            self.queues[0].put(group.sequences)
        elif self.together:
            self.queues[self._pick()].put(group.sequences)
        else:
            for seq in group.sequences:
                self.queues[self._pick()].put([seq])

    def _pick(self) -> int:
        if self.policy is Dispatch.least_loaded:
            if self.ledger is not None:
                self.ledger.flush(self.env.now)
            loads = [q.outstanding() for q in self.queues]
            return loads.index(min(loads))
        i = self._rr % len(self.queues)
        self._rr += 1
        return i
