"""An inference engine (one TP group): continuous batching with event skipping.

Between two events the batch is constant, so the engine does not step through decode
iterations: it asks the decode model for the closed-form time of the k iterations up to the
next event (a sequence finishes, or the KV cache fills up) and waits that long, or until
something arrives that it must react to at the next iteration boundary (queued work that fits
there, as the queue works out in `admission_time`, or new weights under an in-flight or abort
interrupt). A preempted sequence waits in the engine's own list, ahead of the queue, as in
vLLM. On such a wake it
inverts the cumulative time to count the whole iterations done and finishes the one in
progress. The cost of simulating a step therefore grows with the number of sequences, not
tokens. While nothing queued can join the batch, the engine goes further and plans the whole
drain, finish to finish, in one go (drain.py); while its own queue's head only waits for a free
slot or KV room, it plans the refills (admissions, prefills, preemptions) in one go too
(refill.py). Planned finishes reach the reward pool through the ledger (finishes.py), without
one event each. `ReferenceEngine` (reference_engine.py) steps
every iteration and is the oracle.

Interrupt models, applied at iteration boundaries when new weights are pending:
- blocking: once nothing is running and no queued work may still start on the current weights;
- soft_pause: admit nothing new, drain the running sequences, then load;
- abort_resubmit: abort running sequences now, keep their tokens, re-prefill them after loading;
- abort_discard: abort running sequences now, throw their tokens away (waste), restart them;
- in_flight: load between two iterations; running sequences continue on the new weights.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque

import simpy

from rlsim.models.decode import IterationCost
from rlsim.scenario import Interrupt
from rlsim.simulator import states
from rlsim.simulator.costs import Costs
from rlsim.simulator.dispatcher import WorkQueue
from rlsim.simulator.drain import Drain, plan_drain
from rlsim.simulator.finishes import FinishLedger, delay_until
from rlsim.simulator.recorder import Recorder
from rlsim.simulator.refill import PREFILL, SPAN, Refill, plan_refill
from rlsim.simulator.work import Sequence

_AT_BOUNDARY = (Interrupt.in_flight, Interrupt.abort_resubmit, Interrupt.abort_discard)


class Engine:
    """A vLLM-style engine: admits from its queue, prefills, decodes, hands finished sequences on."""

    drains = True  # plan a drain in one go (the reference engine steps every iteration instead)

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        costs: Costs,
        queue: WorkQueue,
        rec: Recorder,
        ledger: FinishLedger,
        *,
        capacity_tokens: int,
        max_batch: int,
        interrupt: Interrupt,
        share_prompt_prefill: bool,
    ) -> None:
        self.env, self.name, self.costs, self.queue, self.rec = env, name, costs, queue, rec
        self._batch_times, self._batch_sizes = rec.running_log(name)  # the batch occupancy
        self.ledger = ledger
        self.drain: Drain | Refill | None = None  # the drain or refill in progress (its steps commit lazily)
        self._prefill_s: dict[tuple[int, ...], float] = {}  # prefill durations by lengths, for refills
        self.capacity, self.max_batch, self.interrupt = capacity_tokens, max_batch, interrupt
        self.share_prompt_prefill = share_prompt_prefill
        self.version = 0
        self.pending: tuple[int, float] | None = None
        self.weights_event = env.event()
        self.running: dict[int, Sequence] = {}  # admission order -> sequence
        # preempted sequences waiting to be recomputed here, ahead of the queue: a vLLM engine
        # keeps a preempted request in its own waiting list; no other engine can take it
        self.local: deque[Sequence] = deque()
        # (iteration at which it finishes, admission order) of the running sequences, for the
        # span-by-span path; None while not needed (a drain plans from the batch itself)
        self._heap: list[tuple[int, int]] | None = None
        self._order = 0
        self.iters = 0  # decode iterations done so far
        self.kv = 0  # tokens cached by the running sequences
        self.step_hint = 0  # RL step (batch) of the newest admitted work, for the recorder
        self.process: simpy.Process | None = None
        self._listening = False  # inside a decode span that an arrival or new weights may cut short
        self._span: tuple[int, IterationCost, float] | None = None  # (iterations, cost, start) of that span
        self._queue_woken = False  # cut short to take the queue's head (others may want what is left)
        self._listen_queue = False

    def start(self) -> simpy.Process:
        self.process = self.env.process(self.run())
        return self.process

    def admission_time(self) -> float | None:
        """The queue changed: when this decoding engine would take its head, if it can now.

        Only the head matters (admission stops at the first that does not fit). It can be taken
        at the end of the iteration in progress if it fits then; a head waiting for newer
        weights cannot start before they arrive (which interrupts on its own), nor can any
        while new weights are to be loaded first. A span-by-span engine looks at its queue again
        where its span ends; a drain does not, so if the head does not fit it stops at the end
        of the current span instead. None: nothing to do now.
        """
        if not (self._listening and self._listen_queue) or self._paused():
            return None
        if (self.pending is not None and self.interrupt in _AT_BOUNDARY) or self.local:
            return None  # it loads weights first, or its own preempted work goes first
        items = self.queue.items
        if not items or items[0].group.min_version > self.version:
            return None
        head = items[0]
        d = self.drain
        if d is None:
            return self._boundary_if_fits(head.prompt_tokens + head.generated, self._span, False)
        self.ledger.flush(self.env.now)
        j = d.pos
        if j >= d.spans:
            return None  # its last span ends now: the drain returns and looks at the queue
        span = (d.k[j], self.costs.iteration(len(self.running)), d.span_start_s(j))
        t = self._boundary_if_fits(head.prompt_tokens + head.generated, span, True)
        if t is None and j < d.spans - 1 and d.stop_at > j:
            d.stop_at = j
            stop = self.env.timeout(delay_until(self.env.now, d.end_s[j]))
            stop.callbacks.append(lambda _ev: self._stop_drain(d))
        return t

    def cut_for_queue(self) -> None:
        """Take the queue's head at the end of the iteration in progress."""
        self._listening = False
        self._queue_woken = True
        self.process.interrupt()

    def _stop_drain(self, d: Drain) -> None:
        """End the drain at a span boundary, where a span-by-span engine looks at its queue."""
        if self.drain is d and self._listening:
            self._listening = False
            d.stopped = True
            self.process.interrupt()

    def _boundary_if_fits(self, context: int, span: tuple[int, IterationCost, float], draining: bool) -> float | None:
        """The end of the iteration in progress, if `_admit` would then take this context."""
        k, cost, start = span
        b = len(self.running)
        room = self.capacity - context - b - 2 - self.kv  # cache the batch may still grow by
        if room < b:  # not even after one more iteration
            return None
        elapsed = self.env.now - start
        if (int(elapsed / cost.at(self.kv + (k - 1) * b)) + 1) * b > room:  # at least this many done
            return None
        n = cost.iterations_within(self.kv, elapsed, k)
        if n >= k:  # the span ends now; a span-by-span engine looks at its queue there anyway
            return start + cost.span_s(self.kv, k) if draining and k * b <= room else None
        return start + cost.span_s(self.kv, n + 1) if (n + 1) * b <= room else None

    # ------------------------------------------------------------ weights
    def deliver(self, version: int, cost_s: float) -> None:
        """Called by the weight bus; the newest pending version replaces an older one."""
        r = self.drain
        if r is not None and r.is_refill and self._listening:
            self._cut_refill(r)
        self.pending = (version, cost_s)
        if not self.weights_event.triggered:
            self.weights_event.succeed()
        if self._listening and self.interrupt in _AT_BOUNDARY:
            self._listening = False
            self.process.interrupt()

    def _cut_refill(self, r: Refill) -> None:
        """New weights: the refill ends with the step in progress, or, under an interrupt at
        iteration boundaries, with the iteration in progress of a span (as a span-by-span
        engine, which listens while it decodes, not while it prefills).

        Steps that start by now were planned on the old weights' rules: committed first.
        """
        self.ledger.flush(self.env.now)
        j = r.pos
        if j > r.last:  # the whole plan has ended now: the engine resumes from it at once
            self._listening = False
        elif r.kind(j) == PREFILL or self.interrupt not in _AT_BOUNDARY:
            r.last, r.rewait = j, True
            r.wake_s = [t for t in r.wake_s if t < r.end_s[j]]
            self._listening = False
            self.process.interrupt()

    def _paused(self) -> bool:
        """Soft pause: new weights are pending, so nothing new is admitted until they are loaded."""
        return self.pending is not None and self.interrupt is Interrupt.soft_pause

    def _update_due(self) -> bool:
        if self.pending is None:
            return False
        if self.interrupt in _AT_BOUNDARY:
            return True
        if self.running:
            return False
        if self.interrupt is Interrupt.soft_pause:
            return True
        head = self.local[0] if self.local else self.queue.peek()
        return head is None or head.group.min_version > self.version

    def _apply_update(self):
        version, cost_s = self.pending
        self.pending = None
        self.weights_event = self.env.event()
        if self.running and self.interrupt in (Interrupt.abort_resubmit, Interrupt.abort_discard):
            self._abort_all(discard=self.interrupt is Interrupt.abort_discard)
        if cost_s > 0:
            self._state(states.SYNC)
            yield self.env.timeout(cost_s)
        self.version = version

    # ------------------------------------------------------------ bookkeeping
    def _state(self, state: str) -> None:
        self.rec.on_state(self.name, state, self.env.now, self.step_hint, self.version)

    def sync_tokens(self, seq: Sequence) -> None:
        seq.generated = seq.generated_at_admit + (self.iters - seq.admit_iter)

    def _remove(self, order: int) -> Sequence:
        seq = self.running.pop(order)
        self.sync_tokens(seq)
        self.kv -= seq.context
        self._report_load()
        return seq

    def _report_load(self) -> None:
        """The sequences this engine holds, decoding or preempted (what least_loaded compares)."""
        self.queue.running = len(self.running) + len(self.local)
        self._batch_times.append(self.env.now)
        self._batch_sizes.append(len(self.running))

    def _abort_all(self, discard: bool) -> None:
        aborted = [self._remove(order) for order in list(self.running)]
        self._heap = None
        for seq in aborted:
            if discard:
                self.rec.on_discard(seq.generated)
                seq.discarded += seq.generated
                seq.generated = 0
                seq.version_start = -1
        if len(self.queue.engines) > 1:  # resubmitted to the pool: any engine may take them
            self.queue.push_front(aborted)
        else:  # its own queue: ahead of everything, as they were
            self.local.extendleft(reversed(aborted))
            self._report_load()

    def _preempt_newest(self) -> None:
        """KV cache full: recompute-preempt the newest sequence (vLLM's default)."""
        order = next(reversed(self.running))
        seq = self._remove(order)
        self.rec.on_preempt(seq.context)
        self.local.appendleft(seq)
        self._report_load()

    def _admit(self) -> list[int]:
        """Admit what fits; returns the context lengths to prefill (empty when nothing was admitted).

        The prefill pass also produces each sequence's next token (vLLM samples the first token
        from the prefill), so a response of r tokens needs r - 1 decode iterations. Fresh members
        of one group admitted together share the prompt's prefill.
        """
        local, items = self.local, self.queue.items
        woken, self._queue_woken = self._queue_woken, False
        if not (items or local) or self._paused():
            if woken and items:
                self.queue.notify()  # it will not take the head: the next engine may
            return []
        running, heap, iters, version = self.running, self._heap, self.iters, self.version
        capacity, max_batch, share = self.capacity, self.max_batch, self.share_prompt_prefill
        lengths: list[int] = []
        prefilled: set = set()  # groups whose prompt this admission already prefills
        kv, order, b = self.kv, self._order, len(running)
        blocked = False
        for source in (local, items) if local else (items,):  # its own preempted work first
            while source and b < max_batch:
                seq = source[0]
                group = seq.group
                if group.min_version > version:
                    blocked = True
                    break
                generated = seq.generated
                context = seq.prompt_tokens + generated
                if kv + context + b + 2 > capacity:  # its prompt and first token, plus one per sequence
                    blocked = True
                    break
                source.popleft()
                if generated or not share or group not in prefilled:
                    lengths.append(context)
                prefilled.add(group)
                if seq.version_start < 0:
                    seq.version_start = version
                generated += 1  # the token the prefill produces
                seq.generated = seq.generated_at_admit = generated
                seq.admit_iter = iters
                seq.finish_iter = finish = iters + seq.response_tokens - generated
                running[order] = seq
                if heap is not None:
                    heapq.heappush(heap, (finish, order))
                elif finish <= iters:  # a one-token response ends with its prefill: _advance(0) needs the heap
                    heap = self._heap = []
                order += 1
                b += 1
                kv += context + 1
            if blocked:
                break
        admitted = order - self._order
        if admitted:
            self.step_hint = running[order - 1].group.batch  # the RL step of its newest work (trace labels)
        self.rec.on_tokens(admitted)
        self.kv, self._order = kv, order
        self._report_load()
        if items and (admitted or woken) and len(self.queue.engines) > 1:
            self.queue.notify()  # the head of a shared queue is new, or still there: the next engine may take it
        if heap is not None and len(heap) < b:
            self._build_heap()
        return lengths

    def _build_heap(self) -> list[tuple[int, int]]:
        heap = self._heap = [(seq.finish_iter, order) for order, seq in self.running.items()]
        heapq.heapify(heap)
        return heap

    def _advance(self, n: int) -> None:
        """n decode iterations done: every running sequence gained n tokens; hand on finishers."""
        running, heap = self.running, self._heap
        if heap is None and n:
            heap = self._build_heap()
        b = len(running)
        iters = self.iters = self.iters + n
        self.kv += n * b
        self.rec.on_tokens(n * b)
        if not heap or heap[0][0] > iters:
            return
        now, version = self.env.now, self.version
        self.ledger.flush(now)  # other engines' earlier finishes reach the reward pool first
        finished = []
        while heap and heap[0][0] <= iters:
            order = heapq.heappop(heap)[1]
            seq = running.pop(order, None)
            if seq is None:
                continue  # preempted or aborted earlier
            seq.generated = seq.response_tokens
            self.kv -= seq.length
            seq.version_end = version
            seq.finish_s = now
            finished.append(seq)
        self._report_load()
        self.ledger.deliver(finished)

    def commit_until(self, t: float) -> list[Sequence]:
        """The drain's spans that end by t are done: update the batch; returns their finishers.

        Called by the ledger, which hands the finishers of every engine on in time order.
        """
        d = self.drain
        if d.is_refill:
            return self._commit_refill(d, t)
        first = d.pos
        pos = d.pos = bisect.bisect_right(d.end_s, t, first)
        d.next_end_s = d.end_s[pos] if pos < d.spans else math.inf
        self.iters, self.kv = d.iters[pos - 1], d.kv_end[pos - 1]
        self.rec.on_tokens(d.tokens[pos] - d.tokens[first])
        lo, hi = d.bounds[first], d.bounds[pos]
        if lo == hi:
            return []
        running, version = self.running, self.version
        finishers = d.finishers[lo:hi]
        times = d.finish_s[lo:hi]
        for order, seq, finish_s in zip(d.orders[lo:hi], finishers, times):
            del running[order]
            seq.generated = seq.response_tokens
            seq.version_end = version
            seq.finish_s = finish_s
        left = len(running) + len(times)  # the batch loses one finisher at a time, at its finish
        self._batch_times.extend(times)
        self._batch_sizes.extend(range(left - 1, left - 1 - len(times), -1))
        self._report_load()
        return finishers

    def _commit_refill(self, r: Refill, t: float) -> list[Sequence]:
        """The refill's steps that end by t are done; returns their finishers.

        At each step's end its finishers leave; then the next step starts as planned: a span
        with the engine's own `_preempt_newest`, a prefill with what `_admit` does (the plan
        names the sequences; taking any other is a bug in the plan).
        """
        j, last, end_s = r.pos, r.last, r.end_s
        if j > last or end_s[j] > t:
            return []
        running, version, steps, finishers, orders, admits = (
            self.running,
            self.version,
            r.steps,
            r.finishers,
            r.orders,
            r.admits,
        )
        name, on_batch, on_state = self.name, self.rec.on_batch, self.rec.on_state
        local, items, order, hint = self.local, self.queue.items, self._order, self.step_hint
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
                    self.iters, self.kv = iters, kv
                    for _ in range(preempts):
                        self._preempt_newest()
                    kv = self.kv
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
        self.iters, self.kv, self._order, self.step_hint = iters, kv, order, hint
        r.pos = j
        r.next_end_s = end_s[j] if j <= last else math.inf
        self.rec.on_tokens(tokens)
        self._report_load()
        return finishers[first:hi]

    def _next_heap_finish(self) -> int:
        heap = self._heap if self._heap is not None else self._build_heap()
        while heap[0][1] not in self.running:
            heapq.heappop(heap)
        return heap[0][0] - self.iters

    # ------------------------------------------------------------ process
    def run(self):
        """Process: the engine's loop, one pass per admission, update, idle wait or decode run."""
        while True:
            if self.pending is not None and self._update_due():
                yield from self._apply_update()
                continue
            prefill = self._admit()
            if prefill:
                self._state(states.PREFILL)
                yield self.env.timeout(self.costs.prefill_s(prefill))
                self._advance(0)  # one-token responses end with their prefill
                self.rec.on_batch(self.name, self.env.now, len(self.running))
                continue
            if not self.running:
                self._state(states.IDLE_WEIGHTS)
                self.rec.on_batch(self.name, self.env.now, 0)
                yield self.queue.arrival() | self.weights_event
                continue
            self._state(states.DECODE)
            yield from self._decode()

    def _decode(self):
        """Decode spans back to back while the engine has nothing else to decide.

        After a span the outer loop would look for pending weights and queued work; while there
        is neither (the batch draining after its admissions, the common case) this loop goes
        straight to the next span. It is the hot path of every simulation.
        """
        while True:
            drained = self.drains and len(self.running) < self.max_batch and self._nothing_to_admit()
            if drained:
                drained = yield from self._drain()
            elif self.drains and self._can_refill():
                refilled = yield from self._refill()
                if refilled:
                    return
            if not drained:
                span = self._span = self._plan_span()
                if span is None:
                    return
                k, cost, start = span
                try:
                    yield self.env.timeout(self._span_s(cost, k))
                    n = k
                except simpy.Interrupt:
                    n = yield from self._cut_short(k, cost, start)
                self._listening = False
                self._advance(n)
            if not self.running or self.queue.items or self.local or self.pending is not None:
                return

    def _nothing_to_admit(self) -> bool:
        """Nothing queued could start at a finish: the queue is empty or waits for newer weights."""
        if self.local:
            return False
        items = self.queue.items
        return not items or items[0].group.min_version > self.version

    def _drain(self):
        """Decode until the batch is empty or the cache full, waking only if cut short.

        Returns False when not even the first span can run (the cache is full: the span-by-span
        path preempts). An arrival or new weights cut the drain at the current time: the ledger
        commits what has ended, the iteration in progress finishes, and the rest is dropped.
        """
        d = plan_drain(self.costs, self.running, self.iters, self.kv, self.capacity, self.env.now)
        if d is None:
            return False
        self.drain = d
        self.ledger.watch(self, d)  # also counts it among the engines with planned finishes
        self._listening = self._listen_queue = True
        try:
            yield self.env.timeout(delay_until(self.env.now, d.end_s[-1]))
            self.ledger.flush(self.env.now)
        except simpy.Interrupt:
            self.ledger.flush(self.env.now)
            self._end_drain()  # before the cut, so no flush commits the dropped plan
            j = d.pos
            if j < d.spans and not d.stopped:  # cut short: finish the iteration in progress
                k, cost = d.k[j], self.costs.iteration(len(self.running))
                n = yield from self._cut_short(k, cost, d.span_start_s(j))
                self._advance(n)
        self._listening = False
        if self.drain is not None:
            self._end_drain()
        self._heap = None  # stale: rebuilt from the batch if the span-by-span path needs it
        return True

    def _can_refill(self) -> bool:
        """Queued work waits for room on this engine alone, and no new weights are pending."""
        return self.pending is None and bool(self.queue.items or self.local) and len(self.queue.engines) == 1

    def _refill(self):
        """Decode, finish, admit and prefill as planned (refill.py), waking only if cut short.

        Returns False when nothing could be planned. New weights end the plan with the step
        in progress (`_cut_refill`), or, under an interrupt at iteration boundaries, with the
        iteration in progress of its span; the engine then goes back to its loop.
        """
        r = plan_refill(self, self.costs, self._prefill_s)
        if r is None:
            return False
        self._heap = None  # stale from here: admissions go on without it
        self.drain = r
        self.ledger.watch(self, r)
        self._listening, self._listen_queue = True, False  # nothing queued can jump the plan
        while True:
            try:
                yield self.env.timeout(delay_until(self.env.now, r.end_s[r.last]))
                self.ledger.flush(self.env.now)
                break
            except simpy.Interrupt:
                if r.rewait:  # cut back to the step in progress: wait for its end instead
                    r.rewait = False
                    continue
                self.ledger.flush(self.env.now)
                j = r.pos
                self._end_refill()
                if j <= r.last:  # new weights mid-span: finish the iteration in progress
                    k, cost = r.steps[j][1], self.costs.iteration(len(self.running))
                    n = yield from self._cut_short(k, cost, r.step_start_s(j))
                    self._advance(n)
                break
        self._listening = False
        if self.drain is r:
            self._end_drain()
        self._heap = None
        return True

    def _end_refill(self) -> None:
        self._end_drain()

    def _end_drain(self) -> None:
        self.drain = None
        self.ledger.unwatch(self)

    def _plan_span(self) -> tuple[int, IterationCost, float] | None:
        """Iterations up to the next finish or KV-full boundary; preempts when the cache is full."""
        b = len(self.running)
        room = (self.capacity - self.kv) // b
        if room <= 0:
            self._preempt_newest()
            return None
        # queued work that fits (with free slots) or new weights may cut the span short
        self._listen_queue = b < self.max_batch
        self._listening = True
        return min(self._next_heap_finish(), room), self.costs.iteration(b), self.env.now

    def _span_s(self, cost: IterationCost, k: int) -> float:
        return cost.span_s(self.kv, k)

    def _cut_short(self, k: int, cost: IterationCost, start: float):
        """Woken mid-span: count the whole iterations done and finish the one in progress."""
        self._listening = False
        elapsed = self.env.now - start
        n = cost.iterations_within(self.kv, elapsed, k)
        if n < k:
            yield self.env.timeout(max(0.0, cost.span_s(self.kv, n + 1) - elapsed))
            n += 1
        return n
