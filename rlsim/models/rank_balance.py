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
rank).

The order. verl's result depends on the batch order (a part keeps its sequences in index order,
and the minibatches are cut in that order; without balancing the chunks themselves are cut from
it), and the batch order is random with respect to length: the data loader's shuffle, and in
asynchronous modes the order in which sequences finish. So rlsim computes the factor in one
canonical order that stands for "a random order", from the multiset of lengths alone:

- the lengths are sorted (longest first), so the factor cannot read the order they arrive in;
- `balanced`: they are dealt to the parts in a snake (part 0, 1, ..., k-1, then k-1, ..., 0, ...),
  which leaves the parts' token totals within about one sequence of each other (Karmarkar-Karp
  comes closer still, but the factors barely notice: tests/test_rank_balance.py checks them
  against verl's own Karmarkar-Karp, tests/verl_karmarkar_karp.py, within 5% on long-tailed
  batches in random orders); `contiguous`: they are
  laid out in a fixed random permutation of the step's size before being cut into chunks;
- each part runs its sequences in its own fixed random permutation, as a part's index order
  is random in length; the factors are the mean over `ORDER_DRAWS` such draws, since one draw's
  update factor spreads by a few % around its expectation when few sequences fall to a rank
  per minibatch.

The permutations come from `np.random.default_rng(ORDER_SEED)` and depend only on the number of
sequences, parts and ranks (cached): no random state is shared with the simulation, the same
lengths in any order give the same factor, and the same scenario gives the same output. The work
per call is a sort, a gather and segment sums (numpy, O(n log n); benchmarks/bench_rank_balance.py).

