"""Memory kernels: a bandwidth stream, cold weight reads, and a kernel-launch overhead probe.

- ``stream``: ``dst.copy_(src)`` over arrays several times the last-level cache; bytes =
  read + write (the STREAM "copy" convention). Gives the device's peak achievable bandwidth.
- ``weight_read``: one token through each linear layer of the model (``x[1, K] @ W[N, K]^T``,
  a GEMV), cycling through a pool of weight copies so that every call reads cold weights,
  as a decode iteration does; bytes = the weight matrix. `fit.fit_link`-style latency +
  bandwidth over the layer sizes gives ``memory_gbps``, the decode model's weight-read rate.
- ``launch``: many tiny in-place adds; seconds per kernel launch (on CUDA the eager dispatch
  and launch cost, on the CPU the op dispatch cost). The decode model's fixed cost is

      iteration_overhead_s = seconds_per_launch
                             · (KERNELS_PER_LAYER · layers + KERNELS_PER_ITERATION)

  with KERNELS_PER_LAYER = 12 (an engine with fused kernels, as vLLM without CUDA graphs:
  fused add+RMSNorm ×2, QKV, rotary, KV-cache write, attention, output projection,
  gate_up, activation-and-multiply, down, plus two for residual/bookkeeping) and
  KERNELS_PER_ITERATION = 8 (embedding, final norm, LM head, logits processing and sampling).
  CUDA graphs remove most of this cost; the datasheet profile's 1.5 ms for a 36-layer 8B
  model (vLLM, H100) is the same order as 12·36+8 = 440 launches at ~3.5 µs.

Units: seconds, bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from rlsim.calibration.pool import ColdPool
from rlsim.calibration.shapes import LlmShape
from rlsim.calibration.timer import Case, Row, measure, row

KERNELS_PER_LAYER = 12
KERNELS_PER_ITERATION = 8
_LAUNCHES_PER_CALL = 100


def kernels_per_iteration(layers: int) -> int:
    """Kernel launches of one eager decode iteration of a `layers`-layer model (see module doc)."""
    return KERNELS_PER_LAYER * layers + KERNELS_PER_ITERATION


def stream_row(nbytes: float, device: torch.device, dtype: torch.dtype, *, warmup: int, repeats: int) -> Row:
    """Time dst.copy_(src) of two arrays of `nbytes` each; bytes counted = read + write."""
    n = int(nbytes // torch.empty((), dtype=dtype).element_size())
    src = torch.full((n,), 1.0, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    timing = measure(lambda: dst.copy_(src), device, warmup=warmup, repeats=repeats)
    moved = 2.0 * n * src.element_size()
    return row(
        "stream",
        device,
        dtype,
        timing,
        op="copy",
        array_bytes=n * src.element_size(),
        bytes=moved,
        gbps=moved / timing.seconds / 1e9,
    )


def weight_read_rows(
    shape: LlmShape,
    pool_bytes: float,
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
) -> list[Row]:
    """One-token GEMV through each layer's weights, cold (a new copy of W every call)."""
    largest = max(k * n for k, n in shape.gemm_layers().values()) * dtype.itemsize
    pool = ColdPool(max(pool_bytes, largest), device, dtype)  # at least one copy of each layer
    rows = []
    for layer, (k, n) in shape.gemm_layers().items():
        copies = pool.views((n, k))
        weights = itertools.cycle([w for (w,) in copies])
        x = torch.randn(1, k, device=device, dtype=dtype)
        timing = measure(lambda x=x, w=weights: torch.mm(x, next(w).t()), device, warmup=warmup, repeats=repeats)
        nbytes = float(k * n * pool.flat.element_size())
        rows.append(
            row(
                "weight_read",
                device,
                dtype,
                timing,
                layer=layer,
                tokens=1,
                k=k,
                n=n,
                bytes=nbytes,
                copies=len(copies),
                gbps=nbytes / timing.seconds / 1e9,
            )
        )
    return rows


def launch_row(layers: int, device: torch.device, *, warmup: int, repeats: int) -> Row:
    """Seconds per tiny kernel launch, and the iteration overhead of a `layers`-layer model."""
    x = torch.zeros(1, device=device)

    def tiny_ops() -> None:
        for _ in range(_LAUNCHES_PER_CALL):
            x.add_(1.0)

    timing = measure(tiny_ops, device, warmup=warmup, repeats=repeats, min_sample_s=0.02)
    per_launch = timing.seconds / _LAUNCHES_PER_CALL
    kernels = kernels_per_iteration(layers)
    return row(
        "launch",
        device,
        x.dtype,
        timing,
        op="add_ on 1 element",
        launches_per_call=_LAUNCHES_PER_CALL,
        seconds_per_launch=per_launch,
        layers=layers,
        kernels_per_iteration=kernels,
        iteration_overhead_s=per_launch * kernels,
    )


def memory_cases(
    shape: LlmShape,
    stream_bytes: Sequence[float],
    pool_bytes: float,
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
) -> list[Case]:
    """Stream sizes, the cold weight reads, and the launch probe."""
    cases: list[Case] = [
        (
            f"stream {b / 1e6:.0f} MB",
            lambda b=b: [stream_row(b, device, dtype, warmup=warmup, repeats=repeats)],
        )
        for b in stream_bytes
    ]
    cases.append(
        (
            "weight reads",
            lambda: weight_read_rows(shape, pool_bytes, device, dtype, warmup=warmup, repeats=repeats),
        )
    )
    cases.append(
        (
            "launch overhead",
            lambda: [launch_row(shape.layers, device, warmup=warmup, repeats=repeats)],
        )
    )
    return cases
