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
reaches. While the batch is full and the cache does not bind, that loop is a first-come-first-
served schedule on the batch's slots, planned in bulk (slot_bound.py); the loop below plans on
from where it stops. The plan is kept as integer rows (numpy) plus what the recorder will log,
and the engine commits it lazily through the ledger (finishes.py), in bulk (planned.py),
applying its own preemption code to its real state where the plan preempts (step by step: a
KV-bound plan, most of whose steps preempt or readmit, is committed so throughout). Under KV
pressure each finish brings a chain of such steps (a readmission's prefill, a short span,
preemptions of the newest, one short span each): the plan's cost grows with the steps, not
the finishes, as benchmarks/bench_kv_bound.py shows.

The plan stops where the engine would next depend on something it cannot know: where it would
look past the queue it saw when planning (the queue may have grown since), where its queue's
head waits for newer weights (a drain takes over), or where its batch empties. New weights cut
it short (engine.py). Only an engine with a queue of its own plans what it takes from the queue:
engines sharing a queue take turns at its head in the order of their iteration boundaries, so
there an engine plans its own preempted work only (shared_refill.py), or, while every batch on
the queue is full, all the engines plan together (joint_refill.py). Times in seconds, sizes
in tokens.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import chain, islice
from operator import attrgetter

import numpy as np
import simpy
from simpy.events import NORMAL

from rlsim.models.decode import spans_s
from rlsim.simulator import states
from rlsim.simulator.batch import RunningBatch
from rlsim.simulator.costs import Costs
from rlsim.simulator.finishes import timeout_at
from rlsim.simulator.slot_bound import (
    ADM,
    ALL_COLUMNS,
    BATCH,
    COLUMNS,
    DECODE,
    EV,
    FIN,
    ITERS,
    KIND,
    KV,
    LOCAL,
    PRE,
    PREEMPTS,
    PREFILL,
    SPAN,
    K,
    slot_bound,
)
from rlsim.simulator.work import Sequence

__all__ = ["PREFILL", "SPAN", "Refill", "plan_refill"]
SNAPSHOT_ITEMS = 4096  # queued sequences one plan may look at (a longer queue is planned in turns)
# Plans of at most this many steps are finished in plain Python (`_small_refill`): numpy's
# per-call set-up outweighs its speed there. Under KV pressure, as a step's queue runs out, most
# plans readmit a preempted sequence or two and end (measured: half of long-cot's plans in sync
# mode have 1-4 steps; 48 measured best of 16, 48 and 200 on its instruction count).
SMALL_PLAN = 48
# A plan on an engine's own queue is planned in chunks of at least this many steps (or a quarter
# of what it has planned so far), each when it is followed past what is planned (`LazyPlan`):
# new weights cut most long async plans after a fraction of their steps (long-cot's plan at 16
# GPUs: 1.75 M steps planned, 1.15 M reached). 512: a chunk's fixed cost (~30 numpy calls, a
# pass over the plan's columns) is a few percent of planning it.
LAZY_STEPS = 512
_NO_LIMIT = 1 << 62
_DONE = object()
_group = attrgetter("group")
_group_batch = attrgetter("group.batch")
_STATE_NAMES = np.array([states.DECODE, states.PREFILL], dtype=object)  # by a step's kind (SPAN, PREFILL)


@dataclass
class PlanLogs:
    """What the recorder logs over a refill: the batch after each prefill, the states each step
    starts (a prefill, or decode after one), with their RL steps."""

    batch_s: list[float]
    batch: list[int]
    states: list[str]
    state_s: list[float]
    hints: list[int]
    finish_s: list[float]  # each finisher's finish (its step's end)
    batch_at: list[int]  # the running batch through each step (after its start's admissions)
    # the step rows' columns a bulk commit reads, each contiguous (an int index, no tuple), and
    # each admission's tokens after its prefill and finish iteration as Python ints
    fin: memoryview
    adm: memoryview
    kv: memoryview
    iters: memoryview
    ev: memoryview
    pre: memoryview
    kind: memoryview
    adm_generated: list[int]
    adm_finish: list[int]


