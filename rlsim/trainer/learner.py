"""Learner: the training side of one RL step, recorded as "logprob", "train" and "optimizer".

Both loops call `train_step` on a `Rollout`, so the synchronous and asynchronous runs differ only
in how they schedule the same work. Also here: building the seeded policy and the supervised warm
start that gives RL a policy which already writes digits and the end token (the warm start is not
part of the timeline). Shapes: N sequences, P prompt tokens, R response positions, V vocabulary.
"""

import numpy as np
import torch
from torch.nn import functional as F

from rlsim.trainer import grpo
from rlsim.trainer.config import GRPOConfig
from rlsim.trainer.model import GPT, GPTConfig
from rlsim.trainer.rollout import Rollout
from rlsim.trainer.task import Addition
from rlsim.trainer.timeline import Timeline


def build_policy(cfg: GRPOConfig, task: Addition) -> GPT:
    """A freshly initialised policy; the same seed gives the same weights."""
    torch.manual_seed(cfg.seed)
    config = GPTConfig(
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        vocab_size=task.vocab_size,
        block_size=task.prompt_tokens + cfg.max_new_tokens,
    )
    return GPT(config)


def token_logprobs(model: GPT, tokens: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """tokens [N, P + R] -> log-prob of each response token given the ones before it [N, R]."""
    logits, _ = model(tokens[:, :-1])  # [N, P + R - 1, V]: position t predicts token t + 1
    logits = logits[:, prompt_len - 1 :]  # [N, R, V]
    targets = tokens[:, prompt_len:]  # [N, R]
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="none")
    return -nll.view(targets.shape)


def warm_start(model: GPT, task: Addition, cfg: GRPOConfig, batch_size: int = 64) -> float:
    """Supervised steps on correct completions (teacher forcing); returns the last loss."""
    rng = np.random.default_rng(cfg.seed + 1)  # prompts the RL run never depends on
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr)
    loss = torch.zeros(())
    for _ in range(cfg.warmup_steps):
        prompts = task.sample_prompts(batch_size, rng)
        rows, masks = [], []
        for p in prompts:
            answer = task.encode(task.answer(p))  # the end token included
            n_pad = task.max_answer_tokens - len(answer)
            rows.append(task.encode(p) + answer + [task.eos_id] * n_pad)
            masks.append([1.0] * len(answer) + [0.0] * n_pad)
        tokens, mask = torch.tensor(rows), torch.tensor(masks)  # [N, P + R], [N, R]
        logp = token_logprobs(model, tokens, task.prompt_tokens)
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.item()


def train_step(
    model: GPT,
    opt: torch.optim.Optimizer,
    roll: Rollout,
    cfg: GRPOConfig,
    tl: Timeline,
    step: int,
    version: int,
    ref: GPT | None = None,
) -> dict[str, float]:
    """One GRPO update on `roll`: cfg.minibatches optimizer steps. Returns `train/...` metrics."""
    N, P = roll.mask.shape[0], roll.prompt_len
    old_logp = roll.sampler_logp  # [N, R]
    if cfg.recompute_logprobs:  # verl's recompute of old log-probs with the trainer's weights
        with tl.phase("training", "logprob", step, version, tokens=roll.tokens.numel()):
            with torch.no_grad():
                old_logp = token_logprobs(model, roll.tokens, P)
    ref_logp = None
    if ref is not None and cfg.kl_coef > 0.0:
        with tl.phase("training", "logprob", step, version, tokens=roll.tokens.numel()):
            with torch.no_grad():
                ref_logp = token_logprobs(ref, roll.tokens, P)
    totals: dict[str, float] = {}
    for mb in torch.arange(N).chunk(cfg.minibatches):  # contiguous rows hold whole groups
        with tl.phase("training", "train", step, version, tokens=roll.tokens[mb].numel()):
            logp = token_logprobs(model, roll.tokens[mb], P)  # [n, R], with grad
            loss, stats = grpo.policy_loss(
                logp,
                old_logp[mb],
                roll.advantages[mb],
                roll.mask[mb],
                cfg.clip_low,
                cfg.clip_high,
                None if ref_logp is None else ref_logp[mb],
                cfg.kl_coef,
            )
            loss.backward()
        with tl.phase("training", "optimizer", step, version):
            stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
            opt.step()
            opt.zero_grad(set_to_none=True)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + v / cfg.minibatches
    return {f"train/{k}": v for k, v in totals.items()}
