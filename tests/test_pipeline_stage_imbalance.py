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
    sync = 4 * train_step._megatron_dp_sync_s(H20, pp2, Q7.total_params * footprint.BF16_BYTES)
    assert got.train_s == pytest.approx(compute * factor + sync)  # no TP link given: no activation traffic
