"""Training-side time of one RL step, phase by phase.

FLOPs follow the usual accounting: a forward pass is 2·P_active·tokens plus causal attention,
a backward is twice that (activation gradients and weight gradients, one forward each), and
activation recompute adds one forward. A LoRA run computes no weight gradients for the frozen
base, so its backward costs about one forward. They run at the profile's training MFU, which
saturates in the tokens one device holds per micro-batch, times the pipeline-parallel bubble.

A MoE model's routed experts run as grouped GEMMs over the tokens routed to each expert, not
over the micro-batch: their FLOPs are charged at the dense rate times the GEMM efficiency at the
micro-batch's rows over that at the rows per expert, and the permutations that sort tokens into
expert order and back add memory-bound time per MoE layer and pass (`moe_layer`).

A micro-batch never holds more than a minibatch gives one rank: at a fixed global batch, more
data-parallel ranks each get fewer tokens, so `micro_batch_tokens` is a cap (verl's
ppo_max_token_len_per_gpu, Megatron's micro-batch), and MFU follows the tokens a rank really
holds. Old-logprob and reference passes are forwards; PPO adds a critic of the policy's size
(forward for values, forward+backward to train). The optimizer step is memory bound (AdamW
reads and writes fp32 master weights, two moments and the gradient).

FSDP/ZeRO-3 all-gathers the parameters for every micro-batch's forward and again for its
backward, and reduce-scatters the gradients after it: each costs (n-1)/n of the shard group's
bytes per GPU, whatever the number of GPUs, while the compute per GPU shrinks as they grow.
The traffic overlaps compute (prefetch), so a phase takes the longer of the two; when it is the
traffic (small per-GPU micro-batches, slow links) halving the pool less than doubles the time.
The shard group is every data-parallel rank unless `fsdp_size` makes it smaller (HSDP); then
the gradient shards are also all-reduced across the replica groups once per minibatch.

Tensor parallelism trades activations inside every layer: Megatron's TP with sequence
parallelism all-gathers the micro-batch's hidden states before the attention and MLP GEMMs and
reduce-scatters them after, two of each per layer in the forward and as many in the backward
(Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, sec. 4.2.2; without sequence parallelism two all-reduces, the same bytes). The
GEMMs wait for them: Megatron-Core overlaps them only with `tp_comm_overlap`, off by default
(NVIDIA/Megatron-LM@02aa3ee454b5ff16b1bf356ec36fa0cc1c26858f megatron/core/model_parallel_config.py).
So they add to the compute, per micro-batch and per layer of a pipeline stage.

A pipeline runs at the pace of its slowest stage. Megatron-Core splits the decoder layers evenly
over the stages by default and puts the output layer (hidden x vocabulary, and the loss) on the
last one (`account_for_loss_in_pipeline_split` and uneven first/last stages off:
NVIDIA/Megatron-LM@d580efc68a9f0dbf1945f834f6f6200cd01d3343, core_v0.12.0,
megatron/core/transformer/transformer_block.py get_num_layers_to_build), so the last stage does
the mean stage's work plus (pp-1)/pp of the output layer's: 8% more for a 7B model with a
152K vocabulary at PP2 (`pp_stage_imbalance`).

Data-parallel ranks run at the pace of the slowest too: each trains its own share of the step's
sequences and every minibatch ends in a gradient reduction, so the compute of each phase is the
slowest rank's (`rank_balance.slowest_rank_factors`, over the sequences as the library hands them
out in a canonical random order, a sequence's work its linear and attention FLOPs; it reads only
the multiset of lengths); the collectives are charged as before.

When the profile holds the model's own timed operators (`Profile.ops_for`) and one device
trains the whole model (no TP/PP/DP, no LoRA, no MFU override), each phase is the sum of the
fitted passes instead: a pass costs a fixed time plus a time per token, once per micro-batch
(`minibatches` x ceil(minibatch tokens / micro_batch_tokens)), and the optimizer step is one
measured time per minibatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlsim.calibration.profile import LinkFit, ModelOps, Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint, moe_layer, rank_balance
from rlsim.models.rank_balance import RankAssignment

# AdamW with fp32 master weights: param + grad + two moments, read and written (bytes/param).
OPTIMIZER_BYTES_PER_PARAM = 32.0


@dataclass(frozen=True)
class TrainShape:
    """The training pool's parallel layout and per-step token counts."""

    gpus: int
    tp: int
    pp: int
    micro_batch_tokens: int
    activation_recompute: bool
    minibatches: int
    trainable_params: float  # all parameters, or the LoRA adapters only
    mfu_override: float | None = None
    cp: int = 1  # context/sequence-parallel ranks: each holds 1/cp of every sequence
    ep: int = 1  # expert-parallel ranks (MoE), within the data-parallel group
    etp: int | None = None  # expert tensor-parallel size: GPUs splitting each routed expert (None: tp)
    first_stage_layers: int | None = None  # decoder layers of the first pipeline stage (None: an even split)
    last_stage_layers: int | None = None  # decoder layers of the last pipeline stage (None: an even split)
    a2a_link: LinkFit | None = None  # the link the cp and ep all-to-alls use (None: no all-to-all cost)
    fsdp_size: int | None = None  # GPUs of one FSDP shard group (None: every data-parallel rank)
    shard_link: LinkFit | None = None  # the shard group's link (None: by pool size, see fsdp_link)
    replica_link: LinkFit | None = None  # the link across HSDP replica groups
    tp_link: LinkFit | None = None  # the link a TP group's activation collectives use (None: no cost)
    megatron_ddp: bool = False  # Megatron DDP + distributed optimizer instead of FSDP's per-micro-batch gathers
    rank_assignment: RankAssignment = RankAssignment.balanced  # how sequences go to data-parallel ranks

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def shard_ranks(self) -> int:
        return min(self.fsdp_size or self.dp, self.dp)

    @property
    def replicas(self) -> int:
        return max(1, self.dp // self.shard_ranks)


@dataclass(frozen=True)
class TrainPhases:
    """Seconds of each training phase of one RL step (the recorder's state names)."""

    logprob_s: float
    train_s: float
    optimizer_s: float


def micro_batches(shape: TrainShape, tokens_per_rank: float) -> int:
    """Micro-batches a rank runs for `tokens_per_rank` tokens: as few as the cap allows."""
    return max(1, math.ceil(tokens_per_rank / shape.micro_batch_tokens))


def mfu(profile: Profile, shape: TrainShape, micro_tokens: float | None = None) -> float:
    """Training MFU at `micro_tokens` per rank per micro-batch (default: the cap).

    Tensor parallelism splits the weights, not the tokens: every rank of a TP group runs its
    GEMMs over all the micro-batch's tokens (Megatron's sequence parallelism splits only the
    norms' and dropouts' activations), so the saturation is in the micro-batch's tokens.
    """
    per_device = (micro_tokens if micro_tokens is not None else shape.micro_batch_tokens) / shape.cp
    return mfu_at_tokens(profile, per_device, shape.mfu_override)


def mfu_at_tokens(profile: Profile, tokens_per_device: float, base: float | None = None) -> float:
    """Training MFU with `tokens_per_device` tokens per micro-batch: saturating in the tokens."""
    peak = base or profile.train_mfu
    return peak * tokens_per_device / (tokens_per_device + profile.train_tokens_half)


def _pp_bubble(shape: TrainShape, micro: int) -> float:
    return (shape.pp - 1) / (micro + shape.pp - 1)


def pp_stage_imbalance(
    llm: LlmSpec,
    pp: int,
    fwd_flops: float,
    tokens: float,
    layer_passes: float = 1.0,
    head_passes: float = 1.0,
    first_layers: int | None = None,
    last_layers: int | None = None,
) -> float:
    """The slowest pipeline stage's work over the mean stage's: >= 1, 1 without pipeline parallelism.

    `fwd_flops`: the forward FLOPs of `tokens` tokens as `footprint.forward_flops` counts them
    (the input embedding is a lookup and costs none); the decoder layers' part is that less the
    output layer's (2 x vocab x hidden per token, the one matrix a tied model has), split evenly
    over the `pp` stages, and the output layer runs on the last. `layer_passes` and
    `head_passes`: forward-equivalents each runs (a forward 1; a training step 3, and the
    layers one more under full recompute, which checkpoints the decoder only).

    `first_layers` / `last_layers`: Megatron-Core's uneven split (num_layers_in_first_pipeline_stage
    and num_layers_in_last_pipeline_stage): those stages build that many layers and the middle
    stages share the rest evenly (NVIDIA/Megatron-LM@af73aa2cebf94a0bee5ea6dda2614ad989faffae
    megatron/core/transformer/transformer_block.py get_num_layers_to_build); a recipe shortens the
    last stage to make room for the output layer. Every layer is taken to cost the mean layer.
    """
    if pp <= 1:
        return 1.0
    head = 2.0 * llm.vocab_size * llm.hidden_size * tokens
    layers = max(0.0, fwd_flops - head) * layer_passes
    head *= head_passes
    if first_layers is None and last_layers is None:
        return pp * (layers / pp + head) / (layers + head)
    middle_stages = pp - (first_layers is not None) - (last_layers is not None)
    middle = (llm.num_layers - (first_layers or 0) - (last_layers or 0)) / max(1, middle_stages)
    counts = [middle] * pp
    if first_layers is not None:
        counts[0] = first_layers
    if last_layers is not None:
        counts[-1] = last_layers
    per_layer = layers / llm.num_layers
    work = [n * per_layer for n in counts]
    work[-1] += head
    return pp * max(work) / (layers + head)


def _compute_s(flops: float, profile: Profile, shape: TrainShape, tokens_per_rank: float) -> float:
    """Seconds of `flops` spread over the pool, a rank's work split into micro-batches of at most the cap."""
    micro = micro_batches(shape, tokens_per_rank)
    bubble = _pp_bubble(shape, micro)
    rate = shape.gpus * profile.peak_tflops * 1e12 * mfu(profile, shape, tokens_per_rank / micro) * (1.0 - bubble)
    return flops / rate


def moe_extra_flops(llm: LlmSpec, profile: Profile, shape: TrainShape, tokens: float, tokens_per_rank: float) -> float:
    """Forward FLOPs to add so a MoE model's routed experts take their grouped-GEMM time (`moe_layer`).

    `tokens`: the pass's tokens over the pool; `tokens_per_rank`: one data-parallel rank's, in
    micro-batches of at most the cap. 0 for a dense model, and under an MFU override (a rate
    the user measured for this model already holds its MoE layers).
    """
    if llm.moe is None or shape.mfu_override is not None:
        return 0.0
    device_tokens = tokens_per_rank / micro_batches(shape, tokens_per_rank) / shape.cp
    return moe_layer.extra_forward_flops(
        llm, profile, tokens, device_tokens, tp=shape.tp, ep=shape.ep, etp=shape.expert_tp
    )


def moe_permute_s(llm: LlmSpec, profile: Profile, shape: TrainShape, tokens_per_rank: float, passes: float) -> float:
    """Seconds one GPU spends permuting a MoE model's tokens to and from expert order (`moe_layer`).

    0 for a dense model and under an MFU override, as `moe_extra_flops`.
    """
    if llm.moe is None or shape.mfu_override is not None:
        return 0.0
    return moe_layer.permute_s(
        llm,
        profile,
        tokens_per_rank / shape.cp,
        tp=shape.tp,
        pp=shape.pp,
        ep=shape.ep,
        etp=shape.expert_tp,
        passes=passes,
    )


def fsdp_link(profile: Profile, shape: TrainShape, gpus_per_node: int = 8) -> LinkFit:
    """The shard group's link: NVLink when the group fits in a node, else the network."""
    if shape.shard_link is not None:
        return shape.shard_link
    group = shape.shard_ranks * shape.tp * shape.pp * shape.cp
    return profile.intra_node if group <= gpus_per_node else profile.inter_node


def _gather_s(llm: LlmSpec, profile: Profile, shape: TrainShape) -> float:
    """One all-gather (or reduce-scatter) of the bf16 parameters over the FSDP shard group.

    The group is `shard_ranks` data-parallel ranks of `cp` GPUs each: with Ulysses or context
    parallelism every GPU of a sequence group still computes with every parameter of its TP/PP
    shard, so FSDP shards them over all the group's GPUs and each gathers (g-1)/g of them (verl
    builds its FSDP mesh over the GPUs, the Ulysses ranks included:
    volcengine/verl@6f0b21c530ad3b36df717bd5c681d156e6d0af7d verl/workers/fsdp_workers.py
    create_device_mesh(world_size, fsdp_size) beside the separate ulysses device mesh).
    """
    g = shape.shard_ranks * shape.cp
    if g <= 1:
        return 0.0
    link = fsdp_link(profile, shape)
    shard_bytes = footprint.weight_bytes(llm) / (shape.tp * shape.pp)
    return link.latency_s + (g - 1) / g * shard_bytes / (link.busbw_gbps * 1e9)


def _megatron_dp_sync_s(llm: LlmSpec, profile: Profile, shape: TrainShape, grad_bytes: float) -> float:
    """Megatron DDP, once per minibatch: the gradients reduce-scattered, the updated parameters all-gathered.

    With the distributed optimizer each rank reduces its share of the accumulated bf16 gradients
    and, after its optimizer step, all-gathers the bf16 parameters back: together the bytes of an
    all-reduce, 2(n-1)/n of a TP/PP shard over the data-parallel group. Megatron-Core overlaps
    neither by default (overlap_grad_reduce and overlap_param_gather False, grads reduced in bf16:
    NVIDIA/Megatron-LM@001199898c4badd01eaf0785c212d8ed7ce83042
    megatron/core/distributed/distributed_data_parallel_config.py).

    A MoE model's routed experts are not replicated over the data-parallel group: a GPU holds
    E/ep experts (a 1/etp slice of each), and their gradients go to their own buffers, reduced
    over the expert data-parallel group of gpus / (etp x ep x pp) GPUs
    (NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/parallel_state.py
    expert_data_parallel_size; distributed/distributed_data_parallel.py, the expert-parallel
    buffers on intra_expt_dp_group). So they add 2(m-1)/m of a 1/(etp x ep x pp) shard over that
    group, which has one GPU (nothing to reduce) when EP spans the data-parallel ranks.
    """
    link = shape.replica_link or profile.inter_node  # the data-parallel group spans the pool
    experts = _expert_grad_bytes(llm, shape)
    seconds = 0.0
    n = shape.dp
    if n > 1:
        shard = (grad_bytes - experts) / (shape.tp * shape.pp)
        seconds += 2 * link.latency_s + 2.0 * (n - 1) / n * shard / (link.busbw_gbps * 1e9)
    m = shape.gpus // (shape.expert_tp * shape.ep * shape.pp)
    if experts > 0 and m > 1:
        shard = experts / (shape.expert_tp * shape.ep * shape.pp)
        seconds += 2 * link.latency_s + 2.0 * (m - 1) / m * shard / (link.busbw_gbps * 1e9)
    return seconds


def _expert_grad_bytes(llm: LlmSpec, shape: TrainShape) -> float:
    """bf16 gradient bytes of the routed experts (0 for a dense model or a LoRA run's adapters)."""
    if llm.moe is None or shape.trainable_params < llm.total_params:
        return 0.0
    routed = footprint.moe_layers(llm) * llm.moe.num_experts * footprint.expert_params(llm)
    return routed * footprint.BF16_BYTES


def _replica_allreduce_s(profile: Profile, shape: TrainShape, grad_bytes: float) -> float:
    """HSDP: each rank's gradient shard all-reduced across the replica groups (once per minibatch)."""
    r = shape.replicas
    if r <= 1:
        return 0.0
    link = shape.replica_link or profile.inter_node
    shard = grad_bytes / (shape.shard_ranks * shape.tp * shape.pp * shape.cp)
    return link.latency_s + 2.0 * (r - 1) / r * shard / (link.busbw_gbps * 1e9)


def all_to_all_s(llm: LlmSpec, shape: TrainShape, tokens_per_rank: float) -> float:
    """Seconds of one pass's all-to-alls for `tokens_per_rank` tokens of one data-parallel rank.

    Context parallelism (Ulysses): before attention each of the cp ranks trades its slice of the
    queries, keys and values for all tokens of its heads, and trades the outputs back after it:
    (2 x hidden + 2 x KV width) bf16 values per token, (cp-1)/cp of them leaving the rank, in
    every layer. Expert parallelism: every MoE layer sends each token's hidden state to its k
    experts and combines the k results back, (ep-1)/ep of them to other ranks. Both sit on the
    critical path of the layer (the attention or the experts wait for them), so they add. A GPU
    runs the layers of its pipeline stage only (1/pp of them), as in `tp_comm_s`.

    Under sequence parallelism each of a data-parallel rank's tp GPUs holds 1/tp of its tokens
    when the MoE layer starts; Megatron-Core's all-to-all dispatcher sends them over the EP group,
    then all-gathers them over the expert tensor-parallel group, whose etp GPUs each hold a slice
    of every local expert, and reduce-scatters the results before the combine
    (MoEAlltoAllTokenDispatcher: A2A(EP), AG(ETP), experts, RS(ETP), A2A(EP);
    NVIDIA/Megatron-LM@af73aa2cebf94a0bee5ea6dda2614ad989faffae
    megatron/core/transformer/moe/token_dispatcher.py). So a GPU moves etp/tp of the rank's token
    copies: all of them at the default etp = tp, its own 1/tp share at etp 1 (no gather). The
    gather is charged with the all-to-all, at its link and (ep-1)/ep share: an approximation.
    """
    link = shape.a2a_link
    if link is None:
        return 0.0
    bw = link.busbw_gbps * 1e9
    seconds = 0.0
    if shape.cp > 1:
        kv_width = llm.num_kv_heads * llm.head_dim
        per_token = (2 * llm.hidden_size + 2 * kv_width) * footprint.BF16_BYTES
        volume = tokens_per_rank / shape.cp * per_token * (shape.cp - 1) / shape.cp
        seconds += llm.num_layers / shape.pp * (2 * link.latency_s + volume / bw)
    if shape.ep > 1 and llm.moe is not None:
        volume = tokens_per_rank / shape.cp * llm.moe.experts_per_token * llm.hidden_size * footprint.BF16_BYTES
        if shape.expert_tp != shape.tp:  # each GPU dispatches its own 1/tp and gathers over the etp group
            volume *= shape.expert_tp / shape.tp
        seconds += footprint.moe_layers(llm) / shape.pp * 2 * (link.latency_s + volume * (shape.ep - 1) / shape.ep / bw)
    return seconds


# Activation collectives per layer and pass under TP with sequence parallelism: 2 all-gathers and
# 2 reduce-scatters of the micro-batch's hidden states (arXiv 2205.05198, sec. 4.2.2).
TP_COLLECTIVES_PER_LAYER_PASS = 4
# of which the MLP's: the all-gather before its first GEMM and the reduce-scatter after its last
TP_MLP_COLLECTIVES_PER_LAYER_PASS = 2


def tp_comm_s(llm: LlmSpec, shape: TrainShape, tokens_per_rank: float, micro: int, passes: float) -> float:
    """Seconds one GPU of a TP group spends in its layers' activation collectives.

    `tokens_per_rank`: the tokens one data-parallel rank runs in `micro` micro-batches; `passes`:
    forward-equivalents that trade activations (1 per forward, 1 more for the backward, 1 for a
    recompute). Each collective moves (tp-1)/tp of the micro-batch's bf16 hidden states (of the
    rank's 1/cp share of the tokens) over the TP link, plus its latency; a GPU runs the layers
    of its pipeline stage only. A MoE layer whose experts are not tensor-parallel (etp 1) and
    which has no shared expert trades only its attention's pair: its experts take the tokens
    each GPU holds from the all-to-all, with no gather or scatter over TP (`all_to_all_s`);
    a shared expert is a TP MLP (Megatron-Core SharedExpertMLP) and keeps the MLP's pair.
    """
    link = shape.tp_link
    if shape.tp <= 1 or link is None or micro <= 0:
        return 0.0
    tokens_per_micro = tokens_per_rank / micro / shape.cp
    nbytes = tokens_per_micro * llm.hidden_size * footprint.BF16_BYTES
    one = link.latency_s + (shape.tp - 1) / shape.tp * nbytes / (link.busbw_gbps * 1e9)
    layers = llm.num_layers / shape.pp
    seconds = micro * passes * layers * TP_COLLECTIVES_PER_LAYER_PASS * one
    if llm.moe is not None and shape.expert_tp == 1 and llm.moe.shared_experts == 0:
        moe_layers = footprint.moe_layers(llm) / shape.pp
        seconds -= micro * passes * moe_layers * TP_MLP_COLLECTIVES_PER_LAYER_PASS * one
    return seconds


def train_phases(
    llm: LlmSpec,
    profile: Profile,
    shape: TrainShape,
    seq_lengths: list[int],
    *,
    reference_model: bool,
    recompute_old_logprobs: bool,
    critic: bool,
) -> TrainPhases:
    """Seconds of each training phase for one RL step over sequences of the given total lengths."""
    lengths = np.asarray(seq_lengths, dtype=np.int64)  # integer sums: exact, as Python's
    tokens = float(lengths.sum())
    ops = _ops(llm, profile, shape)
    if ops is not None:
        passes = int(recompute_old_logprobs) + int(reference_model) + int(critic)
        return measured_phases(ops, shape, tokens, passes, critic)
    sum_sq = float((lengths * lengths).sum())
    fwd = footprint.forward_flops(llm, tokens, sum_sq)
    per_rank = tokens / shape.dp
    gather = 0.0 if shape.megatron_ddp else _gather_s(llm, profile, shape)
    fwd_passes = int(recompute_old_logprobs) + int(reference_model) + int(critic)
    fwd_lp = fwd + moe_extra_flops(llm, profile, shape, tokens, per_rank)
    # the slowest data-parallel rank sets each phase's compute (rlsim/models/rank_balance.py)
    slowest = rank_balance.slowest_rank_factors(
        lengths,
        shape.dp,
        shape.minibatches,
        shape.rank_assignment,
        work_linear=footprint.forward_flops(llm, 1.0),
        work_quadratic=footprint.forward_flops(llm, 0.0, 1.0),
        world=shape.gpus,
    )
    logprob_compute = (
        fwd_passes
        * _compute_s(fwd_lp, profile, shape, per_rank)
        * pp_stage_imbalance(
            llm, shape.pp, fwd_lp, tokens, first_layers=shape.first_stage_layers, last_layers=shape.last_stage_layers
        )
        * slowest.logprob
    )
    logprob = max(logprob_compute, fwd_passes * micro_batches(shape, per_rank) * gather)
    logprob += fwd_passes * all_to_all_s(llm, shape, per_rank)
    logprob += moe_permute_s(llm, profile, shape, per_rank, fwd_passes)
    logprob += fwd_passes * tp_comm_s(llm, shape, per_rank, micro_batches(shape, per_rank), 1.0)

    lora = shape.trainable_params < llm.total_params
    # fwd + activation grads + weight grads (none for a frozen LoRA base) (+ recompute fwd)
    train_mult = 2.0 + float(not lora) + float(shape.activation_recompute)
    models = 2 if critic else 1
    per_rank_mb = per_rank / shape.minibatches
    # the routed experts' grouped GEMMs at this micro-batch's rows per expert: forward and both
    # backward GEMMs (activation and weight gradients) run at the same rows
    fwd_tr = fwd + moe_extra_flops(llm, profile, shape, tokens, per_rank_mb)
    imbalance = pp_stage_imbalance(
        llm,
        shape.pp,
        fwd_tr,
        tokens,
        train_mult,
        train_mult - float(shape.activation_recompute),
        shape.first_stage_layers,
        shape.last_stage_layers,
    )
    train_compute = (
        models
        * shape.minibatches
        * train_mult
        * _compute_s(fwd_tr / shape.minibatches, profile, shape, per_rank_mb)
        * imbalance
        * slowest.update
    )
    # per micro-batch: all-gather for forward and again for backward, reduce-scatter of gradients
    ops_per_micro = 2.0 + float(not lora)
    train_comm = models * shape.minibatches * micro_batches(shape, per_rank_mb) * ops_per_micro * gather
    grad_bytes = shape.trainable_params * footprint.BF16_BYTES
    if shape.megatron_ddp:
        replicas = models * shape.minibatches * _megatron_dp_sync_s(llm, profile, shape, grad_bytes)
    else:
        replicas = models * shape.minibatches * _replica_allreduce_s(profile, shape, grad_bytes)
    # the all-to-alls run again in the backward (their gradients) and in the recompute
    a2a = models * (2.0 + float(shape.activation_recompute)) * all_to_all_s(llm, shape, per_rank)
    # activations traded in the forward, the backward and the recompute of every micro-batch
    tp = (
        models
        * shape.minibatches
        * tp_comm_s(llm, shape, per_rank_mb, micro_batches(shape, per_rank_mb), 2.0 + float(shape.activation_recompute))
    )
    # the token permutations run again in the backward and in the recompute, as the all-to-alls
    permute = models * moe_permute_s(llm, profile, shape, per_rank, 2.0 + float(shape.activation_recompute))
    train = max(train_compute, train_comm) + replicas + a2a + tp + permute

    opt_bytes = OPTIMIZER_BYTES_PER_PARAM * shape.trainable_params * models / shape.gpus
    optimizer = shape.minibatches * (opt_bytes / (profile.memory_gbps * 1e9) + profile.iteration_overhead_s)
    return TrainPhases(logprob_s=logprob, train_s=train, optimizer_s=optimizer)


def _ops(llm: LlmSpec, profile: Profile, shape: TrainShape) -> ModelOps | None:
    """The model's timed operators when they describe this layout: one device, full weights."""
    if shape.gpus != 1 or shape.mfu_override is not None or shape.trainable_params != llm.total_params:
        return None
    return profile.ops_for(llm)


def measured_phases(ops: ModelOps, shape: TrainShape, tokens: float, forward_passes: int, critic: bool) -> TrainPhases:
    """Phases from the model's timed passes: fixed per micro-batch plus per token, per model.

    Log-prob passes are forwards over the whole batch in micro-batches; training runs each
    minibatch in micro-batches (one more forward each with activation recompute); the
    optimizer steps once per minibatch. A critic is charged as a second copy of the policy.
    """
    models = 2 if critic else 1
    micro = max(1, shape.micro_batch_tokens)
    forward_calls = max(1, math.ceil(tokens / micro))
    train_calls = shape.minibatches * max(1, math.ceil(tokens / shape.minibatches / micro))
    forward_s = forward_calls * ops.forward_fixed_s + ops.forward_per_token_s * tokens
    train_s = train_calls * ops.train_fixed_s + ops.train_per_token_s * tokens
    if shape.activation_recompute:
        train_s += train_calls * ops.forward_fixed_s + ops.forward_per_token_s * tokens
    return TrainPhases(
        logprob_s=forward_passes * forward_s,
        train_s=models * train_s,
        optimizer_s=models * shape.minibatches * ops.optimizer_s,
    )


def compute_floor_s(
    llm: LlmSpec,
    profile: Profile,
    shape: TrainShape,
    tokens: float,
    sum_sq_len: float,
    *,
    forward_passes: int,
    critic: bool,
    logprob_speed: float = 1.0,
) -> float:
    """A lower bound on `train_phases`' log-prob plus train seconds, additive over samples.

    Every FLOP at the layout's best MFU (no saturation, bubble, communication or all-to-all),
    or the timed operators' per-token terms only, so the floor of a batch is the sum of its
    samples' floors: a bound on any split of samples into steps (the planner's `bounds`).
    """
    models = 2 if critic else 1
    ops = _ops(llm, profile, shape)
    if ops is not None:
        per_token = forward_passes * ops.forward_per_token_s / logprob_speed + models * (
            ops.train_per_token_s + float(shape.activation_recompute) * ops.forward_per_token_s
        )
        return per_token * tokens
    lora = shape.trainable_params < llm.total_params
    train_mult = 2.0 + float(not lora) + float(shape.activation_recompute)
    rate = shape.gpus * profile.peak_tflops * 1e12 * (shape.mfu_override or profile.train_mfu)
    fwd = footprint.forward_flops(llm, tokens, sum_sq_len)
    return (forward_passes / logprob_speed + models * train_mult) * fwd / rate
