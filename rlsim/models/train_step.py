"""Training-side time of one RL step, phase by phase.

FLOPs follow the usual accounting: a forward pass is 2·P_active·tokens plus causal attention,
a backward is twice that, activation recompute adds one forward. They run at the profile's
training MFU, which saturates in micro-batch tokens per device, times the pipeline-parallel
bubble. Old-logprob and reference passes are forwards; PPO adds a critic of the policy's size
(forward for values, forward+backward to train). The optimizer step is memory bound (AdamW
reads and writes fp32 master weights, two moments and the gradient). FSDP's all-gathers and
reduce-scatters overlap compute; only the part longer than compute is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.calibration.profile import Profile
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
