"""Weight sync: seconds from "the trainer has new weights" to "the engines run them".

One update is three costs in a row (verl and NeMo RL measure them apart; published sync times
span four orders of magnitude because sources count different parts):

1. materialise: the trainer turns its shards into full tensors. With parameter offload it first
   copies its shard back from host memory; then each tensor is all-gathered over the shard group
   (FSDP's `full_tensor()`, Megatron's TP/PP gather): (n-1)/n of the bytes over the group's link.
2. transport (the survey's axis):
   - nccl_broadcast: one broadcast per tensor; each call also pays the engine's update API
     (`update_api`: an in-process `load_weights`, or an RPC/HTTP request to an engine server);
   - nccl_bucketed: tensors packed into buckets; few calls, bandwidth-bound (verl-style);
   - filesystem: save a checkpoint, the engines read it (+ notify);
   - cuda_ipc: colocated; engines map the trainer's memory (no bytes on a link);
   - lora_adapter: only adapter bytes move (bucketed NCCL at adapter size).
3. load: the engine copies the received weights into its own layout on the GPU (read + write at
   the profile's memory bandwidth).

A cuda_ipc update of a model whose operators the profile timed (`Profile.ops_for`, one engine
device) is the measured in-memory update instead: its latency plus the model's bytes at the
measured copy bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.calibration.profile import LinkFit, Profile
from rlsim.catalog import LlmSpec
from rlsim.scenario import Transport, UpdateApi

# Per-call cost of one update call into an engine in the trainer's own process (Python loop,
# NCCL launch, the engine's load_weights per tensor). verl's one-step-off recipe broadcasts a 7B
# tensor by tensor (~340 calls) "under 300 ms" (volcengine/verl@606ed93
# recipe/one_step_off_policy/README.md, 2025-07-17): under 0.9 ms per call. 1 ms is assumed.
IN_PROCESS_CALL_S = 1.0e-3
# Per-call cost of an update request to an engine server (HTTP/RPC, deserialisation, the
# server's weight loader): 41 ms per bucket call in slime's SGLang update, 20 ms after tensor
# flattening (LMSYS blog draft "Efficient RL Training - Optimizing Weight Sync in slime",
# updated 2025-08-27). The optimised figure is used.
SERVER_CALL_S = 20.0e-3
PER_CALL_S = {UpdateApi.in_process: IN_PROCESS_CALL_S, UpdateApi.server: SERVER_CALL_S}
# Tensors per transformer layer of a dense checkpoint (q, k, v and their biases, o, gate, up,
# down, two norms, spare): the calls of a per-tensor update. MoE checkpoints whose experts are
# stored one tensor per expert have far more; that is not modelled.
TENSORS_PER_LAYER = 12
# A filesystem update also restarts nothing but waits for a notification round trip (HTTP).
FILESYSTEM_NOTIFY_S = 0.5


@dataclass(frozen=True)
class SyncPath:
    """Where the bytes travel: the trainer's shard group, the link between pools, the engines."""

    link: LinkFit
    engines: int
    engine_tp: int
    filesystem_gbps: float
    bucket_bytes: float
    shard_gpus: int = 1  # GPUs one full copy of the weights is sharded over on the trainer
    shard_link: LinkFit | None = None  # the shard group's link (None: nothing to gather)
    offloaded: bool = False  # the trainer's parameters wait in host memory between steps
    per_call_s: float = IN_PROCESS_CALL_S


def tensor_count(llm: LlmSpec) -> int:
    """Tensors a per-tensor update sends."""
    return TENSORS_PER_LAYER * llm.num_layers


def materialise_s(llm: LlmSpec, profile: Profile, path: SyncPath, payload_bytes: float) -> float:
    """Seconds for the trainer to hold full tensors: reload its offloaded shard, gather the rest."""
    seconds = 0.0
    if path.offloaded:
        seconds += payload_bytes / path.shard_gpus / (profile.host_link_gbps * 1e9)
    if path.shard_gpus > 1 and path.shard_link is not None:
        n = path.shard_gpus
        gather = (n - 1) / n * payload_bytes / (path.shard_link.busbw_gbps * 1e9)
        seconds += gather + tensor_count(llm) * path.shard_link.latency_s
    return seconds


def sync_s(
    llm: LlmSpec,
    profile: Profile,
    transport: Transport,
    path: SyncPath,
    payload_bytes: float,
    trainer_profile: Profile | None = None,
) -> float:
    """Seconds of one weight update of `payload_bytes` (bf16 weights or adapters).

    `profile` is the engines' GPU (they load the weights); `trainer_profile` the trainer's
    (it gathers them), when the pools run on different GPU types (default: the same).
    """
    bw = path.link.busbw_gbps * 1e9
    load = 2.0 * payload_bytes / path.engine_tp / (profile.memory_gbps * 1e9)
    if transport is Transport.cuda_ipc:
        ops = profile.ops_for(llm) if path.engine_tp == 1 else None
        if ops is not None:  # measured: the model's weights in the dtype it runs, one copy
            return ops.weight_sync_latency_s + ops.weight_bytes / (ops.weight_copy_gbps * 1e9)
    gather = materialise_s(llm, trainer_profile or profile, path, payload_bytes)
    if transport is Transport.cuda_ipc:
        # the engine reads each shard once from the trainer's HBM and writes its own layout
        return gather + load + path.per_call_s
    if transport is Transport.filesystem:
        io = payload_bytes / (path.filesystem_gbps * 1e9)
        return gather + io + io + FILESYSTEM_NOTIFY_S + load  # write once, engines read in parallel
    if transport is Transport.nccl_broadcast:
        calls = tensor_count(llm)
        return gather + calls * (path.per_call_s + path.link.latency_s) + payload_bytes / bw + load
    # nccl_bucketed and lora_adapter
    buckets = max(1.0, payload_bytes / path.bucket_bytes)
    return gather + buckets * (path.per_call_s + path.link.latency_s) + payload_bytes / bw + load
