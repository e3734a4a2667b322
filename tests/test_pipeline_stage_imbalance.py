"""The pipeline runs at its slowest stage's pace: Megatron-Core's even layer split leaves the
output layer on the last stage, pinned by hand for Qwen2.5-7B at PP2 (the verl one-step-off
Megatron rows' layout)."""

from __future__ import annotations

import pytest

from rlsim.calibration.profile import datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, train_step

Q7 = get_llm("qwen2.5-7b")  # 28 layers, hidden 3584, vocab 152,064, untied output layer
H20 = datasheet_profile("h20")
KW = dict(reference_model=False, recompute_old_logprobs=True, critic=False)


def shape(**kw) -> train_step.TrainShape:
    base = dict(
        gpus=16,
        tp=2,
        pp=2,
        micro_batch_tokens=1500,
        activation_recompute=False,
        minibatches=4,
        trainable_params=Q7.total_params,
        megatron_ddp=True,
    )
    return train_step.TrainShape(**(base | kw))


def test_the_last_stage_carries_the_output_layer_of_a_7b_model() -> None:
    tokens = 1000.0
    fwd = footprint.forward_flops(Q7, tokens)  # 2 x (7.616e9 less the 0.545e9 lookup table) per token
    head = 2 * 152_064 * 3584 * tokens  # 1.090 GFLOP per token
    layers = 2 * 7.616e9 * tokens - 2 * head  # less the (untied) embedding and output matrices: 13.05 GFLOP
    # stage 1: 14 layers; stage 2: 14 layers + the output layer; the pipeline moves at stage 2's pace
    expected = (layers / 2 + head) / ((layers + head) / 2)
    assert train_step.pp_stage_imbalance(Q7, 2, fwd, tokens) == pytest.approx(expected)
    assert expected == pytest.approx(1.0771, abs=1e-4)
    assert train_step.pp_stage_imbalance(Q7, 1, fwd, tokens) == 1.0
    # four stages: the same output layer over a quarter of the layers
    assert train_step.pp_stage_imbalance(Q7, 4, fwd, tokens) == pytest.approx(
        (layers / 4 + head) / ((layers + head) / 4)
    )


def test_a_tied_output_layer_is_counted_once() -> None:
    small = get_llm("qwen2.5-0.5b")
    assert small.tie_word_embeddings
    tokens = 100.0
    fwd = footprint.forward_flops(small, tokens)
    head = 2 * small.vocab_size * small.hidden_size * tokens
    layers = fwd - head  # the one matrix is the output layer; the lookup costs no FLOPs
    assert train_step.pp_stage_imbalance(small, 2, fwd, tokens) == pytest.approx(
        2 * (layers / 2 + head) / (layers + head)
    )


def test_full_recompute_reruns_the_decoder_but_not_the_output_layer() -> None:
    tokens = 1000.0
    fwd = footprint.forward_flops(Q7, tokens)
    head = 2 * 152_064 * 3584 * tokens
    layers = fwd - head  # forward_flops leaves the lookup out; the output layer is the one vocab matrix
    # training: layers forward + backward (3) + recompute (1); the output layer 3 only
    expected = 2 * (4 * layers / 2 + 3 * head) / (4 * layers + 3 * head)
    assert train_step.pp_stage_imbalance(Q7, 2, fwd, tokens, 4.0, 3.0) == pytest.approx(expected)
    assert expected < train_step.pp_stage_imbalance(Q7, 2, fwd, tokens)


def test_log_prob_and_update_of_a_pp2_pool_take_the_last_stage_pace() -> None:
    seqs = [750] * 1024
    pp2 = shape()
    got = train_step.train_phases(Q7, H20, pp2, seqs, **KW)
    tokens = 750.0 * 1024
    fwd = footprint.forward_flops(Q7, tokens, 1024 * 750.0**2)
    per_rank = tokens / pp2.dp  # dp = 16 / (2 x 2) = 4
    factor = train_step.pp_stage_imbalance(Q7, 2, fwd, tokens)
    assert factor > 1.07  # the attention term dilutes the output layer a little
    assert got.logprob_s == pytest.approx(train_step._compute_s(fwd, H20, pp2, per_rank) * factor)
    per_mb = per_rank / pp2.minibatches
    compute = 4 * 3.0 * train_step._compute_s(fwd / 4, H20, pp2, per_mb)
    sync = 4 * train_step._megatron_dp_sync_s(Q7, H20, pp2, Q7.total_params * footprint.BF16_BYTES)
    assert got.train_s == pytest.approx(compute * factor + sync)  # no TP link given: no activation traffic


def test_a_shorter_last_stage_makes_room_for_the_output_layer() -> None:
    """DeepSeek-V3 at PP16 as NeMo RL v0.4 splits it: 3 layers first, 14 x 4 in the middle, 2 last."""
    ds = get_llm("deepseek-v3")  # 61 layers: an even split is 3.81 a stage, and Megatron-Core refuses it
    tokens = 1000.0
    fwd = footprint.forward_flops(ds, tokens)
    head = 2 * ds.vocab_size * ds.hidden_size * tokens
    layer = (fwd - head) / 61
    total = 61 * layer + head
    even = train_step.pp_stage_imbalance(ds, 16, fwd, tokens)
    assert even == pytest.approx(16 * (61 / 16 * layer + head) / total)
    uneven = train_step.pp_stage_imbalance(ds, 16, fwd, tokens, first_layers=3, last_layers=2)
    # the slowest stage is now a middle one of 4 layers (the last: 2 layers + the output layer, 1.5 layers' work)
    assert 2 * layer + head < 4 * layer
    assert uneven == pytest.approx(16 * 4 * layer / total)
    assert 1.0 < uneven < even
    # only a first stage set apart: the other 15 share 58 layers, the last one also the output layer
    first_only = train_step.pp_stage_imbalance(ds, 16, fwd, tokens, first_layers=1)
    assert first_only == pytest.approx(16 * (60 / 15 * layer + head) / total)


def test_stage_layers_reach_the_trainer_and_bad_splits_name_the_field() -> None:
    from rlsim.errors import ScenarioError
    from rlsim.placement import resolve
    from rlsim.scenario import load_scenario
    from rlsim.simulator.costs import Costs

    base = ["pipeline.mode=sync", "pipeline.training.data_parallel=megatron", "pipeline.training.pp=2"]
    even = Costs(resolve(load_scenario("default", base)))
    split = Costs(resolve(load_scenario("default", [*base, "pipeline.training.last_stage_layers=13"])))
    assert split.train_shape.last_stage_layers == 13 and even.train_shape.last_stage_layers is None
    seqs = [2048] * 256
    # recompute on: a layer is 4 forwards' work, the output layer (2.3 layers) 3; 15 x 4 against 13 x 4 + 7
    # balances better than 14 x 4 against 14 x 4 + 7
    assert split.train_phases(seqs).train_s < even.train_phases(seqs).train_s
    with pytest.raises(ScenarioError, match="pipeline.training.first_stage_layers"):
        # pp 4 with a first stage of 5: the other three stages cannot share 23 layers evenly
        resolve(load_scenario("default", [*base, "pipeline.training.pp=4", "pipeline.training.first_stage_layers=5"]))
    with pytest.raises(ValueError, match="needs pp >= 2"):
        load_scenario("default", ["pipeline.training.first_stage_layers=4"])
