"""A drain: an engine's running batch planned from finish to finish while nothing can join it.

When nothing queued can start (the queue is empty, or its head waits for newer weights), an
engine's future up to the next outside event is already fixed: each span runs to the next
finish at one sequence fewer, until the batch is empty or the KV cache would fill. Rather than
one SimPy event per finish (the hot path of every simulation: ~10,000 finishes in a default
run), the engine plans all those spans at once, their durations vectorised with the same closed
form as one span (`models.decode.spans_s`), and waits once. The finishes are committed lazily,
in time order across engines, by the ledger (finishes.py). A span's end time is the running sum
of the durations before it, the very times a span-by-span engine reaches, so the timeline is
the same bit for bit. Times in seconds, sizes in tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from rlsim.models.decode import spans_s
from rlsim.simulator.costs import Costs
from rlsim.simulator.work import Sequence

_finish_iter = attrgetter("finish_iter")
_length = attrgetter("length")
_group = attrgetter("group")
# Drains the cache ends within this many spans are planned in plain Python (`_small_drain`);
# under KV pressure most are one or two spans, where numpy's per-call set-up is most of the cost
# (16 measured best of 8, 16 and 48 on long-cot's instruction count, colocated and sync: a
# drain that runs on past the limit was planned in Python for nothing)
SMALL_DRAIN = 16


@dataclass(eq=False)
class Drain:
    """The planned spans of one engine; `pos` is the first span not yet committed."""

    is_refill = False  # (a Refill, refill.py, plans admissions too)
    start_s: float  # when the first span starts
    end_s: list[float]  # each span's end
    iters: list[int]  # the engine's decode-iteration count at each span's end
    kv_end: list[int]  # tokens cached at each span's end, once its finishers have left
    tokens: list[int]  # tokens produced from the drain's start to each span's start, and to its end
    k: list[int]  # decode iterations of each span
    bounds: list[int]  # span j's finishers are finishers[bounds[j]:bounds[j + 1]]
    orders: list[int]  # the finishers' admission orders (their keys in the engine's batch)
    finishers: list[Sequence]  # in finish order
    finish_s: list[float]  # each finisher's finish time (its span's end)
    wake_s: list[float]  # where a group's last running member on this engine finishes (not the end)
    spans: int = 0
    pos: int = 0
    stop_at: int = 1 << 62  # a span at whose end the engine stops early (queued work may fit then)
    stopped: bool = False  # it did: at a span boundary, with no iteration in progress
    next_end_s: float = 0.0  # the end of span `pos` (infinite once all are committed)
    # the first span whose end is not yet applied to the engine's batch (< pos while commits wait
    # to be settled: `planned.settle_drain`), and each such commit's finishers so far and time
    applied: int = 0
    commits: list[tuple[int, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.spans = len(self.end_s)
        self.next_end_s = self.end_s[0]

    def span_start_s(self, j: int) -> float:
        return self.end_s[j - 1] if j else self.start_s


def plan_drain(
    costs: Costs, running: dict[int, Sequence], iters: int, kv: int, capacity: int, now: float
) -> Drain | None:
    """The spans from `now` until the batch is empty or the cache is full (None: none can run).

    `running` maps admission order to sequence, in admission order; ties in finish iteration
    go in that order, as they leave a span-by-span engine's heap.
    """
    n = len(running)
    if capacity - kv < n:  # the cache is full already: not one iteration fits (the engine preempts)
        return None
    seqs = list(running.values())
    small = _small_drain(costs, running, seqs, iters, kv, capacity, now)
    if small is not None:
        return small
    finish = np.fromiter(map(_finish_iter, seqs), np.int64, n)
    order = finish.argsort(kind="stable")
    finish = finish[order]
    new_span = np.empty(n, dtype=bool)
    new_span[0] = True
    np.not_equal(finish[1:], finish[:-1], out=new_span[1:])
    first = np.flatnonzero(new_span)  # each span's first finisher, in finish order
    bounds = np.append(first, n)
    counts = bounds[1:] - first
    ends = finish[first]
    k = ends.copy()
    k[1:] -= ends[:-1]
    k[0] -= iters
    batch = n - first
    freed = np.fromiter(map(_length, seqs), np.int64, n)
    kv_end = kv + np.cumsum(k * batch - np.add.reduceat(freed[order], first))
    kv_start = np.append(kv, kv_end[:-1])
    spans = len(ends)
    room = (capacity - kv_start) // batch
    if (room < k).any():  # the cache fills inside span j: stop there (the engine then preempts)
        j = int(np.argmax(room < k))
        if room[j] <= 0:
            spans = j
        else:
            spans = j + 1
            k[j] = room[j]
            kv_end[j] = kv_start[j] + room[j] * batch[j]
            bounds[j + 1] = bounds[j]
        if spans == 0:
            return None
        counts = bounds[1 : spans + 1] - bounds[:spans]
    k, batch, kv_start = k[:spans], batch[:spans], kv_start[:spans]
    durations = spans_s(costs.coefficients(batch), batch, kv_start, k)
    end_s = np.cumsum(np.concatenate(([now], durations)))[1:]
    keys = list(running)
    finishing = order[: bounds[spans]].tolist()
    finishers = [seqs[i] for i in finishing]
    span_of = np.repeat(np.arange(spans), counts[:spans])
    last_span = dict(zip(map(_group, finishers), span_of.tolist()))  # later spans overwrite earlier
    ints = np.concatenate((iters + np.cumsum(k), kv_end[:spans], [0], np.cumsum(k * batch), k)).tolist()
    ends = end_s.tolist()
    return Drain(
        start_s=now,
        end_s=ends,
        iters=ints[:spans],
        kv_end=ints[spans : 2 * spans],
        tokens=ints[2 * spans : 3 * spans + 1],
        k=ints[3 * spans + 1 :],
        bounds=bounds[: spans + 1].tolist(),
        orders=[keys[i] for i in finishing],
        finishers=finishers,
        finish_s=end_s[span_of].tolist(),
        wake_s=[ends[j] for j in sorted(set(last_span.values()) - {spans - 1})],
    )


def _small_drain(
    costs: Costs, running: dict[int, Sequence], seqs: list[Sequence], iters: int, kv: int, capacity: int, now: float
) -> Drain | None:
    """`plan_drain` in plain Python for a drain the cache ends within `SMALL_DRAIN` spans (None:
    a longer one, planned with numpy). Under KV pressure most drains are one or two spans to the
    KV-full boundary, where numpy's per-call set-up is most of the cost. The same spans, finishers
    and times: each span timed by its scalar `span_s` (bit for bit `spans_s`), the end times the
    same running sums, ties in finish iteration in admission order (a stable sort)."""
    n = len(seqs)
    fins = list(map(_finish_iter, seqs))
    # every sequence ending within the first span's room ends before the cache can fill (the
    # batch's cache grows by at most n an iteration): more of them than the limit, numpy plans it
    reach = iters + (capacity - kv) // n
    if sum(f <= reach for f in fins) > SMALL_DRAIN:
        return None
    by_finish = sorted(range(n), key=fins.__getitem__)  # stable: `argsort(kind="stable")`
    iteration = costs.iteration
    end_s: list[float] = []
    its: list[int] = []
    kv_end: list[int] = []
    tokens = [0]
    ks: list[int] = []
    bounds = [0]
    t, i, made = now, 0, 0
    while i < n:
        if len(ks) == SMALL_DRAIN:
            return None  # it goes on: numpy plans it
        end = fins[by_finish[i]]
        k = end - iters
        b = n - i
        room = (capacity - kv) // b
        if room < k:  # the cache fills inside this span: it ends there (the engine then preempts)
            if room > 0:
                t += iteration(b).span_s(kv, room)
                iters += room
                kv += room * b
                made += room * b
                end_s.append(t)
                its.append(iters)
                kv_end.append(kv)
                tokens.append(made)
                ks.append(room)
                bounds.append(i)
            break
        t += iteration(b).span_s(kv, k)
        j = i + 1
        while j < n and fins[by_finish[j]] == end:
            j += 1
        kv += k * b - sum(seqs[x].length for x in by_finish[i:j])
        iters = end
        made += k * b
        end_s.append(t)
        its.append(iters)
        kv_end.append(kv)
        tokens.append(made)
        ks.append(k)
        bounds.append(j)
        i = j
    spans = len(ks)
    if not spans:
        return None
    keys = list(running)
    finishing = by_finish[: bounds[-1]]
    finishers = [seqs[x] for x in finishing]
    finish_s: list[float] = []
    last_span = {}
    for j in range(spans):
        lo, hi = bounds[j], bounds[j + 1]
        finish_s.extend([end_s[j]] * (hi - lo))
        for seq in finishers[lo:hi]:
            last_span[seq.group] = j  # later spans overwrite earlier
    return Drain(
        start_s=now,
        end_s=end_s,
        iters=its,
        kv_end=kv_end,
        tokens=tokens,
        k=ks,
        bounds=bounds,
        orders=[keys[x] for x in finishing],
        finishers=finishers,
        finish_s=finish_s,
        wake_s=[end_s[j] for j in sorted(set(last_span.values()) - {spans - 1})],
    )
