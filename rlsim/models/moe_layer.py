"""How a MoE layer's routed experts run: grouped GEMMs at the tokens each expert gets, and in
training the permutations that sort tokens to experts and back.

A dense MLP multiplies every token of a micro-batch by one weight matrix; a MoE layer's router
sends each token to k of E experts, so each expert's GEMMs run over only the tokens routed to
it. Megatron-Core's MoE layer (TEGroupedMLP under `moe_grouped_gemm`) runs each projection of
all the local experts as one grouped GEMM whose per-expert M dimension is those tokens, after
the all-to-all dispatcher has permuted the GPU's tokens into expert order (permute), traded
them over the EP group, sorted the received chunks by local expert (sort_chunks_by_idxs, when a
GPU holds more than one expert), and before it undoes both (unsort, then unpermute)
(NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553, 2026-08-22,
megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher
dispatch_preprocess, token_dispatch, combine_preprocess, combine_postprocess; experts.py
TEGroupedMLP). The router's own GEMM (hidden x E) is in the active parameters already.

Two costs follow, both absent from a dense model:

- A GEMM of m rows against a weight matrix does about m FLOPs per weight byte it reads, so it
  is memory-bound below the roofline ridge and its rate saturates in m (`decode.gemm_rate_flops`,
  the profile's `matmul_tokens_half`). A grouped GEMM reads each expert's weights once for that
  expert's rows, so it saturates in the rows per expert, not in the micro-batch's tokens:
  DeepSeek's grouped FP8 GEMMs on H800 (N 4096, K 7168) run at 932, 1040, 1233 and 1297 TFLOPS
  at 256, 512, 1024 and 8192 rows per group, where its dense GEMM of the same N and K runs at 533
  TFLOPS at 128 rows and 1304 at 4096 (deepseek-ai/DeepGEMM@7a70b439cdf1c76f420bf608bf9b55ab56ca53f9
  README.md, 2025-02-26): a grouped GEMM at m rows per group runs at least as fast as a dense
  GEMM of m rows (the dense curve fitted to those two points, half-saturated at 200 rows at
  FP8's ridge, gives 768, 984, 1207, 1335). So the routed experts' FLOPs are charged at the
  dense training rate times gemm_efficiency(rows per expert) / gemm_efficiency(micro-batch rows),
  never faster than the dense layers (the training MFU is measured on dense models).
- Each permutation reads and writes every routed token copy's hidden state (bf16): memory-bound
  kernels on the critical path of the layer, in the forward, again in the backward (the
  gradients take the inverse permutation) and in a recompute.

An inference engine's fused-MoE kernel is a grouped GEMM as well (`engine_extra_s`): its
compute branch charges the routed FLOPs at the rows each touched expert gets. Decode stays
memory-bound (the experts touched, `footprint.decode_weight_bytes`, and the kernel's latency
floor, the profile's `moe_layer_floor_s`), so this shows only at large batches.
"""

from __future__ import annotations

from rlsim.calibration.profile import Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint


def gemm_efficiency(profile: Profile, rows: float) -> float:
    """A GEMM's rate at `rows` rows over its saturated rate: rows / (rows + matmul_tokens_half)."""
    m = max(rows, 1e-9)
    return m / (m + profile.matmul_tokens_half)


def rows_per_expert(llm: LlmSpec, device_tokens: float, *, tp: int, ep: int, etp: int) -> float:
    """Rows of each local expert's grouped GEMM when each GPU of the EP group holds `device_tokens`.

    `device_tokens`: the micro-batch's tokens on one device as the training MFU counts them (a
    context-parallel rank's share). Under sequence parallelism each of its tp GPUs holds 1/tp of
    them when the MoE layer starts; the EP group's GPUs send each token's k copies to the GPUs
    holding those experts (E/ep each), and the expert tensor-parallel group gathers its etp
    GPUs' received tokens (see `train_step.all_to_all_s`). With uniform routing a local expert
    gets device_tokens / tp x k x ep x etp / E rows: tokens x k / E on one GPU.
    """
    assert llm.moe is not None
    return device_tokens / tp * llm.moe.experts_per_token * ep * etp / llm.moe.num_experts


def expert_slowdown(profile: Profile, expert_rows: float, dense_rows: float) -> float:
    """How much slower the routed experts' GEMMs run than the dense layers' (>= 1)."""
    return max(1.0, gemm_efficiency(profile, dense_rows) / gemm_efficiency(profile, expert_rows))


