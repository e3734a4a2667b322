"""Pure GRPO math shared by the synchronous and asynchronous loops: no model, no I/O.

Group-relative advantages (DeepSeekMath, arXiv:2402.03300, section 4.1.2), the PPO-style clipped
policy-gradient loss on per-token log-probabilities, and the k3 estimator of KL to a frozen
reference (Schulman, "Approximating KL divergence", 2020). Shapes: N sequences, R response
positions; `mask` [N, R] is 1.0 on tokens the policy generated (the end token included) and 0.0
on padding after it.
"""

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4, scale: bool = True) -> torch.Tensor:
    """rewards [N] (groups of `group_size` consecutive samples) -> advantages [N].

    A = (r - mean_group) / (std_group + eps), with the Bessel-corrected std as in TRL's
    GRPOTrainer; `scale=False` keeps only the mean baseline (Dr. GRPO, arXiv:2503.20783).
    """
    assert rewards.ndim == 1 and rewards.numel() % group_size == 0, "whole groups only"
    r = rewards.view(-1, group_size)  # [N/G, G]
    adv = r - r.mean(dim=1, keepdim=True)
    if scale:
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    return adv.reshape(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate, k3 = exp(ref - logp) - (ref - logp) - 1 >= 0."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate loss, averaged over the generated tokens of the batch.

    logp, old_logp, mask, ref_logp: [N, R]; advantages: [N]. Per token, with ratio =
    exp(logp - old_logp): loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)
    + kl_coef * k3. Averaging over all tokens of the batch (not per sequence first) follows DAPO
    (arXiv:2503.14476). Returns the scalar loss and detached statistics.
    """
    ratio = torch.exp(logp - old_logp)  # [N, R]
    adv = advantages.unsqueeze(1)  # [N, 1], broadcast over the sequence's tokens
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)  # [N, R]
    n_tokens = mask.sum().clamp(min=1.0)
    kl = torch.zeros(())
    if ref_logp is not None and kl_coef > 0.0:
        k3 = k3_kl(logp, ref_logp)  # [N, R]
        kl = (k3 * mask).sum() / n_tokens
        per_token = per_token + kl_coef * k3
    loss = (per_token * mask).sum() / n_tokens
    clip_fraction = ((clipped < unclipped).float() * mask).sum() / n_tokens
    stats = {
        "loss": loss.item(),
        "clip_fraction": clip_fraction.item(),
        "ratio_mean": ((ratio * mask).sum() / n_tokens).item(),
        "kl": kl.item(),
    }
    return loss, stats
