"""One refill plan across the engines that share a queue, while every batch is full.

Engines that pull from one queue (pull dispatch: streaming) take turns at its head in the
order of their iteration boundaries, so no engine alone can plan what it will take from it
(refill.py plans an engine's own queue; shared_refill.py only an engine's own preempted work).
Planned together they can: while every engine sharing the queue decodes a full batch (empty
preempted list, no new weights pending) and the cache binds nowhere, each finish frees a slot
that the finishing engine fills with the queue's head at the end of that span, and nothing else
reaches the queue. So the engines' futures are merged in time order (a heap of their span
ends): at each, that engine's finishers leave, it takes the next heads, prefills them (its
prefill duration from the cost oracle) and decodes to its next finish (`span_s`, as the
span-by-span engine times it), every time the running sum a span-by-span engine reaches.

The plan stops, for every engine, at the first time T where it would depend on something it
cannot know: an admission past the queue it saw, a head waiting for newer weights or not
fitting the cache, a one-token response, a span the cache cannot hold, or two engines reaching
an event at the same time (SimPy's event order decides there: the engines' own loops take
over). Each engine's plan is then its steps that start before T; the last (a span or prefill in
progress at T) ends where its own loop takes over. Each engine follows its part as a refill
(planned.py), committed step by step as a span-by-span engine logs it, its finish heap kept as
that engine keeps it (a drain after the plan starts from that heap; planned.py
`_commit_joint`); the engine that plans takes the others over from the span they are in
(`hand_over`: an interrupt that makes it follow its part instead), and new weights reaching any
of them cut every part back to its step in progress (`cut_back`), from where the engines' own
loops decide again. A span-by-span engine hands its finishers on at each finish; here the
ledger flushes where a group's last member finishes (the reward pool reads the clock only
then), and only then. Where the plan does not apply (an engine draining, prefilling,
preempting, or loading weights; a GPU scorer; partial rollouts) it is not made and the engines
go on span by span; `STATS` counts both (benchmarks/bench_joint.py). Times in seconds, sizes in
tokens.
"""

from __future__ import annotations

import heapq
import weakref
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING

import simpy

from rlsim.models.decode import IterationCost
from rlsim.simulator.finishes import timeout_at
from rlsim.simulator.refill import SNAPSHOT_ITEMS
from rlsim.simulator.reward import RewardPool
from rlsim.simulator.slot_bound import ADM, FIN, KIND, PREFILL, SPAN, K
from rlsim.simulator.work import Sequence

if TYPE_CHECKING:
    from rlsim.simulator.engine import Engine

# plans made and plans not made, by reason (a diagnostic tally across runs: benchmarks/bench_joint.py)
STATS: Counter = Counter()
MIN_ADMISSIONS = 2  # a plan with fewer admissions per engine costs more than it saves (hand-overs, arrays)
_SHIFT = 32  # a planned finish heap's key: (finish iteration << _SHIFT) | admission order
_ORDER = (1 << _SHIFT) - 1


class JointPlan:
    """The engines planned together and their parts (refills); `live` until new weights cut it.

    A part refers to its plan and the plan to its parts, so the plan holds them weakly: a part
    lives while its engine follows it (`Engine.drain`), and once every engine has gone on, the
    plan and its parts (thousands of step rows) are freed at once rather than left as a cycle
    for the garbage collector's rare full passes (they had doubled a streaming run's peak memory).
    A part no longer alive is one its engine no longer follows, which every loop here skips.
    """

    __slots__ = ("_parts", "live")

    def __init__(self) -> None:
        self._parts: list[tuple[Engine, weakref.ref[JointPart]]] = []
        self.live = True

    def add(self, engine: Engine, part: JointPart) -> None:
        self._parts.append((engine, weakref.ref(part)))

    @property
    def parts(self) -> Iterator[tuple[Engine, JointPart]]:
        """The parts still followed or still held, each with its engine, in planning order."""
        for e, ref in self._parts:
            r = ref()
            if r is not None:
                yield e, r


