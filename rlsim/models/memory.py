"""Memory a placement needs per GPU, to reject configurations that cannot run.

Training (mixed precision AdamW, FSDP/ZeRO-3 sharding over all training GPUs): 2 bytes of
bf16 weights + 2 of gradients + 12 of fp32 master weights and moments per parameter, plus
activations of one micro-batch. Megatron DDP with the distributed optimizer shards only the 12
bytes of optimizer state over the data-parallel ranks; every rank keeps its TP/PP shard's bf16
weights and its bf16 gradient buffer whole (megatron/core/distributed/distributed_data_parallel_config.py
at NVIDIA/Megatron-LM@001199898c4badd01eaf0785c212d8ed7ce83042: grad_reduce_in_fp32 False).
Inference: weights / tp plus room for the KV cache.
"""

from __future__ import annotations

from rlsim.catalog import LlmSpec
from rlsim.models import footprint

TRAIN_STATE_BYTES_PER_PARAM = 16.0
# of which Megatron's distributed optimizer shards over data parallelism (fp32 master + 2 moments)
OPTIMIZER_STATE_BYTES_PER_PARAM = 12.0


def train_bytes_per_gpu(
    llm: LlmSpec,
    gpus: int,
    tp: int,
    micro_batch_tokens: int,
    recompute: bool,
    trainable_params: float,
    cp: int = 1,
    pp: int = 1,
    megatron: bool = False,
    ep: int = 1,
    etp: int | None = None,
) -> float:
    """Bytes per training GPU: sharded states plus one micro-batch of activations.

    `megatron`: the weights and gradients are split only by TP x PP (the stage's layers), the
    optimizer state also over the data-parallel ranks. `ep`: expert parallelism splits a MoE
    layer's routed experts among `ep` ranks, so each keeps 1/ep of them (Megatron-Core's
    expert-parallel group, each rank building num_experts / ep local experts:
    NVIDIA/Megatron-LM@d580efc core_v0.12.0 megatron/core/transformer/moe/moe_layer.py
    `num_local_experts`); the dense layers stay whole per TP x PP shard. `etp` (default `tp`):
    the expert tensor-parallel size, which splits each local expert's weights in place of TP
    (Megatron-Core's parallel folding: a stage's routed experts over etp x ep GPUs,
    NVIDIA/Megatron-LM@af73aa2cebf94a0bee5ea6dda2614ad989faffae megatron/core/parallel_state.py
    initialize_model_parallel). The optimizer state stays 1/gpus of every parameter: the dense
    part is sharded over the dp x cp ranks of its TP x PP shard, the experts over the
    expert-data-parallel ranks of theirs, and each product is the pool.

    Tensor and context parallelism each split a micro-batch's activations (TP with sequence
    parallelism across the hidden width, CP across the tokens).
    """
    frozen = footprint.weight_bytes(llm) if trainable_params < llm.total_params else 0.0
    states = TRAIN_STATE_BYTES_PER_PARAM * trainable_params / gpus + frozen / gpus
    if megatron:
        kept = megatron_kept_fraction(llm, tp, pp, ep, etp)
        replicated = TRAIN_STATE_BYTES_PER_PARAM - OPTIMIZER_STATE_BYTES_PER_PARAM
        states = (
            replicated * trainable_params * kept
            + OPTIMIZER_STATE_BYTES_PER_PARAM * trainable_params / gpus
            + frozen * kept
        )
    # per token per layer: ~34 x hidden bytes of activations without recompute (Korthikanti et
    # al. 2022, bf16, no sequence parallel), ~2 x hidden with full recompute (layer inputs only)
    per_token_layer = (2.0 if recompute else 34.0) * llm.hidden_size
    activations = per_token_layer * llm.num_layers * micro_batch_tokens / (tp * cp)
    return states + activations


def megatron_kept_fraction(llm: LlmSpec, tp: int, pp: int, ep: int = 1, etp: int | None = None) -> float:
    """Share of the model's parameters one Megatron rank keeps whole: its TP x PP shard of the dense
    part and its (ep x etp x pp)-th of the routed experts (`etp` default `tp`)."""
    routed = _routed_params(llm) / llm.total_params
    return ((1.0 - routed) / tp + routed / (ep * (etp or tp))) / pp


def _routed_params(llm: LlmSpec) -> float:
    """Parameters of the routed experts, every MoE layer (0 for a dense model)."""
    if llm.moe is None:
        return 0.0
    return footprint.moe_layers(llm) * llm.moe.num_experts * footprint.expert_params(llm)
