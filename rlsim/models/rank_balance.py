"""How much longer the slowest data-parallel rank takes than the mean one, phase by phase.

Data-parallel ranks each run their own share of a step's sequences, and the gradient reduction
at the end of every minibatch is a barrier: a minibatch takes its slowest rank's time, not the
mean. At a fixed global batch more ranks means fewer sequences each, so with long-tailed
response lengths the slowest rank's share grows relative to the mean and a pool's training time
stops scaling as 1/GPUs.

Two ways of handing out the sequences, both verl's (volcengine/verl@6f0b21c530ad3b36df717bd5c681d156e6d0af7d,
the same at volcengine/verl@38d9a88170786a45cb189a08290c4651e6d6f671 of 2025-06-14):

- `balanced` (`trainer.balance_batch: True`, the default, verl/trainer/config/ppo_trainer.yaml):
  `RayPPOTrainer._balance_batch` (verl/trainer/ppo/ray_trainer.py) partitions the step's
  sequences into one part per GPU of the actor (its world size), equal in count and balanced in
  total length (prompt + response tokens) by Karmarkar-Karp
  (verl/utils/seqlen_balancing.py `get_seqlen_balanced_partitions(..., equal_size=True)`, each
  part's indices sorted), and concatenates them; the dispatch then cuts that order into one
  contiguous chunk per data-parallel rank (`make_nd_compute_dataproto_dispatch_fn`; with Ulysses
  or Megatron model parallelism a rank takes world / dp consecutive parts).
- `contiguous` (`balance_batch: False`): the step in batch order, cut into one contiguous chunk per rank.

Each rank then splits its chunk into `minibatches` consecutive minibatches in order
(verl/workers/actor/dp_actor.py `update_policy`: `data.split(ppo_mini_batch_size)`, the mini
batch normalised per rank), while `compute_log_prob` runs over its whole chunk. The balancing
counts tokens; a sequence's work is not only its tokens but attention's quadratic part too
(`footprint.forward_flops`' sum of squares), so a part with one long sequence still works longer.

The factor of a phase is the slowest rank's work over the mean rank's: for the log-prob passes
over the whole chunk, for the update summed over the minibatches (each minibatch its slowest
rank). It is deterministic: the lengths' order is the batch order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum

import numpy as np


class RankAssignment(str, Enum):
    """How a step's sequences are handed to the data-parallel ranks."""

    balanced = "balanced"  # verl trainer.balance_batch True: Karmarkar-Karp over the GPUs
    contiguous = "contiguous"  # verl balance_batch False: the batch order cut into chunks


@dataclass(frozen=True)
class RankFactors:
    """The slowest rank's compute over the mean rank's, per phase (>= 1)."""

    logprob: float
    update: float


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
    """verl's `get_seqlen_balanced_partitions`: k parts of indices, each sorted, balanced in total length.

    A port of volcengine/verl@6f0b21c530ad3b36df717bd5c681d156e6d0af7d:verl/utils/seqlen_balancing.py
    `karmarkar_karp` (largest differencing) with its order and tie-breaking, so the parts are the
    ones verl forms. With `equal_size` every part holds len / k sequences (len a multiple of k).
    """
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


def rank_chunks(lengths: list[int], dp: int, world: int, policy: RankAssignment) -> list[np.ndarray]:
    """Each data-parallel rank's sequence indices, in the order it runs them.

    `world`: the GPUs of the training pool (verl balances over its actor's world size, then
    gives each of the `dp` ranks world / dp consecutive parts). Where the step's sequences do
    not split into equal parts over the GPUs, the parts are formed per rank instead, and
    without equal sizes where they do not split over the ranks either.
    """
    n = len(lengths)
    if policy is RankAssignment.contiguous or n < dp or dp <= 1:
        return np.array_split(np.arange(n), dp)
    if world % dp == 0 and n >= world and n % world == 0:
        parts = karmarkar_karp(lengths, world, equal_size=True)
        per_rank = world // dp
        return [np.array([i for p in parts[r * per_rank : (r + 1) * per_rank] for i in p]) for r in range(dp)]
    parts = karmarkar_karp(lengths, dp, equal_size=n % dp == 0)
    return [np.array(p, dtype=int) for p in parts]


def slowest_rank_factors(
    lengths: list[int],
    dp: int,
    minibatches: int,
    policy: RankAssignment,
    work_linear: float,
    work_quadratic: float,
    world: int | None = None,
) -> RankFactors:
    """The slowest rank's work over the mean rank's: over each rank's whole chunk, and per minibatch.

    A sequence of n tokens costs `work_linear` x n + `work_quadratic` x n^2 (FLOPs, or any unit:
    only ratios matter). The update's factor is the sum over minibatches of the slowest rank's
    work over the sum of the mean rank's; each rank's chunk is cut into `minibatches` in order.
    """
    if dp <= 1 or not lengths:
        return RankFactors(1.0, 1.0)
    arr = np.asarray(lengths, dtype=float)
    work = work_linear * arr + work_quadratic * arr * arr
    total = float(work.sum())
    if total <= 0.0:
        return RankFactors(1.0, 1.0)
    chunks = rank_chunks(list(lengths), dp, world or dp, policy)
    sizes = np.array([len(c) for c in chunks])
    cum = np.concatenate(([0.0], np.cumsum(work[np.concatenate(chunks).astype(int)])))
    # each rank's chunk cut into `minibatches` in order, as np.array_split cuts it
    mb = max(1, minibatches)
    q, rem = np.divmod(sizes, mb)
    m = np.arange(mb + 1)
    bounds = (np.cumsum(sizes) - sizes)[:, None] + m[None, :] * q[:, None] + np.minimum(m[None, :], rem[:, None])
    grid = cum[bounds[:, 1:]] - cum[bounds[:, :-1]]  # (rank, minibatch) work
    logprob = float(grid.sum(axis=1).max() * dp / total)
    update = float(grid.max(axis=0).sum() * dp / total)
    return RankFactors(logprob=max(1.0, logprob), update=max(1.0, update))
