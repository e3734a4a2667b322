"""An inference engine (one TP group): the SimPy process of continuous batching with event skipping.

The engine's loop decides, at each pass, whether to load pending weights (its interrupt
policy, interrupts.py), to admit and prefill (its running batch, batch.py), to wait idle, or
to decode. Between two events the batch is constant, so it does not step through decode
iterations: it asks the decode model for the closed-form time of the k iterations up to the
next event (a sequence finishes, or the KV cache fills up) and waits that long, or until
something arrives that it must react to at the next iteration boundary (queued work that fits
there, as lookahead.py works out, or new weights under an interrupt at iteration boundaries).
On such a wake it inverts the cumulative time to count the whole iterations done and finishes
the one in progress. The cost of simulating a step therefore grows with the number of
sequences, not tokens. While nothing queued can join the batch, the engine goes further and
plans the whole drain, finish to finish, in one go (drain.py); while its own queue's head only
waits for a free slot or KV room, it plans the refills (admissions, prefills, preemptions) in
one go too (refill.py; on a shared queue, those of its own preempted work: shared_refill.py,
or, while every engine on it decodes a full batch, every engine's at once: joint_refill.py,
which hands the others their parts mid-span, `_handover`), and follows the plan (planned.py),
committed lazily through the ledger
(finishes.py), which hands every finished sequence to its route (lifecycle.py).

The engine talks to its queue, ledger and weight bus through the interfaces in ports.py and
attaches itself to each when it is built. With a reward model on its GPUs (`with_inference`) it
scores the groups waiting in its scoring queue where it would otherwise wait idle
(engine_scoring.py). As vLLM V0 with multi-step scheduling (`scheduler_steps` > 1) it decodes in
windows of that many iterations, the batch fixed, and with a prefill token budget
(`max_num_batched_tokens`) it prefills in passes of at most that many prompt tokens; either runs
span by span (`_window_span`, batch.py `admit`). Under partial rollouts (partial.py) a step's end
takes its running and preempted sequences out at the next iteration boundary (`end_step`).
tests/reference_engine.py is an independent engine that steps every iteration with its own
admission code: the oracle.
"""

from __future__ import annotations

import simpy

from rlsim.models.decode import IterationCost
from rlsim.scenario import Interrupt
from rlsim.simulator import states
from rlsim.simulator.batch import RunningBatch
from rlsim.simulator.costs import Costs
from rlsim.simulator.drain import Drain, plan_drain
from rlsim.simulator.engine_scoring import forward_lengths
from rlsim.simulator.interrupts import POLICIES
from rlsim.simulator.joint_refill import plan_joint, plans_jointly
from rlsim.simulator.kept import free_kept, park, resume
from rlsim.simulator.lifecycle import CarrySink
from rlsim.simulator.lookahead import admission_time
from rlsim.simulator.planned import commit_drain, commit_refill, cut_refill, follow_drain, follow_refill
from rlsim.simulator.ports import FinishSink, ScoringSource, WeightSource, WorkSource
from rlsim.simulator.recorder import Recorder
from rlsim.simulator.refill import Refill, plan_refill
from rlsim.simulator.shared_refill import as_span_by_span
from rlsim.simulator.work import Sequence


