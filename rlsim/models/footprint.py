"""Bytes and FLOPs of an LLM: weights, KV cache per token, experts touched, FLOPs per token.

These are architecture facts, not timings; every timing model builds on them. bf16 weights and
KV cache (2 bytes) unless a caller says otherwise. A hybrid model's Gated DeltaNet layers
(`LlmSpec.linear_attention`) hold a fixed-size state per sequence instead of a per-token cache:
the `linear_state_*` functions size it, and their FLOPs are linear in the tokens.
"""

from __future__ import annotations

import math

from rlsim.catalog import LlmSpec

BF16_BYTES = 2
# vLLM sizes a hybrid model's attention block so that one block of one layer holds a Gated
# DeltaNet layer's state, in whole multiples of the attention kernel's block alignment (16 tokens
# for FlashAttention and FlashInfer, vLLM's DEFAULT_BLOCK_SIZE), and pads the state's page to it
# (vllm 0.33.0 vllm/platforms/interface.py _align_hybrid_block_size: attn_block_size =
# alignment x cdiv(mamba_page_size, alignment x attn_page_size_1_token); mamba_page_size_padded)
HYBRID_BLOCK_ALIGNMENT_TOKENS = 16
# Forward FLOPs of one token's gated delta rule per value head, over dk x dv: verl counts
# 15 x dk x dv x value heads per token per layer for forward and backward together
# (verl-project/verl@1dda039b9c6311889a9c9a26040677e1254814f9 verl/utils/flops_counter.py
# _compute_qwen3_5_gdn_recurrence_flops), at its 1 : 2 forward : backward ratio 5 of them forward
GDN_FORWARD_FLOPS_PER_STATE_ELEMENT = 5.0


def weight_bytes(llm: LlmSpec, dtype_bytes: int = BF16_BYTES) -> float:
    """Bytes of all parameters (every expert of an MoE)."""
    return llm.total_params * dtype_bytes


def expert_params(llm: LlmSpec) -> float:
    """Parameters of one routed expert in one layer (SwiGLU: 3 x hidden x expert width)."""
    assert llm.moe is not None
    return 3.0 * llm.hidden_size * llm.moe.expert_intermediate_size


def moe_layers(llm: LlmSpec) -> int:
    return 0 if llm.moe is None else llm.num_layers - llm.moe.dense_layers


def experts_touched(llm: LlmSpec, tokens: int) -> float:
    """Expected distinct routed experts per MoE layer hit by `tokens` tokens (uniform routing).

    Each token picks k of E experts, so an expert is missed by all tokens with probability
    (1 - k/E)^tokens. Decode at batch 1 reads k experts; at large batch, all E.
    """
    if llm.moe is None:
        return 0.0
    e, k = llm.moe.num_experts, llm.moe.experts_per_token
    return e * (1.0 - (1.0 - k / e) ** max(tokens, 0))


def routed_bytes_per_layer(llm: LlmSpec, batch: int, dtype_bytes: int = BF16_BYTES) -> float:
    """Bytes of the routed experts one MoE layer reads in a decode iteration (0 for a dense model)."""
    if llm.moe is None:
        return 0.0
    return experts_touched(llm, batch) * expert_params(llm) * dtype_bytes


def lookup_embedding_params(llm: LlmSpec) -> float:
    """Parameters of an input embedding that only a lookup reads (0 when the LM head shares it).

    The input embedding is a gather: a pass reads one row per token and does no multiply-adds,
    so neither its FLOPs nor its bytes scale with the table. An untied model's table (Qwen2.5-7B:
    152,064 x 3,584 = 0.55 B parameters, 7% of the model) is counted in `active_params` but is
    neither computed nor streamed per token; a tied table is still the LM head's matmul weight.
    """
    return 0.0 if llm.tie_word_embeddings else float(llm.vocab_size) * llm.hidden_size


def matmul_params(llm: LlmSpec) -> float:
    """Active parameters that a token multiplies with (2 FLOPs each per token): all but the lookup.

    Megatron-LM counts FLOPs the same way: 96 B s l h^2 (1 + s/6h + V/16lh) per iteration, whose
    only vocabulary term is the logit layer (Narayanan et al., arXiv 2104.04473, section 5.1).
    """
    return llm.active_params - lookup_embedding_params(llm)