class _Part:
    """One engine's future while it is planned: its copied batch state and the steps so far."""

    __slots__ = (
        "engine", "version", "run", "heap", "iters", "kv", "order", "t", "start_s", "rows", "end_s",
        "finishers", "orders", "admitted", "admits", "pops",
    )  # fmt: skip

    def __init__(self, engine: Engine, start_s: float) -> None:
        batch = engine.batch
        self.engine, self.version = engine, engine.version
        self.run: dict[int, int] = {o: s.length for o, s in batch.running.items()}  # order -> cache freed at its finish
        # the engine's own finish heap, stale entries and all, each (finish iteration, order) kept
        # as one int, (finish << 32) | order (`_SHIFT`): ordered as the pairs are, compared faster
        self.heap: list[int] = [(f << _SHIFT) | o for f, o in batch.heap]
        self.iters, self.kv, self.order = batch.iters, batch.kv, batch.order
        self.start_s = start_s  # its first step's start (a span in progress)
        self.t = start_s
        self.rows: list[tuple[int, ...]] = []
        self.end_s: list[float] = []
        self.finishers: list[Sequence] = []
        self.orders: list[int] = []
        self.admitted: list[Sequence] = []
        self.admits: list[int] = []  # each admission's tokens after its prefill and its finish iteration, flat
        self.pops: list[int] = []  # the steps whose end pops its finish heap (`Engine._advance` flushes there)

    def span(self, k: int, end_s: float, decode: int) -> None:
        """A span of k iterations (the batch full) ending at end_s, at the next finish (the first
        span of each part; `_merge` inlines the others)."""
        heap, run = self.heap, self.run
        b = len(run)
        iters = self.iters = self.iters + k
        kv = self.kv + k * b
        past = (iters + 1) << _SHIFT  # the keys of entries finishing by `iters` are below it
        if heap and heap[0] < past:
            self.pops.append(len(self.rows))
        while heap and heap[0] < past:
            o = heapq.heappop(heap) & _ORDER
            length = run.pop(o, None)
            if length is not None:
                kv -= length
                self.orders.append(o)
                self.finishers.append(None)  # its sequence: filled in from the engine's batch (`_seqs`)
        self.kv = kv
        self.rows.append((SPAN, k, 0, decode, iters, kv, len(self.finishers), len(self.admitted), 0, b))
        self.end_s.append(end_s)
        self.t = end_s


def plans_jointly(engine: Engine) -> bool:
    """The scenario allows joint plans on this engine's queue (checked once, at its start)."""
    if not engine.queue.shared or not engine.drains or engine.scoring is not None:
        return False
    sc = engine.costs.res.scenario
    if sc.pipeline.partial_rollout is not None:
        return False  # a step's end takes work out of the batches: the engines plan alone
    return isinstance(getattr(engine.ledger.deliver, "__self__", None), RewardPool)


def plan_joint(engine: Engine) -> JointPart | None:
    """Plan every engine sharing `engine`'s queue from now (it is at a decode boundary, its batch
    full); hand the others their parts and return its own (None: no plan, go on span by span)."""
    queue, now = engine.queue, engine.env.now
    others = [e for e in queue.engines if e is not engine]
    reason = _refusal(engine, others, now)
    if reason is not None:
        STATS[reason] += 1
        return None
    engine.ledger.flush(now)  # the others' plans (a joint one ending) committed up to now
    engine.batch.next_finish()  # the heap, as the span-by-span engine planning its span builds it
    parts = {engine: _Part(engine, now)}
    heads: list[tuple[float, int, int]] = []  # (span end, engine index, 0 / 1 where the plan stops): next events
    index = {e: i for i, e in enumerate(queue.engines)}
    first = _first_span(engine, now, now)
    if first is None:
        STATS["cache binds"] += 1
        return None
    for e in others:
        d = e.drain
        if d is None:  # span by span: its span in progress (its timeout fires at start + span_s)
            k, cost, start = e._span
            end = start + cost.span_s(e.batch.kv, k)
        else:  # the last step of the joint plan it follows
            j = d.pos
            k, start, end = d.k(j), d.step_start_s(j), d.end_s[j]
        p = parts[e] = _Part(e, start)
        p.span(k, end, 0)
        heads.append((end, index[e], 0))
    k, end = first
    parts[engine].span(k, end, 0)
    heads.append((end, index[engine], 0))
    heapq.heapify(heads)
    snap = list(islice(queue.items, SNAPSHOT_ITEMS))
    stop_s, qi = _merge(parts, queue.engines, heads, snap, len(snap) == len(queue.items))
    if qi < MIN_ADMISSIONS * len(parts):
        STATS["short"] += 1
        return None
    plan = JointPlan()
    held = [(e, _refill(p, stop_s, plan)) for e, p in parts.items()]  # alive until handed over
    for e, r in held:
        plan.add(e, r)
    if not _arm_ends(engine, plan):
        STATS["a tie"] += 1
        return None
    STATS["planned"] += 1
    for e, _ in plan.parts:
        if e is not engine and e.drain is not None:
            e.drain.joint.live = False  # the last plan's parts in progress are this one's first steps
    _arm_group_wakes(engine, plan)
    mine = None
    for e, r in held:
        if e is engine:
            mine = r
        else:
            hand_over(e, r)
    return mine


