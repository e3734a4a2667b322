"""An engine on a plan: following a drain or a refill, being cut short, committing its steps.

A plan (drain.py, refill.py) says in advance what the engine's batch does step by step; the
engine does not wake for each step. It waits once, for the plan's end (`follow_drain`,
`follow_refill`), unless an arrival or new weights cut it short: then it commits what has
ended, finishes the iteration in progress and drops the rest (`cut_refill` cuts a refill back
to the step in progress; a joint plan's other parts too, joint_refill.py). An engine handed a
part of a joint plan while it waits switches to waiting for that part's end instead; the parts
of a joint plan admit from the queue they share and commit in engine order, not admission
order, so each takes its own sequences out of the queue's planned prefix. When the ledger
(finishes.py) flushes to a time t, the steps that end by t are applied to the engine's real
state in one go (`commit_drain`, `commit_refill`; a refill's bulk commits at a group's
completion stamp only their finishers and leave the rest below to `settle_refill`, applied
once for many commits where the engine goes on or a reader flushes or settles the ledger):
the batch's iteration count and cache, its finishers (stamped with the time of their step's
end), the admissions and preemptions a refill planned (through the batch's own
`preempt_newest` and the queue, checked against the plan), the running batch at each step's
end and start (stamped with the step's time, not the commit's, as the span-by-span engine logs
it: the occupancy and tail metrics integrate it), and what the recorder logs at each step (for
bulk commits, once per plan: `BulkEntries`); the finishers go on, in time order across
engines, to the route. Times in seconds.
"""

from __future__ import annotations

import bisect
import math
from heapq import heappop, heappush
from itertools import compress, repeat, starmap
from typing import TYPE_CHECKING

import simpy

from rlsim.simulator import states as states_
from rlsim.simulator.drain import Drain
from rlsim.simulator.finishes import timeout_at
from rlsim.simulator.joint_refill import cut_back
from rlsim.simulator.refill import Refill
from rlsim.simulator.slot_bound import ADM, FIN, KIND, PREFILL, SPAN
from rlsim.simulator.work import Sequence

if TYPE_CHECKING:
    from rlsim.simulator.engine import Engine
    from rlsim.simulator.joint_refill import JointPart


def commit_drain(engine: Engine, d: Drain, t: float) -> list[Sequence]:
    """The drain's spans that end by t are done: stamps and returns their finishers.

    The batch's state (its iteration count, cache and running sequences, the running-batch log
    and load at each commit, the tokens) waits until something reads it (`settle_drain`), as a
    refill's bulk commits do (`_commit_bulk`)."""
    first = d.pos
    pos = d.pos = bisect.bisect_right(d.end_s, t, first)
    d.next_end_s = d.end_s[pos] if pos < d.spans else math.inf
    if d.applied == first:  # the first commit since the batch was settled: the ledger settles it for readers
        engine.ledger.defer_settle(settle_drain, engine, d)
    lo, hi = d.bounds[first], d.bounds[pos]
    if lo == hi:
        return []
    d.commits.append((hi, engine.env.now))  # the engine reports its load at each commit (`_report_load`)
    version = engine.version
    finishers = d.finishers[lo:hi]
    for seq, finish_s in zip(finishers, d.finish_s[lo:hi]):
        seq.generated = seq.response_tokens
        seq.version_end = version
        seq.finish_s = finish_s
    return finishers


def settle_drain(engine: Engine, d: Drain) -> None:
    """Apply the drain's commits of spans d.applied .. d.pos - 1 to the engine's state, as they
    were made: the finishers leave the batch, which is logged at each finish and, with the load,
    at each commit's time (`Engine._report_load`)."""
    j, pos = d.applied, d.pos
    if j >= pos:
        return
    d.applied = pos
    batch = engine.batch
    batch.iters, batch.kv = d.iters[pos - 1], d.kv_end[pos - 1]
    engine.rec.on_tokens(d.tokens[pos] - d.tokens[j])
    commits = d.commits
    if not commits:
        return
    running = batch.running
    lo, hi = d.bounds[j], commits[-1][0]
    if hi - lo == len(running):  # every running sequence finished (a drain that emptied its batch)
        running.clear()
    else:
        for order in d.orders[lo:hi]:
            del running[order]
    times, sizes, finish_s = engine._batch_times, engine._batch_sizes, d.finish_s
    left = len(running) + hi - lo  # the batch loses one finisher at a time, at its finish
    for end, now in commits:
        times.extend(finish_s[lo:end])
        sizes.extend(range(left - 1, left - 1 - (end - lo), -1))
        left -= end - lo
        times.append(now)
        sizes.append(left)
        lo = end
    d.commits = []
    engine.queue.running = left + len(batch.local)


