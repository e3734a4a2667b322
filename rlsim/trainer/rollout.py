"""Rollout: the inference side of one RL step, recorded as "prefill" and "decode" intervals.

`generate` samples completions with the policy's KV cache the way an inference engine does: one
prefill over the prompt batch (which also samples the first token), then one decode iteration per
further token over the sequences still running; finished sequences leave the batch, so late
iterations run at small batch sizes (the generation tail). `collect` adds prompts, the verifier's
rewards and the group-relative advantages. Shapes: N = B*G sequences, P prompt tokens, R response
positions, V vocabulary.
"""

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from rlsim.trainer import grpo
from rlsim.trainer.model import GPT
from rlsim.trainer.task import Addition
from rlsim.trainer.timeline import Timeline


@dataclass
class Rollout:
    """One RL step's samples, G consecutive rows per prompt, and what training needs of them."""

    tokens: torch.Tensor  # [N, P + R] int64: prompt, completion, then end tokens as padding
    mask: torch.Tensor  # [N, R] float: 1.0 on generated tokens, the end token included
    sampler_logp: torch.Tensor  # [N, R] log-prob of each generated token under the sampler
    rewards: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    prompt_len: int  # P
    version: int  # policy version the whole batch was generated with
    batch_index: int  # the generator's count of batches before this one
    score_s: float  # seconds the verifier took to score the batch (in no pool's state)

    @property
    def response_tokens(self) -> torch.Tensor:
        return self.mask.sum(dim=1).long()  # [N]


def sample_tokens(logits: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [b, V] -> sampled tokens [b] and their log-probs [b] (temperature 1)."""
    logp = F.log_softmax(logits, dim=-1)
    tok = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
    return tok, logp.gather(1, tok[:, None]).squeeze(1)


@torch.no_grad()
def generate(
    model: GPT,
    prompts: torch.Tensor,
    max_new_tokens: int,
    eos_id: int,
    gen: torch.Generator,
    tl: Timeline,
    step: int,
    version: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """prompts [N, P] -> completions [N, R], sampler log-probs [N, R], mask [N, R].

    R is the longest completion of the batch (<= max_new_tokens); rows are padded with eos_id.
    """
    N, P = prompts.shape
    out = torch.full((N, max_new_tokens), eos_id, dtype=torch.long)
    logp = torch.zeros(N, max_new_tokens)
    mask = torch.zeros(N, max_new_tokens)
    rows = torch.arange(N)  # batch row -> sequence index; shrinks as sequences finish
    with tl.phase("inference", "prefill", step, version, tokens=N * P):
        logits, cache = model(prompts)  # [N, P, V]; cache: per layer k, v [N, nh, P, hd]
        tok, tok_logp = sample_tokens(logits[:, -1], gen)
        out[:, 0], logp[:, 0], mask[:, 0] = tok, tok_logp, 1.0
    for t in range(1, max_new_tokens):
        running = tok != eos_id  # [b]
        if not running.any():
            break
        with tl.phase("inference", "decode", step, version, tokens=int(running.sum())):
            rows, tok = rows[running], tok[running]
            cache = [(k[running], v[running]) for k, v in cache]
            logits, cache = model(tok[:, None], cache)  # [b, 1, V]
            tok, tok_logp = sample_tokens(logits[:, -1], gen)
            out[rows, t], logp[rows, t], mask[rows, t] = tok, tok_logp, 1.0
    R = int(mask.sum(dim=1).max())
    return out[:, :R], logp[:, :R], mask[:, :R]


def collect(
    model: GPT,
    task: Addition,
    cfg,
    rng: np.random.Generator,
    gen: torch.Generator,
    tl: Timeline,
    batch_index: int,
    version: int,
) -> Rollout:
    """Sample cfg.prompts_per_step prompts, complete each cfg.group_size times, and score them."""
    prompts = [p for p in task.sample_prompts(cfg.prompts_per_step, rng) for _ in range(cfg.group_size)]
    prompt_ids = torch.tensor([task.encode(p) for p in prompts])  # [N, P]
    completion, sampler_logp, mask = generate(
        model, prompt_ids, cfg.max_new_tokens, task.eos_id, gen, tl, batch_index, version
    )
    # score: a CPU verifier, outside both pools' states, so timed on its own
    t0 = time.perf_counter()
    lengths = mask.sum(dim=1).long().tolist()
    texts = [task.decode(row[:n]) for row, n in zip(completion.tolist(), lengths, strict=True)]
    rewards = torch.tensor([task.reward(p, c) for p, c in zip(prompts, texts, strict=True)])
    advantages = grpo.group_advantages(rewards, cfg.group_size)
    return Rollout(
        tokens=torch.cat([prompt_ids, completion], dim=1),
        mask=mask,
        sampler_logp=sampler_logp,
        rewards=rewards,
        advantages=advantages,
        prompt_len=prompt_ids.shape[1],
        version=version,
        batch_index=batch_index,
        score_s=time.perf_counter() - t0,
    )