Not modelled: verl from volcengine/verl@62221fa13 (2025-10-23, "DP workload balance", #3605)
balances a workload 24576 n + n^2 instead of tokens and runs each part small-large-small rather
than in index order, which lines the minibatches of the ranks up by size (no row uses a build
that new); other libraries' own assignments (NeMo RL sorts and strides each global batch over
the ranks, or packs it into bins dealt round-robin: NVIDIA-NeMo/RL@v0.4.0
nemo_rl/distributed/batched_data_dict.py `shard_by_batch_size`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

import numpy as np

ORDER_SEED = 20251201  # the fixed permutations that stand for a random batch order
ORDER_DRAWS = 4  # random orders the factors are averaged over (one draw's own spread is a few %)


class RankAssignment(str, Enum):
    """How a step's sequences are handed to the data-parallel ranks."""

    balanced = "balanced"  # verl trainer.balance_batch True: Karmarkar-Karp over the GPUs
    contiguous = "contiguous"  # verl balance_batch False: the batch order cut into chunks


@dataclass(frozen=True)
class RankFactors:
    """The slowest rank's compute over the mean rank's, per phase (>= 1)."""

    logprob: float
    update: float


def parts_for(n: int, dp: int, world: int) -> int:
    """How many parts verl's balancing forms: one per GPU where the step splits evenly over them.

    verl asserts the step splits into equal parts over its world size; where it would not
    (a scenario verl refuses), the parts are one per data-parallel rank.
    """
    if world % dp == 0 and n >= world and n % world == 0:
        return world
    return dp


@lru_cache(maxsize=64)
def canonical_layout(n: int, dp: int, world: int, policy: RankAssignment) -> tuple[np.ndarray, np.ndarray]:
    """Where each rank's sequences sit among the lengths sorted longest first, in the order it runs them.

    Returns (positions, sizes): `positions` has one row per draw of the random order (`ORDER_DRAWS`),
    each the ranks' sequences one rank after another as positions in the sorted lengths; `sizes`
    is each rank's count. Depends on the counts alone, so it is cached.
    """
    rng = np.random.default_rng([ORDER_SEED, n, dp, world, policy is RankAssignment.balanced])
    if policy is RankAssignment.contiguous:
        sizes = np.array([len(c) for c in np.array_split(np.arange(n), dp)])
        return rng.permuted(np.tile(np.arange(n), (ORDER_DRAWS, 1)), axis=1), sizes
    k = parts_for(n, dp, world)
    rows = -(-n // k)
    # the snake: row r deals positions r*k .. r*k+k-1 to parts 0..k-1, every other row reversed
    deal = np.arange(rows * k).reshape(rows, k)
    deal[1::2] = deal[1::2, ::-1]
    parts = deal.T  # (part, the positions it holds)
    # each part in its own random order; the last row's empty places (positions >= n) are then
    # dropped, which leaves a random order of the rest
    runs = rng.permuted(np.broadcast_to(parts, (ORDER_DRAWS, k, rows)), axis=2)
    part_sizes = (parts < n).sum(axis=1)
    positions = runs[runs < n].reshape(ORDER_DRAWS, n)  # per draw: part 0's sequences, then part 1's, ...
    sizes = part_sizes.reshape(dp, k // dp).sum(axis=1)  # a rank takes k / dp consecutive parts
    return positions, sizes


def slowest_rank_factors(
    lengths: list[int] | np.ndarray,
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
    Depends only on the multiset of `lengths` (the canonical order of the module docstring), so
    the answer is kept by that multiset and the other arguments: a plan bounds and simulates the
    same draws on many layouts (`FACTORS_KEPT` answers, then the memory starts over).
    """
    n = len(lengths)
    if dp <= 1 or n == 0:
        return RankFactors(1.0, 1.0)
    arr = -np.sort(-np.asarray(lengths, dtype=float))  # longest first
    key = (arr.tobytes(), dp, minibatches, policy, work_linear, work_quadratic, world)
    out = _factors_kept.get(key)
    if out is None:
        if len(_factors_kept) >= FACTORS_KEPT:
            _factors_kept.clear()
        out = _slowest_rank_factors(arr, dp, minibatches, policy, work_linear, work_quadratic, world)
        _factors_kept[key] = out
    return out


FACTORS_KEPT = 1024
_factors_kept: dict[tuple, RankFactors] = {}


def _slowest_rank_factors(
    arr: np.ndarray,
    dp: int,
    minibatches: int,
    policy: RankAssignment,
    work_linear: float,
    work_quadratic: float,
    world: int | None,
) -> RankFactors:
    """`slowest_rank_factors` of lengths `arr`, longest first (floats), over dp > 1 ranks."""
    n = len(arr)
    work = work_linear * arr + work_quadratic * arr * arr
    total = float(work.sum())
    if total <= 0.0:
        return RankFactors(1.0, 1.0)
    if n < dp:  # fewer sequences than ranks: the longest alone on a rank
        return RankFactors(float(work[0]) * dp / total, float(work[0]) * dp / total)
    positions, sizes = canonical_layout(n, dp, world or dp, policy)
    # each rank's chunk cut into `minibatches` in order, as np.array_split cuts it
    mb = max(1, minibatches)
    q, rem = np.divmod(sizes, mb)
    m = np.arange(mb)
    starts = (np.cumsum(sizes) - sizes)[:, None] + m[None, :] * q[:, None] + np.minimum(m[None, :], rem[:, None])
    counts = q[:, None] + (m[None, :] < rem[:, None])
    # per draw: the work in run order and a zero after it, summed segment by segment
    draws = positions.shape[0]
    runs = np.zeros((draws, n + 1))
    runs[:, :n] = work[positions]
    offsets = (np.arange(draws) * (n + 1))[:, None] + starts.ravel()[None, :]
    grid = np.add.reduceat(runs.ravel(), offsets.ravel()).reshape(draws, dp, mb)
    grid[:, counts == 0] = 0.0  # reduceat gives an empty segment its next element
    logprob = float(grid.sum(axis=2).max(axis=1).mean() * dp / total)
    update = float(grid.max(axis=1).sum(axis=1).mean() * dp / total)
    return RankFactors(logprob=max(1.0, logprob), update=max(1.0, update))