def _refusal(engine: Engine, others: list[Engine], now: float) -> str | None:
    """Why the engines cannot be planned together now (None: they can)."""
    batch = engine.batch
    if engine._carry is not None or engine.parked:
        return "not decoding"
    for e in others:
        b = e.batch
        if not e._listening or e.pending is not None or b.local or e._carry is not None or e.parked:
            return "an engine not decoding"
        if len(b.running) != b.max_batch or b.heap is None:
            return "a batch not full"
        d = e.drain
        if d is None:
            span = e._span
            if span is None or e._handover is not None:
                return "an engine not decoding"
            k, _, start = span
            if k != b.next_finish():
                return "cache binds"  # its span ends at a full cache, not a finish
        elif getattr(d, "joint", None) is None or d.rewait or d.pos > d.last or d.kind(d.pos) != SPAN:
            return "an engine on another plan"
        elif d.end_s[d.pos] <= now:
            return "a tie"
    if max(e.batch.order for e in engine.queue.engines) + SNAPSHOT_ITEMS > _ORDER:
        return "orders past a heap key"  # (`_Part.heap`)
    if not engine.queue.items:
        return "queue empty"
    if len(batch.running) != batch.max_batch:
        return "a batch not full"
    return None


def _first_span(engine: Engine, start: float, now: float) -> tuple[int, float] | None:
    """The planning engine's span from now, to its next finish (None: the cache ends it first)."""
    batch = engine.batch
    b = len(batch.running)
    k = batch.next_finish()
    if (batch.capacity - batch.kv) // b < k:
        return None
    return k, now + engine.costs.iteration(b).span_s(batch.kv, k)


def _merge(parts: dict, engines: list, heads: list, snap: list[Sequence], whole: bool) -> tuple[float, int]:
    """The engines' events in time order, each admitting the queue's next heads; returns the time
    T the plan stops at and the queued sequences it admitted. `whole`: the snapshot is the whole
    queue (an engine's loop logs its batch after a prefill only while the queue holds work).

    The hot loop of a joint plan: `_Part.span` is inlined, each part's iteration cost fixed (the
    batch is full throughout)."""
    n_snap, qi = len(snap), 0
    pop, push = heapq.heappop, heapq.heappush
    by_index = [parts.get(e) for e in engines]
    costs = [None if p is None else p.engine.costs.iteration(p.engine.batch.max_batch) for p in by_index]
    lines = [None if c is None else memory_line(c) for c in costs]
    while True:
        t, i, stop = pop(heads)
        if stop or (heads and heads[0][0] == t):
            return t, qi  # two engines at one time: SimPy's event order decides (their loops)
        p = by_index[i]
        e = p.engine
        batch = e.batch
        capacity, max_batch, version = batch.capacity, batch.max_batch, p.version
        run = p.run
        free = max_batch - len(run)
        # ---- `Engine._admit`: the heads that take the free slots, all checked before any is taken
        if qi + free > n_snap or (whole and qi + free == n_snap):
            return t, qi  # past what it saw, or the queue's last: whether it is empty later depends on arrivals
        kv, b = p.kv, len(run)
        iters, order, heap = p.iters, p.order, p.heap
        if free == 1:  # (most events: one finisher, one admission)
            seq = snap[qi]
            generated = seq.generated
            context = seq.prompt_tokens + generated
            if seq.group.min_version > version or kv + context + b + 2 > capacity:
                return t, qi
            generated += 1
            finish = iters + seq.response_tokens - generated
            if finish <= iters:
                return t, qi  # a one-token response ends with its prefill
            kv += context + 1
            b += 1
            run[order] = seq.length
            push(heap, (finish << _SHIFT) | order)
            p.admitted.append(seq)
            p.admits.extend((generated, finish))
            order += 1
            key: tuple[int, ...] = (context,)
        else:
            for seq in snap[qi : qi + free]:
                generated = seq.generated
                context = seq.prompt_tokens + generated
                if seq.group.min_version > version or kv + context + b + 2 > capacity:
                    return t, qi
                if seq.response_tokens - generated - 1 < 1:
                    return t, qi  # a one-token response ends with its prefill
                kv += context + 1
                b += 1
            lengths: list[int] = []
            prefilled: set = set()
            share = batch.share_prompt_prefill
            for seq in snap[qi : qi + free]:
                generated = seq.generated
                if generated or not share or seq.group not in prefilled or seq.turn:
                    lengths.append(seq.prompt_tokens + generated)
                prefilled.add(seq.group)
                generated += 1
                finish = iters + seq.response_tokens - generated
                run[order] = seq.length
                push(heap, (finish << _SHIFT) | order)
                p.admitted.append(seq)
                p.admits.extend((generated, finish))
                order += 1
            key = tuple(lengths)
        qi += free
        p.order = order
        rows, end_s, finishers = p.rows, p.end_s, p.finishers
        rows.append((PREFILL, 0, 0, 0, iters, kv, len(finishers), len(p.admitted), 0, b))
        cache = e._prefill_s
        d = cache.get(key)
        if d is None:
            d = cache[key] = e.costs.prefill_s(key)
        t += d
        end_s.append(t)
        # ---- `Engine._plan_span` after the prefill: to the next finish, unless the cache ends it first
        while heap[0] & _ORDER not in run:
            pop(heap)
        k = (heap[0] >> _SHIFT) - iters
        if (capacity - kv) // b < k:
            p.kv, p.t = kv, t
            push(heads, (t, i, 1))  # the plan stops there (the span is not planned)
            continue
        # ---- the span (`_Part.span`): its finishers leave at its end
        line = lines[i]
        d = None if line is None else line_span_s(line, kv, k)
        t += costs[i].span_s(kv, k) if d is None else d
        iters += k
        kv += k * b
        rows_at = len(rows)
        past = (iters + 1) << _SHIFT
        if heap[0] < past:
            p.pops.append(rows_at)
            orders = p.orders
            while heap and heap[0] < past:
                o = pop(heap) & _ORDER
                length = run.pop(o, None)
                if length is not None:
                    kv -= length
                    orders.append(o)
                    finishers.append(None)
        rows.append((SPAN, k, 0, 1, iters, kv, len(finishers), len(p.admitted), 0, b))
        end_s.append(t)
        p.iters, p.kv, p.t = iters, kv, t
        push(heads, (t, i, 0))