@dataclass(eq=False)
class Refill:
    """The planned steps of one engine; `pos` is the first step whose end is not yet committed.

    Step j is a decode span (preemptions, then k iterations) or a prefill (the admissions made
    at its start). Its start ops are applied when step j - 1 ends (step 0 is a span that has
    none: the engine is decoding already), its end ops (finishers, iteration count, cache) when
    it ends. `steps[j]` is its row (slot_bound.py names the columns); step j's finishers are
    those from the previous step's end.
    """

    is_refill = True
    start_s: float
    steps: np.ndarray  # (steps, ALL_COLUMNS) int32 (int64 if a value needs it)
    tokens: np.ndarray  # int64: tokens the spans produce from the plan's start to each step's end
    end_s: list[float]
    orders: memoryview  # int64: the finishers' admission orders (their keys in the engine's batch)
    finishers: list[Sequence]  # in finish order
    admitted: list[Sequence]  # in admission order
    admits: np.ndarray  # (admissions, 2) int64: each one's tokens after its prefill, its finish iteration
    slow: list[int]  # the steps that preempt or readmit preempted work at their start (committed step by step)
    # most steps are slow (a KV-bound plan): commit every step one by one, so that the plan's logs
    # for bulk commits (`logs`, a pass over the whole plan) are never made for the few that would use them
    by_steps: bool = field(init=False)
    wake_s: list[float] = field(default_factory=list)  # where a group's last member here finishes
    pops: list[int] = field(default_factory=list)  # the steps whose end pops finish iterations off the heap
    last: int = 0  # the plan's last step (cut back when new weights arrive)
    pos: int = 0
    # the first step whose end is not yet applied to the engine's batch (< pos while bulk commits
    # wait to be settled: `planned.settle_refill`)
    applied: int = 0
    next_end_s: float = 0.0
    rewait: int = 0  # interrupts that cut the plan back: the engine waits again, for its new last step
    joint: object = None  # the joint plan this is one engine's part of (joint_refill.py)
    end_event: object = None  # the event its end is awaited on, made in advance (a joint plan's part)
    # commit step by step as a span-by-span engine goes (a shared queue's plan, shared_refill.py):
    # its finish heap kept, and its batch logged where that engine logs it (every plan logs the
    # batch at each step's start; this one leaves the last step's end to the engine's own loop)
    logs_steps: bool = False
    _logs: PlanLogs | None = field(default=None, repr=False)  # made at the first bulk commit (`logs`)
    _row_list: list[list[int]] | None = field(default=None, repr=False)  # (`row_list`)
    # `steps` and `admits` seen as Python ints (commits are frequent and short: no numpy scalars)
    rows: memoryview = field(init=False, repr=False)
    admissions: memoryview = field(init=False, repr=False)
    token_counts: memoryview = field(init=False, repr=False)
    more: LazyPlan | None = field(default=None, repr=False)  # the rest of a plan made in chunks (None: all planned)

    def __post_init__(self) -> None:
        self.last = len(self.steps) - 1
        self.by_steps = 2 * len(self.slow) > len(self.steps)
        self.next_end_s = self.end_s[0]
        self.rows, self.admissions = memoryview(self.steps), memoryview(self.admits)
        self.token_counts = memoryview(self.tokens)

    def step_start_s(self, j: int) -> float:
        return self.end_s[j - 1] if j else self.start_s

    @property
    def logs(self) -> PlanLogs:
        """What the recorder logs over the plan (a plan committed step by step never needs it)."""
        if self._logs is None:
            self._logs = _logs(self.steps, self.end_s, self.admitted, self.admits)
        return self._logs

    @property
    def row_list(self) -> list[list[int]]:
        """The rows as Python lists (a plan committed step by step reads each once; made once)."""
        rows = self._row_list
        if rows is None:
            rows = self._row_list = self.steps.tolist()
        return rows

    def kind(self, j: int) -> int:
        return int(self.steps[j, KIND])

    def ensure(self, t: float) -> None:
        """Planned far enough for a commit at t and for the ledger's next wake-up after t: every
        wake-up up to t and the first after it are known (or the whole plan is)."""
        more = self.more
        while more is not None and not (self.wake_s and self.wake_s[-1] > t):
            more.extend(self)
            more = self.more

    def close(self) -> None:
        """Cut back or dropped: nothing past what is planned will be followed."""
        self.more = None

    def k(self, j: int) -> int:
        return int(self.steps[j, K])


class _Stop(Exception):
    """The plan ends here: the engine would next look at something it could not know."""


