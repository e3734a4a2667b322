"""Fitting: pure functions from measured rows to the parameters a profile holds.

Four curve shapes cover every kernel family:

- saturating rate in a size x (GEMM rows, training micro-batch tokens):
  ``rate(x) = rate_max * x / (x + x_half)``;
- latency + bandwidth (collectives, copies, decode attention):
  ``seconds(bytes) = latency_s + bytes / bytes_per_s``;
- bandwidth alone (streams, weight reads): ``bytes_per_s = sum(bytes) / sum(seconds)``;
- a sum of non-negative linear terms (a model's own operators, `model_ops.py`):
  ``seconds = c_0 * x_0 + c_1 * x_1 + ...``, e.g. fixed + per_sequence * b + per_kv_token * K.

The latency + bandwidth and linear fits minimise *relative* residuals (each point weighted by
1/y): message sizes span six decades and the small ones carry the latency. The saturating fit
minimises residuals in units of the largest rate, favouring the compute-bound end where the
models use it. Both use a soft-L1 loss (`ROBUST`), so one odd point cannot bend the curve.
Each fit returns its parameters with a `FitQuality` (R² on the original scale, maximum
relative residual). No torch here: fitting runs and is tested without it. Units: seconds, bytes, and
whatever rate unit the caller passes in (the row-level helpers use FLOP/s and bytes/s).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares, lsq_linear

# Robust loss: residuals beyond ~10% weigh linearly, not quadratically, so one odd point (a
# sample hit by a neighbour process, a width that hits a slow kernel) cannot bend the curve.
ROBUST: dict[str, Any] = {"loss": "soft_l1", "f_scale": 0.1}


@dataclass(frozen=True)
class FitQuality:
    """How well a fitted curve reproduces its own measurements."""

    r2: float
    max_rel_residual: float
    n: int


@dataclass(frozen=True)
class SaturatingFit:
    """rate(x) = rate_max * x / (x + x_half)."""

    rate_max: float
    x_half: float
    quality: FitQuality

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        return self.rate_max * x / (x + self.x_half)


@dataclass(frozen=True)
class LatencyBandwidthFit:
    """seconds(bytes) = latency_s + bytes / bytes_per_s (bytes_per_s alone when latency is 0)."""

    latency_s: float
    bytes_per_s: float
    quality: FitQuality

    def __call__(self, nbytes: float | np.ndarray) -> float | np.ndarray:
        return self.latency_s + nbytes / self.bytes_per_s


def quality(y: np.ndarray, y_hat: np.ndarray) -> FitQuality:
    """R² (on the original scale) and the largest |y_hat - y| / y."""
    y, y_hat = np.asarray(y, float), np.asarray(y_hat, float)
    ss_res = float(np.sum((y - y_hat) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return FitQuality(r2=r2, max_rel_residual=float(np.max(np.abs(y_hat - y) / y)), n=len(y))


def _check(x: Iterable[float], y: Iterable[float], need: int) -> tuple[np.ndarray, np.ndarray]:
    xa, ya = np.asarray(list(x), float), np.asarray(list(y), float)
    if xa.shape != ya.shape or len(xa) < need:
        raise ValueError(f"need at least {need} paired points, got {len(xa)} x and {len(ya)} y")
    if np.any(xa <= 0) or np.any(ya <= 0):
        raise ValueError("sizes and measurements must be positive")
    return xa, ya


def fit_saturating(x: Iterable[float], rate: Iterable[float]) -> SaturatingFit:
    """Fit rate = rate_max * x / (x + x_half), x_half >= 0, residuals in units of the top rate.

    Absolute (not relative) residuals: the models use these rates where work is compute-bound
    (prefill, training, large decode batches); at a handful of rows a decode iteration is
    bound by its weight reads (the memory branch), so the low end may be loose.
    """
    xa, ya = _check(x, rate, need=2)
    # Work in units of the largest rate; start where the data cross half of it.
    r0 = float(ya.max())
    below = xa[ya < 0.5 * r0]
    h0 = max(float(below.max()) if len(below) else float(xa.min()) * 0.1, 1e-9)
    sol = least_squares(
        lambda p: p[0] * xa / (xa + p[1]) - ya / r0,
        x0=(1.0, h0),
        bounds=([0.0, 0.0], [np.inf, np.inf]),
        x_scale=(1.0, h0),
        **ROBUST,
    )
    r_max, x_half = float(sol.x[0]) * r0, float(sol.x[1])
    return SaturatingFit(r_max, x_half, quality(ya, r_max * xa / (xa + x_half)))


def fit_latency_bandwidth(nbytes: Iterable[float], seconds: Iterable[float]) -> LatencyBandwidthFit:
    """Fit seconds = latency + bytes / bandwidth, latency >= 0, on robust relative residuals."""
    xa, ya = _check(nbytes, seconds, need=2)
    # Unknowns scaled to order one: latency = u * s_y, 1/bandwidth = v * s_y / s_x.
    s_y, s_x = float(np.median(ya)), float(np.median(xa))
    a = np.column_stack([np.full_like(xa, s_y), xa * s_y / s_x]) / ya[:, None]
    start = lsq_linear(a, np.ones_like(ya), bounds=([0.0, 1e-12], [np.inf, np.inf])).x
    sol = least_squares(lambda p: a @ p - 1.0, x0=start, bounds=([0.0, 1e-12], [np.inf, np.inf]), **ROBUST)
    latency, inv_bw = float(sol.x[0]) * s_y, float(sol.x[1]) * s_y / s_x
    return LatencyBandwidthFit(latency, 1.0 / inv_bw, quality(ya, latency + xa * inv_bw))


@dataclass(frozen=True)
class LinearFit:
    """seconds = sum_i coefs[i] * features[i]; every coefficient >= 0 (a cost adds, never saves)."""

    coefs: tuple[float, ...]
    quality: FitQuality

    def __call__(self, *features: float) -> float:
        return float(sum(c * x for c, x in zip(self.coefs, features, strict=True)))


def fit_linear(features: Iterable[Iterable[float]], seconds: Iterable[float]) -> LinearFit:
    """Fit seconds = features @ coefs, coefs >= 0, on robust relative residuals.

    `features` holds one row per measurement (e.g. ``[1, b, K]`` for a fixed term, one per
    sequence and one per cached token). Relative residuals weigh a 1 ms point like a 10 ms one:
    small batches (the generation tail) matter as much as big ones.
    """
    x = np.asarray([list(map(float, f)) for f in features], float)
    y = np.asarray(list(seconds), float)
    if x.ndim != 2 or len(x) != len(y) or len(y) < x.shape[1]:
        raise ValueError(f"need at least as many measurements as terms, got {len(y)} for {x.shape}")
    if np.any(y <= 0) or np.any(x < 0):
        raise ValueError("measurements must be positive and features non-negative")
    # Unknowns scaled to order one: coef_j = u_j * median(y) / median(feature j where nonzero).
    typical = [float(np.median(col[col > 0])) if np.any(col > 0) else 1.0 for col in x.T]
    scale = float(np.median(y)) / np.array(typical)
    a = x * scale / y[:, None]
    bounds = (np.zeros(x.shape[1]), np.full(x.shape[1], np.inf))
    start = lsq_linear(a, np.ones_like(y), bounds=bounds).x
    sol = least_squares(lambda p: a @ p - 1.0, x0=start, bounds=bounds, **ROBUST)
    coefs = sol.x * scale
    return LinearFit(tuple(float(c) for c in coefs), quality(y, x @ coefs))


def fit_bandwidth(nbytes: Iterable[float], seconds: Iterable[float]) -> LatencyBandwidthFit:
    """Bandwidth = total bytes / total seconds (seconds = bytes / bandwidth, through the origin).

    Pooling by time is what a consumer of the figure needs: the decode model divides *all*
    the weight bytes of an iteration by it, so each kernel weighs by the time it takes.
    """
    xa, ya = _check(nbytes, seconds, need=1)
    bw = float(xa.sum() / ya.sum())
    return LatencyBandwidthFit(0.0, bw, quality(ya, xa / bw))


# ---- row-level helpers: rows are the dicts the kernels record -------------------------------


def select(rows: Iterable[Mapping[str, Any]], kernel: str, **match: Any) -> list[Mapping[str, Any]]:
    """The rows of one kernel whose fields equal every `match` value; an empty pick is an error."""
    picked = [r for r in rows if r.get("kernel") == kernel and all(r.get(k) == v for k, v in match.items())]
    if not picked:
        raise ValueError(f"no '{kernel}' measurements {match or ''} to fit")
    return picked


def gemm_rate_by_tokens(rows: Iterable[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Per token count, the rate of all layer GEMMs together: sum(FLOPs) / sum(seconds).

    Pooling by time is what the decode model needs: its compute term is 2·P·b / rate(b)
    summed over all layers, so a layer that takes longer weighs more.
    """
    flops: dict[float, float] = defaultdict(float)
    secs: dict[float, float] = defaultdict(float)
    for r in select(rows, "gemm"):
        flops[r["tokens"]] += r["flops"]
        secs[r["tokens"]] += r["seconds"]
    tokens = np.array(sorted(flops))
    return tokens, np.array([flops[t] / secs[t] for t in tokens])


