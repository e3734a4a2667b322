"""The iteration-level reference engine: the oracle for the event-skipping engine.

An independent, deliberately plain implementation of the same vLLM engine: one SimPy event per
decode iteration, and its own code for every rule (no import of the simulator's batch,
interrupt policies, plans or look-ahead). At each iteration boundary it:
- loads pending weights if its interrupt model says so (aborting running work under the abort
  kinds, as resubmitted or discarded work);
- admits first-come-first-served, its own preempted work first: a free slot, a group no newer
  than its weights, and cache room for the prompt, the token the prefill produces and one
  decode iteration of the grown batch; fresh members of one group admitted together share
  the prompt's prefill;
- otherwise decodes one iteration (every running sequence gains a token, its cache computed
  afresh from the running sequences), or, when that iteration would not fit in the cache,
  recompute-preempts the newest sequence to its own waiting list.
Finished sequences go to the ledger in admission order. With a reward model on its GPUs
(`with_inference`) it scores the waiting groups where it would otherwise wait idle. When a partial rollout's step ends
(`end_step`), everything it runs or holds leaves, tokens kept, at its next iteration boundary
(at once when it runs nothing). A multi-turn agent turn that keeps its KV cache over a tool call
(rlsim/simulator/tools.py) leaves its blocks parked here when it finishes (they count in the
cache), comes back to `resume`, waits behind the preempted work and prefills only its
observation; preempted or aborted later, it loses its blocks and recomputes its whole context. A
later turn never shares its group's prompt prefill. It never plans ahead and never listens mid-
iteration, so the event-skipping engine must reproduce its timeline, admissions, preemptions and
token counts (test_oracle.py and others compare the two). Too slow for
planning; `simulate(scenario, engine_cls=ReferenceEngine)` runs it.
"""

from __future__ import annotations

import simpy

from rlsim.scenario import Interrupt
from rlsim.simulator import states

_LOAD_AT_ONCE = (Interrupt.in_flight, Interrupt.abort_resubmit, Interrupt.abort_discard)
_ABORTS = (Interrupt.abort_resubmit, Interrupt.abort_discard)


