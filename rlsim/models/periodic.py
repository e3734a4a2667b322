"""Periodic evaluation and checkpoints: the pauses a real run takes every N steps, and their mean per step.

A training run evaluates on a validation set every `every_steps` steps and writes a checkpoint
every `every_steps` (verl `trainer.test_freq` / `trainer.save_freq`, NeMo RL `grpo.val_period` /
`checkpointing.save_period`, slime `--eval-interval` / `--save-interval`); training waits for
both, so a run's wall time holds them, while the simulated RL step does not.

- One evaluation pass: the validation batch generated on the rollout engines, whole groups dealt
  round robin, each engine's share in waves of at most `max_batch` sequences admitted together:
  a prefill of the wave's distinct prompts, then the decode drain of that fixed batch, span by
  span from finish to finish (`drain_s`, the simulator's closed form `decode.spans_s`). The cache
  is assumed to hold each wave (no preemption is modelled here). A colocated run's engines are
  asleep between steps, so the caller adds the switch there and back and the weight load. The
  engines are taken to be free of training work meanwhile; in an asynchronous run they may not be
  (verl V1 runs validation beside unfinished training rollouts), so there the pass is a floor.
  Responses are single turns (an agent workload's tool calls are not replayed).
- One checkpoint: its bytes (`checkpoint_bytes`) written by the training nodes in parallel, each
  at the storage's write bandwidth (`checkpoint_s`).
- Over a run of R steps an event every N steps happens floor(R / N) times (`run_s`), so its mean
  per step is floor(R / N) x seconds / R (`amortized_s_per_step`).

Units: seconds, bytes, tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rlsim.models.decode import spans_s

FP32_BYTES = 4
ADAM_MOMENT_BYTES_PER_PARAM = 8.0  # AdamW's two fp32 moments


def drain_s(
    coefficients: Callable[[np.ndarray], np.ndarray], prompt_tokens: Sequence[int], response_tokens: Sequence[int]
) -> float:
    """Decode seconds of a batch admitted together and run until its last sequence ends.

    As in the simulator's engine, the prefill makes each sequence's first token and caches its
    prompt and that token; a response of r tokens then needs r - 1 decode iterations. The spans
    run from finish to finish, each at the batch still running, over the tokens cached at its
    start (a finisher frees its prompt and response). `coefficients(batches)` gives a decode
    iteration's six coefficients per batch size (`Costs.coefficients`).
    """
    if not response_tokens:
        return 0.0
    resp = np.asarray(response_tokens, dtype=np.int64)
    order = resp.argsort(kind="stable")
    ends = resp[order] - 1  # the decode iteration at which each sequence finishes, in finish order
    freed = (np.asarray(prompt_tokens, dtype=np.int64) + resp)[order]
    n = len(ends)
    first = np.flatnonzero(np.concatenate(([True], ends[1:] != ends[:-1])))
    span_ends = ends[first]
    k = np.diff(np.concatenate(([0], span_ends)))
    batch = n - first
    kv0 = int(np.sum(np.asarray(prompt_tokens, dtype=np.int64))) + n
    kv_end = kv0 + np.cumsum(k * batch - np.add.reduceat(freed, first))
    kv_start = np.concatenate(([kv0], kv_end[:-1]))
    run = k > 0  # a span of no iterations: one-token responses, done with the prefill
    if not run.any():
        return 0.0
    return float(np.sum(spans_s(coefficients(batch[run]), batch[run], kv_start[run], k[run])))


def eval_pass_s(
    groups: Sequence[tuple[int, Sequence[int]]],
    engines: int,
    max_batch: int,
    coefficients: Callable[[np.ndarray], np.ndarray],
    prefill_s: Callable[[list[int]], float],
    switch_s: float = 0.0,
) -> float:
    """Seconds of one evaluation pass: the slowest engine's share, plus `switch_s` (colocated).

    `groups`: (prompt tokens, response lengths) of each validation prompt. Group i goes to engine
    i mod `engines`; an engine runs its sequences in waves of at most `max_batch`, one after the
    other, each a prefill of its distinct prompts and the drain of that batch.
    """
    slowest = 0.0
    for e in range(engines):
        seqs = [(i, p, r) for i, (p, rs) in enumerate(groups[e::engines]) for r in rs]
        seconds = 0.0
        for w in range(0, len(seqs), max_batch):
            wave = seqs[w : w + max_batch]
            prompts = {i: p for i, p, _ in wave}  # a group's prompt prefilled once per wave
            seconds += prefill_s(list(prompts.values()))
            seconds += drain_s(coefficients, [p for _, p, _ in wave], [r for _, _, r in wave])
        slowest = max(slowest, seconds)
    return slowest + switch_s


def checkpoint_bytes(
    total_params: float, trainable_params: float, stored_param_bytes: int, with_optimizer: bool
) -> float:
    """Bytes of one checkpoint: the parameters as stored, plus the AdamW state with the optimizer.

    The optimizer state is the two fp32 moments of every trainable parameter and, where the
    stored parameters are not fp32 (Megatron's bf16 buffers), the fp32 master copy: the 12 bytes
    per parameter of `memory.OPTIMIZER_STATE_BYTES_PER_PARAM` then, 8 with fp32 (FSDP) parameters.
    """
    weights = total_params * stored_param_bytes
    if not with_optimizer:
        return weights
    master = FP32_BYTES if stored_param_bytes < FP32_BYTES else 0
    return weights + trainable_params * (ADAM_MOMENT_BYTES_PER_PARAM + master)


def checkpoint_s(nbytes: float, nodes: int, write_gbps_per_node: float) -> float:
    """Seconds to write `nbytes` from `nodes` training nodes in parallel, each at `write_gbps_per_node`."""
    return nbytes / (nodes * write_gbps_per_node * 1e9)


def run_s(run_steps: int, every_steps: int, seconds: float) -> float:
    """Seconds a run of `run_steps` spends on an event every `every_steps` steps: floor(R / N) of them."""
    return (run_steps // every_steps) * seconds


def amortized_s_per_step(run_steps: int, every_steps: int, seconds: float) -> float:
    """The event's mean seconds per step over the run: floor(R / N) x seconds / R."""
    return run_s(run_steps, every_steps, seconds) / run_steps