def commit_refill(engine: Engine, r: Refill, t: float) -> list[Sequence]:
    """The refill's steps that end by t are done; returns their finishers.

    At each step's end its finishers leave; then the next step starts as planned: a span
    with the engine's own `_preempt_newest`, a prefill with what `RunningBatch.admit` does (the
    plan names the sequences; taking any other is a bug in the plan). Without preemptions or
    readmissions among them, the steps are committed in bulk (`_commit_bulk`), unless most of the
    plan's steps have them (`Refill.by_steps`): the two paths leave the same state and logs.
    """
    j, last, end_s = r.pos, r.last, r.end_s
    if j > last or end_s[j] > t:
        return []
    if r.joint is not None:
        return _commit_joint(engine, r, t)
    if r.more is not None:  # a plan made in chunks: planned past t first (refill.py, `LazyPlan`)
        r.ensure(t)
        last = r.last
    stop = bisect.bisect_right(end_s, t, j, last + 1)  # steps j .. stop - 1 end by t
    top = min(stop, last)  # steps j + 1 .. top start (their start ops are applied)
    slow = r.slow
    if r.logs_steps or r.by_steps or (slow and bisect.bisect_right(slow, top) > bisect.bisect_right(slow, j)):
        if r.applied < j:
            settle_refill(engine, r)
        finishers = _commit_steps(engine, r, t)
        r.applied = r.pos
        return finishers
    return _commit_bulk(engine, r, stop)


def _commit_bulk(engine: Engine, r: Refill, stop: int) -> list[Sequence]:
    """Steps r.pos .. stop - 1 end, and none of the steps they start preempts: their finishers
    are stamped (tokens, versions, finish time, engine) and returned; the rest of the commit, the
    batch's state, waits until something reads it (`settle_refill`).

    A flush at a group's completion (the ledger's wake-ups: most commits, a few finishes each)
    needs only the finishers, in time order; nobody reads this engine's batch, queue or logs
    until the engine's own loop goes on after the plan, the ledger flushes for a reader
    (a least-loaded dispatcher, new weights, a step's end, the run's end) or commits steps one
    by one, and each of those settles first. So the admissions, removals and logs of many
    commits are applied once, and a sequence admitted and finished among them never enters the
    batch's dict. Its finish stamps are all a reader of a finished sequence sees: its first
    version (stamped here if the admission, not applied yet, would have) and engine included."""
    j = r.pos
    if r.applied == j:  # the first commit since the batch was settled: the ledger settles it for readers
        engine.ledger.defer_settle(settle_refill, engine, r)
    logs = r._logs or r.logs
    fin = logs.fin
    lo, hi = (fin[j - 1] if j else 0), fin[stop - 1]
    r.pos = stop
    r.next_end_s = r.end_s[stop] if stop <= r.last else math.inf
    finishers = r.finishers[lo:hi]
    version = engine.version
    for seq, e in zip(finishers, logs.finish_s[lo:hi]):
        if seq.version_start < 0:
            seq.version_start = version
        seq.generated = seq.response_tokens
        seq.version_end = version
        seq.finish_s = e
        seq.engine = engine
    return finishers