def plan_refill(
    batch: RunningBatch,
    queued: deque[Sequence],
    version: int,
    now: float,
    costs: Costs,
    prefill_cache: dict,
    lazy: bool = False,
) -> Refill | None:
    """The engine's steps from `now`, inside its decode loop before it plans a span (None: none).

    Mirrors `Engine.run`, `_admit`, `_decode` and `_plan_span` (engine.py) and
    `RunningBatch.admit`, `advance` and `preempt_newest` (batch.py) on copies of the batch and
    of the `queued` sequences; any change to those must be made here too (the oracle and drain
    tests compare the two paths on random, pressured and queue-bound scenarios).

    `lazy`: a plan longer than `LAZY_STEPS` is returned after its first chunk and planned on as
    it is followed (`LazyPlan`); the steps, times and wake-ups are those of the whole plan.
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

    steps: list[int] = []  # the rows of the steps after the slot-bound stretch, flat (COLUMNS ints each)
    orders: list[int] = []
    finishers: list[Sequence] = []
    admitted: list[Sequence] = []
    admits: list[int] = []  # each admission's tokens after its prefill and its finish iteration, flat
    span_kv: list[int] = []  # each span's cache at its start (its batch and iterations are in its row)
    prefills: list[int] = []  # each prefill's count of contexts (its duration is timed at the end)
    prefilled_lengths: list[int] = []  # the contexts of every prefill, one after the other
    enter_decode = 0  # (an int: it goes into the rows as it is)
    at_top = False  # the plan starts inside `_decode`, before its drain check
    stretch = None
    if not local and len(run) == max_batch and n_snap:
        live = heap  # the stretch reads live entries only: the engine's own heap may hold sequences gone since
        if batch.heap is not None:
            live = [(v[0], o) for o, v in run.items()]
            heapq.heapify(live)
        stretch = slot_bound(run, live, snap, version, iters, kv, order, capacity, share, costs, prefill_cache)
    if stretch is not None:  # the general loop goes on after its last prefill
        run, iters, kv, order = stretch.run, stretch.iters, stretch.kv, stretch.order
        heap = [(v[0], o) for o, v in run.items()]
        heapq.heapify(heap)
        orders, finishers, admitted = stretch.orders, stretch.finishers, stretch.admitted[:]
        qi = len(admitted)
        at_top, enter_decode = True, 1
    limit = LAZY_STEPS * COLUMNS if lazy else _NO_LIMIT
    loop = _loop(limit, run, heap, pops, local, snap, qi, steps, orders, finishers, admitted, admits, span_kv,
                 prefills, prefilled_lengths, at_top, enter_decode, iters, kv, order, version, capacity, max_batch,
                 share)  # fmt: skip
    if next(loop, _DONE) is not _DONE:  # paused after its first chunk: planned on as it is followed
        members = Counter(map(_group, chain(batch.running.values(), batch.local, snap)))
        return LazyPlan(now, costs, loop, stretch, members, steps, span_kv, prefills, prefilled_lengths, orders,
                        finishers, admitted, admits, pops).first()  # fmt: skip
    if stretch is None and len(steps) <= SMALL_PLAN * COLUMNS:
        if not steps:
            return None
        return _small_refill(now, costs, prefill_cache, steps, span_kv, prefills, prefilled_lengths, orders, finishers,
                             admitted, admits, pops)  # fmt: skip
    rows = np.array(steps, np.int64).reshape(-1, COLUMNS)
    if stretch is not None:
        rows = np.concatenate((stretch.rows, rows))
        pops = [p + len(stretch.rows) for p in pops]
    if not len(rows):
        return None
    n = len(rows)
    dur = np.empty(n)
    is_span = rows[:, KIND] == SPAN
    span_b, span_k = rows[is_span, BATCH], rows[is_span, K]  # (the stretch's spans too: their rows hold them)
    span_kv = np.fromiter(span_kv, np.int64, len(span_kv))
    if prefills:
        counts = np.fromiter(prefills, np.int64, len(prefills))
        contexts = np.fromiter(prefilled_lengths, np.int64, len(prefilled_lengths))
        if len(contexts) == len(counts):  # one context each (most)
            prefills = costs.prefills_s(contexts, contexts * contexts, counts)
        else:
            first_of = np.cumsum(counts) - counts
            tokens = np.add.reduceat(contexts, first_of)
            prefills = costs.prefills_s(tokens, np.add.reduceat(contexts * contexts, first_of), counts)
    if stretch is not None:
        span_kv = np.concatenate((stretch.span_kv, span_kv))
        prefills = np.concatenate((stretch.prefills, prefills))
    if len(span_k):
        dur[is_span] = spans_s(costs.coefficients(span_b), span_b, span_kv, span_k)
    if len(prefills):
        dur[~is_span] = prefills
    end_s = np.cumsum(np.concatenate(([now], dur)))[1:].tolist()
    fin = rows[:, FIN]
    step_of = np.repeat(np.arange(n), np.diff(fin, prepend=0)).tolist()  # each finisher's step
    finishers = finishers[: len(step_of)]
    last_step = dict(zip((seq.group for seq in finishers), step_of))  # later steps overwrite earlier
    final = n - 1
    admits = np.array(admits, np.int64).reshape(-1, 2)
    if stretch is not None:
        admits = np.concatenate((np.stack((stretch.generated, stretch.finish), axis=1), admits))
    admits = np.ascontiguousarray(admits)
    admitted = admitted[: int(rows[-1, ADM])]
    steps, tokens = _with_logs(rows)
    return Refill(
        start_s=now,
        steps=steps,
        tokens=tokens,
        end_s=end_s,
        orders=memoryview(np.array(orders, dtype=np.int64)),
        finishers=finishers,
        admitted=admitted,
        admits=admits,
        slow=np.flatnonzero((rows[:, PREEMPTS] != 0) | (rows[:, LOCAL] != 0)).tolist(),
        wake_s=[end_s[j] for j in sorted(set(last_step.values()) - {final})],
        pops=pops,
    )


def _loop(
    limit: int,
    run: dict,
    heap: list,
    pops: list[int],
    local: deque,
    snap: list[Sequence],
    qi: int,
    steps: list[int],
    orders: list[int],
    finishers: list[Sequence],
    admitted: list[Sequence],
    admits: list[int],
    span_kv: list[int],
    prefills: list[int],
    prefilled_lengths: list[int],
    at_top: bool,
    enter_decode: int,
    iters: int,
    kv: int,
    order: int,
    version: int,
    capacity: int,
    max_batch: int,
    share: bool,
):
    """`plan_refill`'s loop, as a generator: it appends the plan's steps (and what they admit,
    finish, time) to the lists it is given, and pauses at the top of the engine's loop once
    `steps` holds `limit` ints (then the next limit is sent in); it returns where the plan stops.
    Paused or not, the steps are the same: a pause only waits."""
    add_step, add_admit, add_span = steps.extend, admits.extend, span_kv.append
    popitem, to_local = run.popitem, local.appendleft
    push, pop = heapq.heappush, heapq.heappop
    n_snap, preempts = len(snap), 0
    try:
        while True:
            if len(steps) >= limit:  # a chunk planned: wait to be asked for the next (`LazyPlan.extend`)
                limit = yield
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
                    b, first, blocked = len(run), len(admitted), False
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
                        admitted.append(seq)
                        add_admit((generated, finish))
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
                        admitted.append(seq)
                        add_admit((generated, finish))
                        order += 1
                        b += 1
                        kv += context + 1
                    if len(admitted) > first:
                        prefilled_lengths.extend(lengths)  # timed all at once at the end
                        prefills.append(len(lengths))
                        if heap and heap[0][0] <= iters:
                            pops.append(len(steps) // COLUMNS)
                        while heap and heap[0][0] <= iters:  # one-token responses end with their prefill
                            o = pop(heap)[1]
                            v = run.pop(o, None)
                            if v is not None:
                                kv -= v[1]
                                orders.append(o)
                                finishers.append(v[2])
                        add_step((PREFILL, 0, 0, 0, iters, kv, len(finishers), len(admitted), from_local, b))
                        enter_decode = 1
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
                n_fin, n_adm = len(finishers), len(admitted)  # (none finishes or is admitted in this loop)
                while True:
                    o, v = popitem()  # the newest
                    seq = v[2]
                    if seq.held:
                        run[o] = v
                        raise _Stop  # an agent turn that kept its cache loses it: the engine preempts it itself
                    generated = v[4] + iters - v[3]
                    kv -= seq.prompt_tokens + generated
                    to_local((seq, generated))
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
                    add_span(kv)
                    iters += room
                    kv += room * b
                    add_step((SPAN, room, preempts, enter_decode, iters, kv, n_fin, n_adm, 0, b))
                    preempts = enter_decode = 0
                continue
            while heap[0][1] not in run:
                pop(heap)
            k = heap[0][0] - iters
            if room < k:
                k = room
            add_span(kv)
            iters += k
            kv += k * b
            if heap and heap[0][0] <= iters:
                pops.append(len(steps) // COLUMNS)
            while heap and heap[0][0] <= iters:
                o = pop(heap)[1]
                v = run.pop(o, None)
                if v is not None:
                    kv -= v[1]
                    orders.append(o)
                    finishers.append(v[2])
            add_step((SPAN, k, preempts, enter_decode, iters, kv, len(finishers), len(admitted), 0, b))
            preempts = enter_decode = 0
            if run and not local and qi == n_snap:
                raise _Stop  # back in `_decode`, it would look at a queue it cannot know
    except _Stop:
        pass


def _small_refill(
    now: float,
    costs: Costs,
    cache: dict,
    flat: list[int],
    span_kv: list[int],
    prefills: list[int],
    prefilled_lengths: list[int],
    orders: list[int],
    finishers: list[Sequence],
    admitted: list[Sequence],
    admits: list[int],
    pops: list[int],
) -> Refill:
    """The end of `plan_refill` for a short plan, without a stretch: the same Refill, step by step
    (each span timed by its scalar `span_s`, bit for bit `spans_s`; each prefill by the cache)."""
    iteration, span_kv_left, prefills_left = costs.iteration, iter(span_kv), iter(prefills)
    end_s, rows, tokens, last_step, slow = [], [], [], {}, []
    t, pre, ev, tok, lo, at = now, 0, 0, 0, 0, 0
    steps = list(zip(*[iter(flat)] * COLUMNS))
    for j, row in enumerate(steps):
        if row[KIND] == SPAN:
            b, k = row[BATCH], row[K]
            t += iteration(b).span_s(next(span_kv_left), k)
            tok += k * b
            if j and row[DECODE]:
                ev += 1
        else:
            n = next(prefills_left)
            key = tuple(prefilled_lengths[at : at + n])
            at += n
            d = cache.get(key)
            if d is None:
                d = cache[key] = costs.prefill_s(key)
            t += d
            pre += 1
            if j:
                ev += 1
        end_s.append(t)
        rows.append((*row, pre, ev))
        tokens.append(tok)
        hi = row[FIN]
        for i in range(lo, hi):
            last_step[finishers[i].group] = j  # later steps overwrite earlier
        lo = hi
        if row[PREEMPTS] or row[LOCAL]:
            slow.append(j)
    out = np.array(rows, dtype=np.int64)
    if out.max() < 2**31:
        out = out.astype(np.int32)
    final = len(steps) - 1
    return Refill(
        start_s=now,
        steps=out,
        tokens=np.array(tokens, dtype=np.int64),
        end_s=end_s,
        orders=memoryview(np.array(orders, dtype=np.int64)),
        finishers=finishers[:lo],
        admitted=admitted[: steps[-1][ADM]],
        admits=np.array(admits, dtype=np.int64).reshape(-1, 2),
        slow=slow,
        wake_s=[end_s[j] for j in sorted(set(last_step.values()) - {final})],
        pops=pops,
    )


def _with_logs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows with the running counts a bulk commit reads (prefills, logged states), as int32
    where every value fits (half the memory of a plan in flight), and the span tokens so far."""
    out = np.zeros((len(rows), ALL_COLUMNS), dtype=np.int64)
    out[:, :COLUMNS] = rows
    span = rows[:, KIND] == SPAN
    np.cumsum(~span, out=out[:, PRE])
    logged = ~span | (rows[:, DECODE] != 0)
    logged[0] = False  # the first step has no start ops
    np.cumsum(logged, out=out[:, EV])
    if out.max() < 2**31:
        out = out.astype(np.int32)
    return out, np.cumsum(np.where(span, rows[:, K] * rows[:, BATCH], 0))