def fit_gemm(rows: Iterable[Mapping[str, Any]]) -> SaturatingFit:
    """GEMM rows -> saturating FLOP/s in tokens (rows of the activation matrix)."""
    return fit_saturating(*gemm_rate_by_tokens(rows))


@dataclass(frozen=True)
class GemmSizeFit:
    """How the GEMM half-saturation moves with a layer's per-GPU GEMM parameters P.

    The law `decode.tokens_half` applies: half(P) = x_half * sqrt(reference_params / P), with the
    rate and x_half of the TP1 fit (`fit_gemm`). `exponent` is that of a free power law fitted
    to the same rows (half ∝ P^-exponent), kept for the record; `rms` and `rms_flat` are the rms
    of log(model / measured time) of the law and of x_half at every size.
    """

    reference_params: float
    exponent: float
    params: tuple[float, ...]  # the per-GPU layer GEMM parameters of each size measured
    rms: float
    rms_flat: float
    quality: FitQuality


# Bytes per weight element by the dtype name a GEMM row records.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def gemm_sizes(rows: Iterable[Mapping[str, Any]]) -> dict[float, list[Mapping[str, Any]]]:
    """Per layer size: its per-GPU layer GEMM parameters -> its GEMM rows.

    Sizes are the TP1 "gemm" rows and the "gemm_size" rows of each TP degree. A size's parameters
    are its layer's GEMMs (K x N summed, the LM head left out, as `decode.gemm_layer_params`
    counts them). Rows without a layer name (files from before the layer-size sweep) give no size.
    """
    by_tp: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("kernel") in ("gemm", "gemm_size") and "layer" in r:
            by_tp[int(r.get("tp", 1))].append(r)
    out: dict[float, list[Mapping[str, Any]]] = {}
    for group in by_tp.values():
        first = min(r["tokens"] for r in group)
        out[float(sum(r["k"] * r["n"] for r in group if r["tokens"] == first and r["layer"] != "lm_head"))] = group
    return out