def settle_refill(engine: Engine, r: Refill) -> None:
    """Apply the bulk commits' steps r.applied .. r.pos - 1 to the engine's state, as one commit.

    Their admissions leave the queue (checked against the plan) and join the batch, unless they
    finished among these steps (their finish stamps are on already: `_commit_bulk`); the earlier
    sequences that finished leave it. A sequence that never joins the batch keeps the admission
    bookkeeping it had (`admit_iter`, `generated_at_admit`, `finish_iter`: read only while it
    runs). The running batch is logged from slices of the plan's (its steps' ends and sizes);
    what the recorder logs over them, slices of the plan's logs, waits until the engine logs
    anything else (`BulkEntries`). The plan's columns are read from `PlanLogs` (contiguous, an
    int index each), its admissions as Python ints. Consecutive commits applied one by one
    leave the same state and logs as here: every start op of steps j + 1 .. min(pos, last) and
    end op of steps j .. pos - 1, the running batch at each step's end (after the next step's
    admissions), the recorder's slices joined."""
    j, stop = r.applied, r.pos
    if j >= stop:
        return
    r.applied = stop
    top = min(stop, r.last)  # steps j + 1 .. top start (their start ops are applied)
    logs = r._logs or r.logs
    end = stop - 1
    batch = engine.batch
    running, version = batch.running, engine.version
    order = batch.order  # the first admission's order here (each one's: order + its index)
    fin = logs.fin
    lo, hi = (fin[j - 1] if j else 0), fin[end]
    gone: list[int] = []  # the admissions here that finished here (their index among them)
    if hi > lo:
        for o in r.orders[lo:hi]:
            if o < order:
                del running[o]
            else:
                gone.append(o - order)
    adm_col = logs.adm
    a_lo, a_hi = adm_col[j], adm_col[top]
    kv = logs.kv[end]
    if a_hi > a_lo:
        n = a_hi - a_lo
        items = engine.queue.items
        admitted = r.admitted[a_lo:a_hi]
        if list(starmap(items.popleft, repeat((), n))) != admitted:  # (identity: `Sequence` has no __eq__)
            raise AssertionError(f"{engine.name}: a refill admitted other work than it planned")
        generated, finish = logs.adm_generated, logs.adm_finish
        if gone:
            alive = bytearray(b"\x01") * n
            for i in gone:
                alive[i] = 0
            kept = compress(range(n), alive)
        else:
            kept = range(n)
        for i in kept:
            seq = admitted[i]
            g = generated[a_lo + i]
            f = finish[a_lo + i]
            if seq.version_start < 0:
                seq.version_start = version
            seq.generated = seq.generated_at_admit = g
            seq.admit_iter = f - seq.response_tokens + g
            seq.engine = engine
            seq.finish_iter = f
            running[order + i] = seq
        order += n
        now_lo = adm_col[end] if top == stop and logs.kind[top] == PREFILL else a_hi  # step `stop` starts now
        if now_lo < a_hi:  # the admissions of the step starting now hold their cache already
            for seq, g in zip(admitted[now_lo - a_lo :], generated[now_lo:a_hi]):
                kv += seq.prompt_tokens + g
    # the running batch as a span-by-span engine logs it: at each step's end, what the next step
    # starts with (after its admissions), or, at the plan's last, what its finishers leave
    engine._batch_times.extend(r.end_s[j:stop])
    sizes = engine._batch_sizes
    sizes.extend(logs.batch_at[j + 1 : stop])
    sizes.append(len(running))
    ev = logs.ev
    e0, e1 = ev[j], ev[top]
    if e1 > e0:
        engine.step_hint = logs.hints[e1 - 1]
    pre = logs.pre
    p0, p1 = (pre[j - 1] if j else 0), pre[end]
    tokens = r.token_counts
    n = tokens[end] - (tokens[j - 1] if j else 0) + a_hi - a_lo
    entries = engine.rec.deferred(engine.name)
    if (
        type(entries) is BulkEntries
        and entries.plan is r
        and entries.p1 == p0
        and entries.e1 == e0
        and entries.version == version
    ):
        entries.p1, entries.e1 = p1, e1  # this commit's slices follow the last one's
        entries.tokens += n
    else:
        engine.rec.defer(engine.name, BulkEntries(engine, r, p0, p1, e0, e1, n))
    batch.iters, batch.kv, batch.order = logs.iters[end], kv, order
    engine.queue.running = len(running) + len(batch.local)  # (`Engine._report_load`; its batch is logged)


