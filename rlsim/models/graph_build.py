"""Host time to build cuDNN fused-attention graphs for padded shapes a training rank has not seen.

TransformerEngine runs attention through cuDNN's graph API. It keeps every graph it built in a
cache keyed by the whole problem: batch, heads, `s_q`, `s_kv`, head dims, layout, mask, dtype,
dropout and `is_training`, one map for forward graphs and one for backward graphs, `static
thread_local` in the library (NVIDIA/TransformerEngine@d0067d0d
transformer_engine/common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu: `FADescriptor_v1`,
`sdpa_f16_fprop_cache`, `sdpa_f16_bprop_cache`). A miss builds the graph and its execution plan
(`validate`, `create_execution_plans`, `check_support`, `build_plans`): synchronous host work the
GPU waits for, "~1s" per new shape in Megatron's BSHD path on Qwen3.5-35B-A3B (verl-project/verl
PR 6901, merge 561a4b03, 2026-07-02; "about 1 s each" in another trainer, modelscope/FunASR PR
3705). Each training rank is its own process, so each builds its own graphs.

Megatron's BSHD (padded, non-packed) path pads a micro-batch to a length aligned to
`tp x cp x 2` (`tp` without CP): verl's `preprocess_bshd_engine` (verl-project/verl@890dfc3e
verl/models/mcore/util.py). Which length depends on what sets it: each micro-batch's own longest
sample (verl before PR 6901, or with `pad_bshd_to_minibatch_max` off), or the longest sample of
the rank's whole forward call: one PPO minibatch for the update, the rank's whole batch for the
log-prob pass (`pad_bshd_to_minibatch_max`, on by default since PR 6901;
verl/workers/engine/megatron/transformer_impl.py `forward_backward_batch`). A log-prob pass runs
in eval mode (`is_training` false) and builds forward graphs only; the update builds a training
forward and a backward graph; the two never share a graph. The caches are per thread, and
PyTorch runs a CUDA backward on the autograd engine's own long-lived thread for the device
(pytorch/pytorch torch/csrc/autograd/engine.cpp `Engine::start_device_threads`), so with
activation recompute the forward re-run inside the backward misses that thread's cache once
more: three graphs. Under context parallelism TE's causal ring (`cp_comm_type` p2p, which
Megatron-Core's TEDotProductAttention sets when unset: megatron/core/extensions/transformer_engine.py)
runs each attention in sections of their own shapes: the diagonal (s/cp against s/cp),
and the lower (s/cp against s/2cp) or upper (s/2cp against s/cp) triangle, by rank
(transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
`AttnFuncWithCPAndKVP2P`): 2 shapes a rank at cp 2, 3 on a middle rank beyond. A reference
forward shares the log-prob pass's graphs (same process, same key).

How many shapes are new in a step depends on the run's history: the cache fills as the run goes.
A published step time that is the mean over a run of `run_steps` steps holds the run's total
build time divided by `run_steps`, and the expected number of distinct values among n draws is
sum over padded lengths L of 1 - (1 - p_L)^n. So the charge per step is that count over the
whole run's draws, times the graphs per shape and the seconds per graph, over `run_steps`: the
run's mean, not the first steps' (which meet many more new shapes) nor a late step's (which meets
almost none). Not modelled: a pipeline stage waits for the stage before it to build (the first
micro-batch of a new shape may pay it once per stage, so with pp > 1 this is a lower bound); the
data-parallel ranks are charged their expected count, not the slowest rank's; samples are drawn
independently from the workload's distributions (a group's correlated lengths and a length
schedule's drift are not seen).
Units: seconds, tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShapePass:
    """One kind of forward call a rank makes, as far as its attention shapes go.

    `calls_per_step`: padded shapes the rank meets per RL step in this pass (micro-batches when each
    sets its own length, forward calls when a call sets one length for all its micro-batches);
    `samples_per_shape`: samples whose longest sets one shape; `graphs`: graphs a new shape builds.
    """

    calls_per_step: float
    samples_per_shape: int
    graphs: int


def cp_sections(cp: int) -> int:
    """Attention shapes one padded length makes on a rank of TE's causal CP ring (the most any rank has)."""
    return 1 if cp <= 1 else 2 if cp == 2 else 3


def forward_graphs(cp: int) -> int:
    """Graphs a new padded length builds in an eval-mode forward pass (log-prob, reference)."""
    return cp_sections(cp)


def training_graphs(cp: int, activation_recompute: bool) -> int:
    """Graphs a new padded length builds in a training pass: forward, backward, and the recomputed
    forward on the backward's thread."""
    return cp_sections(cp) * (3 if activation_recompute else 2)


def bshd_alignment(tp: int, cp: int) -> int:
    """Tokens a BSHD micro-batch's length is padded to a multiple of: tp x cp x 2 with CP, else tp."""
    return tp * cp * 2 if cp > 1 else tp


def padded_pmf(length_pmf: np.ndarray, align: int, samples_per_shape: int = 1) -> np.ndarray:
    """Probabilities of each padded shape: the longest of `samples_per_shape` samples, rounded up.

    `length_pmf[i]`: probability that one sample is i tokens long. Entry k of the result is the
    probability that the padded length is k x `align` tokens (the CDF of the longest is the
    sample's CDF to the power `samples_per_shape`).
    """
    p = np.asarray(length_pmf, dtype=float)
    buckets = -(-np.arange(p.size) // align)  # ceil(i / align)
    per_bucket = np.bincount(buckets, weights=p, minlength=int(buckets[-1]) + 1)
    cdf = np.minimum(np.cumsum(per_bucket) / per_bucket.sum(), 1.0) ** samples_per_shape
    return np.diff(cdf, prepend=0.0)


def expected_distinct(pmf: np.ndarray, draws: float) -> float:
    """Expected number of distinct values among `draws` independent draws from `pmf`."""
    p = np.asarray(pmf, dtype=float)
    p = p[p > 0]
    seen = np.where(p >= 1.0, 1.0, -np.expm1(draws * np.log1p(-np.minimum(p, 1.0 - 1e-16))))
    return float(seen.sum())


def new_shapes_per_step(length_pmf: np.ndarray, align: int, shape_pass: ShapePass, run_steps: int) -> float:
    """Mean new padded shapes per step of this pass over a run of `run_steps` steps, per rank."""
    pmf = padded_pmf(length_pmf, align, shape_pass.samples_per_shape)
    return expected_distinct(pmf, shape_pass.calls_per_step * run_steps) / run_steps


def build_s_per_step(
    length_pmf: np.ndarray, align: int, shape_pass: ShapePass, run_steps: int, graph_build_s: float
) -> float:
    """Mean host seconds per step a rank spends building this pass's graphs over the run."""
    if graph_build_s <= 0 or shape_pass.calls_per_step <= 0:
        return 0.0
    shapes = new_shapes_per_step(length_pmf, align, shape_pass, run_steps)
    return shapes * shape_pass.graphs * graph_build_s
