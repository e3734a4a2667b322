"""The slot-bound stretch of a refill: first come, first served on a full batch's slots, planned in bulk.

While an engine's batch is full (`max_batch` sequences) and the cache never binds, its future
is a multi-slot FCFS schedule: each finish frees a slot, the queue's head takes it in the next
prefill, and decodes for its remaining tokens. Only the order of finish iterations needs a
heap (one `heapreplace` per admission); everything else a refill records (each span's
iterations and cache, each admission's fit, the steps' rows) follows from those iterations
with numpy prefix sums. The stretch ends before the first event the cache would bind in (a
span the cache cannot hold, an admission that does not fit), before an admission it cannot
check here (a head waiting for newer weights, a one-token response), and at the last event
whose finishers it has all seen; refill.py's general loop plans on from there, on the state
this returns, so the plan is the one that loop would have made step by step. Sizes in tokens,
iterations in decode iterations.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from rlsim.simulator.costs import Costs
from rlsim.simulator.work import Sequence

# the columns of a refill's step rows (refill.py): kind, iterations, preemptions at its start,
# enters decode, iteration count at its end, cache at its end once its finishers have left,
# finishers so far, admissions so far, of which from the engine's own preempted list, batch
# while it runs (after its start ops); then what refill.py adds for the commits: prefills and
# logged states so far
KIND, K, PREEMPTS, DECODE, ITERS, KV, FIN, ADM, LOCAL, BATCH, PRE, EV = range(12)
COLUMNS, ALL_COLUMNS = 10, 12
SPAN, PREFILL = 0, 1

_generated, _response, _prompt, _length = (
    attrgetter(a) for a in ("generated", "response_tokens", "prompt_tokens", "length")
)
_min_version = attrgetter("group.min_version")
_SHIFT = 32  # a slot's heap key: (finish iteration << _SHIFT) | admission order
_ORDER = (1 << _SHIFT) - 1


def _prefill(key: tuple[int, ...], costs: Costs, cache: dict) -> float:
    """The duration of prefilling these contexts together (cached by the engine)."""
    d = cache.get(key)
    if d is None:
        d = cache[key] = costs.prefill_s(key)
    return d


@dataclass
class Stretch:
    """The slot-bound prefix of a refill and the engine's planned state at its end (after a prefill)."""

    rows: np.ndarray  # (steps, COLUMNS) int64
    span_kv: np.ndarray  # each span's cache at its start (its batch is the full batch)
    span_k: np.ndarray  # each span's iterations
    prefills: np.ndarray  # each prefill's duration
    orders: list[int]  # the finishers' admission orders, in finish order
    finishers: list[Sequence]
    admitted: list[Sequence]  # in admission order (the queue's first ones)
    generated: np.ndarray  # each admission's tokens after its prefill
    finish: np.ndarray  # each admission's finish iteration
    run: dict  # the running sequences at its end, as refill.py's loop keeps them
    iters: int
    kv: int
    order: int