def routed_forward_flops(llm: LlmSpec, tokens: float) -> float:
    """Forward FLOPs of the routed experts for `tokens` tokens (0 for a dense model)."""
    if llm.moe is None:
        return 0.0
    return 2.0 * footprint.moe_layers(llm) * llm.moe.experts_per_token * footprint.expert_params(llm) * tokens


def extra_forward_flops(
    llm: LlmSpec, profile: Profile, tokens: float, device_tokens: float, *, tp: int, ep: int, etp: int
) -> float:
    """Forward FLOPs to add at the dense rate so the routed experts take their grouped-GEMM time.

    `tokens`: the tokens of the pass; `device_tokens`: one micro-batch's tokens per device (the
    rows of the dense GEMMs). 0 for a dense model, and falls to 0 as the rows per expert grow.
    """
    if llm.moe is None:
        return 0.0
    rows = rows_per_expert(llm, device_tokens, tp=tp, ep=ep, etp=etp)
    return routed_forward_flops(llm, tokens) * (expert_slowdown(profile, rows, device_tokens) - 1.0)


def engine_extra_s(llm: LlmSpec, profile: Profile, tokens: float, tp: int) -> float:
    """Seconds a TP-`tp` inference engine's forward over `tokens` rows adds for its routed experts.

    vLLM's fused-MoE Triton kernel is a grouped GEMM too: it sorts the tokens' expert choices
    into blocks of BLOCK_SIZE_M per expert (moe_align_block_size) and each program multiplies
    one block of one expert's tokens by that expert's weights
    (vllm-project/vllm@13cb3e44373beb1c8b9d2c017f565af6f7a1b601
    vllm/model_executor/layers/fused_moe/fused_moe.py fused_moe_kernel, read 2026-12-01). Every GPU of the engine
    holds a 1/tp slice of every expert and sees all the tokens, so each expert the tokens touch
    (`footprint.experts_touched`) gets tokens x k / touched rows (one at batch 1, tokens x k / E
    once every expert is hit): the routed FLOPs run at `decode.gemm_rate_flops` at those rows
    rather than at the engine's tokens. The extra is the difference (0 for a dense model).
    """
    if llm.moe is None or tokens <= 0:
        return 0.0
    e, k = llm.moe.num_experts, llm.moe.experts_per_token
    touched = e * (1.0 - (1.0 - k / e) ** tokens)  # `footprint.experts_touched` at fractional tokens
    rows = max(tokens * k / touched, 1.0)
    dense_rate = profile.matmul_tflops * 1e12 * gemm_efficiency(profile, max(tokens, 1.0)) * tp
    grouped_rate = profile.matmul_tflops * 1e12 * gemm_efficiency(profile, rows) * tp
    flops = routed_forward_flops(llm, tokens)
    return max(0.0, flops / grouped_rate - flops / dense_rate)


def permutations_per_layer(llm: LlmSpec, ep: int) -> tuple[int, int]:
    """(permutations of the GPU's own token copies, of the copies it received) per MoE layer pass.

    Permute before the dispatch and unpermute after the combine touch the copies of the GPU's
    own tokens; the sort by local expert and its inverse run only when a GPU holds more than
    one expert, on the copies it received.
    """
    assert llm.moe is not None
    local_experts = llm.moe.num_experts // max(1, ep)
    return 2, (2 if local_experts > 1 else 0)


def permute_s(
    llm: LlmSpec, profile: Profile, gpu_tokens: float, *, tp: int, pp: int, ep: int, etp: int, passes: float
) -> float:
    """Seconds one GPU spends in the token permutations of its pipeline stage's MoE layers.

    `gpu_tokens`: the tokens of the pass that one context-parallel rank of a data-parallel rank
    holds (all its micro-batches); `passes`: permutation passes (1 per forward, 1 more for the
    backward, 1 for a recompute). Each permutation reads and writes a bf16 hidden state per
    routed token copy at the profile's streaming bandwidth; the copies the GPU received are
    its own count times etp (the expert tensor-parallel gather).
    """
    if llm.moe is None or passes <= 0:
        return 0.0
    own_copies = gpu_tokens / tp * llm.moe.experts_per_token
    own, received = permutations_per_layer(llm, ep)
    copies = own * own_copies + received * own_copies * etp
    nbytes = 2.0 * copies * llm.hidden_size * footprint.BF16_BYTES  # read and write
    return passes * footprint.moe_layers(llm) / pp * nbytes / (profile.memory_gbps * 1e9)
