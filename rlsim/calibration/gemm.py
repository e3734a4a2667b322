"""GEMM kernel: the linear layers of one decoder layer (and the LM head) over token counts.

For each layer of `LlmShape.gemm_layers()` (in_features K, out_features N) and each token
count t, time ``Y[t, N] = X[t, K] @ W[N, K]^T`` (nn.Linear) and record FLOPs = 2·t·K·N.
`fit.fit_gemm` pools the layers per token count and fits the saturating rate
``rate(t) = matmul_tflops · t / (t + matmul_tokens_half)``.

`gemm_size_cases` times the same GEMMs as one GPU of `tp` holds them (column-parallel N and
row-parallel K split, `LlmShape.gemm_layers(tp)`) as "gemm_size" rows: the layer sizes from which
`fit.fit_gemm_size` fits how the half-saturation moves with the layer's per-GPU parameters
(the profile's `matmul_tokens_half_params`, `decode.tokens_half`).

Weights are random normal (GPU GEMMs run measurably faster on all-zero data because the
tensor cores draw less power), in bf16 on CUDA and float32 on the CPU (the CPU has no fast
bf16 GEMM in general). Units: seconds, FLOPs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlsim.calibration.shapes import LlmShape
from rlsim.calibration.timer import Case, Row, measure, row


def gemm_row(
    layer: str,
    tokens: int,
    k: int,
    n: int,
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
    kernel: str = "gemm",
    tp: int = 1,
) -> Row:
    """Time one GEMM [tokens, k] @ [k, n] and return its measurement row (`kernel`, TP degree `tp`)."""
    gen = torch.Generator(device=device).manual_seed(tokens * 7919 + k + n)
    x = torch.randn(tokens, k, device=device, dtype=dtype, generator=gen)
    # nn.Linear layout: weight [out, in], Y = X @ W^T (the transposed view costs no copy).
    w_t = (torch.randn(n, k, device=device, dtype=dtype, generator=gen) * k**-0.5).t()
    y = torch.empty(tokens, n, device=device, dtype=dtype)
    timing = measure(lambda: torch.mm(x, w_t, out=y), device, warmup=warmup, repeats=repeats)
    flops = 2.0 * tokens * k * n
    return row(
        kernel,
        device,
        dtype,
        timing,
        layer=layer,
        tp=tp,
        tokens=tokens,
        k=k,
        n=n,
        flops=flops,
        tflops=flops / timing.seconds / 1e12,
    )


def gemm_cases(
    shape: LlmShape,
    tokens: Sequence[int],
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
) -> list[Case]:
    """One case per (layer, token count) of the sweep."""
    cases: list[Case] = []
    for t in tokens:
        for layer, (k, n) in shape.gemm_layers().items():
            cases.append(
                (
                    f"gemm {layer} t={t}",
                    lambda layer=layer, t=t, k=k, n=n: [
                        gemm_row(layer, t, k, n, device, dtype, warmup=warmup, repeats=repeats)
                    ],
                )
            )
    return cases


def gemm_size_cases(
    shape: LlmShape,
    tps: Sequence[int],
    tokens: Sequence[int],
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
) -> list[Case]:
    """One case per (TP degree, token count): every GEMM of one GPU's layer and LM head shard."""
    cases: list[Case] = []
    for tp in tps:
        for t in tokens:
            cases.append(
                (
                    f"gemm tp={tp} t={t}",
                    lambda tp=tp, t=t: [
                        gemm_row(
                            layer, t, k, n, device, dtype, warmup=warmup, repeats=repeats, kernel="gemm_size", tp=tp
                        )
                        for layer, (k, n) in shape.gemm_layers(tp).items()
                    ],
                )
            )
    return cases