def logit_params(llm: LlmSpec) -> float:
    """Parameters of the LM head (the logit layer, vocabulary x hidden), tied or not."""
    return float(llm.vocab_size) * llm.hidden_size


def prefill_flops(llm: LlmSpec, tokens: float, sequences: float, sum_sq_len: float = 0.0) -> float:
    """Forward FLOPs of prefilling `sequences` prompts of `tokens` tokens in all.

    As `forward_flops`, less the LM head on every position but each sequence's last: an engine
    computes logits only where it samples (vLLM V0's `LogitsProcessor` takes the hidden states at
    the sampling metadata's `selected_token_indices`, one per prompt without prompt log-probs:
    vllm@307e0861 vllm/model_executor/layers/logits_processor.py `_prune_hidden_states`; V1's
    `GPUModelRunner._prepare_inputs` sets `logits_indices = query_start_loc[1:] - 1`, the last
    scheduled token of each request, and `execute_model` computes the logits of
    `hidden_states[logits_indices]` only: vllm@4e179065 vllm/v1/worker/gpu_model_runner.py).
    Training and log-prob passes need every position's logits, so they keep `forward_flops`.
    The order of operations is `prefill.prefills_s`'s, so both round alike.
    """
    return (
        2.0 * (matmul_params(llm) - logit_params(llm)) * tokens
        + 2.0 * logit_params(llm) * sequences
        + linear_attention_flops_per_token(llm) * tokens
        + attention_flops_per_cached_token(llm) * sum_sq_len / 2.0
    )


def decode_weight_bytes(llm: LlmSpec, batch: int, dtype_bytes: int = BF16_BYTES) -> float:
    """Weight bytes one decode iteration reads: every dense matrix, plus the experts touched.

    An untied input embedding is not streamed: the lookup reads `batch` rows of it (negligible).
    """
    dense = llm.total_params - lookup_embedding_params(llm)
    if llm.moe is None:
        return dense * dtype_bytes
    all_routed = moe_layers(llm) * llm.moe.num_experts * expert_params(llm)
    touched = moe_layers(llm) * experts_touched(llm, batch) * expert_params(llm)
    return (dense - all_routed + touched) * dtype_bytes