class JointPart:
    """One engine's part of a joint plan: a refill (planned.py follows, cuts and commits it as
    one, `_commit_joint`) whose steps are spans to a finish and prefills from the shared queue,
    kept as plain tuples (slot_bound.py's columns; it is committed a few steps at a time)."""

    __slots__ = (
        "start_s", "steps", "end_s", "finishers", "orders", "admitted", "admits", "pops", "last", "pos",
        "next_end_s", "rewait", "joint", "end_event", "wake_s", "__weakref__",
    )  # fmt: skip
    is_refill = True
    logs_steps = True  # its finish heap kept, its batch logged where a span-by-span engine logs it

    def __init__(self, p: _Part, n: int, plan: JointPlan) -> None:
        rows = self.steps = p.rows[:n]
        self.start_s, self.end_s = p.start_s, p.end_s[:n]
        fin, adm = rows[-1][FIN], rows[-1][ADM]
        self.orders = p.orders[:fin]
        by_order = dict(p.engine.batch.running)
        by_order.update(zip(range(p.engine.batch.order, p.order), p.admitted))
        self.finishers = [by_order[o] for o in self.orders]
        self.admitted = p.admitted[:adm]
        self.admits = p.admits[: 2 * adm]  # flat: each admission's tokens after its prefill, its finish iteration
        self.pops = {j for j in p.pops if j < n}  # the steps whose end pops the finish heap
        self.last, self.pos = n - 1, 0
        self.next_end_s = self.end_s[0]
        self.rewait = 0
        self.joint, self.end_event = plan, None
        self.wake_s: list[float] = []  # the ledger flushes where groups complete (`_arm_group_wakes`)

    def step_start_s(self, j: int) -> float:
        return self.end_s[j - 1] if j else self.start_s

    def kind(self, j: int) -> int:
        return self.steps[j][KIND]

    def k(self, j: int) -> int:
        return self.steps[j][K]


