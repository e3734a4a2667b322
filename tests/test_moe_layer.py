"""A MoE layer's routed experts in training, pinned by hand: grouped GEMMs at the rows each
expert gets (slower than the dense layers' GEMMs, less so as the rows grow) and the token
permutations around them; a dense model is untouched."""

from __future__ import annotations

import pytest

from rlsim.calibration.profile import datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, moe_layer, train_step
from rlsim.models.decode import iteration_cost

H100 = datasheet_profile("h100-sxm")
MOE = get_llm("qwen3-30b-a3b")  # 128 experts, top-8, 48 MoE layers
# a dense model of the same active size: the same attention, embeddings and FLOPs per token
DENSE = MOE.model_copy(update={"moe": None, "total_params": MOE.active_params})
KW = dict(reference_model=False, recompute_old_logprobs=True, critic=False)


def _shape(llm, micro_batch_tokens: int = 8192, **kw) -> train_step.TrainShape:
    base = dict(
        gpus=1,
        tp=1,
        pp=1,
        micro_batch_tokens=micro_batch_tokens,
        activation_recompute=False,
        minibatches=1,
        trainable_params=llm.total_params,
    )
    return train_step.TrainShape(**{**base, **kw})


def _g(rows: float) -> float:
    return rows / (rows + H100.matmul_tokens_half)


def test_a_moe_model_trains_slower_than_a_dense_model_of_its_active_size_by_the_formulas_factor() -> None:
    lengths = [1024] * 16  # 16,384 tokens: two micro-batches of 8,192 on one GPU
    tokens = float(sum(lengths))
    assert footprint.forward_flops(MOE, tokens) == footprint.forward_flops(DENSE, tokens)
    moe = train_step.train_phases(MOE, H100, _shape(MOE), lengths, **KW)
    dense = train_step.train_phases(DENSE, H100, _shape(DENSE), lengths, **KW)

    # by hand: each expert gets 8,192 x 8 / 128 = 512 rows against the dense GEMMs' 8,192
    slowdown = _g(8192) / _g(512)
    assert slowdown == pytest.approx(1.17, abs=0.01)
    routed = 2.0 * 48 * 8 * (3 * 2048 * 768) * tokens  # forward FLOPs of the routed experts
    fwd = footprint.forward_flops(DENSE, tokens, float(sum(n * n for n in lengths)))
    compute_factor = 1.0 + routed * (slowdown - 1.0) / fwd
    # four permutations per layer (128 local experts: the sort and unsort run), each reading and
    # writing 16,384 x 8 bf16 hidden states, in 48 layers; forward and backward
    permute_pass = 48 * 4 * 2 * (tokens * 8) * 2048 * 2 / (H100.memory_gbps * 1e9)
    assert moe.train_s == pytest.approx(dense.train_s * compute_factor + 2 * permute_pass, rel=1e-9)
    assert moe.logprob_s == pytest.approx(dense.logprob_s * compute_factor + permute_pass, rel=1e-9)
    # the grouped GEMMs add 9% (the routed experts are 55% of the FLOPs), the permutations 21%
    # (a 768-wide expert does 9.4 MFLOP per token copy, its permutations move 32 KB)
    assert compute_factor == pytest.approx(1.09, abs=0.01)
    assert moe.train_s / dense.train_s == pytest.approx(1.30, abs=0.01)


def test_the_slowdown_falls_to_one_as_the_rows_per_expert_grow() -> None:
    # more expert parallelism gathers more tokens to each expert: ep x 512 rows at an 8,192 micro-batch
    extras = [
        train_step.moe_extra_flops(MOE, H100, _shape(MOE, ep=ep, gpus=ep), 8192.0 * ep, 8192.0)
        for ep in (1, 2, 4, 8, 16)
    ]
    assert all(a > b for a, b in zip(extras, extras[1:]))
    # at EP16 each expert gets the micro-batch's 8,192 rows: the dense rate, nothing added
    assert extras[-1] == 0.0
    routed = moe_layer.routed_forward_flops(MOE, 8192.0)
    assert extras[0] == pytest.approx(routed * (_g(8192) / _g(512) - 1.0))
    # and larger micro-batches bring the grouped GEMMs toward saturation with the dense ones
    slowdowns = [moe_layer.expert_slowdown(H100, m * 8 / 128, m) for m in (1024, 4096, 16384, 65536)]
    assert all(a > b > 1.0 for a, b in zip(slowdowns, slowdowns[1:]))
    assert slowdowns[-1] < 1.03


def test_rows_per_expert_follow_the_dispatcher() -> None:
    # Qwen3-235B-A22B's NeMo RL layout: 4,096 tokens per CP rank, TP2 under sequence parallelism
    # (2,048 per GPU), EP16, ETP1: 2,048 x 8 copies over the 8 experts a GPU holds
    q235 = get_llm("qwen3-235b-a22b")
    assert moe_layer.rows_per_expert(q235, 4096, tp=2, ep=16, etp=1) == pytest.approx(2048 * 8 / 8)
    # the default ETP = TP gathers the TP group's tokens: twice the rows
    assert moe_layer.rows_per_expert(q235, 4096, tp=2, ep=16, etp=2) == pytest.approx(4096)
    # one expert per GPU: no sort by local expert, only permute and unpermute
    assert moe_layer.permutations_per_layer(q235, 128) == (2, 0)
    assert moe_layer.permutations_per_layer(q235, 16) == (2, 2)


