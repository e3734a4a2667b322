"""cuDNN fused-attention graph builds for new padded shapes (training.attention_graph_build_s):
expected distinct padded lengths over the run, pinned by hand, and where the simulator charges them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from rlsim.models import graph_build as gb
from rlsim.placement import resolve
from rlsim.scenario import ConstantLengths, HistogramLengths, LognormalLengths, load_scenario
from rlsim.simulator.costs import Costs
from rlsim.workload import length_pmf


def _two_lengths() -> np.ndarray:
    """A sample is 8 tokens long with probability 1/4 and 16 with 3/4."""
    pmf = np.zeros(17)
    pmf[8], pmf[16] = 0.25, 0.75
    return pmf


def test_two_padded_lengths_match_the_closed_form() -> None:
    # 2 calls a step over 3 steps: 6 draws; each length is seen unless all 6 miss it
    shapes = gb.new_shapes_per_step(_two_lengths(), 8, gb.ShapePass(2, 1, 1), run_steps=3)
    assert shapes == pytest.approx(((1 - 0.75**6) + (1 - 0.25**6)) / 3, rel=1e-12)
    # seconds: that count x graphs per shape x seconds per graph
    build = gb.build_s_per_step(_two_lengths(), 8, gb.ShapePass(2, 1, 2), 3, 1.5)
    assert build == pytest.approx(shapes * 2 * 1.5, rel=1e-12)


def test_doubling_the_run_lowers_the_charge_per_step() -> None:
    per = [gb.new_shapes_per_step(_two_lengths(), 8, gb.ShapePass(2, 1, 1), n) for n in (10, 20)]
    assert per[0] == pytest.approx((2 - 0.75**20 - 0.25**20) / 10, rel=1e-12)
    assert per[1] == pytest.approx((2 - 0.75**40 - 0.25**40) / 20, rel=1e-12)
    assert per[1] < per[0]


def test_one_padded_length_is_one_graph_over_the_whole_run() -> None:
    # lengths 1..8 all pad to 8 tokens: one shape, built once whatever the run's length
    pmf = np.zeros(9)
    pmf[1:] = 1 / 8
    for run_steps in (1, 7, 150):
        assert gb.new_shapes_per_step(pmf, 8, gb.ShapePass(128, 1, 1), run_steps) == pytest.approx(1 / run_steps)
        assert gb.build_s_per_step(pmf, 8, gb.ShapePass(128, 1, 2), run_steps, 1.0) == pytest.approx(2 / run_steps)


def test_no_seconds_no_charge() -> None:
    assert gb.build_s_per_step(_two_lengths(), 8, gb.ShapePass(2, 1, 2), 3, 0.0) == 0.0


def test_a_call_is_padded_to_its_longest_sample() -> None:
    # the longest of 2 samples is 16 tokens unless both are 8: 1 - 1/16
    pmf = gb.padded_pmf(_two_lengths(), 8, samples_per_shape=2)
    assert pmf[1] == pytest.approx(0.25**2) and pmf[2] == pytest.approx(1 - 0.25**2)
    # one sample per shape: the lengths themselves, in buckets of 8
    assert gb.padded_pmf(_two_lengths(), 8)[1:].tolist() == pytest.approx([0.25, 0.75])


def test_alignment_is_verls_bshd_padding() -> None:
    # verl's preprocess_bshd_engine: tp x cp x 2 with context parallelism, tp without
    assert gb.bshd_alignment(2, 2) == 8
    assert gb.bshd_alignment(2, 1) == 2
    assert gb.bshd_alignment(4, 1) == 4


def test_graphs_a_new_length_builds() -> None:
    # TE's causal CP ring: the diagonal plus one triangle a rank at cp 2, both triangles on a middle rank
    assert [gb.cp_sections(cp) for cp in (1, 2, 4, 8)] == [1, 2, 3, 3]
    assert gb.forward_graphs(1) == 1 and gb.forward_graphs(2) == 2
    # training: forward and backward, plus the forward recomputed on the backward's thread
    assert gb.training_graphs(1, activation_recompute=False) == 2
    assert gb.training_graphs(1, activation_recompute=True) == 3
    assert gb.training_graphs(2, activation_recompute=True) == 6


def test_length_tables_are_the_drawn_distributions() -> None:
    assert length_pmf(ConstantLengths(value=5)).tolist() == [0, 0, 0, 0, 0, 1]
    # a histogram bin's integers are equally likely (floor of a uniform draw in [low, high))
    assert length_pmf(HistogramLengths(bins=[(1, 5, 1.0)], max=10))[1:5].tolist() == pytest.approx([0.25] * 4)
    # the lognormal: rounded and clipped as drawn; the share above max sits at max
    dist = LognormalLengths(mean=1000, sigma=1.0, max=2000, clip_fraction=0.1)
    pmf = length_pmf(dist)
    assert pmf.sum() == pytest.approx(1.0, rel=1e-12)
    above = 1 - 0.5 * (1 + math.erf((math.log(1999.5) - (math.log(1000) - 0.5)) / math.sqrt(2)))
    assert pmf[2000] == pytest.approx(0.9 * above + 0.1, rel=1e-9)


# a small Megatron trainer: 8 GPUs at TP 2 (4 data-parallel ranks), 16 prompts x 4 = 64 samples a
# step (16 a rank), 2 minibatches; every sample 100 + 400 tokens: one padded length (500, TP 2)
SMALL = [
    "cluster.nodes=2",
    "pipeline.mode=async",
    "pipeline.inference.gpus=8",
    "pipeline.training.gpus=8",
    "pipeline.training.tp=2",
    "algorithm.prompts_per_step=16",
    "algorithm.group_size=4",
    "algorithm.minibatches=2",
    "workload.prompt_tokens.mean=100",
    "workload.prompt_tokens.sigma=0",
    "workload.response_tokens.mean=400",
    "workload.response_tokens.sigma=0",
]


def _costs(*extra: str) -> Costs:
    return Costs(resolve(load_scenario("default", [*SMALL, *extra])))


def test_one_shape_is_built_once_per_pass_over_the_run() -> None:
    on = _costs("run_steps=10", "pipeline.training.attention_graph_build_s=2")
    # old log-prob pass: 1 shape x 1 graph x 2 s over 10 steps; update: 1 shape x 3 graphs (forward,
    # backward, and the recomputed forward on the backward's thread) x 2 s
    assert on.graph_build_s == pytest.approx((0.2, 0.6), rel=1e-12)
    off = _costs("run_steps=10")
    assert off.graph_build_s == (0.0, 0.0)
    lengths = [500] * 64
    a, b = on.train_phases(lengths), off.train_phases(lengths)
    assert a.logprob_s == pytest.approx(b.logprob_s + 0.2, rel=1e-12)
    assert a.train_s == pytest.approx(b.train_s + 0.6, rel=1e-12)
    assert a.optimizer_s == b.optimizer_s


def test_without_a_log_prob_pass_only_the_update_builds() -> None:
    on = _costs("run_steps=10", "pipeline.training.attention_graph_build_s=2", "algorithm.recompute_old_logprobs=false")
    assert on.graph_build_s == pytest.approx((0.0, 0.6), rel=1e-12)
    # without activation recompute the update builds a forward and a backward graph
    on = _costs(
        "run_steps=10", "pipeline.training.attention_graph_build_s=2", "pipeline.training.activation_recompute=false"
    )
    assert on.graph_build_s == pytest.approx((0.2, 0.4), rel=1e-12)


def test_what_sets_a_shape_decides_the_draws(monkeypatch) -> None:
    seen: list[gb.ShapePass] = []

    def record(pmf, align, shape_pass, run_steps, graph_build_s):
        seen.append(shape_pass)
        return 0.0

    monkeypatch.setattr(gb, "build_s_per_step", record)
    on = ["run_steps=10", "pipeline.training.attention_graph_build_s=1"]
    _costs(*on)  # calls: the rank's 16 samples in one log-prob call, 2 minibatch calls of 8 in the update
    assert seen == [gb.ShapePass(1, 16, 1), gb.ShapePass(2, 8, 3)]
    seen.clear()
    _costs(*on, "pipeline.training.stream_minibatches=true")  # a log-prob call per minibatch
    assert seen == [gb.ShapePass(2, 8, 1), gb.ShapePass(2, 8, 3)]
    seen.clear()
    _costs(*on, "pipeline.training.attention_shape_from=sample")  # every sample its own shape
    assert seen == [gb.ShapePass(16, 1, 1), gb.ShapePass(16, 1, 3)]
    seen.clear()
    _costs(*on, "pipeline.training.cp=2")  # 2 data-parallel ranks of 32 samples; 2 ring sections a length
    assert seen == [gb.ShapePass(1, 32, 2), gb.ShapePass(2, 16, 6)]


def test_the_charge_needs_the_run_length() -> None:
    with pytest.raises(ValidationError, match="attention_graph_build_s: set run_steps"):
        load_scenario("default", [*SMALL, "run_steps=null", "pipeline.training.attention_graph_build_s=1"])