def memory_line(cost: IterationCost) -> tuple[float, ...] | None:
    """The coefficients for `IterationCost.span_s` when no launch floor holds and the compute
    line grows no faster than the memory line: then wherever the memory line starts above the
    compute one it wins the whole span, and span_s is fixed * k plus its line's sum, which
    `_merge` evaluates inline in the same operations and order (bit for bit; a test checks it).
    None: not that case (`span_s` itself)."""
    b = cost.batch
    slope_m, slope_c = cost.mem_per_token_s * b, cost.comp_per_token_s * b
    if cost.floor_s > 0 or slope_m < slope_c:
        return None
    return cost.fixed_s, cost.mem0_s, cost.mem_per_token_s, cost.comp0_s, cost.comp_per_token_s, slope_m


def line_span_s(line: tuple[float, ...], kv: int, k: int) -> float | None:
    """`IterationCost.span_s(kv, k)` (k >= 1) from `memory_line`'s coefficients, bit for bit,
    where the memory line starts at or above the compute one (None: elsewhere)."""
    fixed, mem0, mem_k, comp0, comp_k, slope_m = line
    base_m = mem0 + mem_k * kv
    if base_m < comp0 + comp_k * kv:
        return None
    return fixed * k + (base_m * k + slope_m * (k - 1) * k / 2.0)  # + the compute line's share, 0.0


def _refill(p: _Part, stop_s: float, plan: JointPlan) -> JointPart:
    """One engine's part of the plan: its steps that start before stop_s."""
    n = len(p.rows)
    while n > 1 and _start_of(p, n - 1) >= stop_s:
        n -= 1
    return JointPart(p, n, plan)


def _start_of(p: _Part, j: int) -> float:
    return p.end_s[j - 1] if j else p.start_s


def _arm_ends(engine: Engine, plan: JointPlan) -> bool:
    """Make each part's end event now, in the order a span-by-span engine would have made it (at
    its last step's start; the planning engine's after the others' at one time), so that engines
    whose plans end at one time go on in SimPy's order there. False: two such steps also start
    at one time (that order is not known here)."""
    env = engine.env
    keyed = []
    for e, r in plan.parts:
        last = r.last
        keyed.append((r.step_start_s(last), e is engine, r.end_s[last], e, r))
    keyed.sort(key=lambda x: (x[0], x[1]))
    seen: dict[float, float] = {}
    for start, _, end, _, _ in keyed:
        if seen.get(end) == start:
            return False
        seen[end] = start
    for _, _, end, _, r in keyed:
        r.end_event = timeout_at(env, end)
    return True


def _arm_group_wakes(engine: Engine, plan: JointPlan) -> None:
    """Flush where a group's last member finishes within the plan (its delivery completes it)."""
    last: dict = {}
    count: Counter = Counter()
    for _, r in plan.parts:
        groups = [seq.group for seq in r.finishers]
        count.update(groups)
        lo, times = 0, []
        for e, row in zip(r.end_s, r.steps):  # each finisher's time: its step's end
            hi = row[FIN]
            if hi > lo:
                times += [e] * (hi - lo)
                lo = hi
        # a part's finishers are in time order: the last of a group's is its latest here
        for g, e in dict(zip(groups, times)).items():
            if e > last.get(g, -1.0):
                last[g] = e
    times = sorted({t for g, t in last.items() if g.scored + count[g] == g.size})
    if times:
        _arm(engine, plan, times, 0)


def _arm(engine: Engine, plan: JointPlan, times: list[float], i: int) -> None:
    timeout_at(engine.env, times[i], (engine, plan, times, i)).callbacks.append(_wake)


def _wake(event: simpy.Event) -> None:
    engine, plan, times, i = event.value
    if not plan.live:
        return
    engine.ledger.flush(engine.env.now)
    if i + 1 < len(times):
        _arm(engine, plan, times, i + 1)


def hand_over(e: Engine, r: JointPart) -> None:
    """Engine e, in a span now, follows r from it: r's first step is that span."""
    e.drain = r
    e.ledger.watch(e, r)
    e._listening, e._listen_queue = True, False
    e._handover = r
    e.process.interrupt()


def cut_back(plan: JointPlan, cut: Engine) -> None:
    """New weights reach `cut`: every other part ends with its step in progress (the ledger has
    committed up to now), from where its engine's own loop decides; a span goes on listening
    for new weights, as a span-by-span engine's does."""
    plan.live = False
    for e, r in plan.parts:
        if e is cut or e.drain is not r or not e._listening:
            continue
        j = r.pos
        if j > r.last:
            continue
        if r.last > j:
            r.last = j
            r.rewait += 1
            e.process.interrupt()
        e._listening = r.kind(j) == SPAN