class BulkEntries:
    """What a refill's bulk commits log, gathered until the recorder settles it (`Recorder.defer`).

    Commits come at every flush of the ledger, a few finishes each; logging each one's slices of
    the plan's logs cost more than the rest of the commit. Nothing reads an engine's track
    before the run ends, and only the engine itself logs to it (from its own loop, after the
    plan, or committing steps one by one), so the slices of consecutive commits join into one
    and are logged once, before the engine's next entry of its own or at the run's end: the
    same entries, in the same order, at the version they were committed at (the engine loads
    new weights only after its plan, and a new plan defers entries of its own).
    """

    __slots__ = ("engine", "plan", "version", "p0", "p1", "e0", "e1", "tokens")

    def __init__(self, engine: Engine, plan: Refill, p0: int, p1: int, e0: int, e1: int, tokens: int) -> None:
        self.engine, self.plan, self.version = engine, plan, engine.version
        self.p0, self.p1 = p0, p1  # the slice of the plan's batch log (`PlanLogs.batch_s`, `batch`)
        self.e0, self.e1 = e0, e1  # the slice of its states (`PlanLogs.states`, `state_s`, `hints`)
        self.tokens = tokens  # generated over the commits

    def settle(self) -> None:
        engine, logs, p0, p1, e0, e1 = self.engine, self.plan.logs, self.p0, self.p1, self.e0, self.e1
        rec, name = engine.rec, engine.name
        rec.on_tokens(self.tokens)
        if p1 > p0:
            rec.on_batches(name, logs.batch_s[p0:p1], logs.batch[p0:p1])
        if e1 > e0:
            rec.on_states(name, logs.states[e0:e1], logs.state_s[e0:e1], logs.hints[e0:e1], self.version)


