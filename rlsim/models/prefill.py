"""Prefill: the compute-bound pass that fills the KV cache of newly admitted prompts.

Time = one weight read + FLOPs (linear in tokens, plus causal attention quadratic in each
prompt's length) at the GEMM rate for that many tokens, plus the TP all-reduces. Chunking
(vLLM's chunked prefill) changes the scheduling, not the FLOPs, so it is not modelled apart.
With the model's own timed operators in the profile (one device), the fitted line replaces it:
prefill_fixed + prefill_per_sequence * prompts + prefill_per_token * tokens.
"""

from __future__ import annotations

from rlsim.calibration.profile import LinkFit, Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint
from rlsim.models.decode import allreduce_s, gemm_rate_flops


def prefill_s(
    llm: LlmSpec, profile: Profile, tp: int, lengths: list[int] | tuple[int, ...], tp_link: LinkFit | None = None
) -> float:
    """Seconds to prefill sequences of the given token lengths together on one engine.

    `tp_link`: the link of the TP group's all-reduces (default NVLink; the network across nodes).
    """
    tokens = float(sum(lengths))
    if tokens <= 0:
        return 0.0
    ops = profile.ops_for(llm) if tp == 1 else None
    if ops is not None:
        return ops.prefill_fixed_s + ops.prefill_per_sequence_s * len(lengths) + ops.prefill_per_token_s * tokens
    sum_sq = float(sum(n * n for n in lengths))
    flops = footprint.forward_flops(llm, tokens, sum_sq)
    compute = flops / (gemm_rate_flops(profile, tokens) * tp)
    weights = footprint.decode_weight_bytes(llm, int(tokens)) / (profile.memory_gbps * 1e9 * tp)
    link = tp_link or profile.intra_node
    comm = (
        2
        * llm.num_layers
        * allreduce_s(link.busbw_gbps, link.latency_s, tokens * llm.hidden_size * footprint.BF16_BYTES, tp)
    )
    return profile.iteration_overhead_s + max(compute, weights) + comm
