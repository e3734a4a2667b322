"""Performance models against hand-computed values and their own brute-force sums."""

from __future__ import annotations

import math

import pytest

from rlsim.calibration.profile import datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, train_step, weight_sync
from rlsim.models.decode import IterationCost, gemm_layer_params, gemm_rate_flops, iteration_cost, tokens_half
from rlsim.models.kv_cache import ACTIVATION_RESERVE_GB_PER_GPU, kv_budget_bytes, kv_capacity_tokens
from rlsim.scenario import Transport

H100 = datasheet_profile("h100-sxm")
Q7 = get_llm("qwen2.5-7b")


@pytest.mark.parametrize(
    "cost",
    [
        IterationCost(batch=8, fixed_s=1e-3, mem0_s=5e-3, mem_per_token_s=1e-7, comp0_s=2e-3, comp_per_token_s=3e-7),
        IterationCost(batch=3, fixed_s=0.0, mem0_s=1e-3, mem_per_token_s=2e-7, comp0_s=4e-3, comp_per_token_s=1e-8),
        IterationCost(batch=5, fixed_s=2e-4, mem0_s=1e-3, mem_per_token_s=1e-7, comp0_s=1e-3, comp_per_token_s=1e-7),
    ],
)
@pytest.mark.parametrize("kv0", [0, 1000, 50_000])
def test_span_matches_iteration_sum(cost: IterationCost, kv0: int) -> None:
    """The closed-form sum over k iterations equals adding every iteration (both branch orders)."""
    for k in (1, 2, 7, 100, 3000):
        brute = sum(cost.at(kv0 + j * cost.batch) for j in range(k))
        assert cost.span_s(kv0, k) == pytest.approx(brute, rel=1e-12)


def test_iterations_within_inverts_span() -> None:
    cost = iteration_cost(Q7, H100, 1, 64)
    for k in (1, 10, 333):
        t = cost.span_s(5000, k)
        assert cost.iterations_within(5000, t, 10_000) == k
        assert cost.iterations_within(5000, t * 0.999999, 10_000) == k - 1


def test_decode_iteration_by_hand() -> None:
    """Qwen2.5-7B on one H100 at batch 1 with no cache: weight read + 1 ms overhead.

    The untied input embedding (152,064 x 3,584) is looked up, not streamed.
    """
    cost = iteration_cost(Q7, H100, 1, 1)
    weights_s = (Q7.total_params - 152_064 * 3_584) * 2 / (3350e9 * 0.80)
    assert cost.at(0) == pytest.approx(1.0e-3 + weights_s, rel=1e-9)
    # each cached token adds its KV bytes at the attention bandwidth (memory bound at batch 1)
    assert cost.at(10_000) - cost.at(0) == pytest.approx(10_000 * 57344 / (3350e9 * 0.70), rel=1e-9)


def test_compute_bound_gemms_do_not_hide_the_kv_reads() -> None:
    """Qwen2.5-7B on one H20 at batch 512: the GEMMs are compute-bound and the attention's KV
    reads come after them (kernel by kernel), so the iteration is the GEMM time plus the KV time."""
    h20 = datasheet_profile("h20")
    batch, kv = 512, 512 * 1_000
    cost = iteration_cost(Q7, h20, 1, batch)
    weights_s = footprint.decode_weight_bytes(Q7, batch) / (h20.memory_gbps * 1e9)
    gemm_s = 2.0 * footprint.matmul_params(Q7) * batch / gemm_rate_flops(h20, batch, gemm_layer_params(Q7, 1))
    assert gemm_s > 5 * weights_s  # compute-bound: the weights are read well within the GEMMs
    kv_s = kv * 57344 / (h20.attention_gbps * 1e9)
    assert cost.at(kv) == pytest.approx(h20.iteration_overhead_s + gemm_s + kv_s, rel=1e-9)
    # one roofline over the whole iteration would have hidden the KV reads under the GEMMs
    attention_flops_s = kv * footprint.attention_flops_per_cached_token(Q7) / (h20.matmul_tflops * 1e12)
    assert cost.at(kv) - max(weights_s + kv_s, gemm_s + attention_flops_s) > 0.5 * kv_s
    # while the GEMMs are memory-bound (batch 1) the sum is the one roofline over all the bytes
    small = iteration_cost(Q7, h20, 1, 1)
    one_read = footprint.decode_weight_bytes(Q7, 1) / (h20.memory_gbps * 1e9) + 1_000 * 57344 / (
        h20.attention_gbps * 1e9
    )
    assert small.at(1_000) == pytest.approx(h20.iteration_overhead_s + one_read, rel=1e-9)


