"""`GRPOConfig`: the fields both loops share (task, policy size, GRPO algorithm, run length).

`sync_loop.SyncConfig` and `async_loop.AsyncConfig` extend it with the fields of their mode.
Each field has one doc line (cleanrl's `Args`); the recorded JSON keeps the whole config.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class GRPOConfig:
    steps: int = 100
    """RL steps: rollout batches trained on (dropped batches do not count)"""
    prompts_per_step: int = 16
    """prompts per RL step (B); each is completed group_size times"""
    group_size: int = 8
    """completions per prompt (G), the group of GRPO's relative advantage"""
    max_new_tokens: int = 8
    """longest completion in tokens, the end token included"""
    n_digits: int = 1
    """digits per operand of the addition task"""
    n_layer: int = 2
    """transformer blocks of the policy"""
    n_head: int = 2
    """attention heads per block"""
    n_embd: int = 64
    """embedding width of the policy"""
    lr: float = 6e-4
    """AdamW learning rate of the RL updates"""
    minibatches: int = 2
    """optimizer steps per RL step; the batch is split into this many minibatches of whole groups"""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (ratio >= 1 - clip_low)"""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (ratio <= 1 + clip_high)"""
    kl_coef: float = 0.0
    """weight of the k3 KL penalty to the frozen warm-started policy; 0 skips the reference pass"""
    recompute_logprobs: bool = False
    """recompute old log-probs with the trainer's weights ("logprob" state), as verl does; the
    default uses the sampler's, exact here (same code and dtype) and a staleness correction"""
    max_grad_norm: float = 1.0
    """gradient-norm clip before each optimizer step"""
    warmup_steps: int = 100
    """supervised steps on correct answers before RL (warm start; not on the timeline)"""
    warmup_lr: float = 3e-3
    """AdamW learning rate of the supervised warm start"""
    seed: int = 0
    """seed of the policy init, the prompts and the sampling"""
    out_path: str = "out/trainer_timeline.json"
    """where the run's timeline JSON is written (atomically)"""
    metrics_path: str | None = None
    """where to also write verl-style metrics, one JSON line per step (`rlsim fit` reads it); None: not written"""

    def __post_init__(self) -> None:
        if self.prompts_per_step % self.minibatches != 0:
            raise ValueError(
                f"minibatches: {self.minibatches} does not divide prompts_per_step="
                f"{self.prompts_per_step}; a minibatch must hold whole GRPO groups"
            )
        if self.group_size < 2:
            raise ValueError("group_size: GRPO needs at least 2 completions per prompt")