def _commit_steps(engine: Engine, r: Refill, t: float) -> list[Sequence]:
    """`commit_refill` step by step (steps that preempt or readmit preempted work among them).

    Each row is read once: step j's end ops (its finishers leave), then step j + 1's start ops
    (its preemptions, through the batch's newest as `Engine._preempt_newest` takes them, or its
    admissions) as soon as step j has ended, whether or not step j + 1 ends by t. The rows are
    the plan's as Python lists, made at its first such commit (`Refill.row_list`), and the states
    and batch samples logged go to the engine's deferred `StepEntries`, not to the recorder at
    each commit (under KV pressure commits are many and a few steps each).
    """
    j = r.pos
    rows = r.row_list
    first = rows[j - 1][FIN] if j else 0
    last, end_s = r.last, r.end_s
    batch = engine.batch
    running, version, finishers, orders, admitted = (
        batch.running,
        engine.version,
        r.finishers,
        r.orders,
        r.admitted,
    )
    name, rec = engine.name, engine.rec
    logs_steps, log_t, log_b = r.logs_steps, engine._batch_times, engine._batch_sizes
    local, items, order, hint = batch.local, engine.queue.items, batch.order, engine.step_hint
    adm, joint = r.admissions, r.joint is not None
    popitem, to_local = running.popitem, local.appendleft
    lo = first
    tokens = 0
    # what the recorder hears: the tallies summed and handed over at the end (as `on_preempt`
    # would hear them step by step), the states and batch samples, in order, to the engine's
    # deferred entries (logged before its next entry of its own: `StepEntries`)
    entries = rec.deferred(name)
    if type(entries) is not StepEntries or entries.version != version:
        entries = StepEntries(rec, name, version)
        rec.defer(name, entries)
    st, st_s, st_h, b_s, b_n = entries.states, entries.state_s, entries.hints, entries.batch_s, entries.batch
    pre_n = pre_tokens = load = 0
    heap = batch.heap if logs_steps else None  # kept as a span-by-span engine keeps it (shared_refill.py)
    row = rows[j]
    e = end_s[j]
    while True:
        # ---- step j ends at e (<= t)
        kind, k, _, _, iters, kv, hi = row[:7]
        if kind == SPAN:
            tokens += k * len(running)
        else:
            b_s.append(e)
        if heap is not None:
            while heap and heap[0][0] <= iters:
                heappop(heap)
        if hi > lo:
            for i in range(lo, hi):
                seq = finishers[i]
                del running[orders[i]]
                seq.generated = seq.response_tokens
                seq.version_end = version
                seq.finish_s = e
            lo = hi
        if kind != SPAN:
            b_n.append(len(running))
        j += 1
        if j > last:
            if not logs_steps:  # what the last step's finishers leave (a shared queue's engine logs on itself)
                log_t.append(e)
                log_b.append(len(running))
            break
        # ---- step j starts at e
        a_lo = row[ADM]
        row = rows[j]
        kind, _, preempts, decode, _, _, _, a_hi, from_local = row[:9]
        if kind == SPAN:
            if preempts:  # `Engine._preempt_newest`, its tallies summed and its load reported at the end
                pre_n += preempts
                for _ in range(preempts):
                    seq = popitem()[1]  # the newest
                    seq.generated = generated = seq.generated_at_admit + (iters - seq.admit_iter)
                    context = seq.held + seq.prompt_tokens + generated
                    kv -= context
                    pre_tokens += context
                    if seq.held:
                        seq.prompt_tokens += seq.held
                        seq.held = 0
                    to_local(seq)
                load = len(running) + len(local)
            if decode:
                st.append(states_.DECODE)
                st_s.append(e)
                st_h.append(hint)
            log_t.append(e)  # the running batch at each step's start, as a span-by-span engine logs it
            log_b.append(len(running))
            if logs_steps:
                while heap[0][1] not in running:  # `RunningBatch.next_finish` as the span is planned
                    heappop(heap)
        else:
            for i in range(a_lo, a_hi):
                seq, generated, finish = admitted[i], adm[i, 0], adm[i, 1]
                if i - a_lo < from_local:
                    if local.popleft() is not seq:
                        raise AssertionError(f"{name}: a refill admitted other work than it planned")
                elif items[0] is seq:
                    items.popleft()
                elif joint:  # engines planned together commit in engine order, not admission order
                    items.remove(seq)
                else:
                    raise AssertionError(f"{name}: a refill admitted other work than it planned")
                if seq.version_start < 0:
                    seq.version_start = version
                seq.generated = seq.generated_at_admit = generated
                seq.admit_iter = iters
                seq.engine = engine
                seq.finish_iter = finish
                running[order] = seq
                if heap is not None:
                    heappush(heap, (finish, order))
                order += 1
                kv += seq.prompt_tokens + generated
            tokens += a_hi - a_lo
            hint = seq.group.batch
            st.append(states_.PREFILL)
            st_s.append(e)
            st_h.append(hint)
            log_t.append(e)
            log_b.append(len(running))
        e = end_s[j]
        if e > t:
            break
    batch.iters, batch.kv, batch.order, engine.step_hint = iters, kv, order, hint
    r.pos = j
    r.next_end_s = end_s[j] if j <= last else math.inf
    rec.on_tokens(tokens)
    if pre_n:
        rec.on_preempt(pre_tokens, pre_n)
        engine.queue.running = load
    if not logs_steps:
        engine.queue.running = len(running) + len(local)  # (`Engine._report_load`; its batch is logged)
    elif j > last and last in r.pops:
        engine._report_load()  # as `Engine._advance` at the plan's last step (the engine's loop logs on from here)
    return finishers[first:hi]


class StepEntries:
    """What `_commit_steps` (and `_commit_joint`) logs (states entered, batch samples at prefills), gathered over an
    engine's consecutive step-by-step commits at one version until the recorder settles it
    (`Recorder.defer`, as `BulkEntries`): the same entries, in the same order, logged once
    rather than at every commit (`Recorder.on_states` of the joined lists is its calls one by one)."""

    __slots__ = ("rec", "name", "version", "states", "state_s", "hints", "batch_s", "batch")

    def __init__(self, rec, name: str, version: int) -> None:
        self.rec, self.name, self.version = rec, name, version
        self.states: list[str] = []
        self.state_s: list[float] = []
        self.hints: list[int] = []  # each state's RL step (trace labels)
        self.batch_s: list[float] = []
        self.batch: list[int] = []

    def settle(self) -> None:
        rec, name = self.rec, self.name
        if self.states:
            rec.on_states(name, self.states, self.state_s, self.hints, self.version)
        if self.batch_s:
            rec.on_batches(name, self.batch_s, self.batch)