def slot_bound(
    run: dict,
    heap: list[tuple[int, int]],
    snap: list[Sequence],
    version: int,
    iters0: int,
    kv0: int,
    order0: int,
    capacity: int,
    share: bool,
    costs: Costs,
    prefill_cache: dict,
) -> Stretch | None:
    """Plan from a full batch at a decode boundary (`run` and `heap` as refill.py builds them).

    None: not even one event qualifies (the general loop plans from the start).
    """
    full, n = len(run), len(snap)
    generated = np.fromiter(map(_generated, snap), np.int64, n)
    need_a = np.fromiter(map(_response, snap), np.int64, n) - generated - 1
    ok = (need_a >= 1) & (np.fromiter(map(_min_version, snap), np.int64, n) <= version)
    if not ok.all():  # the head that needs only a slot: current weights, >= 1 decode iteration
        n = int(np.argmin(ok))
        if n == 0:
            return None
        generated, need_a = generated[:n], need_a[:n]
    if order0 + n > _ORDER or max(f for f, _ in heap) + int(need_a.sum()) >= 1 << 31:
        return None  # (past what a slot's key holds: the general loop plans it)
    # each admission takes the next finisher's slot, at its finish: the heap holds one int per
    # slot, (finish iteration << 32) | admission order, ordered as the (finish, order) pairs
    # are (int comparisons, not tuples'), and admission i replaces the least with its own,
    # need_a[i] iterations later (`add`: need_a << 32 plus its order, made in one go)
    add = array("q", ((need_a << _SHIFT) + np.arange(order0, order0 + n, dtype=np.int64)).tobytes())
    h = [(f << _SHIFT) | o for f, o in heap]  # (a monotone map: still a heap)
    replace = heapq.heapreplace
    popped_keys = [replace(h, (h[0] >> _SHIFT << _SHIFT) + x) for x in add]
    keys = np.array(popped_keys, np.int64)
    del popped_keys
    a_all = keys >> _SHIFT  # each admission's iteration (non-decreasing: every need is >= 1)
    m = n
    last_at = int(a_all[-1])
    if h[0] >> _SHIFT == last_at:  # the last event has more finishers than admissions left: stop before it
        m = int(np.searchsorted(a_all, last_at))
    if m == 0:
        return None
    a = a_all[:m]
    starts = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))
    ends = np.append(starts[1:], m)
    count = ends - starts
    it = a[starts]
    k = np.diff(it, prepend=iters0)
    po = keys[:m] & _ORDER
    new = po >= order0
    lens_a = np.fromiter(map(_length, snap[:m]), np.int64, m)
    keys = np.fromiter(run, np.int64, full)
    init_len = np.fromiter((v[1] for v in run.values()), np.int64, full)
    flen = np.where(
        new, lens_a[np.where(new, po - order0, 0)], init_len[np.minimum(np.searchsorted(keys, po), full - 1)]
    )
    ctx_a = np.fromiter(map(_prompt, snap[:m]), np.int64, m) + generated[:m]
    c_ex = np.concatenate(([0], np.cumsum(ctx_a + 1)))  # cache the admissions before each add
    f_ex = np.concatenate(([0], np.cumsum(flen)))  # cache the finishers before each free
    done = it - iters0
    kv_span0 = kv0 + full * (done - k) + c_ex[starts] - f_ex[starts]
    kv_span1 = kv0 + full * done + c_ex[starts] - f_ex[ends]
    event = np.repeat(np.arange(len(starts)), count)
    kv_before = kv_span1[event] + c_ex[:m] - c_ex[starts][event]
    batch_before = full - count[event] + (np.arange(m) - starts[event])
    room_ok = (capacity - kv_span0) // full >= k
    fits = kv_before + ctx_a + batch_before + 2 <= capacity
    bad = len(starts)
    if not room_ok.all():
        bad = int(np.argmin(room_ok))
    if not fits.all():
        bad = min(bad, int(event[np.argmin(fits)]))
    if bad == 0:
        return None
    n = int(ends[bad - 1])  # admissions kept
    starts, ends, k, it = starts[:bad], ends[:bad], k[:bad], it[:bad]
    kv_span0, kv_span1 = kv_span0[:bad], kv_span1[:bad]
    kv_prefill = kv_span1 + c_ex[ends] - c_ex[starts]

    rows = np.zeros((2 * bad, COLUMNS), dtype=np.int64)
    span, pre = rows[0::2], rows[1::2]
    span[:, KIND], span[:, K], span[:, ITERS], span[:, KV] = SPAN, k, it, kv_span1
    span[1:, DECODE] = 1  # each span after a prefill enters decode (the first continues one)
    span[:, FIN], span[:, ADM], span[:, BATCH] = ends, starts, full
    pre[:, KIND], pre[:, ITERS], pre[:, KV] = PREFILL, it, kv_prefill
    pre[:, FIN], pre[:, ADM], pre[:, BATCH] = ends, ends, full

    single = count[:bad] == 1
    prefills = np.empty(bad)
    if single.any():  # one admission: its context alone (most events), timed all at once
        c = ctx_a[starts[single]]
        prefills[single] = costs.prefills_s(c, c * c, np.ones(len(c), np.int64))
    ctx = ctx_a.tolist()
    gen = generated.tolist()
    for e in np.flatnonzero(
        ~single
    ).tolist():  # fresh members of one group admitted together share its prompt's prefill
        lengths, prefilled = [], set()
        for i in range(int(starts[e]), int(ends[e])):
            seq = snap[i]
            if gen[i] or not share or seq.group not in prefilled or seq.turn:
                lengths.append(ctx[i])
            prefilled.add(seq.group)
        prefills[e] = _prefill(tuple(lengths), costs, prefill_cache)

    orders = array("q", po[:n].tobytes())
    finishers = [snap[p - order0] if p >= order0 else run[p][2] for p in orders]
    gen_a = generated[:n] + 1
    finish = a[:n] + need_a[:n]
    last = int(it[-1])
    left = {o: v for o, v in run.items() if v[0] > last}
    for i in np.flatnonzero(finish > last).tolist():
        left[order0 + i] = (int(finish[i]), int(lens_a[i]), snap[i], int(a_all[i]), int(gen_a[i]))
    return Stretch(
        rows=rows,
        span_kv=kv_span0,
        span_k=k,
        prefills=prefills,
        orders=orders,
        finishers=finishers,
        admitted=snap[:n],
        generated=gen_a,
        finish=finish,
        run=left,
        iters=last,
        kv=int(kv_prefill[-1]),
        order=order0 + n,
    )