def engine_kv_bytes_per_token(llm: LlmSpec, tp: int) -> float:
    """KV-cache bytes one token occupies on a TP-`tp` engine, over all its GPUs.

    vLLM gives each GPU max(1, KV heads // tp) KV heads, replicating them once tp exceeds the
    model's KV heads, and caches an MLA model's latent whole on every GPU (MLA decodes as MQA:
    one head per GPU) (vllm 0.8.5 vllm/config.py ModelConfig.get_num_kv_heads). So the engine
    holds tp / KV-heads copies of each head (Qwen3-235B-A22B, 4 KV heads, at TP8: 2) and tp
    copies of a latent (DeepSeek-V3 at TP32: 32); below that, the cache splits without copies.
    """
    if llm.mla is not None:
        return llm.kv_bytes_per_token() * tp
    heads = max(1, llm.num_kv_heads // tp) * tp
    if heads == llm.num_kv_heads:
        return llm.kv_bytes_per_token()
    return llm.kv_bytes_per_token() * heads / llm.num_kv_heads


def attention_flops_per_cached_token(llm: LlmSpec) -> float:
    """Forward attention FLOPs for one query token against one cached token (QK^T and PV), over
    the full-attention layers (a hybrid model's Gated DeltaNet layers have no such term)."""
    layers = llm.full_attention_layers
    if llm.mla is not None:
        qk = llm.mla.qk_nope_head_dim + llm.mla.qk_rope_head_dim
        return 2.0 * layers * llm.num_attention_heads * (qk + llm.mla.v_head_dim)
    return 4.0 * layers * llm.num_attention_heads * llm.head_dim


def linear_attention_flops_per_token(llm: LlmSpec) -> float:
    """Forward FLOPs of the Gated DeltaNet recurrences for one token, all such layers (0 unless hybrid).

    The chunked kernel (fla's chunk_gated_delta_rule) that prefill and training run, and the
    recurrent one decode runs, both cost a fixed amount per token: linear in the length, with no
    context term. Their projections and conv1d are parameters, counted in `matmul_params`.
    """
    gdn = llm.linear_attention
    if gdn is None:
        return 0.0
    return GDN_FORWARD_FLOPS_PER_STATE_ELEMENT * gdn.recurrent_state_elements * llm.linear_attention_layers


def forward_flops(llm: LlmSpec, tokens: float, sum_sq_len: float = 0.0) -> float:
    """Forward FLOPs of `tokens` tokens; causal attention adds half of the sum of squared lengths.

    A hybrid model's Gated DeltaNet recurrences add a term linear in the tokens.
    """
    return (
        2.0 * matmul_params(llm) * tokens
        + linear_attention_flops_per_token(llm) * tokens
        + attention_flops_per_cached_token(llm) * sum_sq_len / 2.0
    )


def _linear_state_bytes_per_gpu_layer(llm: LlmSpec, tp: int) -> float:
    """Bytes of one Gated DeltaNet layer's state for one sequence on one GPU of a TP-`tp` engine.

    vLLM shards the value heads and the conv channels over TP (vllm 0.33.0
    vllm/model_executor/layers/mamba/mamba_utils.py gated_delta_net_state_shape: conv
    (conv_dim / tp, kernel - 1) in the model dtype, recurrent (value heads / tp, dv, dk) in the
    mamba_ssm_cache_dtype).
    """
    gdn = llm.linear_attention
    assert gdn is not None
    conv = gdn.conv_channels / tp * (gdn.conv_kernel_size - 1) * BF16_BYTES
    recurrent = gdn.recurrent_state_elements / tp * gdn.state_dtype_bytes
    return conv + recurrent


def linear_state_bytes_per_sequence(llm: LlmSpec, tp: int) -> float:
    """Bytes a running sequence's Gated DeltaNet states take from a TP-`tp` engine's KV pool (0 unless hybrid).

    vLLM's hybrid KV-cache manager draws them from the same block pool as the attention blocks:
    one block per Gated DeltaNet layer per running request, whatever its length (vllm 0.33.0
    vllm/v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes: one page, mamba_cache_mode
    'none', no speculative decoding), each page padded to one attention block of one layer. So a
    request costs its tokens' KV plus this, and the pool bounds the running requests jointly
    (vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config).
    """
    if llm.linear_attention is None:
        return 0.0
    state = _linear_state_bytes_per_gpu_layer(llm, tp)
    attention_token_layer = engine_kv_bytes_per_token(llm, tp) / (tp * llm.full_attention_layers)
    align = HYBRID_BLOCK_ALIGNMENT_TOKENS * attention_token_layer
    padded = math.ceil(state / align) * align
    return padded * tp * llm.linear_attention_layers


def linear_state_rw_bytes_per_sequence(llm: LlmSpec) -> float:
    """Bytes a decode iteration reads and writes per sequence for its Gated DeltaNet states (0 unless hybrid).

    Each layer's recurrent step reads the sequence's state and writes it back (fla's
    fused_recurrent_gated_delta_rule, in place), and the conv1d update reads and shifts its
    window: twice the unpadded state, split over the engine's GPUs, with no context term.
    """
    if llm.linear_attention is None:
        return 0.0
    return 2.0 * _linear_state_bytes_per_gpu_layer(llm, 1) * llm.linear_attention_layers


def lora_params(llm: LlmSpec, rank: int, modules: list[str]) -> float:
    """Adapter parameters: r x (in + out) per targeted projection per layer (q, k, v and o only
    in a hybrid model's full-attention layers: its Gated DeltaNet layers have none)."""
    h, f = llm.hidden_size, llm.intermediate_size
    q_out = llm.num_attention_heads * llm.head_dim
    kv_out = llm.num_kv_heads * llm.head_dim
    dims = {
        "q": (h, q_out),
        "k": (h, kv_out),
        "v": (h, kv_out),
        "o": (q_out, h),
        "gate": (h, f),
        "up": (h, f),
        "down": (f, h),
    }
    attention = {"q", "k", "v", "o"}
    per_attention = sum(rank * (dims[m][0] + dims[m][1]) for m in modules if m in attention)
    per_mlp = sum(rank * (dims[m][0] + dims[m][1]) for m in modules if m not in attention)
    if llm.linear_attention is None:
        return float(llm.num_layers * (per_attention + per_mlp))
    return float(llm.full_attention_layers * per_attention + llm.num_layers * per_mlp)
