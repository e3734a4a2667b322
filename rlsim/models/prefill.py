"""Prefill: the compute-bound pass that fills the KV cache of newly admitted prompts.

Time = one weight read + FLOPs (linear in tokens, plus causal attention quadratic in each
prompt's length over the full-attention layers; a hybrid model's chunked Gated DeltaNet layers are
linear; the LM head only at each prompt's last position, where the engine samples:
`footprint.prefill_flops`) at the GEMM rate for that many tokens, plus the TP all-reduces. Chunking
(vLLM's chunked prefill) changes the scheduling, not the FLOPs, so it is not modelled apart.
With the model's own timed operators in the profile (one device), the fitted line replaces it:
prefill_fixed + prefill_per_sequence * prompts + prefill_per_token * tokens.
"""

from __future__ import annotations

import numpy as np

from rlsim.calibration.profile import LinkFit, Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint
from rlsim.models.decode import allreduce_s, gemm_layer_params, gemm_rate_flops, tokens_half


def prefill_s(
    llm: LlmSpec,
    profile: Profile,
    tp: int,
    lengths: list[int] | tuple[int, ...],
    tp_link: LinkFit | None = None,
    *,
    logits_everywhere: bool = False,
) -> float:
    """Seconds to prefill sequences of the given token lengths together on one engine.

    `tp_link`: the link of the TP group's all-reduces (default NVLink; the network across nodes).
    `logits_everywhere`: the LM head on every position (`footprint.forward_flops`), as a forward
    that needs each token's log-prob does (a distillation teacher's); an engine's prefill takes
    logits at each prompt's last position only.
    """
    tokens = float(sum(lengths))
    if tokens <= 0:
        return 0.0
    ops = profile.ops_for(llm) if tp == 1 else None
    if ops is not None:
        return ops.prefill_fixed_s + ops.prefill_per_sequence_s * len(lengths) + ops.prefill_per_token_s * tokens
    sum_sq = float(sum(n * n for n in lengths))
    if logits_everywhere:
        flops = footprint.forward_flops(llm, tokens, sum_sq)
    else:
        flops = footprint.prefill_flops(llm, tokens, float(len(lengths)), sum_sq)
    compute = flops / (gemm_rate_flops(profile, tokens, gemm_layer_params(llm, tp)) * tp)
    weights = footprint.decode_weight_bytes(llm, int(tokens)) / (profile.memory_gbps * 1e9 * tp)
    link = tp_link or profile.intra_node
    comm = (
        2
        * llm.num_layers
        * allreduce_s(link.busbw_gbps, link.latency_s, tokens * llm.hidden_size * footprint.BF16_BYTES, tp)
    )
    return profile.iteration_overhead_s + max(compute, weights) + comm


def prefills_s(
    llm: LlmSpec,
    profile: Profile,
    tp: int,
    tokens: np.ndarray,
    sum_sq: np.ndarray,
    counts: np.ndarray,
    tp_link: LinkFit | None = None,
) -> np.ndarray:
    """`prefill_s` of many prefills at once, bit for bit: prefill i of `counts[i]` (>= 1)
    sequences totalling `tokens[i]` (> 0) tokens, with `sum_sq[i]` the sum of their squared
    lengths (int64 arrays: the sums are exact, as the scalar form's are).

    A refill under KV pressure prefills a preempted sequence or two at a time, each of a context
    length seen once (its prompt and the tokens it had generated), so no cache by lengths helps;
    the plan (simulator/refill.py) times them all in one go. Every operation mirrors the scalar
    form in the same order (float64 arithmetic rounds as Python's does).
    """
    total = tokens.astype(np.float64)
    ops = profile.ops_for(llm) if tp == 1 else None
    if ops is not None:
        return ops.prefill_fixed_s + ops.prefill_per_sequence_s * counts + ops.prefill_per_token_s * total
    logits = footprint.logit_params(llm)
    flops = (  # `footprint.prefill_flops`
        2.0 * (footprint.matmul_params(llm) - logits) * total
        + 2.0 * logits * counts.astype(np.float64)
        + footprint.linear_attention_flops_per_token(llm) * total
        + footprint.attention_flops_per_cached_token(llm) * sum_sq.astype(np.float64) / 2.0
    )
    t = np.maximum(total, 1.0)
    half = tokens_half(profile, gemm_layer_params(llm, tp))
    rate = profile.matmul_tflops * 1e12 * t / (t + half)  # `gemm_rate_flops`
    compute = flops / (rate * tp)
    if llm.moe is None:
        weights = footprint.decode_weight_bytes(llm, 0) / (profile.memory_gbps * 1e9 * tp)
    else:  # the experts touched depend on the tokens: one scalar per distinct total
        distinct, inverse = np.unique(tokens, return_inverse=True)
        per = [footprint.decode_weight_bytes(llm, n) for n in distinct.tolist()]
        weights = np.array(per)[inverse] / (profile.memory_gbps * 1e9 * tp)
    link = tp_link or profile.intra_node
    if tp <= 1:  # `allreduce_s` of one rank
        comm = 2 * llm.num_layers * 0.0
    else:
        nbytes = total * llm.hidden_size * footprint.BF16_BYTES
        comm = 2 * llm.num_layers * (link.latency_s + 2.0 * (tp - 1) / tp * nbytes / (link.busbw_gbps * 1e9))
    return profile.iteration_overhead_s + np.maximum(compute, weights) + comm