def _logs(rows: np.ndarray, end_s: list[float], admitted: list[Sequence], admits: np.ndarray) -> PlanLogs:
    """What the recorder logs as the steps start and end (planned.py commits slices of it), and
    the columns a bulk commit reads."""
    span = rows[:, KIND] == SPAN
    prefill = np.flatnonzero(~span)
    fin = rows[:, FIN]
    freed = np.diff(fin, prepend=0)
    logged = ~span | (rows[:, DECODE] != 0)
    logged[0] = False
    ev = np.flatnonzero(logged)
    batches = np.fromiter(map(_group_batch, admitted), np.int64, len(admitted))
    at = np.where(span, -1, np.arange(len(rows)))
    np.maximum.accumulate(at, out=at)  # the last prefill so far (every logged span follows one)
    hint = batches[np.maximum(rows[at, ADM] - 1, 0)] if len(batches) else np.zeros(len(rows), np.int64)
    step_of = np.repeat(np.arange(len(rows)), freed)  # each finisher's step
    ends = np.array(end_s)  # (the same floats: picked out in numpy, not one at a time)
    return PlanLogs(
        finish_s=ends[step_of].tolist(),
        batch_s=ends[prefill].tolist(),
        batch=(rows[prefill, BATCH] - freed[prefill]).tolist(),
        states=_STATE_NAMES[rows[ev, KIND]].tolist(),
        state_s=ends[ev - 1].tolist(),  # (the first step logs nothing: every j in ev is >= 1)
        hints=hint[ev].tolist(),
        batch_at=rows[:, BATCH].tolist(),
        **_columns(rows, admits),
    )