def _commit_joint(engine: Engine, r: JointPart, t: float) -> list[Sequence]:
    """`_commit_steps` for a joint plan's part (joint_refill.py), which neither preempts nor
    readmits: spans to a finish and prefills from the queue the engines share. The parts commit
    in engine order at a flush, not in admission order: each takes its own sequences out of the
    queue's planned prefix."""
    j, last, end_s, rows = r.pos, r.last, r.end_s, r.steps
    batch = engine.batch
    running, version, heap = batch.running, engine.version, batch.heap
    finishers, orders, admitted, adm = r.finishers, r.orders, r.admitted, r.admits
    log_t, log_b = engine._batch_times, engine._batch_sizes
    items, order, hint = engine.queue.items, batch.order, engine.step_hint
    lo = first = rows[j - 1][FIN] if j else 0
    tokens = 0
    rec, name = engine.rec, engine.name
    # the states and batch samples, in order, to the engine's deferred entries, as `_commit_steps`
    # logs them (the parts commit at every flush, a few steps each: `StepEntries`)
    entries = rec.deferred(name)
    if type(entries) is not StepEntries or entries.version != version:
        entries = StepEntries(rec, name, version)
        rec.defer(name, entries)
    st, st_s, st_h, b_s, b_n = entries.states, entries.state_s, entries.hints, entries.batch_s, entries.batch
    row, e = rows[j], end_s[j]
    while True:
        # ---- step j ends at e (<= t)
        kind, k, _, _, iters, kv, hi = row[:7]
        if kind == SPAN:
            tokens += k * len(running)
        else:
            b_s.append(e)
        while heap and heap[0][0] <= iters:
            heappop(heap)
        if hi > lo:
            for i in range(lo, hi):
                seq = finishers[i]
                del running[orders[i]]
                seq.generated = seq.response_tokens
                seq.version_end = version
                seq.finish_s = e
            lo = hi
        if kind != SPAN:
            b_n.append(len(running))
        j += 1
        if j > last:
            break
        # ---- step j starts at e
        a_lo = row[ADM]
        row = rows[j]
        if row[KIND] == SPAN:
            st.append(states_.DECODE)  # (every span after a prefill enters decode)
            st_s.append(e)
            st_h.append(hint)
            log_t.append(e)  # the running batch at each step's start, as a span-by-span engine logs it
            log_b.append(len(running))
            while heap[0][1] not in running:  # `RunningBatch.next_finish` as the span is planned
                heappop(heap)
        else:
            a_hi = row[ADM]
            for i in range(a_lo, a_hi):
                seq, generated, finish = admitted[i], adm[2 * i], adm[2 * i + 1]
                if items[0] is seq:
                    items.popleft()
                else:
                    items.remove(seq)  # another part's admissions, earlier, are still ahead of it
                if seq.version_start < 0:
                    seq.version_start = version
                seq.generated = seq.generated_at_admit = generated
                seq.admit_iter = iters
                seq.engine = engine
                seq.finish_iter = finish
                running[order] = seq
                heappush(heap, (finish, order))
                order += 1
                kv += seq.prompt_tokens + generated
            tokens += a_hi - a_lo
            hint = seq.group.batch
            st.append(states_.PREFILL)
            st_s.append(e)
            st_h.append(hint)
            log_t.append(e)
            log_b.append(len(running))
        e = end_s[j]
        if e > t:
            break
    batch.iters, batch.kv, batch.order, engine.step_hint = iters, kv, order, hint
    r.pos = j
    r.next_end_s = end_s[j] if j <= last else math.inf
    rec.on_tokens(tokens)
    if j > last and last in r.pops:
        engine._report_load()  # as `Engine._advance` at the plan's last step (the engine's loop logs on from here)
    return finishers[first:hi]


