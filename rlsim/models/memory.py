"""Memory a placement needs per GPU, to reject configurations that cannot run.

Training (mixed precision AdamW, FSDP/ZeRO-3 sharding over all training GPUs): 2 bytes of
bf16 weights + 2 of gradients + 12 of fp32 master weights and moments per parameter, plus
activations of one micro-batch. Inference: weights / tp plus room for the KV cache.
"""

from __future__ import annotations

from rlsim.catalog import LlmSpec
from rlsim.models import footprint

TRAIN_STATE_BYTES_PER_PARAM = 16.0


def train_bytes_per_gpu(
    llm: LlmSpec,
    gpus: int,
    tp: int,
    micro_batch_tokens: int,
    recompute: bool,
    trainable_params: float,
    cp: int = 1,
) -> float:
    """Bytes per training GPU: sharded states plus one micro-batch of activations.

    Tensor and context parallelism each split a micro-batch's activations (TP with sequence
    parallelism across the hidden width, CP across the tokens).
    """
    frozen = footprint.weight_bytes(llm) if trainable_params < llm.total_params else 0.0
    states = TRAIN_STATE_BYTES_PER_PARAM * trainable_params / gpus + frozen / gpus
    # per token per layer: ~34 x hidden bytes of activations without recompute (Korthikanti et
    # al. 2022, bf16, no sequence parallel), ~2 x hidden with full recompute (layer inputs only)
    per_token_layer = (2.0 if recompute else 34.0) * llm.hidden_size
    activations = per_token_layer * llm.num_layers * micro_batch_tokens / (tp * cp)
    return states + activations
