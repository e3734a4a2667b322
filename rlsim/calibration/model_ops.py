"""Model-specific operator kernels: the model's real module timed at its own shapes (Vidur-style).

The generic kernels time GEMMs, attention and a launch probe on a reference shape. A small model
run eagerly (the validation trainer's GPT) spends its time elsewhere: operator dispatch,
sampling over the vocabulary, the KV-cache gather and concatenation of every decode
iteration, the loss and the optimizer's per-tensor work. Simulators such as Vidur profile the
model's own operators for that reason. Here, with random weights and the trainer's own code
paths (`rlsim.trainer`), each case times one of:

- ``op_decode``: one decode iteration as `rollout.generate` runs it: the running rows' cache
  gathered, one token per sequence forward with the cache, sampled, written to the outputs;
  at batch b and context c (cached tokens + the new one), so K = b * c;
- ``op_prefill``: a prefill of `prompts` prompts of `prompt_tokens` tokens, first token sampled;
- ``op_train``: `learner.token_logprobs` + `grpo.policy_loss` + backward on a micro-batch of
  rows x sequence length tokens (``op_forward``: the same log-prob pass without gradients);
- ``op_optimizer``: gradient clipping, an AdamW step and zeroing, as `learner.train_step` does;
- ``op_weight_sync``: the async trainer's shared-memory update (`SharedWeights.publish` and
  `load_into`), and ``op_copy``: flat copies of 1x..16x the model's bytes for the bandwidth.

Timing. In an RL step every operator runs once on fresh data, after some other operator:
a decode iteration on the cache the previous pass just built, a prefill after the training
phase, an optimizer step after a backward, a weight update after a training step. Timed back
to back on the same inputs instead, with caches and the allocator warm, they ran 10-50%
faster here than inside the trainer (the weight update 2-3x). So each sample times one call
right after an untimed *setup* that plays its predecessor (`_measure_after`): a fresh prefill
for a decode iteration, a small training step for a prefill and a weight update, a prefill
for a training pass, a backward for the optimizer step.

`model_ops_fit.fit_model_ops` turns the rows into a profile's `ModelOps`. Units: seconds, bytes,
tokens.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from rlsim.calibration.model_ops_fit import OpsModel
from rlsim.calibration.sweeps import MAX_OPS_CONTEXT, OpsSweep
from rlsim.calibration.timer import Case, Row, Timing, cpu_clock, row, synchronize
from rlsim.trainer import grpo
from rlsim.trainer.learner import token_logprobs
from rlsim.trainer.model import GPT, GPTConfig
from rlsim.trainer.rollout import sample_tokens  # the trainer's own sampling step

LR = 6e-4  # the trainer's default RL learning rate (timing does not depend on it)
MAX_GRAD_NORM = 1.0
SETUP_ROWS = 64  # sequences in a setup's training step or prefill (a minibatch of the trainer)


def build(model: OpsModel, device: torch.device, dtype: torch.dtype) -> GPT:
    """The model's module with seeded random weights (timing does not depend on their values).

    Left in training mode, as the synchronous trainer's policy is (this GPT has no dropout).
    """
    torch.manual_seed(0)
    config = GPTConfig(model.n_layer, model.n_head, model.n_embd, model.vocab_size, model.block_size)
    return GPT(config).to(device=device, dtype=dtype)


def _row(kernel: str, model: OpsModel, device: torch.device, dtype: torch.dtype, timed: Any, **fields: Any) -> Row:
    """A measurement row of `model`, tagged with its profile key."""
    return row(kernel, device, dtype, timed, model_key=model.key, model=model.name, model_type=model.model_type,
               **fields)  # fmt: skip


def _measure_after(setup: Callable[[], object], fn: Callable[[], object], device: torch.device, *, warmup: int,
                   repeats: int) -> Timing:  # fmt: skip
    """Median seconds of `fn`, each call timed alone right after an untimed `setup()`.

    2 x repeats samples (one call each, so more than `timer.measure` takes); the clock is the
    calibration's: thread CPU time with one intra-op thread, else the wall clock.
    """
    tick = cpu_clock() if device.type == "cpu" else time.perf_counter
    samples = []
    for i in range(max(warmup, 1) + 2 * repeats):
        setup()
        synchronize(device)
        t0 = tick()
        fn()
        synchronize(device)
        if i >= max(warmup, 1):
            samples.append(tick() - t0)
    method = "thread_time" if tick is time.thread_time else "perf_counter"
    return Timing(statistics.median(samples), samples, 1, f"{method}, median of {len(samples)} calls, each after setup")


def _tokens(model: OpsModel, rows: int, length: int, device: torch.device) -> torch.Tensor:
    return torch.randint(0, model.vocab_size, (rows, length), device=device)


def _train_step(gpt: GPT, model: OpsModel, device: torch.device) -> Callable[[], None]:
    """A setup: one small training step (forward, backward, AdamW), as ends an RL step's training."""
    opt = torch.optim.AdamW(gpt.parameters(), lr=LR)
    tokens = _tokens(model, SETUP_ROWS, min(8, model.block_size), device)

    def step() -> None:
        token_logprobs(gpt, tokens, 1).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _prefill(gpt: GPT, model: OpsModel, device: torch.device) -> Callable[[], None]:
    """A setup: a generation-side pass (a no-grad forward of a minibatch's prompts)."""
    ids = _tokens(model, SETUP_ROWS, min(4, model.block_size), device)

    @torch.no_grad()
    def prefill() -> None:
        gpt(ids)

    return prefill


