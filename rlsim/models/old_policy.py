"""Decoupled PPO in a streamed step: keeping the old policy's weights in host memory.

A trainer that trains a step's minibatches one at a time as they arrive (verl's V1
`separate_async` trainer) changes its weights between minibatches, yet decoupled PPO wants every
minibatch's old log-probs from the policy the step began with (pi_old). verl keeps pi_old in host
memory: the first minibatch saves the weights to the host and computes with them; every later one
saves the current weights, restores pi_old, computes its old log-probs and restores the current
weights. N minibatches make N saves and 2 (N - 1) restores
(verl-project/verl@1dda039b9c6311889a9c9a26040677e1254814f9 docs/advance/v1_async_trainer.md,
"Separate Async training Granularity and Decoupled PPO"; verl/trainer/ppo/v1/trainer_separate_async.py
`_compute_old_log_prob`). Megatron's save copies each DDP parameter buffer with
`.cpu().clone().pin_memory()`: a blocking copy into fresh pageable memory, then two host copies;
its restore copies the pinned copy back with `.to(device)` (verl/utils/megatron_utils.py
`copy_megatron_model_to_cpu`, `restore_megatron_model_from_cpu`). Seconds, bytes per GPU; every
GPU copies its own shard at once. `algorithm.rollout_correction.bypass_mode` (no old-log-prob
pass) skips all of it.
"""

from __future__ import annotations

from rlsim.calibration.profile import Profile


def save_s(profile: Profile, shard_bytes_per_gpu: float, save_gbps: float) -> float:
    """One save: the GPU's shard into fresh pageable memory at `save_gbps` (at most the host link).

    The two host copies after it (clone, pin) are not charged, so this is a lower bound.
    """
    return shard_bytes_per_gpu / min(save_gbps * 1e9, profile.host_link_gbps * 1e9)


def restore_s(profile: Profile, shard_bytes_per_gpu: float) -> float:
    """One restore: the pinned copy back to the GPU at the host link."""
    return shard_bytes_per_gpu / (profile.host_link_gbps * 1e9)


def minibatch_swaps_s(profile: Profile, shard_bytes_per_gpu: float, first: bool, save_gbps: float) -> float:
    """One minibatch's share: a save, and for every minibatch after the first two restores."""
    restores = 0 if first else 2
    return save_s(profile, shard_bytes_per_gpu, save_gbps) + restores * restore_s(profile, shard_bytes_per_gpu)


def snapshot_swaps_s(profile: Profile, shard_bytes_per_gpu: float, minibatches: int, save_gbps: float) -> float:
    """Seconds one RL step of `minibatches` minibatches spends saving and restoring the trainer's weights."""
    first = minibatch_swaps_s(profile, shard_bytes_per_gpu, True, save_gbps)
    return first + (minibatches - 1) * minibatch_swaps_s(profile, shard_bytes_per_gpu, False, save_gbps)