def test_a_dense_model_and_a_measured_mfu_get_no_moe_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = [1024] * 16
    shape = _shape(DENSE)
    before = train_step.train_phases(DENSE, H100, shape, lengths, **KW)

    def never(*args, **kwargs):
        raise AssertionError("a dense model must not reach the MoE layer's terms")

    monkeypatch.setattr(moe_layer, "extra_forward_flops", never)
    monkeypatch.setattr(moe_layer, "permute_s", never)
    assert train_step.train_phases(DENSE, H100, shape, lengths, **KW) == before
    # a dense model's phases are the dense formula: fwd + bwd at the MFU of its micro-batch
    fwd = footprint.forward_flops(DENSE, 16384.0, float(sum(n * n for n in lengths)))
    rate = H100.peak_tflops * 1e12 * train_step.mfu_at_tokens(H100, 8192.0)
    assert before.train_s == pytest.approx(3 * fwd / rate, rel=1e-12)
    # an MFU the user measured for a MoE model already holds its MoE layers
    measured = _shape(MOE, mfu_override=0.2)
    assert train_step.moe_extra_flops(MOE, H100, measured, 16384.0, 16384.0) == 0.0
    assert train_step.moe_permute_s(MOE, H100, measured, 16384.0, 2.0) == 0.0


def test_an_engines_routed_experts_compute_at_the_rows_each_touched_expert_gets() -> None:
    # at batch 1 each of the 8 experts touched gets the one token: the dense rate, nothing added
    # (the dense copy at the profile's matmul_tokens_half, which a MoE model's GEMMs keep at any layer size)
    flat = H100.model_copy(update={"matmul_tokens_half_params": None})
    one = iteration_cost(MOE, H100, 1, 1)
    assert one.comp0_s == iteration_cost(DENSE, flat, 1, 1).comp0_s
    assert moe_layer.engine_extra_s(MOE, H100, 1, 1) == 0.0
    # and the iteration still reads the experts touched (8 at batch 1), above the kernel's floor
    assert footprint.experts_touched(MOE, 1) == pytest.approx(8.0)
    # at 4,096 tokens (a large prefill-sized batch) every expert is hit with 256 rows
    big = iteration_cost(MOE, H100, 1, 4096)
    routed = moe_layer.routed_forward_flops(MOE, 4096.0)
    rate = H100.matmul_tflops * 1e12
    extra = routed / (rate * _g(4096 * 8 / (128 * (1 - (1 - 8 / 128) ** 4096)))) - routed / (rate * _g(4096))
    assert big.comp0_s == pytest.approx(iteration_cost(DENSE, flat, 1, 4096).comp0_s + extra, rel=1e-12)
    assert extra / big.comp0_s == pytest.approx(0.18, abs=0.02)
    # a dense engine is untouched
    assert moe_layer.engine_extra_s(DENSE, H100, 4096, 1) == 0.0


def test_megatron_reduces_the_routed_experts_gradients_over_the_expert_data_parallel_group() -> None:
    q235 = get_llm("qwen3-235b-a22b")  # 94 MoE layers x 128 experts of 3 x 4096 x 1536
    link = H100.inter_node
    bw = link.busbw_gbps * 1e9
    grads = q235.total_params * 2.0
    experts = 94 * 128 * 3 * 4096 * 1536 * 2.0
    assert experts / grads == pytest.approx(0.96, abs=0.01)
    base = dict(gpus=128, tp=2, pp=8, cp=2, megatron_ddp=True, replica_link=link)
    # NeMo RL's layout: EP16 x ETP1 x PP8 = 128 GPUs, so each expert lives on one GPU: the
    # expert data-parallel group is one GPU, and only the dense 4% is reduced over DP 4
    folded = _shape(q235, **base, ep=16, etp=1)
    dense_part = 2 * link.latency_s + 2 * 3 / 4 * (grads - experts) / 16 / bw
    assert train_step._megatron_dp_sync_s(q235, H100, folded, grads) == pytest.approx(dense_part, rel=1e-12)
    # without EP the experts are replicated over the 8 GPUs of ETP2 x PP8's complement
    replicated = _shape(q235, **base)
    expert_part = 2 * link.latency_s + 2 * 7 / 8 * experts / 16 / bw
    got = train_step._megatron_dp_sync_s(q235, H100, replicated, grads)
    assert got == pytest.approx(dense_part + expert_part, rel=1e-12)
    assert got > 20 * dense_part
    # a dense model (and a LoRA run's adapters) keep the one data-parallel all-reduce
    dense_shape = _shape(DENSE, **base)
    one = 2 * link.latency_s + 2 * 3 / 4 * grads / 16 / bw
    assert train_step._megatron_dp_sync_s(DENSE, H100, dense_shape, grads) == pytest.approx(one, rel=1e-12)
    lora = _shape(q235, **{**base, "ep": 16, "etp": 1}, trainable_params=1e8)
    assert train_step._megatron_dp_sync_s(q235, H100, lora, 2e8) == pytest.approx(
        2 * link.latency_s + 2 * 3 / 4 * 2e8 / 16 / bw, rel=1e-12
    )