def decode_row(model: OpsModel, batch: int, context: int, device: torch.device, dtype: torch.dtype, **rep: int) -> Row:
    """One decode iteration of `batch` sequences with context-1 cached tokens each, on a fresh cache."""
    gpt, gen = build(model, device, dtype), torch.Generator(device=device).manual_seed(0)
    rows, running = torch.arange(batch, device=device), torch.ones(batch, dtype=torch.bool, device=device)
    out = torch.zeros(batch, 2, dtype=torch.long, device=device)
    logp, mask = torch.zeros(batch, 2, device=device), torch.zeros(batch, 2, device=device)
    state: dict[str, Any] = {}

    @torch.no_grad()
    def fresh_cache() -> None:  # the pass before: a prefill that leaves the cache [b, nh, c-1, hd]
        _, state["cache"] = gpt(_tokens(model, batch, context - 1, device))
        state["tok"] = torch.randint(0, model.vocab_size, (batch,), device=device)

    @torch.no_grad()
    def iteration() -> None:  # rollout.generate's loop body
        r, t = rows[running], state["tok"][running]
        c = [(k[running], v[running]) for k, v in state["cache"]]
        logits, _ = gpt(t[:, None], c)
        t2, lp = sample_tokens(logits[:, -1], gen)
        out[r, 1], logp[r, 1], mask[r, 1] = t2, lp, 1.0

    timing = _measure_after(fresh_cache, iteration, device, **rep)
    return _row("op_decode", model, device, dtype, timing, batch=batch, context=context, kv_tokens=batch * context)


def prefill_row(
    model: OpsModel, prompts: int, length: int, device: torch.device, dtype: torch.dtype, **rep: int
) -> Row:
    """A prefill of `prompts` prompts of `length` tokens that samples each one's first token."""
    gpt, gen = build(model, device, dtype), torch.Generator(device=device).manual_seed(0)
    ids = _tokens(model, prompts, length, device)
    out = torch.zeros(prompts, 2, dtype=torch.long, device=device)
    logp, mask = torch.zeros(prompts, 2, device=device), torch.zeros(prompts, 2, device=device)

    @torch.no_grad()
    def prefill() -> None:
        logits, _ = gpt(ids)  # [N, P, V], and the cache
        tok, lp = sample_tokens(logits[:, -1], gen)
        out[:, 0], logp[:, 0], mask[:, 0] = tok, lp, 1.0

    timing = _measure_after(_train_step(gpt, model, device), prefill, device, **rep)
    return _row("op_prefill", model, device, dtype, timing, prompts=prompts, prompt_tokens=length,
                tokens=prompts * length)  # fmt: skip


