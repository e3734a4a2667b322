"""Colocated switches: what it costs the same GPUs to turn from generation to training and back.

verl's hybrid engine, going to training: the engines sleep (KV cache freed; weights optionally
offloaded), the optimizer state comes back from host memory. Going back: the optimizer state is
offloaded again and the engines wake (weights reloaded if they were offloaded, KV re-allocated).
Each transfer is bytes over the host link of every GPU in parallel, plus a fixed cost of freeing
and re-allocating the KV cache and CUDA graphs (vLLM sleep/wake; a scenario field, 0.5 s by
default, an assumption).
"""

from __future__ import annotations

from rlsim.calibration.profile import Profile

# fp32 master weights + two AdamW moments, bytes per trainable parameter.
OPTIMIZER_STATE_BYTES_PER_PARAM = 12.0


def switch_s(
    profile: Profile,
    gpus: int,
    trainable_params: float,
    engine_weight_bytes_per_gpu: float,
    offload_optimizer: bool,
    offload_engine_weights: bool,
    reallocate_s: float,
    optimizer_gbps: float | None = None,
) -> float:
    """Seconds of one direction of a colocated switch (the two directions are symmetric).

    `optimizer_gbps`: the per-GPU rate the optimizer state moves at (None: the host link, as
    pinned copies run). A library that copies it tensor by tensor into fresh pageable memory
    (`state[k] = v.to("cpu")`) runs far below the link: see `Colocation.optimizer_offload_gbps`.
    """
    link = profile.host_link_gbps * 1e9
    seconds = reallocate_s
    if offload_optimizer:
        rate = link if optimizer_gbps is None else min(optimizer_gbps * 1e9, link)
        seconds += OPTIMIZER_STATE_BYTES_PER_PARAM * trainable_params / gpus / rate
    if offload_engine_weights:
        seconds += engine_weight_bytes_per_gpu / link
    return seconds


def param_round_trip_s(profile: Profile, shard_bytes_per_gpu: float, reload_gbps: float) -> float:
    """Seconds to copy an offloaded parameter shard to the GPU before a training phase and back after it.

    verl's offloaded actor does this around every phase that needs the parameters: compute_log_prob
    and update_actor each load the shard first and offload it at the end (volcengine/verl@503ea75f5
    verl/workers/fsdp_workers.py); FSDP2 moves it with `model.to(device)` / `model.cpu()`
    (verl/utils/fsdp_utils.py), blocking copies of pageable memory, one per parameter, at
    `reload_gbps` per GPU (at most the host link). Every GPU copies its own shard at once.
    """
    rate = min(reload_gbps, profile.host_link_gbps) * 1e9
    return 2.0 * shard_bytes_per_gpu / rate
