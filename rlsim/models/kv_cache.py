"""KV-cache capacity of one engine: how many tokens can be cached at once.

capacity = (memory x fraction x tp - weights - activation reserve) / the engine's KV bytes per
token (KV heads replicated once tp exceeds them, an MLA latent on every GPU), as vLLM
sizes it (its share covers the activations it profiles); an engine whose share covers only weights
and the KV pool (SGLang's mem_fraction_static) keeps its activations outside the share, so the
reserve is not taken from it (`reserve_in_fraction=False`). Other weights resident on the engine's
GPUs (a reward model placed `with_inference`) come out of the same share (`other_weights_bytes`).
It bounds concurrency: an engine whose cached tokens would exceed it preempts a sequence (vLLM's
recompute preemption) and re-prefills it later.

A hybrid model (Gated DeltaNet layers) caches per token only in its full-attention layers; each
running sequence also holds one padded state page per Gated DeltaNet layer from the same pool
(`footprint.linear_state_bytes_per_sequence`). rlsim's engines count cached tokens only, so the
states of `state_sequences` sequences (the engine's max_batch: vLLM's max_num_seqs) are set aside
up front: exact while the batch is full, a little short of vLLM's room when fewer run.
"""

from __future__ import annotations

from rlsim.calibration.profile import Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint

# Activations, CUDA graphs and the sampler's buffers; vLLM profiles them at start-up.
# 1 GB per GPU is a round figure for 7B-70B models at batch 256 (assumption, documented).
ACTIVATION_RESERVE_GB_PER_GPU = 1.0


def kv_budget_bytes(
    llm: LlmSpec,
    profile: Profile,
    tp: int,
    memory_fraction: float,
    reserve_in_fraction: bool = True,
    other_weights_bytes: float = 0.0,
    state_sequences: int = 0,
) -> float:
    """Bytes left for the per-token KV cache on a TP-`tp` engine (negative when the weights do not fit),
    after the Gated DeltaNet states of `state_sequences` running sequences (none unless hybrid)."""
    usable = profile.memory_bytes * memory_fraction * tp  # of the total CUDA reports, as vLLM and SGLang take it
    reserve = ACTIVATION_RESERVE_GB_PER_GPU * 1e9 * tp if reserve_in_fraction else 0.0
    states = state_sequences * footprint.linear_state_bytes_per_sequence(llm, tp)
    return usable - reserve - footprint.weight_bytes(llm) - other_weights_bytes - states


def kv_capacity_tokens(
    llm: LlmSpec,
    profile: Profile,
    tp: int,
    memory_fraction: float,
    reserve_in_fraction: bool = True,
    other_weights_bytes: float = 0.0,
    state_sequences: int = 0,
) -> int:
    """Tokens an engine can hold in its KV cache (0 when nothing fits), beside `state_sequences` states."""
    budget = kv_budget_bytes(
        llm, profile, tp, memory_fraction, reserve_in_fraction, other_weights_bytes, state_sequences
    )
    return max(0, int(budget // footprint.engine_kv_bytes_per_token(llm, tp)))