class Engine:
    """A vLLM-style engine: admits from its queue, prefills, decodes, hands finished sequences on."""

    kind = "event-skipping"
    drains = True  # plan drains and refills in one go (False: span by span, for the tests)
    # Agent turns come back from tool calls every few iterations and cut nearly every plan
    # short (a default-size agent run planned ~3,400 drains in 4 steps, at 5x the CPU time of
    # span by span), so an agent scenario's engines step span by span unless this is True
    # (the tests turn it on to hold plans exact around tool calls too).
    plans_with_tool_calls = False

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        costs: Costs,
        queue: WorkSource,
        rec: Recorder,
        ledger: FinishSink,
        bus: WeightSource,
        *,
        capacity_tokens: int,
        max_batch: int,
        interrupt: Interrupt,
        share_prompt_prefill: bool,
        scoring: ScoringSource | None = None,
    ) -> None:
        self.env, self.name, self.costs, self.queue, self.rec = env, name, costs, queue, rec
        self._batch_times, self._batch_sizes = rec.running_log(name)  # the batch occupancy
        self.ledger = ledger
        self.batch = RunningBatch(capacity_tokens, max_batch, share_prompt_prefill)
        self.batch.owner = self
        self.drain: Drain | Refill | None = None  # the drain or refill in progress (its steps commit lazily)
        self._prefill_s: dict[tuple[int, ...], float] = {}  # prefill durations by lengths, for refills
        self.interrupt, self.policy = interrupt, POLICIES[interrupt]
        self.version = 0
        self.pending: tuple[int, float] | None = None
        self.weights_event = env.event()
        self.step_hint = 0  # RL step (batch) of the newest admitted work, for the recorder
        self.process: simpy.Process | None = None
        self._shared = False  # its queue is shared with other engines (known once all are attached)
        self._joint = False  # it plans with the engines sharing its queue (joint_refill.py; known at start)
        self._handover: Refill | None = None  # a joint plan's part another engine made for it, to follow now
        self._listening = False  # inside a decode span that an arrival or new weights may cut short
        self._span: tuple[int, IterationCost, float] | None = None  # (iterations, cost, start) of that span
        self._queue_woken = False  # cut short to take the queue's head (others may want what is left)
        self._listen_queue = False
        self._carry: CarrySink | None = None  # the step ended (partial rollouts): hand its work over here
        self.parked: dict[Sequence, int] = {}  # agent turns on a tool call with their KV kept here -> tokens
        self.scoring = scoring  # a reward model on these GPUs: it scores whenever the engine would idle
        if costs.res.scenario.workload.agent is not None and not self.plans_with_tool_calls:
            self.drains = False
        inference = costs.res.scenario.pipeline.inference
        # vLLM V0's multi-step scheduling: decode in windows of this many iterations (`_plan_span`)
        self.window = inference.scheduler_steps
        self.window_end = 0  # the iteration the current window ends at
        self.batch.token_budget = inference.max_num_batched_tokens
        if self.window > 1 or inference.max_num_batched_tokens is not None:
            self.drains = False  # the plans admit at every finish, all that fits: span by span instead
        queue.attach(self)
        ledger.attach(self)
        bus.attach(self)

    def start(self) -> simpy.Process:
        self._shared = self.queue.shared
        self._joint = plans_jointly(self)
        self.process = self.env.process(self.run())
        return self.process

    def sync_running(self) -> None:
        """Bring the running sequences' token counts up to date (at the end of a run)."""
        for seq in self.batch.running.values():
            self.batch.sync_tokens(seq)

    # ------------------------------------------------------------ the queue
    admission_time = admission_time  # lookahead.py: a method of the engine, without a call layer

    def cut_for_queue(self) -> None:
        """Take the queue's head at the end of the iteration in progress."""
        self._listening = False
        self._queue_woken = True
        self.process.interrupt()

    # ------------------------------------------------------------ agent turns keeping their KV cache (kept.py)
    resume, park, _free_kept = resume, park, free_kept

    # ------------------------------------------------------------ weights
    def deliver(self, version: int, cost_s: float) -> None:
        """Called by the weight bus; the newest pending version replaces an older one."""
        r = self.drain
        if r is not None and r.is_refill and self._listening:
            cut_refill(self, r)
        self.pending = (version, cost_s)
        if not self.weights_event.triggered:
            self.weights_event.succeed()
        if self._listening and self.policy.at_boundary:
            self._listening = False
            self.process.interrupt()

    # ------------------------------------------------------------ a step's end (partial rollouts)
    def end_step(self, sink: CarrySink) -> None:
        """The step's batch is complete: every sequence this engine runs or holds preempted goes to
        `sink`, its tokens kept, at the end of the iteration (or prefill, or weight load) in progress.

        With nothing running it hands its preempted work over at once; otherwise it is cut short
        as new weights under an interrupt at iteration boundaries cut it (the ledger has committed
        every finish up to now).
        """
        if not self.batch.running:
            sink.carried(self._take_all(), self.version)
            return
        self._carry = sink
        r = self.drain
        if r is not None and r.is_refill and self._listening:
            cut_refill(self, r, at_iteration=True)
        if self._listening:
            self._listening = False
            self.process.interrupt()

    def _take_all(self) -> list[Sequence]:
        """Every running and preempted sequence leaves the batch, tokens up to date, cache freed."""
        batch = self.batch
        seqs = [batch.remove(order) for order in list(batch.running)]
        batch.heap = None
        seqs.extend(batch.local)
        batch.local.clear()
        self._report_load()
        return seqs

    def _paused(self) -> bool:
        """New weights are pending and the policy admits nothing new until they are loaded."""
        return self.pending is not None and self.policy.pauses_admission

    def _apply_update(self):
        version, cost_s = self.pending
        self.pending = None
        self.weights_event = self.env.event()
        self.policy.on_load(self)  # abort the running sequences, or let them continue
        if cost_s > 0:
            self._state(states.SYNC)
            yield self.env.timeout(cost_s)
        self.version = version

    # ------------------------------------------------------------ bookkeeping
    def _state(self, state: str) -> None:
        self.rec.on_state(self.name, state, self.env.now, self.step_hint, self.version)

    def _report_load(self) -> None:
        """The sequences this engine holds, decoding or preempted (what least_loaded compares)."""
        batch = self.batch
        self.queue.running = len(batch.running) + len(batch.local)
        self._batch_times.append(self.env.now)
        self._batch_sizes.append(len(batch.running))

    def abort_running(self, discard: bool) -> None:
        """Abort every running sequence (their tokens kept, or thrown away): they are resubmitted."""
        batch = self.batch
        aborted = []
        for order in list(batch.running):
            aborted.append(batch.remove(order))
            self._report_load()
        batch.heap = None
        for seq in aborted:
            if discard:
                self.rec.on_discard(seq.generated)
                seq.discarded += seq.generated
                seq.generated = 0
                seq.version_start = -1
        if self._shared:  # resubmitted to the pool: any engine may take them
            self.queue.push_front(aborted)
        else:  # its own queue: ahead of everything, as they were
            batch.local.extendleft(reversed(aborted))
            self._report_load()

    def _preempt_newest(self) -> None:
        """KV cache full: recompute-preempt the newest sequence (vLLM's default)."""
        seq = self.batch.preempt_newest()
        self._report_load()
        self.rec.on_preempt(seq.context)
        self._report_load()

    def _admit(self) -> list[int]:
        """Admit what fits (batch.py); returns the context lengths to prefill (empty: none)."""
        batch, items = self.batch, self.queue.items
        woken, self._queue_woken = self._queue_woken, False
        if not (items or batch.local) or self._paused():
            if woken and items:
                self.queue.notify()  # it will not take the head: the next engine may
            return []
        before = batch.order
        lengths = batch.admit(items, self.version)
        admitted = batch.order - before
        if admitted:
            self.step_hint = batch.running[batch.order - 1].group.batch  # its newest work's RL step (trace labels)
        self.rec.on_tokens(admitted)
        self._report_load()
        if items and (admitted or woken) and self._shared:
            self.queue.notify()  # the head of a shared queue is new, or still there: the next engine may take it
        return lengths

    def _advance(self, n: int) -> None:
        """n decode iterations done: every running sequence gained n tokens; hand on finishers."""
        batch = self.batch
        self.rec.on_tokens(n * len(batch.running))
        finished = batch.advance(n, self.version, self.env.now)
        if finished is None:
            return
        if self.window > 1:  # the steps of a window past a sequence's end are computed, not output
            self.rec.on_tokens(sum(seq.finish_iter for seq in finished) - batch.iters * len(finished))
        self.ledger.flush(self.env.now, settle=False)  # other engines' earlier finishes reach the route first
        self._report_load()
        self.ledger.deliver(finished)

    def commit_until(self, t: float) -> list[Sequence]:
        """The plan's steps that end by t are done (planned.py); returns their finishers.

        Called by the ledger, which hands the finishers of every engine on in time order.
        """
        d = self.drain
        return commit_refill(self, d, t) if d.is_refill else commit_drain(self, d, t)

    # ------------------------------------------------------------ process
    def run(self):
        """Process: the engine's loop, one pass per admission, update, idle wait or decode run."""
        policy = self.policy
        while True:
            if self._carry is not None:
                sink, self._carry = self._carry, None
                sink.carried(self._take_all(), self.version)
            if self.pending is not None and policy.update_due(self):
                yield from self._apply_update()
                continue
            prefill = self._admit()
            if prefill:
                self._state(states.PREFILL)
                yield self.env.timeout(self.costs.prefill_s(prefill))
                self._advance(0)  # one-token responses end with their prefill
                self.rec.on_batch(self.name, self.env.now, len(self.batch.running))
                continue
            if not self.batch.running:
                if (self.parked or self.batch.local) and self._free_kept():
                    continue
                scoring = self.scoring
                if scoring is not None and scoring.waiting:
                    yield from self._score(scoring)
                    continue
                self._state(states.IDLE_WEIGHTS)
                self.rec.on_batch(self.name, self.env.now, 0)
                wake = self.queue.arrival() | self.weights_event
                yield wake if scoring is None else wake | scoring.arrival()
                continue
            self._state(states.DECODE)
            yield from self._decode()

    def _score(self, scoring: ScoringSource):
        """One forward of the reward model that shares these GPUs (engine_scoring.py)."""
        batch = scoring.take()
        self._state(states.SCORE)
        yield self.env.timeout(self.costs.score_s(forward_lengths(batch)))
        scoring.scored(batch)

    def _decode(self):
        """Decode spans back to back while the engine has nothing else to decide.

        After a span the outer loop would look for pending weights and queued work; while there
        is neither (the batch draining after its admissions, the common case) this loop goes
        straight to the next span. It is the hot path of every simulation.
        """
        batch, queue = self.batch, self.queue
        while True:
            drained = self.drains and len(batch.running) < batch.max_batch and self._nothing_to_admit()
            if drained:
                d = plan_drain(self.costs, batch.running, batch.iters, batch.kv, batch.capacity, self.env.now)
                drained = d is not None  # None: not even one span fits (the span-by-span path preempts)
                if drained:
                    yield from follow_drain(self, d)
            elif self.drains and self._can_refill():
                shared = self._shared  # a shared queue: plan its own preempted work only (shared_refill.py)
                items = () if shared else queue.items
                # planned in chunks on its own queue (`LazyPlan`), unless the route reads the whole plan (tools)
                lazy = not shared and not self.ledger.reads_whole_plans
                r = plan_refill(batch, items, self.version, self.env.now, self.costs, self._prefill_s, lazy)
                if r is not None:
                    if shared:
                        as_span_by_span(self, r)
                    yield from follow_refill(self, r)
                    return
            elif self._joint and self.pending is None and not batch.local and len(batch.running) == batch.max_batch:
                r = plan_joint(self)  # every engine on the shared queue, planned together (joint_refill.py)
                if r is not None:
                    yield from follow_refill(self, r)
                    return
            if not drained:
                span = self._span = self._plan_span()
                if span is None:
                    return
                k, cost, start = span
                try:
                    yield self.env.timeout(cost.span_s(batch.kv, k))
                    n = k
                except simpy.Interrupt:
                    if self._handover is not None:  # planned with the others: it follows its part from this span
                        r, self._handover = self._handover, None
                        yield from follow_refill(self, r)
                        return
                    n = yield from self._cut_short(k, cost, start)
                    self.window_end = batch.iters + n  # a cut (new weights, a step's end) ends the window
                self._listening = False
                self._advance(n)
            if not batch.running or queue.items or batch.local or self.pending is not None or self._carry:
                return

    def _nothing_to_admit(self) -> bool:
        """Nothing queued could start at a finish: the queue is empty or waits for newer weights."""
        if self.batch.local:
            return False
        items = self.queue.items
        return not items or items[0].group.min_version > self.version

    def _can_refill(self) -> bool:
        """Work waits for room on this engine (its own preempted work, on a shared queue), no new weights pending."""
        if self.pending is not None:
            return False
        return bool(self.batch.local) if self._shared else bool(self.queue.items or self.batch.local)

    def _plan_span(self) -> tuple[int, IterationCost, float] | None:
        """Iterations up to the next finish or KV-full boundary; preempts when the cache is full."""
        batch = self.batch
        b = len(batch.running)
        room = (batch.capacity - batch.kv) // b
        if room <= 0:
            self._preempt_newest()
            return None
        self._listening = True
        if self.window > 1:
            return self._window_span(room), self.costs.iteration(b), self.env.now
        # queued work that fits (with free slots) or new weights may cut the span short
        self._listen_queue = b < batch.max_batch
        return min(batch.next_finish(), room), self.costs.iteration(b), self.env.now

    def _window_span(self, room: int) -> int:
        """Iterations to the end of the multi-step window (vLLM V0, `scheduler_steps` > 1).

        vLLM 0.6 schedules once per window: the batch is fixed for its steps, a sequence that
        ends inside it is computed to its end and freed then, and queued work waits for it (new
        weights or a step's end may still cut it). A window starts where the last one ended;
        one the cache cannot hold ends early, so the next scheduling pass preempts.
        """
        self._listen_queue = False
        iters = self.batch.iters
        if self.window_end <= iters:
            self.window_end = iters + self.window
        if self.window_end - iters > room:
            self.window_end = iters + room
        return self.window_end - iters

    def _cut_short(self, k: int, cost: IterationCost, start: float):
        """Woken mid-span: count the whole iterations done and finish the one in progress."""
        self._listening = False
        batch = self.batch
        elapsed = self.env.now - start
        n = cost.iterations_within(batch.kv, elapsed, k)
        if n < k:
            yield self.env.timeout(max(0.0, cost.span_s(batch.kv, n + 1) - elapsed))
            n += 1
        return n
