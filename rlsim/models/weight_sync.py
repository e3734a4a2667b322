"""Weight sync: seconds from "the trainer has new weights" to "the engines run them".

Transports (the survey's axis):
- nccl_broadcast: per-tensor broadcasts from trainer rank 0 after an FSDP all-gather; each
  call pays a software overhead (Python loop, NCCL launch, the engine's load_weights per tensor).
- nccl_bucketed: tensors packed into buckets; few calls, bandwidth-bound (verl-style).
- filesystem: save a checkpoint, the engines read it (+ notify).
- cuda_ipc: colocated; engines map the trainer's memory and reshard at HBM speed.
- lora_adapter: only adapter bytes move (bucketed NCCL at adapter size).
Every transport ends with the engine copying the received weights into its own layout on the
GPU (read + write at the profile's memory bandwidth). A cuda_ipc update of a model whose
operators the profile timed (`Profile.ops_for`, one engine device) is the measured in-memory
update instead: its latency plus the model's bytes at the measured copy bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.calibration.profile import LinkFit, Profile
from rlsim.catalog import LlmSpec
from rlsim.scenario import Transport

# Per-call software cost of an unbucketed broadcast (Python loop + NCCL launch + engine
# load_weights per tensor). 1 ms x ~12 tensors per layer reproduces the 100-500 ms full-model
# broadcasts verl reports for 7B-32B models; an assumption, not measured.
PER_CALL_OVERHEAD_S = 1.0e-3
TENSORS_PER_LAYER = 12
# A filesystem update also restarts nothing but waits for a notification round trip (HTTP).
FILESYSTEM_NOTIFY_S = 0.5


@dataclass(frozen=True)
class SyncPath:
    """Where the bytes travel: the link between pools and the receiving engines."""

    link: LinkFit
    engines: int
    engine_tp: int
    filesystem_gbps: float
    bucket_bytes: float


def sync_s(llm: LlmSpec, profile: Profile, transport: Transport, path: SyncPath, payload_bytes: float) -> float:
    """Seconds of one weight update of `payload_bytes` (bf16 weights or adapters)."""
    bw = path.link.busbw_gbps * 1e9
    load = 2.0 * payload_bytes / path.engine_tp / (profile.memory_gbps * 1e9)
    if transport is Transport.cuda_ipc:
        ops = profile.ops_for(llm) if path.engine_tp == 1 else None
        if ops is not None:  # measured: the model's weights in the dtype it runs, one copy
            return ops.weight_sync_latency_s + ops.weight_bytes / (ops.weight_copy_gbps * 1e9)
        # the engine reads each shard once from the trainer's HBM and writes its own layout
        return 2.0 * payload_bytes / path.engine_tp / (profile.memory_gbps * 1e9) + PER_CALL_OVERHEAD_S
    if transport is Transport.filesystem:
        io = payload_bytes / (path.filesystem_gbps * 1e9)
        return io + io + FILESYSTEM_NOTIFY_S + load  # write once, engines read in parallel
    if transport is Transport.nccl_broadcast:
        calls = TENSORS_PER_LAYER * llm.num_layers
        return calls * (PER_CALL_OVERHEAD_S + path.link.latency_s) + payload_bytes / bw + load
    # nccl_bucketed and lora_adapter
    buckets = max(1.0, payload_bytes / path.bucket_bytes)
    return buckets * (PER_CALL_OVERHEAD_S + path.link.latency_s) + payload_bytes / bw + load
