"""verl's balance_batch as verl runs it: the reference the fast slowest-rank factor is checked against.

An exact port of volcengine/verl@6f0b21c530ad3b36df717bd5c681d156e6d0af7d:verl/utils/seqlen_balancing.py
`karmarkar_karp` (largest differencing, `equal_size=True` as `RayPPOTrainer._balance_batch` calls
it over the actor's world size; the same at volcengine/verl@38d9a88170786a45cb189a08290c4651e6d6f671),
with its order and tie-breaking, so the parts are the ones verl forms, each part's indices sorted
(the batch order). It is a Python heap over the sequences (~0.5 s for 65K of them), too slow for
the simulator's every step: rlsim/models/rank_balance.py deals the sorted lengths instead, and
tests/test_rank_balance.py checks that its factors stay within a few % of these on batches in a
random order.
"""

from __future__ import annotations

import heapq

import numpy as np


class _Top:
    """A state on the heap: ties in spread pop the state whose largest part is largest first.

    Parts are lists [total, count, indices], so Python's list order is verl's `Set` order (sum,
    then size, then items: the indices decide, being unique).
    """

    __slots__ = ("parts",)

    def __init__(self, parts: list[list]) -> None:
        self.parts = parts

    def __lt__(self, other: _Top) -> bool:
        return other.parts[0] < self.parts[0]


def _entry(parts: list[list]) -> list:
    parts.sort(reverse=True)
    top = parts[0]
    # the largest spread is the smallest entry; then the largest top part (its indices decide last)
    return [parts[-1][0] - top[0], -top[0], -top[1], _Top(parts)]


def karmarkar_karp(lengths: list[int], k: int, equal_size: bool) -> list[list[int]]:
    """k parts of indices, each sorted, balanced in total length; with `equal_size` len / k each."""
    n = len(lengths)
    if k <= 0 or n < k:
        raise ValueError(f"cannot split {n} sequences into {k} parts")
    if equal_size and n % k:
        raise ValueError(f"{n} sequences do not split into {k} equal parts")
    arr = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(arr, kind="stable").tolist()  # by length, then index: verl's sorted((len, i))
    values = arr.tolist()
    heap: list[list] = []
    step = k if equal_size else 1
    empty = [] if equal_size else [[0, 0, []] for _ in range(k - 1)]
    for offset in range(0, n, step):
        parts = [[values[i], 1, [i]] for i in order[offset : offset + step]]
        heap.append(_entry(parts + [[0, 0, []] for _ in empty]))
    heapq.heapify(heap)
    while len(heap) > 1:
        mine = heapq.heappop(heap)[-1].parts
        theirs = heapq.heappop(heap)[-1].parts
        for a, b in zip(mine, reversed(theirs), strict=True):
            a[0] += b[0]
            a[1] += b[1]
            a[2].extend(b[2])
        heapq.heappush(heap, _entry(mine))
    return [sorted(part[2]) for part in heap[0][-1].parts]


def verl_rank_chunks(lengths: list[int], dp: int, world: int) -> list[np.ndarray]:
    """Each data-parallel rank's indices in the order it runs them under `balance_batch: True`.

    verl balances over the `world` GPUs and the dispatch gives each of the `dp` ranks world / dp
    consecutive parts (`make_nd_compute_dataproto_dispatch_fn`).
    """
    parts = karmarkar_karp(lengths, world, equal_size=True)
    per_rank = world // dp
    return [np.array([i for p in parts[r * per_rank : (r + 1) * per_rank] for i in p]) for r in range(dp)]


def factors_of_chunks(work: np.ndarray, chunks: list[np.ndarray], minibatches: int) -> tuple[float, float]:
    """(log-prob, update) factors of ranks running `chunks` of `work`, each chunk cut into minibatches in order.

    A plain loop over ranks and minibatches (np.array_split cuts as verl's `data.split` does).
    """
    dp = len(chunks)
    mean = float(work.sum()) / dp
    per_rank = [float(work[c].sum()) for c in chunks]
    cut = [np.array_split(c, minibatches) for c in chunks]
    update = sum(max(float(work[cut[r][m]].sum()) for r in range(dp)) for m in range(minibatches))
    return max(per_rank) / mean, update / mean