def _columns(rows: np.ndarray, admits: np.ndarray) -> dict:
    """`PlanLogs`' columns for bulk commits: one contiguous copy of the rows' transpose, viewed a
    column at a time, and the admissions' two columns as lists (read a few at a time, in order)."""
    cols = np.ascontiguousarray(rows.T)
    names = {"fin": FIN, "adm": ADM, "kv": KV, "iters": ITERS, "ev": EV, "pre": PRE, "kind": KIND}
    out: dict = {name: memoryview(cols[c]) for name, c in names.items()}
    out["adm_generated"] = admits[:, 0].tolist()
    out["adm_finish"] = admits[:, 1].tolist()
    return out


class LazyPlan:
    """The part of a refill not planned yet: `plan_refill`'s paused loop and what it has appended.

    New weights cut most long plans on an engine's own queue far before their end, so a plan is
    made a chunk at a time (`extend`), each when the plan is followed near the end of what is
    planned: by a commit (`Refill.ensure` at the commit's time), or by an event at the end of
    the last planned step but one (`arm`). The rows, times, finishers and admissions appended
    are those of the whole plan, bit for bit (the loop is the same; spans and prefills are timed
    per chunk, each element as the whole plan's; end times are the same running sum).

    What depends on the whole plan is its wake-ups (`Refill.wake_s`: the steps where a group's
    last finisher *in this plan* leaves, which the ledger flushes at, and with it the output's
    running-batch samples) and its end (the follower's event). A wake-up at step h is known once
    every group with a finisher at or before h has either finished all the members the plan can
    see (running, preempted here or in its snapshot: `members`) or a finisher after h, and h is
    not the last step; the ledger reads the next wake-up when the last one fires, so a commit at
    t plans on until the first wake-up after t is known (`Refill.ensure`). The follower's end
    event is made when it starts to follow, with the SimPy event id a timeout made then would
    have had, and is put on SimPy's queue at the plan's end when the last chunk is planned (ties
    at one time go by event id: the events around it keep their order).
    """

    def __init__(self, now, costs, loop, stretch, members, steps, span_kv, prefills, lengths, orders, finishers,
                 admitted, admits, pops) -> None:  # fmt: skip
        self.now, self.costs, self.loop, self.stretch, self.members = now, costs, loop, stretch, members
        self.steps, self.span_kv, self.prefills, self.lengths = steps, span_kv, prefills, lengths
        self.orders, self.finishers, self.admitted, self.admits, self.pops = orders, finishers, admitted, admits, pops
        self.base = len(stretch.rows) if stretch is not None else 0  # the loop's step 0 in the plan
        self.n_adm0 = len(stretch.admitted) if stretch is not None else 0  # the loop's admission 0 in the plan
        # what has been taken into the refill: the loop's ints of steps, spans, prefills, contexts, pops
        self.at_step = self.at_span = self.at_prefill = self.at_length = self.at_pop = 0
        self.fin = self.adm = self.pre = self.ev = self.tok = 0  # the plan's counts so far (finishers, ...)
        self.done: dict = {}  # finishers so far by group
        self.last_step: dict = {}  # each group's last finisher's step so far
        self.open: set = set()  # groups with finishers and members left
        self.final: set = set()  # the last steps of groups with none left, not yet among the wake-ups
        self.end = None  # (env, event, event id) once followed: the plan's end, armed when it is known

    def first(self) -> Refill:
        """The refill of the first chunk (planned on as it is followed)."""
        rows, steps, tokens, end_s = self._take(self.now, True)
        fin, adm = int(rows[-1, FIN]), int(rows[-1, ADM])
        r = Refill(
            start_s=self.now,
            steps=steps,
            tokens=tokens,
            end_s=end_s,
            orders=memoryview(np.array(self.orders[:fin], dtype=np.int64)),
            finishers=self.finishers[:fin],
            admitted=self.admitted[:adm],
            admits=np.ascontiguousarray(self._admits(0, adm)),
            slow=np.flatnonzero((rows[:, PREEMPTS] != 0) | (rows[:, LOCAL] != 0)).tolist(),
            wake_s=[],
            pops=[p + self.base for p in self.pops],
            more=self,
        )
        self.at_pop = len(self.pops)
        self.fin, self.adm = fin, adm
        self._certify(r, rows, 0, 0, False)
        r.ensure(self.now)  # the ledger arms the first wake-up as the engine starts to follow
        return r

    def extend(self, r: Refill) -> None:
        """Plan the next chunk (at least `LAZY_STEPS` steps, or a quarter of those planned)."""
        limit = len(self.steps) + max(LAZY_STEPS, len(r.end_s) // 4) * COLUMNS
        try:
            self.loop.send(limit)
            done = False
        except StopIteration:
            done = True
        if len(self.steps) > self.at_step:
            base = len(r.end_s)
            rows, steps, tokens, end_s = self._take(r.end_s[-1], False)
            fin, adm = int(rows[-1, FIN]), int(rows[-1, ADM])
            r.steps = np.concatenate((r.steps, steps))
            r.tokens = np.concatenate((r.tokens, tokens))
            r.end_s.extend(end_s)
            r.orders = memoryview(np.array(self.orders[:fin], dtype=np.int64))
            r.finishers.extend(self.finishers[self.fin : fin])
            r.admitted.extend(self.admitted[self.adm : adm])
            r.admits = np.ascontiguousarray(np.concatenate((r.admits, self._admits(self.adm, adm))))
            r.slow.extend((np.flatnonzero((rows[:, PREEMPTS] != 0) | (rows[:, LOCAL] != 0)) + base).tolist())
            r.pops.extend(p + self.base for p in self.pops[self.at_pop :])
            self.at_pop = len(self.pops)
            r.last = len(r.steps) - 1
            r.by_steps = 2 * len(r.slow) > len(r.steps)
            r.rows, r.admissions, r.token_counts = memoryview(r.steps), memoryview(r.admits), memoryview(r.tokens)
            r._logs = None  # (made again over the longer plan when a bulk commit reads it)
            if r._row_list is not None:
                r._row_list.extend(steps.tolist())
            lo, self.fin, self.adm = self.fin, fin, adm
            self._certify(r, rows, base, lo, done)
        elif done:
            self._certify(r, np.zeros((0, COLUMNS), np.int64), len(r.end_s), self.fin, True)
        if done:
            r.more = None
            if self.end is not None:  # followed already: its end event goes on SimPy's queue now
                env, event, eid = self.end
                event._ok, event._value = True, None  # triggered, as a Timeout is when it is made
                heapq.heappush(env._queue, (r.end_s[r.last], NORMAL, eid, event))

    def follow(self, engine, r: Refill) -> simpy.Event:
        """The event the follower waits on for the plan's end, with the id a timeout made now has."""
        env = engine.env
        event = env.event()
        self.end = (env, event, next(env._eid))
        self.arm(engine, r)
        return event

    def arm(self, engine, r: Refill) -> None:
        """Plan on at the end of the last planned step but one (before the plan's end can be due)."""
        timeout_at(engine.env, r.end_s[r.last - 1], (engine, r)).callbacks.append(_frontier)

    def _admits(self, lo: int, hi: int) -> np.ndarray:
        """Admissions lo .. hi - 1 of the plan: tokens after the prefill, finish iteration."""
        out = np.array(self.admits[2 * max(0, lo - self.n_adm0) : 2 * (hi - self.n_adm0)], np.int64).reshape(-1, 2)
        st = self.stretch
        if st is not None and lo < self.n_adm0:
            out = np.concatenate((np.stack((st.generated, st.finish), axis=1)[lo:hi], out))
        return out

    def _take(self, start_s: float, first: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
        """The steps the loop appended since the last take, timed from `start_s`: their rows, the
        rows with the commit columns, the span tokens so far, the end times (as `plan_refill`)."""
        flat = self.steps
        rows = np.array(flat[self.at_step :], np.int64).reshape(-1, COLUMNS)
        self.at_step = len(flat)
        is_span = rows[:, KIND] == SPAN
        n_span = int(is_span.sum())
        n_pre = len(rows) - n_span
        span_kv = np.fromiter(self.span_kv[self.at_span : self.at_span + n_span], np.int64, n_span)
        self.at_span += n_span
        counts = self.prefills[self.at_prefill : self.at_prefill + n_pre]
        self.at_prefill += n_pre
        prefills = np.empty(0)
        if counts:
            n_ctx = sum(counts)
            contexts = np.fromiter(self.lengths[self.at_length : self.at_length + n_ctx], np.int64, n_ctx)
            self.at_length += n_ctx
            counts = np.fromiter(counts, np.int64, len(counts))
            if len(contexts) == len(counts):
                prefills = self.costs.prefills_s(contexts, contexts * contexts, counts)
            else:
                first_of = np.cumsum(counts) - counts
                tokens = np.add.reduceat(contexts, first_of)
                prefills = self.costs.prefills_s(tokens, np.add.reduceat(contexts * contexts, first_of), counts)
        st = self.stretch
        if first and st is not None:
            rows = np.concatenate((st.rows, rows))
            is_span = rows[:, KIND] == SPAN
            span_kv = np.concatenate((st.span_kv, span_kv))
            prefills = np.concatenate((st.prefills, prefills))
        dur = np.empty(len(rows))
        span_b, span_k = rows[is_span, BATCH], rows[is_span, K]
        if len(span_k):
            dur[is_span] = spans_s(self.costs.coefficients(span_b), span_b, span_kv, span_k)
        if len(prefills):
            dur[~is_span] = prefills
        end_s = np.cumsum(np.concatenate(([start_s], dur)))[1:].tolist()
        out = np.zeros((len(rows), ALL_COLUMNS), dtype=np.int64)
        out[:, :COLUMNS] = rows
        out[:, PRE] = self.pre + np.cumsum(~is_span)
        logged = ~is_span | (rows[:, DECODE] != 0)
        if first:
            logged[0] = False  # the first step has no start ops
        out[:, EV] = self.ev + np.cumsum(logged)
        tokens = self.tok + np.cumsum(np.where(is_span, rows[:, K] * rows[:, BATCH], 0))
        self.pre, self.ev, self.tok = int(out[-1, PRE]), int(out[-1, EV]), int(tokens[-1])
        return rows, out, tokens, end_s

    def _certify(self, r: Refill, rows: np.ndarray, base: int, lo: int, done: bool) -> None:
        """Add the wake-ups now known to `r.wake_s` (all of them once the plan is `done`): `rows`
        are the plan's steps from `base` on, their finishers the plan's from `lo` on."""
        fin = rows[:, FIN]
        step_of = np.repeat(np.arange(base, base + len(rows)), np.diff(fin, prepend=lo)).tolist()
        members, count, last_step, open_, final = self.members, self.done, self.last_step, self.open, self.final
        for seq, j in zip(r.finishers[lo:], step_of):
            g = seq.group
            last_step[g] = j
            n = count[g] = count.get(g, 0) + 1
            if n >= members.get(g, 0):
                open_.discard(g)
                final.add(j)
            else:
                open_.add(g)
        last = len(r.end_s) - 1
        if done:
            known = (final | {last_step[g] for g in open_}) - {last}
            final.clear()
        else:
            bound = min((last_step[g] for g in open_), default=last)
            bound = min(bound, last)
            known = {j for j in final if j < bound}
            final -= known
        end_s = r.end_s
        r.wake_s.extend(end_s[j] for j in sorted(known))


def _frontier(event: simpy.Event) -> None:
    """The end of a lazy plan's last planned step but one: plan on (`LazyPlan.arm`)."""
    engine, r = event.value
    more = r.more
    if more is None or engine.drain is not r:
        return  # planned to its end, cut back or dropped
    if r.end_s[r.last - 1] <= engine.env.now:
        more.extend(r)
    if r.more is not None:
        more.arm(engine, r)