class ReferenceEngine:
    """An engine that simulates every decode iteration as its own event."""

    kind = "reference"

    def __init__(
        self,
        env: simpy.Environment,
        name,
        costs,
        queue,
        rec,
        ledger,
        bus,
        *,
        capacity_tokens: int,
        max_batch: int,
        interrupt: Interrupt,
        share_prompt_prefill: bool,
        scoring=None,
    ) -> None:
        self.env, self.name, self.costs, self.queue, self.rec, self.ledger = env, name, costs, queue, rec, ledger
        self.times, self.sizes = rec.running_log(name)
        self.capacity, self.max_batch, self.interrupt = capacity_tokens, max_batch, interrupt
        self.share = share_prompt_prefill
        self.running: list = []  # in admission order; the newest last
        self.parked: dict = {}  # agent turns waiting on a tool call with their blocks here: sequence -> tokens
        agent = costs.res.scenario.workload.agent
        self.keeps_cache = agent is not None and agent.kv_cache.value == "kept"
        self.waiting: list = []  # its own preempted (or aborted) sequences, ahead of the queue
        self.version = 0
        self.pending: tuple[int, float] | None = None
        self.weights = env.event()
        self.step = 0  # the RL step of the newest admitted work (trace labels)
        self.drain = None  # it never plans finishes ahead
        self.leaving = None  # a partial rollout's step ended: where its work goes at the next boundary
        self.shared = False
        self.scoring = scoring  # a reward model on its GPUs (with_inference): it scores when it would idle
        queue.attach(self)
        ledger.attach(self)
        bus.attach(self)

    # ---------------------------------------------------------------- what others call
    def start(self) -> simpy.Process:
        self.shared = self.queue.shared
        return self.env.process(self.loop())

    def admission_time(self) -> None:
        return None  # it looks at its queue at every iteration boundary anyway

    def cut_for_queue(self) -> None:
        raise AssertionError("the reference engine is never cut short")

    def commit_until(self, t: float) -> list:
        raise AssertionError("the reference engine plans no finishes")

    def deliver(self, version: int, cost_s: float) -> None:
        self.pending = (version, cost_s)
        if not self.weights.triggered:
            self.weights.succeed()

    def end_step(self, sink) -> None:
        if self.running:
            self.leaving = sink  # the iteration, prefill or weight load in progress finishes first
        else:
            self.hand_over(sink)

    def hand_over(self, sink) -> None:
        """Every sequence it runs or holds goes to `sink` with its tokens; none stays cached."""
        leaving, self.running, self.waiting = self.running + self.waiting, [], []
        self.report()
        sink.carried(leaving, self.version)

    def sync_running(self) -> None:
        pass  # its sequences' token counts are always current

    def park(self, seq, tokens: int) -> None:
        pass  # it notes parked blocks itself, when a turn finishes

    def free_parked(self) -> bool:
        """Idle, and the first waiting or queued work does not fit: free parked blocks, the
        earliest finished turn first (then group, member), then the blocks of returned turns
        waiting here, from the last in line to the first."""
        queued = self.queue.items
        if self.waiting:
            head = self.waiting[0]
        elif queued and queued[0].group.min_version <= self.version:
            if self.pending is not None and self.interrupt is Interrupt.soft_pause:
                return False
            head = queued[0]
        else:
            return False

        def fits() -> bool:
            return self.cached() + head.prompt_tokens + head.generated + 2 <= self.capacity

        if fits():
            return False
        freed = False
        for seq in sorted(self.parked, key=lambda s: (s.finish_s, s.group.gid, s.index)):
            if fits():
                break
            del self.parked[seq]
            seq.episode.evicted = True
            freed = True
        for seq in self.waiting[::-1]:
            if fits():
                break
            if seq.held:
                self.drop_cache(seq)
                freed = True
        return freed

    def resume(self, seq) -> None:
        """An agent turn back from its tool call, its blocks parked here: behind the preempted work."""
        self.parked.pop(seq, None)  # cached still, as the waiting turn's own (`held`)
        self.waiting.append(seq)
        self.report()
        self.queue.notify()  # wakes this engine if idle

    # ---------------------------------------------------------------- the loop
    def loop(self):
        env = self.env
        while True:
            if self.leaving is not None:
                sink, self.leaving = self.leaving, None
                self.hand_over(sink)
            if self.pending is not None and self.update_due():
                version, cost_s = self.pending
                self.pending = None
                self.weights = env.event()
                if self.running and self.interrupt in _ABORTS:
                    self.abort(discard=self.interrupt is Interrupt.abort_discard)
                if cost_s > 0:
                    self.state(states.SYNC)
                    yield env.timeout(cost_s)
                self.version = version
                continue
            lengths = self.admit()
            if lengths:
                self.state(states.PREFILL)
                yield env.timeout(self.costs.prefill_s(lengths))
                self.finish()  # a one-token response ends with its prefill
                self.rec.on_batch(self.name, env.now, len(self.running))
                continue
            if not self.running:
                if (self.parked or self.waiting) and self.free_parked():
                    continue
                if self.scoring is not None and self.scoring.waiting:
                    groups = self.scoring.take()
                    self.state(states.SCORE)
                    yield env.timeout(self.costs.score_s([s.length for g in groups for s in g.sequences]))
                    self.scoring.scored(groups)
                    continue
                self.state(states.IDLE_WEIGHTS)
                self.rec.on_batch(self.name, env.now, 0)
                wake = self.queue.arrival() | self.weights
                yield wake if self.scoring is None else wake | self.scoring.arrival()
                continue
            self.state(states.DECODE)
            b = len(self.running)
            if self.cached() + b > self.capacity:  # the next iteration's tokens do not fit
                self.preempt()
                continue
            yield env.timeout(self.costs.iteration(b).at(self.cached()))
            for seq in self.running:
                seq.generated += 1
            self.rec.on_tokens(b)
            self.finish()

    def update_due(self) -> bool:
        """Load now? At once for in-flight and the aborts; when the batch is empty for a soft
        pause; and for blocking, when also nothing waiting may still start on these weights."""
        if self.interrupt in _LOAD_AT_ONCE:
            return True
        if self.running:
            return False
        if self.interrupt is Interrupt.soft_pause:
            return True
        head = self.waiting[0] if self.waiting else (self.queue.items[0] if self.queue.items else None)
        return head is None or head.group.min_version > self.version

    def admit(self) -> list[int]:
        """First come, first served, preempted work first; the contexts to prefill."""
        queued = self.queue.items
        if not (queued or self.waiting):
            return []
        if self.pending is not None and self.interrupt is Interrupt.soft_pause:
            return []  # a soft pause admits nothing new while weights are pending
        lengths, prompts_prefilled, admitted = [], set(), 0
        while len(self.running) < self.max_batch:
            if self.waiting:
                seq = self.waiting[0]
            elif queued:
                seq = queued[0]
            else:
                break
            if seq.group.min_version > self.version:
                break
            context = seq.prompt_tokens + seq.generated
            after_prefill = self.cached() + context + 1  # its prompt and the token the prefill makes
            if after_prefill + len(self.running) + 1 > self.capacity:  # then one iteration of the grown batch
                break
            if self.waiting:
                self.waiting.pop(0)
            else:
                queued.popleft()
            if seq.generated or seq.turn or not self.share or seq.group not in prompts_prefilled:
                lengths.append(context)
            prompts_prefilled.add(seq.group)
            if seq.version_start < 0:
                seq.version_start = self.version
            seq.generated += 1
            seq.engine = self
            self.parked.pop(seq, None)  # its parked blocks are its running cache again
            self.running.append(seq)
            self.step = seq.group.batch
            admitted += 1
        self.rec.on_tokens(admitted)
        self.report()
        if queued and admitted and self.shared:
            self.queue.notify()  # another engine may take the new head
        return lengths

    def finish(self) -> None:
        """Hand on the sequences that reached their length, in admission order."""
        done = [s for s in self.running if s.generated >= s.response_tokens]
        if not done:
            return
        self.running = [s for s in self.running if s.generated < s.response_tokens]
        for seq in done:
            seq.version_end = self.version
            seq.finish_s = self.env.now
            episode = seq.episode
            if self.keeps_cache and episode is not None and seq.turn < episode.last:  # off to a tool, blocks kept
                self.parked[seq] = seq.held + seq.prompt_tokens + seq.generated
        self.report()
        self.ledger.deliver(done)

    def preempt(self) -> None:
        """Recompute preemption of the newest sequence: it waits here, first in line."""
        seq = self.running.pop()
        self.drop_cache(seq)
        self.rec.on_preempt(seq.prompt_tokens + seq.generated)
        self.waiting.insert(0, seq)
        self.report()

    def abort(self, discard: bool) -> None:
        aborted, self.running = self.running, []
        for seq in aborted:
            self.drop_cache(seq)
            if discard:
                self.rec.on_discard(seq.generated)
                seq.discarded += seq.generated
                seq.generated = 0
                seq.version_start = -1
        self.report()
        if self.shared:
            self.queue.push_front(aborted)  # any engine of the pool may take them
        else:
            self.waiting = aborted + self.waiting
            self.report()

    # ---------------------------------------------------------------- bookkeeping
    @staticmethod
    def drop_cache(seq) -> None:
        """A turn that came back to its kept blocks loses them: its whole context is its prompt now."""
        seq.prompt_tokens += seq.held
        seq.held = 0

    def cached(self) -> int:
        running = sum(s.held + s.prompt_tokens + s.generated for s in self.running)
        return running + sum(self.parked.values()) + sum(s.held for s in self.waiting)

    def state(self, state: str) -> None:
        self.rec.on_state(self.name, state, self.env.now, self.step, self.version)

    def report(self) -> None:
        self.queue.running = len(self.running) + len(self.waiting)
        self.times.append(self.env.now)
        self.sizes.append(len(self.running))
