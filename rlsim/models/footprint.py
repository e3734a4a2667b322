"""Bytes and FLOPs of an LLM: weights, KV cache per token, experts touched, FLOPs per token.

These are architecture facts, not timings; every timing model builds on them. bf16 weights and
KV cache (2 bytes) unless a caller says otherwise.
"""

from __future__ import annotations

from rlsim.catalog import LlmSpec

BF16_BYTES = 2


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
    """Forward attention FLOPs for one query token against one cached token (QK^T and PV)."""
    if llm.mla is not None:
        qk = llm.mla.qk_nope_head_dim + llm.mla.qk_rope_head_dim
        return 2.0 * llm.num_layers * llm.num_attention_heads * (qk + llm.mla.v_head_dim)
    return 4.0 * llm.num_layers * llm.num_attention_heads * llm.head_dim


def forward_flops(llm: LlmSpec, tokens: float, sum_sq_len: float = 0.0) -> float:
    """Forward FLOPs of `tokens` tokens; causal attention adds half of the sum of squared lengths."""
    return 2.0 * matmul_params(llm) * tokens + attention_flops_per_cached_token(llm) * sum_sq_len / 2.0


def lora_params(llm: LlmSpec, rank: int, modules: list[str]) -> float:
    """Adapter parameters: r x (in + out) per targeted projection per layer."""
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
    return float(llm.num_layers * sum(rank * (dims[m][0] + dims[m][1]) for m in modules))
