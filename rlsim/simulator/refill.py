"""A refill: an engine's future planned while its queue's head waits only for a free slot or KV room.

When the queue holds more than an engine can admit (a full batch, or a cache too full for the
head), the future is still fixed until something outside changes it: each finish frees a slot
or cache room, the engine admits what now fits from its own preempted work and the queue's
head, prefills it, and decodes on; when the cache fills it preempts its newest sequence. The
span-by-span engine spends a prefill event and a span event per finish on this; a refill plans
the whole chain at once, as a drain (drain.py) plans a batch that only empties. The plan is the
engine's own loop replayed on integers (which sequences run, finish, are admitted or
preempted, at which decode iteration: none of that depends on time), then timed in one go: the
spans' durations vectorised with `models.decode.spans_s` (bit for bit the scalar `span_s`),
the prefills' from the cost oracle, their end times the running sums a span-by-span engine
reaches. The engine commits the plan lazily, step by step, through the ledger (finishes.py),
applying its own admission and preemption code to its real state at each step's time.

The plan stops where the engine would next depend on something it cannot know: where it would
look past the queue it saw when planning (the queue may have grown since), where its queue's
head waits for newer weights (a drain takes over), or where its batch empties. New weights cut
it short (engine.py). Only an engine with a queue of its own plans what it takes from the queue:
engines sharing a queue take turns at its head in the order of their iteration boundaries, so
there an engine plans its own preempted work only (shared_refill.py). Times in seconds, sizes
in tokens.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from itertools import islice

import numpy as np

from rlsim.models.decode import spans_s
from rlsim.simulator.batch import RunningBatch
from rlsim.simulator.costs import Costs
from rlsim.simulator.work import Sequence

SPAN, PREFILL = 0, 1
SNAPSHOT_ITEMS = 4096  # queued sequences one plan may look at (a longer queue is planned in turns)


@dataclass(eq=False)
class Refill:
    """The planned steps of one engine; `pos` is the first step whose end is not yet committed.

    Step j is a decode span (preemptions, then k iterations) or a prefill (the admissions made
    at its start). Its start ops are applied when step j - 1 ends (step 0 is a span that has
    none: the engine is decoding already), its end ops (finishers, iteration count, cache) when
    it ends. `steps[j]` holds
    (kind, k, preemptions, enters decode, iterations at its end, cache at its end once its
    finishers have left, end of its finishers, end of its admissions, admissions from the
    engine's own preempted list); step j's finishers are those from the previous step's end.
    """

    is_refill = True
    start_s: float
    steps: list[tuple[int, int, int, bool, int, int, int, int, int]]
    end_s: list[float]
    orders: list[int]  # the finishers' admission orders (their keys in the engine's batch)
    finishers: list[Sequence]  # in finish order
    admits: list[tuple[Sequence, int, int]]  # (sequence, tokens generated after its prefill, finish iteration)
    wake_s: list[float] = field(default_factory=list)  # where a group's last member here finishes
    pops: list[int] = field(default_factory=list)  # the steps whose end pops finish iterations off the heap
    last: int = 0  # the plan's last step (cut back when new weights arrive)
    pos: int = 0
    next_end_s: float = 0.0
    rewait: bool = False  # the plan was cut back: the engine waits again, for its new last step
    # log the running batch at each step's start, as a span-by-span engine does (a shared queue's
    # plan, shared_refill.py), rather than at each commit
    logs_steps: bool = False

    def __post_init__(self) -> None:
        self.last = len(self.steps) - 1
        self.next_end_s = self.end_s[0]

    def step_start_s(self, j: int) -> float:
        return self.end_s[j - 1] if j else self.start_s

    def kind(self, j: int) -> int:
        return self.steps[j][0]


class _Stop(Exception):
    """The plan ends here: the engine would next look at something it could not know."""


def plan_refill(
    batch: RunningBatch, queued: deque[Sequence], version: int, now: float, costs: Costs, prefill_cache: dict
) -> Refill | None:
    """The engine's steps from `now`, inside its decode loop before it plans a span (None: none).

    Mirrors `Engine.run`, `_admit`, `_decode` and `_plan_span` (engine.py) and
    `RunningBatch.admit`, `advance` and `preempt_newest` (batch.py) on copies of the batch and
    of the `queued` sequences; any change to those must be made here too (the oracle and drain
    tests compare the two paths on random, pressured and queue-bound scenarios).
    """
    capacity, max_batch = batch.capacity, batch.max_batch
    share = batch.share_prompt_prefill
    iters, kv, order = batch.iters, batch.kv, batch.order
    if capacity - kv < len(batch.running):
        return None  # it preempts first (span by span); so the first step is a span, started already
    # running: order -> (finish_iter, length, seq, admit_iter, generated_at_admit)
    run = {o: (s.finish_iter, s.length, s, s.admit_iter, s.generated_at_admit) for o, s in batch.running.items()}
    if batch.heap is not None:  # the span-by-span engine's own, with the entries of sequences gone since
        heap = list(batch.heap)
    else:
        heap = [(v[0], o) for o, v in run.items()]
        heapq.heapify(heap)
    pops: list[int] = []  # the steps whose end pops the heap (a span-by-span engine's `_advance` flushes there)
    local = deque((s, s.generated) for s in batch.local)
    snap = list(islice(queued, SNAPSHOT_ITEMS))
    n_snap, qi = len(snap), 0
    push, pop = heapq.heappush, heapq.heappop

    steps: list[tuple] = []
    orders: list[int] = []
    finishers: list[Sequence] = []
    admits: list[tuple[Sequence, int, int]] = []
    spans: list[tuple[int, int, int]] = []  # (batch, cache at its start, iterations) of each span
    prefills: list[float] = []  # each prefill's duration
    preempts = 0
    enter_decode = False
    try:
        at_top = False  # the plan starts inside `_decode`, before its drain check
        while True:
            if at_top:
                # ---- Engine.run (no weights pending while a plan runs), then Engine._admit
                if not local and qi == n_snap:
                    raise _Stop  # the real queue may hold more than the snapshot
                b = len(run)
                if b < max_batch:  # does the head fit? (most visits admit nothing: check it first)
                    seq, generated = local[0] if local else (snap[qi], snap[qi].generated)
                    fits = seq.group.min_version <= version and kv + seq.prompt_tokens + generated + b + 2 <= capacity
                else:
                    fits = False
                if fits:
                    lengths: list[int] = []
                    prefilled: set = set()
                    b, first, blocked = len(run), len(admits), False
                    from_local = 0
                    while local and b < max_batch:  # its own preempted work first
                        seq, generated = local[0]
                        context = seq.prompt_tokens + generated
                        if seq.group.min_version > version or kv + context + b + 2 > capacity:
                            blocked = True
                            break
                        local.popleft()
                        if generated or not share or seq.group not in prefilled or seq.turn:
                            lengths.append(context)
                        prefilled.add(seq.group)
                        generated += 1
                        finish = iters + seq.response_tokens - generated
                        run[order] = (finish, seq.length, seq, iters, generated)
                        push(heap, (finish, order))
                        admits.append((seq, generated, finish))
                        order += 1
                        b += 1
                        kv += context + 1
                        from_local += 1
                    while not blocked and b < max_batch:
                        if qi == n_snap:
                            raise _Stop  # it would look past what it saw
                        seq = snap[qi]
                        group = seq.group
                        generated = seq.generated
                        context = seq.prompt_tokens + generated
                        if group.min_version > version or kv + context + b + 2 > capacity:
                            break
                        qi += 1
                        if generated or not share or group not in prefilled or seq.turn:
                            lengths.append(context)
                        prefilled.add(group)
                        generated += 1
                        finish = iters + seq.response_tokens - generated
                        run[order] = (finish, seq.length, seq, iters, generated)
                        push(heap, (finish, order))
                        admits.append((seq, generated, finish))
                        order += 1
                        b += 1
                        kv += context + 1
                    if len(admits) > first:
                        key = tuple(lengths)
                        d = prefill_cache.get(key)
                        if d is None:
                            d = prefill_cache[key] = costs.prefill_s(lengths)
                        prefills.append(d)
                        if heap and heap[0][0] <= iters:
                            pops.append(len(steps))
                        while heap and heap[0][0] <= iters:  # one-token responses end with their prefill
                            o = pop(heap)[1]
                            v = run.pop(o, None)
                            if v is not None:
                                kv -= v[1]
                                orders.append(o)
                                finishers.append(v[2])
                        steps.append((PREFILL, 0, 0, False, iters, kv, len(finishers), len(admits), from_local))
                        enter_decode = True
                        continue
                if not run:
                    raise _Stop  # idle: it waits for an arrival or weights
            at_top = True
            # ---- Engine._decode, one span; the loop goes back to the top after it here
            b = len(run)
            if b < max_batch and not local:
                if qi == n_snap or snap[qi].group.min_version > version:
                    raise _Stop  # nothing to admit (or unknown): a drain or a replan follows
            room = (capacity - kv) // b
            if room <= 0:  # _plan_span preempts the newest; then, while the cache stays full, again
                while True:
                    o, v = run.popitem()  # the newest
                    seq = v[2]
                    if seq.held:
                        run[o] = v
                        raise _Stop  # an agent turn that kept its cache loses it: the engine preempts it itself
                    generated = v[4] + (iters - v[3])
                    kv -= seq.prompt_tokens + generated
                    local.appendleft((seq, generated))
                    preempts += 1
                    b -= 1
                    if not b:
                        break
                    # Back at the top, the head of `local` (just preempted, as the cache was full) does not
                    # fit: kv + its context + b + 2 > capacity. So the engine plans a span, or preempts again.
                    room = (capacity - kv) // b
                    if room <= 0:
                        continue
                    while heap[0][1] not in run:
                        pop(heap)
                    if room >= heap[0][0] - iters:
                        break  # the span reaches a finish: planned below
                    # the span fills the cache before any finish (none pops: the heap's least is live and
                    # later); after it the head still does not fit (capacity - kv < b) and room is 0
                    spans.append((b, kv, room))
                    iters += room
                    kv += room * b
                    steps.append((SPAN, room, preempts, enter_decode, iters, kv, len(finishers), len(admits), 0))
                    preempts, enter_decode = 0, False
                continue
            while heap[0][1] not in run:
                pop(heap)
            k = heap[0][0] - iters
            if room < k:
                k = room
            spans.append((b, kv, k))
            iters += k
            kv += k * b
            if heap and heap[0][0] <= iters:
                pops.append(len(steps))
            while heap and heap[0][0] <= iters:
                o = pop(heap)[1]
                v = run.pop(o, None)
                if v is not None:
                    kv -= v[1]
                    orders.append(o)
                    finishers.append(v[2])
            steps.append((SPAN, k, preempts, enter_decode, iters, kv, len(finishers), len(admits), 0))
            preempts, enter_decode = 0, False
            if run and not local and qi == n_snap:
                raise _Stop  # back in `_decode`, it would look at a queue it cannot know
    except _Stop:
        pass
    if not steps:
        return None
    dur = np.empty(len(steps))
    is_span = np.fromiter((s[0] == SPAN for s in steps), bool, len(steps))
    if spans:
        batch, kv0, k = np.array(spans).T
        dur[is_span] = spans_s(costs.coefficients(batch), batch, kv0, k)
    if prefills:
        dur[~is_span] = prefills
    end_s = np.cumsum(np.concatenate(([now], dur)))[1:].tolist()
    last_step: dict = {}
    lo = 0
    for j, step in enumerate(steps):
        hi = step[6]
        for seq in finishers[lo:hi]:
            last_step[seq.group] = j
        lo = hi
    final = len(steps) - 1
    return Refill(
        start_s=now,
        steps=steps,
        end_s=end_s,
        orders=orders,
        finishers=finishers,
        admits=admits,
        wake_s=[end_s[j] for j in sorted(set(last_step.values()) - {final})],
        pops=pops,
    )
