"""Weight sync: seconds from "the trainer has new weights" to "the engines run them".

One update is three costs in a row (verl and NeMo RL measure them apart; published sync times
span four orders of magnitude because sources count different parts):

1. materialise: the trainer turns its shards into full tensors, tensor by tensor, in the dtype
   its shards are stored in (`stored_param_bytes`: FSDP's mixed precision keeps fp32 shards and
   casts after the gather; Megatron keeps bf16). With parameter offload each rank first copies
   its shard of the tensor back from host memory (`reload_gbps` per GPU: verl's offload keeps
   every parameter in its own pageable buffer); then the tensor is all-gathered over the shard
   group (FSDP's `full_tensor()`, Megatron's TP/PP gather): (n-1)/n of the bytes over the
   group's link. Where the sender's export was measured (`export_gbps`: rank 0 converts and
   packs every full tensor into its bucket), that work follows each gather: rank 0 packs a
   tensor only once its gather is done, and the next gather starts after, so the three add up.
   Sources: verl's FSDP engine trains an fp32 model (`model_dtype: fp32`) and exports
   `param.to(device).full_tensor().to(torch.bfloat16)` per parameter; its nccl engine copies
   each into the bucket before pulling the next (verl-project/verl@b7ff88e3:
   verl/workers/engine/fsdp/transformer_impl.py get_per_tensor_param,
   verl/checkpoint_engine/nccl_checkpoint_engine.py send_weights). NeMo RL's DTensor worker
   "always load[s] the model in float32" and casts after `full_tensor()` (NVIDIA-NeMo/RL@7ea279a:
   nemo_rl/models/policy/workers/dtensor_policy_worker.py).
2. transport (the survey's axis):
   - nccl_broadcast: one broadcast per tensor; each tensor costs its host work and a request to
     the engine (`update_api`: an in-process `load_weights`, or an RPC/HTTP request to a server).
     NCCL calls return to the host at once, so the loop's host work and the device's gathers,
     broadcasts and copies overlap: the update takes the longer of the two (verl one-step-off's
     loop waits on nothing: `full_tensor()`, `copy_`, `collective.broadcast`, `load_weights`,
     volcengine/verl@606ed93 recipe/one_step_off_policy/fsdp_workers.py sync_rollout_weights);
   - nccl_bucketed: tensors packed into buckets; few calls (verl's checkpoint engine), but every
     tensor still costs serial host work (`tensor_host_s`): an MoE checkpoint stores one tensor
     per expert and projection, so it has ~50x the tensors of a dense model of its size;
   - filesystem: save a checkpoint, the engines read it (+ notify);
   - cuda_ipc: colocated; engines map the trainer's memory (no bytes on a link); per tensor the
     same host work; through a single controller (NeMo RL's refit) every bucket also costs one
     Ray call per trainer worker and per engine, made one after another;
   - lora_adapter: only adapter bytes move (bucketed NCCL at adapter size).
3. load: the engine copies the received weights into its own layout on the GPU (read + write at
   the profile's memory bandwidth).

A cuda_ipc update of a model whose operators the profile timed (`Profile.ops_for`, one engine
device) is the measured in-memory update instead: its latency plus the model's bytes at the
measured copy bandwidth.

The broadcast's link: to engines on the sender's node, that node's link; to other nodes, the
network, through as many NICs as the broadcast group has ranks on the sender's node (each NCCL
channel leaves the node at its own NIC; a group of the sender alone leaves through one,
verl-project/verl PR 7291), at most the node link.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.calibration.profile import LinkFit, Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint
from rlsim.scenario import Transport, UpdateApi

# Serial host work per checkpoint tensor, on the critical path in every update: the trainer
# produces the full tensor (and packs it into a bucket), the engine maps or receives it and runs
# its weight loader (an MoE engine's FusedMoE weight_loader is one call per expert and
# projection). Bucketing removes requests, not this. verl's one-step-off recipe broadcasts a 7B
# tensor by tensor (~340 tensors, each one NCCL broadcast and one in-process load_weights) "under
# 300 ms" (volcengine/verl@606ed93 recipe/one_step_off_policy/README.md, 2025-07-17): under
# 0.9 ms per tensor; where "both sides [are] dominated by per-expert conversion" a Qwen3-30B-A3B
# delta sync (~18k expert tensors, Megatron TP4 x EP2) takes 17.1-19.7 s, about 1 ms per tensor
# (verl-project/verl issue 7060, perf matrix comment of 2026-07-20). 1 ms is used.
TENSOR_HOST_S = 1.0e-3
# A request's own cost, beyond its tensors' host work. In process: a Python call, nothing that
# the per-tensor figure above does not already hold. To an engine server (HTTP/RPC, argument
# (de)serialisation): 41 ms per bucket request in slime's SGLang update, 20 ms after tensor
# flattening (LMSYS blog draft "Efficient RL Training - Optimizing Weight Sync in slime",
# updated 2025-08-27). The optimised figure is used.
IN_PROCESS_CALL_S = 0.0
SERVER_CALL_S = 20.0e-3
PER_CALL_S = {UpdateApi.in_process: IN_PROCESS_CALL_S, UpdateApi.server: SERVER_CALL_S}
# One Ray actor call from a single controller, submission and argument serialisation: 2,836 calls
# per second with arguments, asynchronously (ray-project/ray@08444c4cf99b7584c60525e67a370e9382e13a81
# release/perf_metrics/microbenchmark.json, 1_1_async_actor_calls_with_args_async). NeMo RL's
# refit makes these one after another for every worker and bucket (NVIDIA-NeMo/RL issue 945).
CONTROLLER_CALL_S = 1.0 / 2836.0
# A filesystem update also restarts nothing but waits for a notification round trip (HTTP).
FILESYSTEM_NOTIFY_S = 0.5
# Per GPU, the rate an offloaded shard returns from pageable host memory while every GPU of the
# node copies at once: the CUDA driver stages pageable copies through a pinned buffer, one host
# memcpy per copy. verl's FSDP offload keeps each parameter in its own pageable buffer; staging a
# Qwen2.5-7B shard (7.6e9 fp32 parameters over 8 GPUs: 3.8 GB a GPU) to the GPU and back took
# 3.3-4.5 s on 8 H100s (verl-project/verl PR 7005, b7ff88e3dcfc649b1bc830e00ed72ef0ac1810b9,
# 2026-07-10: "hundreds of small blocking H2D + D2H copies"): 7.6 GB / 3.9 s, ~2 GB/s.
PAGEABLE_RELOAD_GBPS = 2.0  # the scenario's training.offload_reload_gbps default


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
    per_call_s: float = IN_PROCESS_CALL_S  # one request's own cost (an in-process call: none)
    tensor_host_s: float = TENSOR_HOST_S  # serial host work per tensor, every transport but files
    controller_calls: int = 0  # Ray calls a single controller makes per bucket (0: no controller)
    export_gbps: float | None = None  # measured rate rank 0 converts and packs full tensors at (None: free)
    stored_param_bytes: int = footprint.BF16_BYTES  # bytes per parameter the trainer's shards hold
    reload_gbps: float = PAGEABLE_RELOAD_GBPS  # per GPU, an offloaded shard's copy back from host memory


def sender_node(
    training_gpus: int, inference_gpus: int, gpus_per_node: int, all_trainer_ranks: bool
) -> tuple[bool, int]:
    """(every engine GPU on the sender's node, ranks of the broadcast group on that node).

    Pools take contiguous GPU ids, the training pool first, nodes `gpus_per_node` ids each; the
    sender is the trainer's rank 0 (GPU 0). The group holds the engines' GPUs and the sender, or
    every trainer rank.
    """
    on_node_training = min(training_gpus, gpus_per_node)
    on_node_inference = max(0, min(training_gpus + inference_gpus, gpus_per_node) - training_gpus)
    relays = (on_node_training if all_trainer_ranks else 1) + on_node_inference
    return training_gpus + inference_gpus <= gpus_per_node, relays


def broadcast_link(intra: LinkFit, inter: LinkFit, destinations_on_sender_node: bool, relays: int) -> LinkFit:
    """The link a broadcast from the trainer's rank 0 to the engines runs at.

    All destinations on the sender's node: the node link. Otherwise the network, through `relays`
    NICs (the group's ranks on the sender's node, each NCCL channel leaving at its own NIC), at
    most the node link's bandwidth.
    """
    if destinations_on_sender_node:
        return intra
    return LinkFit(busbw_gbps=min(intra.busbw_gbps, max(1, relays) * inter.busbw_gbps), latency_s=inter.latency_s)


def layer_tensor_count(llm: LlmSpec, moe_layer: bool) -> int:
    """Checkpoint tensors of one transformer block, as Hugging Face checkpoints store them.

    Attention: q, k, v (each with a bias under qkv_bias) and o, or MLA's down/up projections and
    their norms; q and k norms under qk_norm; the two block norms. FFN: gate, up and down of a
    dense layer; of an MoE layer, gate, up and down per routed expert (one tensor each, the layout
    vLLM's and SGLang's FusedMoE weight_loader take expert by expert), the router, and per shared
    expert its three projections.
    """
    if llm.mla is not None:
        attention = 5 + (2 if llm.mla.q_lora_rank else 0)  # (q | q_a, q_a_norm, q_b), kv_a, kv_a_norm, kv_b, o
    else:
        attention = 4 + (3 if llm.qkv_bias else 0) + (2 if llm.qk_norm else 0)
    norms = 2
    if not moe_layer or llm.moe is None:
        return attention + norms + 3
    return attention + norms + 3 * llm.moe.num_experts + 1 + 3 * llm.moe.shared_experts


# Tensors of a Gated DeltaNet token mixer in a Hugging Face checkpoint: in_proj_qkvz, in_proj_ba,
# conv1d, dt_bias, A_log, the gated norm and out_proj (Qwen3-Next's layout; Qwen3.5 splits the two
# input projections into four, two more)
GATED_DELTANET_TENSORS = 7


def tensor_count(llm: LlmSpec) -> int:
    """Tensors a full update sends: every block's, the embedding, the final norm and the LM head.

    A hybrid model's Gated DeltaNet layers send their token mixer's tensors in place of attention's.
    """
    dense = llm.num_layers if llm.moe is None else llm.moe.dense_layers
    blocks = dense * layer_tensor_count(llm, False) + (llm.num_layers - dense) * layer_tensor_count(llm, True)
    if llm.linear_attention is not None:
        attention = 4 + (3 if llm.qkv_bias else 0) + (2 if llm.qk_norm else 0)
        blocks += llm.linear_attention_layers * (GATED_DELTANET_TENSORS - attention)
    return blocks + 2 + (0 if llm.tie_word_embeddings else 1)


def reload_s(profile: Profile, path: SyncPath, payload_bytes: float) -> float:
    """Seconds for each rank to copy its offloaded shard back (0 without offload); host-blocking.

    Every rank copies its own 1/n of the stored bytes at once, at the path's per-GPU rate, at
    most the profile's host link.
    """
    if not path.offloaded:
        return 0.0
    stored = payload_bytes * path.stored_param_bytes / footprint.BF16_BYTES
    return stored / path.shard_gpus / (min(path.reload_gbps, profile.host_link_gbps) * 1e9)


def gather_s(llm: LlmSpec, path: SyncPath, payload_bytes: float) -> float:
    """Seconds of the shard group's all-gathers, one per tensor, in the stored dtype (device work)."""
    if path.shard_gpus <= 1 or path.shard_link is None:
        return 0.0
    n = path.shard_gpus
    stored = payload_bytes * path.stored_param_bytes / footprint.BF16_BYTES
    return (n - 1) / n * stored / (path.shard_link.busbw_gbps * 1e9) + tensor_count(llm) * path.shard_link.latency_s


def export_s(path: SyncPath, payload_bytes: float) -> float:
    """Seconds of rank 0's measured conversion and packing of the full tensors (0 where unmeasured)."""
    return 0.0 if path.export_gbps is None else payload_bytes / (path.export_gbps * 1e9)


def materialise_s(llm: LlmSpec, profile: Profile, path: SyncPath, payload_bytes: float) -> float:
    """Seconds for the trainer's rank 0 to have produced every full tensor of `payload_bytes` (bf16).

    Per tensor, one after another: each rank reloads its offloaded shard of it, the shard group
    all-gathers it, rank 0 converts and packs it (the host waits for each gather before it packs,
    and packs before it starts the next). `profile` is the trainer's GPU.
    """
    return reload_s(profile, path, payload_bytes) + gather_s(llm, path, payload_bytes) + export_s(path, payload_bytes)


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
    trainer = trainer_profile or profile
    if transport is Transport.nccl_broadcast:  # one request and one broadcast per tensor
        calls = tensor_count(llm)
        host = calls * (path.tensor_host_s + path.per_call_s)
        host += reload_s(trainer, path, payload_bytes) + export_s(path, payload_bytes)
        device = gather_s(llm, path, payload_bytes) + calls * path.link.latency_s + payload_bytes / bw + load
        return max(host, device)  # the loop never waits on the device: one side hides the other
    gather = materialise_s(llm, trainer, path, payload_bytes)
    if transport is Transport.cuda_ipc:
        # the engine reads each shard once from the trainer's HBM and writes its own layout
        buckets = max(1.0, payload_bytes / path.bucket_bytes)
        controller = buckets * path.controller_calls * CONTROLLER_CALL_S
        return gather + tensor_count(llm) * path.tensor_host_s + controller + load + path.per_call_s
    if transport is Transport.filesystem:
        io = payload_bytes / (path.filesystem_gbps * 1e9)
        return gather + io + io + FILESYSTEM_NOTIFY_S + load  # write once, engines read in parallel
    # nccl_bucketed and lora_adapter
    buckets = max(1.0, payload_bytes / path.bucket_bytes)
    per_tensor = tensor_count(llm) * path.tensor_host_s if transport is Transport.nccl_bucketed else 0.0
    return gather + per_tensor + buckets * (path.per_call_s + path.link.latency_s) + payload_bytes / bw + load