def test_input_embedding_is_a_lookup_not_a_matmul() -> None:
    """An untied table costs no FLOPs and is not streamed by decode; a tied one is the LM head."""
    assert not Q7.tie_word_embeddings
    table = 152_064 * 3_584
    assert footprint.matmul_params(Q7) == pytest.approx(Q7.active_params - table)
    assert footprint.forward_flops(Q7, 10.0) == pytest.approx(20.0 * (Q7.active_params - table))
    assert footprint.decode_weight_bytes(Q7, 1) == pytest.approx(2.0 * (Q7.total_params - table))
    tied = get_llm("qwen2.5-1.5b")
    assert tied.tie_word_embeddings
    assert footprint.matmul_params(tied) == tied.active_params
    assert footprint.decode_weight_bytes(tied, 1) == footprint.weight_bytes(tied)


def test_gemm_rate_saturates() -> None:
    assert gemm_rate_flops(H100, 1e9) == pytest.approx(H100.matmul_tflops * 1e12, rel=1e-6)
    assert gemm_rate_flops(H100, H100.matmul_tokens_half) == pytest.approx(H100.matmul_tflops * 1e12 / 2)


def test_a_smaller_layer_needs_more_rows_to_half_saturate() -> None:
    """The H100 datasheet profile half-saturates at 96 rows for a layer of 6.97e8 GEMM parameters
    per GPU (Vidur's H100 kernels: CodeLlama-34B at TP1, 6.92e8, fits best at 101) and as 1/sqrt
    of the layer's size: a quarter of it (Qwen2.5-7B-like layers, 1.74e8) needs 192 rows, 4x
    it 48. A measured profile (no reference size) keeps its own count at every size."""
    assert H100.matmul_tokens_half_params == pytest.approx(6.97e8)
    assert tokens_half(H100, 6.97e8) == pytest.approx(96.0)
    assert tokens_half(H100, 6.97e8 / 4) == pytest.approx(192.0)
    assert tokens_half(H100, 6.97e8 * 4) == pytest.approx(48.0)
    assert tokens_half(H100, None) == 96.0
    assert gemm_rate_flops(H100, 192.0, 6.97e8 / 4) == pytest.approx(H100.matmul_tflops * 1e12 / 2)
    measured = H100.model_copy(update={"matmul_tokens_half_params": None})
    assert tokens_half(measured, 6.97e8 / 4) == 96.0


def test_a_dense_layers_gemm_size_sets_its_decode_gemm_time() -> None:
    """Qwen3-8B at TP1 (36 layers; per layer QKV 4096 x 6144, output 4096 x 4096, gate/up 4096 x
    24576, down 12288 x 4096 = 192.9M, plus norms' 8,448 weights the footprint counts with them) at 256
    sequences: the GEMM term is 2 x P x 256 x (256 + half) / (794.5 TFLOPS x 256), half = 96 x
    sqrt(6.97e8 / P) = 182.5 rows instead of 96; at TP2 the layer halves and half = 258.1."""
    llm = get_llm("qwen3-8b")
    layer = 4096 * (6144 + 4096 + 24576) + 12288 * 4096
    assert gemm_layer_params(llm, 1) == pytest.approx(layer, rel=1e-4)
    assert tokens_half(H100, gemm_layer_params(llm, 1)) == pytest.approx(182.5, abs=0.1)
    assert tokens_half(H100, gemm_layer_params(llm, 2)) == pytest.approx(258.1, abs=0.1)
    cost = iteration_cost(llm, H100, 1, 256)
    params = footprint.matmul_params(llm)
    half = 96 * math.sqrt(6.97e8 / gemm_layer_params(llm, 1))
    assert cost.comp0_s == pytest.approx(2 * params * (256 + half) / (794.5e12), rel=1e-9)
    assert gemm_layer_params(get_llm("qwen3-30b-a3b"), 4) is None  # MoE: the routed experts' rows rule