def cut_refill(engine: Engine, r: Refill, at_iteration: bool | None = None) -> None:
    """New weights: the refill ends with the step in progress, or, under an interrupt at
    iteration boundaries, with the iteration in progress of a span (as a span-by-span
    engine, which listens while it decodes, not while it prefills). `at_iteration`: cut a span
    at the iteration in progress whatever the interrupt (a partial rollout's step end, an agent
    turn back from its tool).

    Steps that start by now were planned on the old weights' rules: committed first.
    """
    engine.ledger.flush(engine.env.now)
    if r.joint is not None and r.joint.live:  # the others' plans assumed this one's admissions
        cut_back(r.joint, engine)
    j = r.pos
    if at_iteration is None:
        at_iteration = engine.policy.at_boundary
    if j > r.last:  # the whole plan has ended now: the engine resumes from it at once
        engine._listening = False
    elif r.kind(j) == PREFILL or not at_iteration:
        if getattr(r, "more", None) is not None:  # the whole plan's wake-ups before the cut, then no more
            r.ensure(r.end_s[j])
            r.close()
        r.last, r.rewait = j, r.rewait + 1
        r.wake_s = [t for t in r.wake_s if t < r.end_s[j]]
        engine._listening = False
        engine.process.interrupt()


def follow_drain(engine: Engine, d: Drain):
    """Decode until the batch is empty or the cache full, waking only if cut short.

    An arrival or new weights cut the drain at the current time: the ledger commits what has
    ended, the iteration in progress finishes, and the rest is dropped.
    """
    batch = engine.batch
    engine.drain = d
    engine.ledger.watch(engine, d)  # also counts it among the engines with planned finishes
    engine._listening = engine._listen_queue = True
    try:
        yield timeout_at(engine.env, d.end_s[-1])
        engine.ledger.flush(engine.env.now)
    except simpy.Interrupt:
        engine.ledger.flush(engine.env.now)
        end_plan(engine)  # before the cut, so no flush commits the dropped plan
        j = d.pos
        if j < d.spans and not d.stopped:  # cut short: finish the iteration in progress
            k, cost = d.k[j], engine.costs.iteration(len(batch.running))
            n = yield from engine._cut_short(k, cost, d.span_start_s(j))
            engine._advance(n)
    engine._listening = False
    if engine.drain is not None:
        end_plan(engine)
    batch.heap = None  # stale: rebuilt from the batch if the span-by-span path needs it


def follow_refill(engine: Engine, r: Refill):
    """Decode, finish, admit and prefill as planned (refill.py), waking only if cut short.

    New weights end the plan with the step in progress (`cut_refill`), or, under an interrupt
    at iteration boundaries, with the iteration in progress of its span; the engine then goes
    back to its loop.
    """
    batch = engine.batch
    if engine.drain is not r:  # (an engine handed a joint plan's part is set up already)
        if r.logs_steps:
            batch.next_finish()  # builds the heap, as the span-by-span engine planning this first span does
        else:
            batch.heap = None  # stale from here: admissions go on without it
        engine.drain = r
        engine.ledger.watch(engine, r)
        engine._listening, engine._listen_queue = True, False  # nothing queued can jump the plan
    while True:
        try:
            end, r.end_event = r.end_event, None  # (a joint plan's, made in its engines' order)
            if end is None:  # (a plan made in chunks arms its end once it is planned: `LazyPlan.follow`)
                more = getattr(r, "more", None)
                end = timeout_at(engine.env, r.end_s[r.last]) if more is None else more.follow(engine, r)
            yield end
            engine.ledger.flush(engine.env.now)
            break
        except simpy.Interrupt:
            if engine._handover is not None:  # another engine planned them together: its part from here
                r, engine._handover = engine._handover, None
                continue
            if r.rewait:  # cut back to the step in progress: wait for its end instead
                r.rewait -= 1
                continue
            engine.ledger.flush(engine.env.now)
            j = r.pos
            end_plan(engine)
            if getattr(r, "more", None) is not None:
                r.close()
            if j <= r.last:  # new weights mid-span: finish the iteration in progress
                k, cost = r.k(j), engine.costs.iteration(len(batch.running))
                n = yield from engine._cut_short(k, cost, r.step_start_s(j))
                engine._advance(n)
            break
    engine._listening = False
    if engine.drain is r:
        end_plan(engine)
    if not r.logs_steps:
        batch.heap = None


def end_plan(engine: Engine) -> None:
    """The engine has no planned finishes any more (its plan ended or was cut): its batch is settled."""
    engine.ledger.settle()
    engine.drain = None
    engine.ledger.unwatch(engine)
