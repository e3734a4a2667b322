"""Sweeps: the sizes each kernel family is measured at, per device type and mode.

Quick sweeps keep a CPU calibration under a minute on two cores and a GPU one to a couple
of minutes; full sweeps cover token counts from 1 to 4K-8K, KV caches to 32K tokens per
sequence, and collectives from a few KB to 256 MB-1 GB. Sizes are chosen so that every
buffer that must be cold (KV pool, weight copies, stream arrays) is several times the
last-level cache (CPU L3 up to a few hundred MB here; GPU L2 50-126 MB), and then shrunk to
the device's free memory by `fit_to_memory`. `OPS_SWEEPS` are the sizes a model's own
operators are timed at (`model_ops.py`), as fractions of its longest context where they are
lengths. The GEMMs are timed again as one GPU of TP 2-8 holds them (`gemm_size_*`), the layer
sizes `fit.fit_gemm_size` fits the half-saturation's size law over: each row's timed samples
last at least repeats x 10 ms, so on a GPU that adds about 12 s (quick: 120 rows) or 33 s
(full: 165 rows), and on two CPU cores about 5 s of CPU time (quick). Units: bytes, tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MB = 1 << 20


@dataclass(frozen=True)
class Sweep:
    """Sizes each kernel family is measured at, and how many timed repeats."""

    gemm_tokens: tuple[int, ...]
    gemm_size_tp: tuple[int, ...]  # TP degrees whose per-GPU GEMMs are timed too (layer-size law)
    gemm_size_tokens: tuple[int, ...]  # token counts of those (TP1 is the gemm_tokens sweep)
    attention_grid: tuple[tuple[int, int], ...]  # (batch, KV length) of uniform batches
    attention_mixed: tuple[tuple[int, int], ...]  # (batch, mean KV length) of lognormal batches
    pool_bytes: int  # cold pool for KV caches, weights and CPU copies
    stream_bytes: tuple[int, ...]
    copy_bytes: tuple[int, ...]
    train_tokens: tuple[int, ...]
    train_seq_cap: int
    collective_bytes: tuple[int, ...]
    warmup: int
    repeats: int


SWEEPS = {
    ("cpu", True): Sweep(
        gemm_tokens=(1, 4, 16, 64, 256, 1024),
        gemm_size_tp=(2, 4),
        gemm_size_tokens=(1, 4, 16, 64, 256),
        attention_grid=((1, 512), (1, 2048), (4, 512), (4, 2048), (16, 512), (16, 2048)),
        attention_mixed=((8, 1024), (24, 512)),
        pool_bytes=512 * MB,
        stream_bytes=(256 * MB, 512 * MB),
        copy_bytes=(4 * MB, 32 * MB, 128 * MB),
        train_tokens=(64, 256, 1024),
        train_seq_cap=256,
        collective_bytes=(64 << 10, 1 * MB, 8 * MB),
        warmup=2,
        repeats=7,
    ),
    ("cpu", False): Sweep(
        gemm_tokens=tuple(2**i for i in range(13)),
        gemm_size_tp=(2, 4, 8),
        gemm_size_tokens=tuple(2**i for i in range(11)),
        attention_grid=tuple((b, n) for b in (1, 2, 4, 8, 16, 32, 64) for n in (256, 1024, 4096)),
        attention_mixed=((4, 2048), (8, 1024), (24, 512), (48, 1024)),
        pool_bytes=1024 * MB,
        stream_bytes=(256 * MB, 512 * MB, 1024 * MB),
        copy_bytes=(1 * MB, 4 * MB, 16 * MB, 64 * MB, 256 * MB),
        train_tokens=(32, 64, 128, 256, 512, 1024, 2048),
        train_seq_cap=256,
        collective_bytes=tuple(4**i << 10 for i in range(9)),
        warmup=3,
        repeats=9,
    ),
    ("cuda", True): Sweep(
        gemm_tokens=(1, 8, 64, 512, 4096),
        gemm_size_tp=(2, 4, 8),
        gemm_size_tokens=(1, 8, 64, 128, 256, 512, 1024, 4096),
        attention_grid=((1, 1024), (8, 8192), (64, 2048), (64, 8192)),
        attention_mixed=((32, 4096), (128, 2048)),
        pool_bytes=8192 * MB,
        stream_bytes=(1024 * MB, 4096 * MB),
        copy_bytes=(1 * MB, 64 * MB, 1024 * MB),
        train_tokens=(512, 2048, 8192),
        train_seq_cap=2048,
        collective_bytes=(64 << 10, 4 * MB, 256 * MB),
        warmup=5,
        repeats=10,
    ),
    ("cuda", False): Sweep(
        gemm_tokens=tuple(2**i for i in range(14)),
        gemm_size_tp=(2, 4, 8),
        gemm_size_tokens=tuple(2**i for i in range(3, 14)),
        attention_grid=tuple((b, n) for b in (1, 4, 16, 64, 256) for n in (512, 2048, 8192, 32768)),
        attention_mixed=((16, 8192), (64, 4096), (128, 2048), (256, 1024)),
        pool_bytes=16384 * MB,
        stream_bytes=(1024 * MB, 2048 * MB, 4096 * MB),
        copy_bytes=tuple(4**i * MB for i in range(6)),
        train_tokens=(256, 512, 1024, 2048, 4096, 8192, 16384),
        train_seq_cap=4096,
        collective_bytes=tuple(8**i << 10 for i in range(7)),
        warmup=10,
        repeats=20,
    ),
}


@dataclass(frozen=True)
class OpsSweep:
    """Sizes one model's own operators are timed at; lengths are fractions of its context.

    Lengths scale with the model's position table (``max_position_embeddings``, capped at
    `MAX_OPS_CONTEXT`), so a model with a 12-token context and one with 2048 both get a low, a
    middle and a full length. Batches cover one sequence to a few hundred (RL generation
    batches; the fit extrapolates beyond, and the profile records the range).
    """

    decode_batches: tuple[int, ...]
    decode_contexts: tuple[float, ...]  # cached + new token per sequence, fractions of the context
    prefill_prompts: tuple[int, ...]  # prompts per prefill call
    prefill_lengths: tuple[float, ...]  # tokens per prompt, fractions of the context
    train_rows: tuple[int, ...]  # sequences per micro-batch
    train_lengths: tuple[float, ...]  # tokens per sequence, fractions of the context
    copy_multiples: tuple[int, ...]  # flat copies of this many times the model's bytes
    warmup: int
    repeats: int


MAX_OPS_CONTEXT = 1024  # longest sequence the operator sweep uses, tokens

OPS_SWEEPS = {
    True: OpsSweep(
        decode_batches=(1, 8, 32, 96, 192),
        decode_contexts=(0.25, 0.5, 1.0),
        prefill_prompts=(1, 32, 128, 256),
        prefill_lengths=(0.15, 0.4, 0.9),
        train_rows=(16, 32, 64, 96, 128),
        train_lengths=(0.5, 0.75, 1.0),
        copy_multiples=(1, 4, 16),
        warmup=2,
        repeats=7,
    ),
    False: OpsSweep(
        decode_batches=(1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256),
        decode_contexts=(0.2, 0.4, 0.6, 0.8, 1.0),
        prefill_prompts=(1, 4, 16, 64, 128, 256),
        prefill_lengths=(0.1, 0.3, 0.6, 0.9),
        train_rows=(8, 16, 32, 64, 128, 256),
        train_lengths=(0.3, 0.6, 1.0),
        copy_multiples=(1, 2, 4, 8, 16),
        warmup=3,
        repeats=9,
    ),
}


def fit_to_memory(sweep: Sweep, free: int) -> Sweep:
    """Shrink the big buffers so that no family needs more than ~40% of free memory.

    The cold pool holds the KV caches (and, separately, the weight copies); the stream needs two
    arrays; copies need one buffer. A 24 GB card cannot take the 80 GB card's sizes.
    """
    pool = int(min(sweep.pool_bytes, 0.4 * free))
    copy_max = min(0.2 * free, pool / 2)  # the CPU memcpy takes source and target from the pool
    return replace(
        sweep,
        pool_bytes=pool,
        stream_bytes=tuple(b for b in sweep.stream_bytes if 2 * b <= 0.4 * free) or (int(0.2 * free),),
        copy_bytes=tuple(b for b in sweep.copy_bytes if b <= copy_max) or (int(copy_max / 2),),
    )
