"""GRPO math (rlsim.trainer.grpo) against values computed by hand."""

import math

import pytest

torch = pytest.importorskip("torch")

from rlsim.trainer import grpo  # noqa: E402


def test_group_advantages_mean_and_bessel_std():
    # group 1: mean 0.25, sample std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    # group 2: all equal -> std 0 -> advantage 0 (eps keeps it finite)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])
    adv = grpo.group_advantages(rewards, group_size=4, eps=0.0)
    assert adv[:4].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5])
    adv = grpo.group_advantages(rewards, group_size=4, eps=1e-4)
    assert adv[:4].tolist() == pytest.approx([0.75 / 0.5001] + [-0.25 / 0.5001] * 3)
    assert adv[4:].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_group_advantages_without_std_scaling():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    adv = grpo.group_advantages(rewards, group_size=2, scale=False)
    assert adv.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])


def test_group_advantages_rejects_partial_groups():
    with pytest.raises(AssertionError):
        grpo.group_advantages(torch.zeros(6), group_size=4)


def _loss(ratios, advantage, mask, **kw):
    logp = torch.log(torch.tensor([ratios])).requires_grad_(True)  # old log-probs are 0
    loss, stats = grpo.policy_loss(
        logp, torch.zeros(1, len(ratios)), torch.tensor([advantage]), torch.tensor([mask]), **kw
    )
    return logp, loss, stats


def test_clipped_loss_positive_advantage():
    # ratio 1.5 > 1.2 with A = +1: the clipped term 1.2 wins; ratio 0.5: unclipped 0.5 wins
    logp, loss, stats = _loss([1.5, 0.5], 1.0, [1.0, 1.0])
    assert loss.item() == pytest.approx(-(1.2 + 0.5) / 2)
    assert stats["clip_fraction"] == pytest.approx(0.5)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    loss.backward()
    # clipped token: no gradient; the other: d/dlogp(-ratio * A / 2) = -0.5 / 2
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.25])


def test_clipped_loss_negative_advantage():
    # A = -1: ratio 1.5 -> min(-1.5, -1.2) = -1.5; ratio 0.5 -> min(-0.5, -0.8) = -0.8
    _, loss, stats = _loss([1.5, 0.5], -1.0, [1.0, 1.0])
    assert loss.item() == pytest.approx((1.5 + 0.8) / 2)
    assert stats["clip_fraction"] == pytest.approx(0.5)


def test_clipped_loss_asymmetric_clip_and_mask():
    # clip_high 0.28 (DAPO's clip-higher): ratio 1.5 is clipped to 1.28; the masked token is ignored
    _, loss, _ = _loss([1.5, 3.0], 2.0, [1.0, 0.0], clip_high=0.28)
    assert loss.item() == pytest.approx(-1.28 * 2.0)


def test_k3_kl():
    logp, ref = torch.log(torch.tensor([0.5, 0.3])), torch.log(torch.tensor([0.25, 0.3]))
    kl = grpo.k3_kl(logp, ref)
    assert kl[0].item() == pytest.approx(0.5 - math.log(0.5) - 1.0)  # 0.19315
    assert kl[1].item() == pytest.approx(0.0)


def test_loss_adds_kl_penalty():
    # ratio 1 and A = 0: the loss is the KL term alone, averaged over unmasked tokens
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.9]]))
    loss, stats = grpo.policy_loss(logp, logp, torch.zeros(1), torch.tensor([[1.0, 0.0]]), ref_logp=ref, kl_coef=0.1)
    k3 = 0.5 - math.log(0.5) - 1.0
    assert stats["kl"] == pytest.approx(k3)
    assert loss.item() == pytest.approx(0.1 * k3)
