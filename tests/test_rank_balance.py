"""The slowest data-parallel rank: its factors by hand, their independence from the order of the
lengths, their agreement with verl's own Karmarkar-Karp (tests/verl_karmarkar_karp.py) on batches
in a random order, and their effect on a training pool at a fixed global batch
(rlsim/models/rank_balance.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rlsim.calibration.profile import LinkFit, datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, train_step
from rlsim.models.rank_balance import RankAssignment, RankFactors, canonical_layout, slowest_rank_factors
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.costs import Costs
from tests.verl_karmarkar_karp import factors_of_chunks, karmarkar_karp, verl_rank_chunks

H100 = datasheet_profile("h100-sxm")
Q7 = get_llm("qwen2.5-7b")
KW = dict(reference_model=False, recompute_old_logprobs=True, critic=False)
BAL, CON = RankAssignment.balanced, RankAssignment.contiguous


def test_the_reference_karmarkar_karp_by_hand() -> None:
    # sorted pairs (1,2) (3,4) (5,100): spreads 1, 1, 95. The widest state merges first with the
    # spread-1 state whose largest part is larger (3,4): {100,3} {5,4}; then with (1,2): the
    # largest part takes the smallest, {100,3,1} {5,4,2}
    assert karmarkar_karp([1, 2, 3, 4, 5, 100], 2, equal_size=True) == [[0, 2, 5], [1, 3, 4]]
    # unequal sizes: 100 alone against the rest
    assert sorted(karmarkar_karp([1, 2, 3, 4, 5, 100], 2, equal_size=False)) == [[0, 1, 2, 3, 4], [5]]
    with pytest.raises(ValueError, match="equal parts"):
        karmarkar_karp([1, 2, 3], 2, equal_size=True)


def test_balanced_factors_by_hand() -> None:
    # the snake over 2 parts, longest first: 50 -> 0, 30 -> 1, then reversed: 10 -> 1, 10 -> 0
    f = slowest_rank_factors([10, 10, 30, 50], 2, 1, BAL, work_linear=1.0, work_quadratic=0.0)
    assert f.logprob == pytest.approx(60 / 50) and f.update == pytest.approx(60 / 50)
    # the work is quadratic too: 2500 + 100 against a mean of (100 + 100 + 900 + 2500) / 2
    f = slowest_rank_factors([10, 10, 30, 50], 2, 1, BAL, work_linear=0.0, work_quadratic=1.0)
    assert f.logprob == pytest.approx(2600 / 1800)
    # a step that does not split evenly: 5, 4 | then 3 -> 1, 2 -> 0 | then 1 -> 0: {5, 2, 1} {4, 3}
    f = slowest_rank_factors([3, 1, 5, 2, 4], 2, 1, BAL, work_linear=1.0, work_quadratic=0.0)
    assert f.logprob == pytest.approx(8 / 7.5)


def test_balanced_tokens_still_leave_attention_unbalanced() -> None:
    # {4, 2} and {3, 3}: 6 tokens each, but 16 + 4 against 9 + 9 squared
    assert slowest_rank_factors([3, 3, 2, 4], 2, 1, BAL, 1.0, 0.0).logprob == pytest.approx(1.0)
    assert slowest_rank_factors([3, 3, 2, 4], 2, 1, BAL, 0.0, 1.0).logprob == pytest.approx(20 / 19)


def test_a_rank_takes_world_over_dp_consecutive_parts() -> None:
    """verl balances over every GPU; with Ulysses or model parallelism a rank takes several parts."""
    lengths = [8, 7, 6, 5, 4, 3, 2, 1]
    # 4 parts: {8, 1} {7, 2} {6, 3} {5, 4}; rank 0 takes the first two: 64 + 1 + 49 + 4 squared
    f = slowest_rank_factors(lengths, 2, 1, BAL, 0.0, 1.0, world=4)
    assert f.logprob == pytest.approx(118 / 102)
    # 2 parts, one per rank: {8, 5, 4, 1} {7, 6, 3, 2}: 106 against 98
    f = slowest_rank_factors(lengths, 2, 1, BAL, 0.0, 1.0, world=2)
    assert f.logprob == pytest.approx(106 / 102)
    positions, sizes = canonical_layout(8, 2, 4, BAL)
    assert sizes.tolist() == [4, 4]
    for draw in positions:  # longest-first positions: parts {0, 7} {1, 6} on rank 0, in some order
        assert sorted(draw[:2]) == [0, 7] and sorted(draw[2:4]) == [1, 6]


@pytest.mark.parametrize("policy", [BAL, CON])
def test_one_sequence_per_rank_is_the_longest_over_the_mean(policy: RankAssignment) -> None:
    lengths = [100, 400, 300, 200]
    f = slowest_rank_factors(lengths, 4, 2, policy, 1.0, 0.0)
    assert f.logprob == pytest.approx(400 / 250) and f.update == pytest.approx(400 / 250)
    f = slowest_rank_factors(lengths[:3], 4, 2, policy, 1.0, 0.0)  # fewer sequences than ranks
    assert f.logprob == pytest.approx(400 / (800 / 4))


def _long_tail(n: int, seed: int, heavy: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    prompts = rng.integers(100, 1000, n)
    if heavy:
        return prompts + np.minimum(rng.lognormal(7.0, 0.9, n).astype(int), 16384)
    return prompts + np.minimum(rng.exponential(3000.0, n).astype(int), 8192)


@pytest.mark.parametrize("policy", [BAL, CON])
def test_the_factors_read_the_lengths_not_their_order(policy: RankAssignment) -> None:
    lengths = _long_tail(1024, 3, heavy=True)
    base = slowest_rank_factors(lengths.tolist(), 16, 8, policy, 1.0, 1e-4)
    assert base.update > 1.2  # a long tail over 16 ranks: the term is not idle here
    rng = np.random.default_rng(7)
    for _ in range(3):
        assert slowest_rank_factors(rng.permutation(lengths).tolist(), 16, 8, policy, 1.0, 1e-4) == base
    # no state: the same factors after the cached layouts are dropped, the global RNG untouched
    state = np.random.get_state()[1].copy()
    canonical_layout.cache_clear()
    assert slowest_rank_factors(lengths.tolist(), 16, 8, policy, 1.0, 1e-4) == base
    assert (np.random.get_state()[1] == state).all()


# the shapes of the suite's rows: thousands of sequences over 32-128 GPUs, 16 minibatches
SHAPES = [(8192, 32, 32, 16), (8192, 64, 64, 16), (8192, 128, 128, 16), (8192, 32, 64, 16), (1024, 8, 8, 4)]


@pytest.mark.parametrize("heavy", [True, False])
@pytest.mark.parametrize(("n", "dp", "world", "minibatches"), SHAPES)
def test_the_fast_factors_are_verls_karmarkar_karp_in_a_random_order(
    n: int, dp: int, world: int, minibatches: int, heavy: bool
) -> None:
    """verl's own partition (tests/verl_karmarkar_karp.py) of the same lengths in 6 random orders:
    the canonical order's factors are within 5% of their mean (one order's update spreads by
    2-4% around it). The contiguous chunks of the shuffled lengths agree within 8%: the largest of
    128 chunks of a heavy tail spreads by 6% from one order to the next."""
    lengths = _long_tail(n, n + dp + world, heavy)
    lin, quad = footprint.forward_flops(Q7, 1.0), footprint.forward_flops(Q7, 0.0, 1.0)
    rng = np.random.default_rng(11)
    kk, chunks = [], []
    for _ in range(6):
        order = rng.permutation(lengths)
        work = lin * order + quad * order.astype(float) ** 2
        kk.append(factors_of_chunks(work, verl_rank_chunks(order.tolist(), dp, world), minibatches))
        chunks.append(factors_of_chunks(work, np.array_split(np.arange(n), dp), minibatches))
    bal = slowest_rank_factors(lengths.tolist(), dp, minibatches, BAL, lin, quad, world)
    con = slowest_rank_factors(lengths.tolist(), dp, minibatches, CON, lin, quad, world)
    kk_lp, kk_up = np.mean(kk, axis=0)
    con_lp, con_up = np.mean(chunks, axis=0)
    assert bal.logprob == pytest.approx(kk_lp, rel=0.05) and bal.update == pytest.approx(kk_up, rel=0.05)
    assert con.logprob == pytest.approx(con_lp, rel=0.08) and con.update == pytest.approx(con_up, rel=0.08)
    assert kk_up > 1.1  # a real wait: the minibatch barrier over a long tail


@pytest.mark.parametrize("policy", [BAL, CON])
@pytest.mark.parametrize(("dp", "minibatches"), [(2, 1), (4, 2), (8, 4), (16, 16)])
def test_equal_lengths_run_at_the_mean(policy: RankAssignment, dp: int, minibatches: int) -> None:
    f = slowest_rank_factors([1500] * 256, dp, minibatches, policy, 2.0, 1.0, world=dp)
    assert f.logprob == pytest.approx(1.0) and f.update == pytest.approx(1.0)


def test_the_factor_is_one_rank_or_more() -> None:
    lengths = [8000, 300, 450, 900, 120, 2000, 640, 75, 30, 4000, 220, 510] * 2
    assert slowest_rank_factors(lengths, 1, 4, BAL, 1.0, 1.0) == RankFactors(1.0, 1.0)  # one rank: no wait
    for policy in (BAL, CON):
        f = slowest_rank_factors(lengths, 4, 2, policy, 1.0, 1e-3)
        assert 1.0 <= f.logprob < f.update  # a minibatch barrier can only add to the chunk's


def _shape(gpus: int, policy: RankAssignment = BAL) -> train_step.TrainShape:
    return train_step.TrainShape(
        gpus=gpus,
        tp=1,
        pp=1,
        micro_batch_tokens=65536,
        activation_recompute=True,
        minibatches=4,
        trainable_params=Q7.total_params,
        shard_link=LinkFit(busbw_gbps=1e9, latency_s=0.0),  # no traffic cost: compute alone
        rank_assignment=policy,
    )


def test_train_phases_charge_the_slowest_ranks_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = [4096, 512, 256, 1024, 128, 3000, 700, 64] * 8
    bal = train_step.train_phases(Q7, H100, _shape(8), lengths, **KW)
    con = train_step.train_phases(Q7, H100, _shape(8, CON), lengths, **KW)
    lin, quad = footprint.forward_flops(Q7, 1.0), footprint.forward_flops(Q7, 0.0, 1.0)
    fb = slowest_rank_factors(lengths, 8, 4, BAL, lin, quad, world=8)
    fc = slowest_rank_factors(lengths, 8, 4, CON, lin, quad, world=8)
    # the same tokens per rank on average (the same MFU): the phases scale with the factors
    assert con.logprob_s / bal.logprob_s == pytest.approx(fc.logprob / fb.logprob, rel=1e-9)
    assert con.train_s / bal.train_s == pytest.approx(fc.update / fb.update, rel=1e-9)
    assert con.optimizer_s == bal.optimizer_s  # not a rank's compute
    monkeypatch.setattr(train_step.rank_balance, "slowest_rank_factors", lambda *a, **k: RankFactors(1.0, 1.0))
    mean = train_step.train_phases(Q7, H100, _shape(8), lengths, **KW)  # every rank at the mean
    assert bal.logprob_s / mean.logprob_s == pytest.approx(fb.logprob, rel=1e-9)
    assert bal.train_s / mean.train_s == pytest.approx(fb.update, rel=1e-9)


def test_halving_a_pool_with_a_long_tail_less_than_doubles_training() -> None:
    """At a fixed global batch, 16 ranks of 8 sequences each cannot spread eight long ones."""
    lengths = ([8192] + [512] * 15) * 8  # one long response per group of 16
    f16 = slowest_rank_factors(lengths, 16, 4, BAL, 1.0, 0.0)
    f8 = slowest_rank_factors(lengths, 8, 4, BAL, 1.0, 0.0)
    assert f16.logprob > 1.4 and f8.logprob == pytest.approx(1.0)  # 8 ranks: one long one each
    equal = [sum(lengths) // len(lengths)] * len(lengths)
    tail = {g: train_step.train_phases(Q7, H100, _shape(g), lengths, **KW) for g in (8, 16)}
    flat = {g: train_step.train_phases(Q7, H100, _shape(g), equal, **KW) for g in (8, 16)}
    assert tail[8].train_s < 2 * tail[16].train_s
    assert tail[8].logprob_s < 2 * tail[16].logprob_s
    # less than the same tokens in equal lengths would say (whose halving is MFU's alone)
    assert tail[8].train_s / tail[16].train_s < flat[8].train_s / flat[16].train_s
    assert tail[8].logprob_s / tail[16].logprob_s < 0.8 * flat[8].logprob_s / flat[16].logprob_s


def test_balance_batch_reaches_the_training_shape() -> None:
    on = Costs(resolve(load_scenario("default", ["steps=2"])))
    off = Costs(resolve(load_scenario("default", ["steps=2", "pipeline.training.balance_batch=false"])))
    assert on.train_shape.rank_assignment is BAL and off.train_shape.rank_assignment is CON


def test_factors_are_kept_by_the_multiset_of_lengths():
    """The kept answer is the computed one, for any order of the same lengths, and another
    layout (ranks, minibatches) is computed anew, not answered from the memory."""
    from rlsim.models import rank_balance

    lengths = [900, 30, 4000, 250, 250, 1200, 70, 3100]
    rank_balance._factors_kept.clear()
    fresh = rank_balance._slowest_rank_factors(-np.sort(-np.asarray(lengths, dtype=float)), 4, 2, BAL, 1.0, 0.5, None)
    assert slowest_rank_factors(lengths, 4, 2, BAL, 1.0, 0.5) == fresh
    assert len(rank_balance._factors_kept) == 1
    assert slowest_rank_factors(lengths[::-1], 4, 2, BAL, 1.0, 0.5) == fresh  # the same multiset: kept
    assert len(rank_balance._factors_kept) == 1
    other = slowest_rank_factors(lengths, 2, 2, BAL, 1.0, 0.5)
    assert len(rank_balance._factors_kept) == 2 and other != fresh