def fit_gemm_size(rows: Iterable[Mapping[str, Any]], gemm: SaturatingFit, weight_bytes_per_s: float) -> GemmSizeFit:
    """GEMM rows of several layer sizes -> the reference size of the law half = x_half sqrt(ref / P).

    Fitted in the form the decode model uses the half in (`decode.iteration_cost`): each size's
    GEMMs (LM head included) take max(their weight bytes / weight_bytes_per_s, their FLOPs at
    rate_max x t / (t + half)); residuals are log(model / measured) seconds per size and token
    count, robust. The TP1 fit's rate_max and x_half are held, so only the reference (and, for
    the record, a free exponent) is fitted. Needs two sizes and x_half > 0.
    """
    sizes = gemm_sizes(rows)
    if len(sizes) < 2:
        raise ValueError(f"need GEMMs of at least 2 layer sizes, got {len(sizes)}")
    if gemm.x_half <= 0:
        raise ValueError("the GEMM rate is saturated at one row (x_half 0): no size law to fit")
    params, t, weights_s, flops, measured = [], [], [], [], []
    for p, group in sizes.items():
        for tokens in sorted({r["tokens"] for r in group}):
            at = [r for r in group if r["tokens"] == tokens]
            elements = sum(r["k"] * r["n"] for r in at)
            params.append(p)
            t.append(float(tokens))
            weights_s.append(elements * DTYPE_BYTES.get(str(at[0].get("dtype")), 2) / weight_bytes_per_s)
            flops.append(sum(r["flops"] for r in at))
            measured.append(sum(r["seconds"] for r in at))
    p_a, t_a, w_a, f_a, y_a = (np.array(v, float) for v in (params, t, weights_s, flops, measured))
    log_p, log_mean = np.log(p_a), float(np.mean(np.log(list(sizes))))

    def model_s(half: np.ndarray) -> np.ndarray:
        return np.maximum(w_a, f_a * (t_a + half) / (gemm.rate_max * t_a))

    def residuals(half: np.ndarray) -> np.ndarray:
        return np.log(model_s(half) / y_a)

    law = least_squares(
        lambda u: residuals(gemm.x_half * np.exp(0.5 * (u[0] - log_p))),
        x0=(log_mean,),
        bounds=([log_mean - 30.0], [log_mean + 30.0]),
        **ROBUST,
    )
    free = least_squares(
        lambda v: residuals(gemm.x_half * np.exp(v[0] - v[1] * (log_p - log_mean))),
        x0=(0.0, 0.5),
        bounds=([-30.0, -5.0], [30.0, 5.0]),
        **ROBUST,
    )
    reference = float(np.exp(law.x[0]))
    half = gemm.x_half * np.sqrt(reference / p_a)
    return GemmSizeFit(
        reference_params=reference,
        exponent=float(free.x[1]),
        params=tuple(sorted(sizes)),
        rms=float(np.sqrt(np.mean(residuals(half) ** 2))),
        rms_flat=float(np.sqrt(np.mean(residuals(np.full_like(t_a, gemm.x_half)) ** 2))),
        quality=quality(y_a, model_s(half)),
    )


def fit_training(rows: Iterable[Mapping[str, Any]]) -> SaturatingFit:
    """Training rows -> saturating FLOP/s in micro-batch tokens."""
    picked = select(rows, "train")
    return fit_saturating([r["tokens"] for r in picked], [r["flops"] / r["seconds"] for r in picked])


def fit_attention(rows: Iterable[Mapping[str, Any]]) -> LatencyBandwidthFit:
    """Decode-attention rows -> per-call latency + KV bandwidth, on the bytes the kernel reads.

    Padded rows read their padding too; fitting on bytes read gives the device's KV read rate,
    which a padding-free (paged) engine achieves on useful bytes alone.
    """
    picked = select(rows, "attention")
    return fit_latency_bandwidth([r["read_bytes"] for r in picked], [r["seconds"] for r in picked])


def fit_link(rows: Iterable[Mapping[str, Any]], kernel: str, **match: Any) -> LatencyBandwidthFit:
    """Copy or collective rows -> latency + bandwidth on `bus_bytes` (nccl-tests busbw)."""
    picked = select(rows, kernel, **match)
    return fit_latency_bandwidth([r["bus_bytes"] for r in picked], [r["seconds"] for r in picked])
