"""The slowest data-parallel rank: verl's balanced partition by hand, the factors it gives, and
their effect on a training pool at a fixed global batch (rlsim/models/rank_balance.py)."""

from __future__ import annotations

import pytest

from rlsim.calibration.profile import LinkFit, datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, train_step
from rlsim.models.rank_balance import RankAssignment, RankFactors, karmarkar_karp, rank_chunks, slowest_rank_factors
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.costs import Costs

H100 = datasheet_profile("h100-sxm")
Q7 = get_llm("qwen2.5-7b")
KW = dict(reference_model=False, recompute_old_logprobs=True, critic=False)
BAL, CON = RankAssignment.balanced, RankAssignment.contiguous


def test_karmarkar_karp_by_hand() -> None:
    # sorted pairs (1,2) (3,4) (5,100): spreads 1, 1, 95. The widest state merges first with the
    # spread-1 state whose largest part is larger (3,4): {100,3} {5,4}; then with (1,2): the
    # largest part takes the smallest, {100,3,1} {5,4,2}
    assert karmarkar_karp([1, 2, 3, 4, 5, 100], 2, equal_size=True) == [[0, 2, 5], [1, 3, 4]]
    # unequal sizes: 100 alone against the rest
    assert sorted(karmarkar_karp([1, 2, 3, 4, 5, 100], 2, equal_size=False)) == [[0, 1, 2, 3, 4], [5]]
    with pytest.raises(ValueError, match="equal parts"):
        karmarkar_karp([1, 2, 3], 2, equal_size=True)


def test_contiguous_factors_by_hand() -> None:
    # two ranks: [50, 10] and [10, 30]; tokens 60 and 40 against a mean of 50
    f = slowest_rank_factors([50, 10, 10, 30], 2, 1, CON, work_linear=1.0, work_quadratic=0.0)
    assert f.logprob == pytest.approx(60 / 50) and f.update == pytest.approx(60 / 50)
    # two minibatches: [50] | [10] on rank 0, [10] | [30] on rank 1; the slowest of each, 50 + 30
    f = slowest_rank_factors([50, 10, 10, 30], 2, 2, CON, work_linear=1.0, work_quadratic=0.0)
    assert f.logprob == pytest.approx(60 / 50) and f.update == pytest.approx(80 / 50)


def test_balanced_factors_by_hand() -> None:
    # Karmarkar-Karp over 2 GPUs: {10, 50} and {10, 30}, in batch order on each rank
    assert [c.tolist() for c in rank_chunks([10, 10, 30, 50], 2, 2, BAL)] == [[0, 3], [1, 2]]
    f = slowest_rank_factors([10, 10, 30, 50], 2, 2, BAL, work_linear=1.0, work_quadratic=0.0)
    assert f.logprob == pytest.approx(60 / 50)
    assert f.update == pytest.approx((10 + 50) / 50)  # minibatch 1: 10 vs 10; minibatch 2: 50 vs 30
    # the work is quadratic too: 100 + 2500 against a mean of (100 + 100 + 900 + 2500) / 2
    f = slowest_rank_factors([10, 10, 30, 50], 2, 1, BAL, work_linear=0.0, work_quadratic=1.0)
    assert f.logprob == pytest.approx(2600 / 1800)


def test_balanced_tokens_still_leave_attention_unbalanced() -> None:
    # {2, 4} and {3, 3}: 6 tokens each, but 4 + 16 against 9 + 9 squared
    assert [c.tolist() for c in rank_chunks([3, 3, 2, 4], 2, 2, BAL)] == [[2, 3], [0, 1]]
    assert slowest_rank_factors([3, 3, 2, 4], 2, 1, BAL, 1.0, 0.0).logprob == pytest.approx(1.0)
    assert slowest_rank_factors([3, 3, 2, 4], 2, 1, BAL, 0.0, 1.0).logprob == pytest.approx(20 / 19)


def test_a_rank_takes_world_over_dp_consecutive_parts() -> None:
    """verl balances over every GPU; with Ulysses or model parallelism a rank takes several parts."""
    lengths = [7, 1, 30, 2, 9, 4, 4, 12]
    parts = karmarkar_karp(lengths, 4, equal_size=True)
    chunks = rank_chunks(lengths, 2, 4, BAL)
    assert [c.tolist() for c in chunks] == [parts[0] + parts[1], parts[2] + parts[3]]


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


def test_train_phases_charge_the_slowest_ranks_compute() -> None:
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
    mean = train_step.train_phases(Q7, H100, _shape(8), lengths, **KW, slowest_rank=False)  # the planner's bound
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