def test_kv_capacity_by_hand() -> None:
    # 81105.69 MiB: the total CUDA reports for an H100 SXM (deviceQuery's 85045477376 bytes), not 80e9
    budget = 81105.69 * 2**20 * 0.9 - ACTIVATION_RESERVE_GB_PER_GPU * 1e9 - Q7.total_params * 2
    assert kv_capacity_tokens(Q7, H100, 1, 0.9) == int(budget // 57344)
    assert kv_capacity_tokens(get_llm("qwen2.5-72b"), H100, 1, 0.9) == 0  # 145 GB of weights


def test_moe_decode_reads_only_touched_experts() -> None:
    moe = get_llm("qwen3-30b-a3b")
    one = footprint.decode_weight_bytes(moe, 1)
    many = footprint.decode_weight_bytes(moe, 4096)
    assert one < 0.2 * many  # batch 1 touches 8 of 128 experts per layer
    # every expert at a large batch: all the weights but the untied input embedding (a lookup)
    table_bytes = 2.0 * 151_936 * 2_048
    assert many == pytest.approx(footprint.weight_bytes(moe) - table_bytes, rel=1e-3)
    assert footprint.experts_touched(moe, 1) == pytest.approx(8.0)


def test_train_phases_by_hand() -> None:
    shape = train_step.TrainShape(
        gpus=4,
        tp=1,
        pp=1,
        micro_batch_tokens=16384,
        activation_recompute=True,
        minibatches=2,
        trainable_params=Q7.total_params,
    )
    lengths = [1000] * 64
    ph = train_step.train_phases(
        Q7, H100, shape, lengths, reference_model=True, recompute_old_logprobs=True, critic=False
    )
    matmul = Q7.active_params - 152_064 * 3_584  # the untied input embedding is a lookup
    fwd = 2 * matmul * 64_000 + footprint.attention_flops_per_cached_token(Q7) * 64 * 1000**2 / 2

    def rate(tokens: float) -> float:  # MFU saturates in the tokens a rank really holds per micro-batch
        return 4 * 989e12 * H100.train_mfu * tokens / (tokens + H100.train_tokens_half)

    # log-prob passes: 64,000 tokens / 4 ranks = one micro-batch of 16,000 (under the 16,384 cap)
    assert ph.logprob_s == pytest.approx(2 * fwd / rate(16_000), rel=1e-9)  # old logprobs + reference
    # training: 2 minibatches of 8,000 tokens per rank, one micro-batch each
    assert ph.train_s == pytest.approx(4 * fwd / rate(8_000), rel=1e-9)  # fwd + 2 bwd + recompute
    opt = 2 * (32 * Q7.total_params / 4 / (H100.memory_gbps * 1e9) + H100.iteration_overhead_s)
    assert ph.optimizer_s == pytest.approx(opt, rel=1e-9)


def test_pipeline_bubble_slows_training() -> None:
    base = dict(
        gpus=8,
        tp=1,
        micro_batch_tokens=8192,
        activation_recompute=False,
        minibatches=1,
        trainable_params=Q7.total_params,
    )
    kw = dict(reference_model=False, recompute_old_logprobs=False, critic=False)
    flat = train_step.train_phases(Q7, H100, train_step.TrainShape(pp=1, **base), [2000] * 64, **kw)
    piped = train_step.train_phases(Q7, H100, train_step.TrainShape(pp=4, **base), [2000] * 64, **kw)
    assert piped.train_s > flat.train_s


def _path(**kw) -> weight_sync.SyncPath:
    base = dict(link=H100.intra_node, engines=4, engine_tp=1, filesystem_gbps=2.0, bucket_bytes=512e6)
    return weight_sync.SyncPath(**{**base, **kw})


def test_weight_sync_transports_order() -> None:
    payload = footprint.weight_bytes(Q7)
    t = {tr: weight_sync.sync_s(Q7, H100, tr, _path(), payload) for tr in Transport}
    assert t[Transport.nccl_broadcast] < t[Transport.filesystem]
    assert t[Transport.cuda_ipc] < t[Transport.nccl_bucketed]
    # through an engine server bucketing saves a request per tensor
    server = _path(per_call_s=weight_sync.SERVER_CALL_S)
    bucketed = weight_sync.sync_s(Q7, H100, Transport.nccl_bucketed, server, payload)
    assert bucketed < weight_sync.sync_s(Q7, H100, Transport.nccl_broadcast, server, payload)
    # in process, one broadcast per tensor hides its transfers under the loop's host work
    assert t[Transport.nccl_broadcast] <= t[Transport.nccl_bucketed]
    lora = footprint.lora_params(Q7, 16, ["q", "k", "v", "o"]) * 2
    assert weight_sync.sync_s(Q7, H100, Transport.lora_adapter, _path(), lora) < 0.1 * t[Transport.nccl_bucketed]
    # broadcast of a 7B model: within the 100-500 ms verl reports for its NCCL broadcast
    assert 0.1 < t[Transport.nccl_broadcast] < 0.5


def test_bucketed_sync_by_hand() -> None:
    payload = 10e9
    got = weight_sync.sync_s(Q7, H100, Transport.nccl_bucketed, _path(), payload)
    buckets = payload / 512e6
    expect = buckets * (weight_sync.IN_PROCESS_CALL_S + H100.intra_node.latency_s)
    expect += weight_sync.tensor_count(Q7) * weight_sync.TENSOR_HOST_S  # 339 tensors' host work
    expect += payload / (H100.intra_node.busbw_gbps * 1e9) + 2 * payload / (H100.memory_gbps * 1e9)
    assert math.isclose(got, expect, rel_tol=1e-12)


def test_iterations_within_is_the_plain_search() -> None:
    """The bracketed search returns what a search over the whole range returns, exactly."""
    import random

    def plain(c: IterationCost, kv0: int, elapsed: float, limit: int) -> int:
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if c.span_s(kv0, mid) <= elapsed * (1 + 1e-12):
                lo = mid
            else:
                hi = mid - 1
        return lo

    rnd = random.Random(3)
    for _ in range(3000):
        c = IterationCost(
            batch=rnd.randint(1, 300),
            fixed_s=rnd.choice([0.0, rnd.uniform(0, 1e-3)]),
            mem0_s=rnd.uniform(0, 1e-2),
            mem_per_token_s=rnd.choice([0.0, rnd.uniform(0, 1e-7)]),
            comp0_s=rnd.choice([0.0, rnd.uniform(0, 1e-2)]),
            comp_per_token_s=rnd.choice([0.0, rnd.uniform(0, 1e-7)]),
        )
        kv0, limit = rnd.randint(0, 10**6), rnd.choice([1, 5, 50, 2000, 30000])
        elapsed = c.span_s(kv0, rnd.randint(0, limit)) * rnd.choice([1, 1 + 1e-13, 1 - 1e-13, 1.5, 0.3])
        assert c.iterations_within(kv0, elapsed, limit) == plain(c, kv0, elapsed, limit)


def test_kv_heads_are_copied_once_tp_exceeds_them_and_an_mla_latent_on_every_gpu() -> None:
    """vLLM's get_num_kv_heads: max(1, heads // tp) per GPU, 1 for MLA (the latent whole)."""
    assert footprint.engine_kv_bytes_per_token(Q7, 4) == Q7.kv_bytes_per_token()  # 4 heads, one each
    assert footprint.engine_kv_bytes_per_token(Q7, 8) == 2 * Q7.kv_bytes_per_token()  # each head on two GPUs
    ds = get_llm("deepseek-v3")
    assert ds.mla is not None
    assert footprint.engine_kv_bytes_per_token(ds, 8) == 8 * ds.kv_bytes_per_token()
    # the engine's capacity and its decode reads both see the copies
    h100 = datasheet_profile("h100-sxm")
    budget = kv_budget_bytes(Q7, h100, 8, 0.9)
    assert kv_capacity_tokens(Q7, h100, 8, 0.9) == int(budget // (2 * 57344))
    four, eight = iteration_cost(Q7, h100, 4, 64), iteration_cost(Q7, h100, 8, 64)
    assert eight.mem_per_token_s == pytest.approx(four.mem_per_token_s)  # twice the bytes over twice the GPUs


def test_fsdp_gathers_over_the_sequence_parallel_gpus_too() -> None:
    """Ulysses/CP ranks each compute with every parameter, so FSDP shards and gathers over all of them.

    8 GPUs as 2 data-parallel ranks of cp 4, one shard group: each GPU gathers 7/8 of the bf16
    weights per pass. Tiny micro-batches expose the traffic, so the log-prob pass is the gathers.
    """
    shape = train_step.TrainShape(
        gpus=8,
        tp=1,
        pp=1,
        cp=4,
        micro_batch_tokens=256,
        activation_recompute=False,
        minibatches=1,
        trainable_params=Q7.total_params,
    )
    lengths = [1000] * 64
    ph = train_step.train_phases(
        Q7, H100, shape, lengths, reference_model=False, recompute_old_logprobs=True, critic=False
    )
    link = H100.intra_node
    gather = link.latency_s + 7 / 8 * footprint.weight_bytes(Q7) / (link.busbw_gbps * 1e9)
    micro = train_step.micro_batches(shape, 64_000 / shape.dp)
    assert ph.logprob_s == pytest.approx(micro * gather, rel=1e-9)
