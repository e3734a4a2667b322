"""Training-side time of one RL step, phase by phase.

FLOPs follow the usual accounting: a forward pass is 2·P_active·tokens plus causal attention,
a backward is twice that, activation recompute adds one forward. They run at the profile's
training MFU, which saturates in micro-batch tokens per device, times the pipeline-parallel
bubble. Old-logprob and reference passes are forwards; PPO adds a critic of the policy's size
(forward for values, forward+backward to train). The optimizer step is memory bound (AdamW
reads and writes fp32 master weights, two moments and the gradient). FSDP's all-gathers and
reduce-scatters overlap compute; only the part longer than compute is exposed.

When the profile holds the model's own timed operators (`Profile.ops_for`) and one device
trains the whole model (no TP/PP/DP, no LoRA, no MFU override), each phase is the sum of the
fitted passes instead: a pass costs a fixed time plus a time per token, once per micro-batch
(`minibatches` x ceil(minibatch tokens / micro_batch_tokens)), and the optimizer step is one
measured time per minibatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlsim.calibration.profile import ModelOps, Profile
from rlsim.catalog import LlmSpec
from rlsim.models import footprint

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

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


@dataclass(frozen=True)
class TrainPhases:
    """Seconds of each training phase of one RL step (the recorder's state names)."""

    logprob_s: float
    train_s: float
    optimizer_s: float


def mfu(profile: Profile, shape: TrainShape) -> float:
    """Training MFU at this micro-batch size, with the pipeline bubble (1F1B) applied."""
    base = shape.mfu_override or profile.train_mfu
    per_device = shape.micro_batch_tokens / shape.tp
    eff = base * per_device / (per_device + profile.train_tokens_half)
    return eff


def _pp_bubble(shape: TrainShape, tokens_per_rank: float) -> float:
    micro = max(1.0, tokens_per_rank / shape.micro_batch_tokens)
    return (shape.pp - 1) / (micro + shape.pp - 1)


def _compute_s(flops: float, profile: Profile, shape: TrainShape, tokens: float) -> float:
    bubble = _pp_bubble(shape, tokens / shape.dp)
    rate = shape.gpus * profile.peak_tflops * 1e12 * mfu(profile, shape) * (1.0 - bubble)
    return flops / rate


def _fsdp_comm_s(llm: LlmSpec, profile: Profile, shape: TrainShape, passes: float) -> float:
    """All-gather of bf16 params per pass plus a reduce-scatter of grads, over the DP group."""
    if shape.dp <= 1:
        return 0.0
    shard_bytes = footprint.weight_bytes(llm) / (shape.tp * shape.pp)
    link = profile.intra_node if shape.gpus <= 8 else profile.inter_node
    per_op = link.latency_s + (shape.dp - 1) / shape.dp * shard_bytes / (link.busbw_gbps * 1e9)
    return passes * per_op


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
    tokens = float(sum(seq_lengths))
    ops = _ops(llm, profile, shape)
    if ops is not None:
        passes = int(recompute_old_logprobs) + int(reference_model) + int(critic)
        return measured_phases(ops, shape, tokens, passes, critic)
    sum_sq = float(sum(n * n for n in seq_lengths))
    fwd = footprint.forward_flops(llm, tokens, sum_sq)
    fwd_passes = int(recompute_old_logprobs) + int(reference_model) + int(critic)
    logprob_compute = fwd_passes * _compute_s(fwd, profile, shape, tokens)
    logprob = max(logprob_compute, _fsdp_comm_s(llm, profile, shape, fwd_passes))

    train_mult = 3.0 + float(shape.activation_recompute)  # fwd + 2x bwd (+ recompute fwd)
    models = 2 if critic else 1
    train_compute = models * train_mult * _compute_s(fwd, profile, shape, tokens)
    train_comm = _fsdp_comm_s(llm, profile, shape, models * shape.minibatches * 3.0)
    train = max(train_compute, train_comm)

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
