"""Decode-attention kernel: one query token per sequence against its KV cache.

A batch is a list of per-sequence KV lengths. The one-token query of ``heads`` heads attends
to K and V ``[b, kv_heads, L_max, head_dim]`` (grouped-query attention: ``heads / kv_heads``
query heads share a KV head, laid out as ``[b, kv_heads, group, head_dim]``). Batches of
mixed lengths are padded to the longest and masked: the kernel reads the padding, so a row
records both ``read_bytes`` (what the kernel touched) and ``useful_bytes`` (the sequences'
real KV, ``sum(L_i)·2·kv_heads·head_dim·elem``); its achieved useful bandwidth counts useful
bytes only. `fit.fit_attention` fits ``seconds = latency + read_bytes / bandwidth``; a paged
engine reads no padding, so that bandwidth applies to useful bytes in the decode model.

KV caches are cold: in a real decode iteration a layer's cache was last touched one whole
iteration earlier, after every other layer's weights and KV. So each timed call reads the
next slice of a pool several times larger than the last-level cache (`ColdPool`).

CUDA uses ``torch.nn.functional.scaled_dot_product_attention`` (flash kernel for uniform
batches, memory-efficient kernel with the padding mask); the CPU uses an explicit
matmul-softmax on the same layout, which measured ~1.6x faster than SDPA there.
Units: seconds, bytes, tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rlsim.calibration.pool import ColdPool
from rlsim.calibration.shapes import LlmShape
from rlsim.calibration.timer import Case, Row, measure, row


def mixed_lengths(batch: int, mean_tokens: int, seed: int) -> list[int]:
    """Deterministic lognormal KV lengths (sigma 0.8, like RL response lengths), at least 16."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=np.log(mean_tokens) - 0.32, sigma=0.8, size=batch)
    return [int(max(16, min(8 * mean_tokens, x))) for x in raw]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, impl: str) -> torch.Tensor:
    """q [b, kv_heads, group, d], k/v [b, kv_heads, L, d], mask [b, 1, 1, L] bool (True = attend).

    The decode query's ``heads`` rows are grouped per KV head (``group = heads / kv_heads``),
    so each KV head is read once, as a GQA decode kernel does; plain SDPA on this layout needs
    no ``enable_gqa`` (whose support varies by backend and would expand K and V in the math one).
    """
    if impl == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def attention_row(
    lengths: Sequence[int],
    shape: LlmShape,
    pool: ColdPool,
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
) -> Row:
    """Time decode attention for one batch of KV lengths; bytes counted per K and V."""
    b, l_max = len(lengths), max(lengths)
    impl = "sdpa" if device.type == "cuda" else "matmul_softmax"
    group = shape.heads // shape.kv_heads
    q = torch.randn(b, shape.kv_heads, group, shape.head_dim, device=device, dtype=dtype)
    mask = None
    if min(lengths) != l_max:
        lens = torch.tensor(lengths, device=device)
        mask = (torch.arange(l_max, device=device)[None, :] < lens[:, None]).view(b, 1, 1, l_max)
    views = itertools.cycle(pool.views((b, shape.kv_heads, l_max, shape.head_dim), group=2))
    timing = measure(lambda: _attend(q, *next(views), mask, impl), device, warmup=warmup, repeats=repeats)
    per_token = 2 * shape.kv_heads * shape.head_dim * q.element_size()  # K and V, one layer
    useful, read = sum(lengths) * per_token, b * l_max * per_token
    return row(
        "attention",
        device,
        dtype,
        timing,
        impl=impl,
        batch=b,
        kv_tokens=sum(lengths),
        kv_len_min=min(lengths),
        kv_len_max=l_max,
        mixed=mask is not None,
        kv_heads=shape.kv_heads,
        heads=shape.heads,
        head_dim=shape.head_dim,
        useful_bytes=useful,
        read_bytes=read,
        useful_gbps=useful / timing.seconds / 1e9,
        read_gbps=read / timing.seconds / 1e9,
        lengths=list(lengths) if mask is not None else [],
    )


def attention_cases(
    batches: Sequence[Sequence[int]],
    shape: LlmShape,
    device: torch.device,
    dtype: torch.dtype,
    *,
    pool_bytes: float,
    warmup: int,
    repeats: int,
) -> list[Case]:
    """One case per batch of KV lengths; the first allocates the cold pool, the last frees it."""
    pool: list[ColdPool] = []

    def run(lengths: Sequence[int], last: bool) -> list[Row]:
        if not pool:
            pool.append(ColdPool(pool_bytes, device, dtype))
        rows = [attention_row(lengths, shape, pool[0], device, dtype, warmup=warmup, repeats=repeats)]
        if last:
            pool.clear()  # give the memory back to the next kernel family
        return rows

    label = "attention b={} L={}"
    return [
        (
            label.format(len(ls), max(ls) if len(set(ls)) == 1 else "mixed"),
            lambda ls=ls, i=i: run(ls, i == len(batches) - 1),
        )
        for i, ls in enumerate(batches)
    ]