def train_rows(model: OpsModel, n: int, length: int, device: torch.device, dtype: torch.dtype, **rep: int) -> list[Row]:
    """A training pass (forward, GRPO loss, backward) and a no-grad log-prob pass on n x length tokens."""
    gpt = build(model, device, dtype)
    tokens = _tokens(model, n, length, device)  # [n, P + R]
    prompt = max(1, length // 2)  # the loss covers the response positions; its cost is tiny
    old = torch.zeros(n, length - prompt, device=device, dtype=dtype)
    adv, mask = torch.randn(n, device=device, dtype=dtype), torch.ones_like(old)
    before = _prefill(gpt, model, device)

    def train() -> None:
        gpt.zero_grad(set_to_none=True)  # fresh gradients, as after each optimizer step
        loss, _ = grpo.policy_loss(token_logprobs(gpt, tokens, prompt), old, adv, mask)
        loss.backward()

    @torch.no_grad()
    def forward() -> None:
        token_logprobs(gpt, tokens, prompt)

    sizes = {"rows": n, "seq_len": length, "tokens": n * length}
    return [
        _row("op_train", model, device, dtype, _measure_after(before, train, device, **rep), **sizes),
        _row("op_forward", model, device, dtype, _measure_after(before, forward, device, **rep), **sizes),
    ]


def optimizer_row(model: OpsModel, device: torch.device, dtype: torch.dtype, **rep: int) -> Row:
    """Clip the gradient norm, step AdamW, zero the gradients (learner.train_step's optimizer phase).

    Each step follows a fresh backward (untimed), as in training: the gradients are new tensors.
    """
    gpt = build(model, device, dtype)
    opt = torch.optim.AdamW(gpt.parameters(), lr=LR)
    tokens = _tokens(model, SETUP_ROWS, min(8, model.block_size), device)

    def backward() -> None:
        token_logprobs(gpt, tokens, 1).sum().backward()

    def step() -> None:
        float(torch.nn.utils.clip_grad_norm_(gpt.parameters(), MAX_GRAD_NORM))
        opt.step()
        opt.zero_grad(set_to_none=True)

    timing = _measure_after(backward, step, device, **rep)
    return _row("op_optimizer", model, device, dtype, timing, params=sum(p.numel() for p in gpt.parameters()))


def weight_rows(model: OpsModel, multiples: tuple[int, ...], device: torch.device, dtype: torch.dtype,
                **rep: int) -> list[Row]:  # fmt: skip
    """The async trainer's shared-memory weight update, both ways; flat copies for the bandwidth.

    Each call follows a small training step, as the trainer publishes right after its
    optimizer step.
    """
    from rlsim.trainer.async_loop import SharedWeights

    gpt = build(model, device, dtype)
    n = sum(p.numel() for p in gpt.parameters())
    nbytes = float(n * dtype.itemsize)
    ctx = mp.get_context("spawn")  # the primitives only; no process is started
    flat = torch.zeros(n, dtype=dtype, device=device)
    if device.type == "cpu":
        flat.share_memory_()  # as the async trainer's: both processes map it
    shared, stop = SharedWeights(flat, ctx.Value("q", 0), ctx.Lock()), ctx.Event()
    before = _train_step(gpt, model, device)

    def timed(fn: Callable[[], object]) -> Timing:
        return _measure_after(before, fn, device, **rep)

    rows = [
        _row("op_weight_sync", model, device, dtype, timed(fn), direction=d, bytes=nbytes)
        for d, fn in (("publish", lambda: shared.publish(gpt, 1, stop)), ("load", lambda: shared.load_into(gpt, stop)))
    ]
    for k in multiples:
        src = torch.ones(int(k * n), device=device, dtype=dtype)
        dst = torch.empty_like(src)
        rows.append(_row("op_copy", model, device, dtype, timed(lambda s=src, d=dst: d.copy_(s)), bytes=k * nbytes))
    return rows


def _length(fraction: float, model: OpsModel, least: int) -> int:
    return max(least, round(fraction * min(model.block_size, MAX_OPS_CONTEXT)))


def ops_cases(model: OpsModel, sweep: OpsSweep, device: torch.device, dtype: torch.dtype) -> list[Case]:
    """Every operator case of `model`, in run order (labels for the progress bar)."""
    rep = {"warmup": sweep.warmup, "repeats": sweep.repeats}
    contexts = sorted({_length(f, model, 2) for f in sweep.decode_contexts})  # >= 1 cached token
    prompts = sorted({_length(f, model, 1) for f in sweep.prefill_lengths})
    lengths = sorted({_length(f, model, 2) for f in sweep.train_lengths})  # >= 1 predicted token
    cases: list[tuple[str, Callable[[], list[Row]]]] = [
        (f"{model.name} decode b={b} c={c}", lambda b=b, c=c: [decode_row(model, b, c, device, dtype, **rep)])
        for b in sweep.decode_batches
        for c in contexts
    ]
    cases += [
        (f"{model.name} prefill {n}x{p}", lambda n=n, p=p: [prefill_row(model, n, p, device, dtype, **rep)])
        for n in sweep.prefill_prompts
        for p in prompts
    ]
    cases += [
        (f"{model.name} train {n}x{s}", lambda n=n, s=s: train_rows(model, n, s, device, dtype, **rep))
        for n in sweep.train_rows
        for s in lengths
    ]
    cases.append((f"{model.name} optimizer", lambda: [optimizer_row(model, device, dtype, **rep)]))
    cases.append(
        (f"{model.name} weight update", lambda: weight_rows(model, sweep.copy_multiples, device, dtype, **rep))
    )
    return cases
