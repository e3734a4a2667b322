"""Measured rows -> a `Profile` (source "measured"): the fits, the peaks, the notes.

Pure: no torch, so it is tested on synthetic rows. What each profile field comes from:

| field | from |
|---|---|
| matmul_tflops, matmul_tokens_half | saturating fit of the pooled GEMM rate per token count |
| matmul_tokens_half_params | reference of the layer-size law fitted over the GEMMs at TP 1-8 (`_gemm_size`) |
| memory_gbps | total bytes / total seconds of cold one-token GEMVs through every layer's weights |
| attention_gbps | latency + bandwidth fit of decode attention on bytes read |
| iteration_overhead_s | launch probe: seconds per launch · kernels per iteration |
| train_mfu, train_tokens_half | saturating fit of block forward+backward FLOP/s, over peak_tflops |
| host_link_gbps | CUDA: harmonic mean of h2d and d2h (see below); CPU: the memcpy stand-in |
| intra_node | all-reduce latency + busbw fit; one GPU: the datasheet profile's figure |
| inter_node | the datasheet profile's figure (one host cannot measure it); CPU: intra_node |
| peak_tflops, peak_memory_gbps | GPU: the catalog. CPU: see below |
| memory_gib | GPU: the total CUDA reports (torch.cuda.mem_get_info). CPU: see below |
| model_ops | a model's own operator rows, if timed: `model_ops_fit.fit_model_ops` |

The harmonic mean makes a round trip of B bytes each way cost exactly 2B / host_link_gbps (an
offload plus a reload). On the CPU, peak_tflops is the best GEMM rate measured (or the fitted
asymptote if higher), peak_memory_gbps the stream bandwidth, memory_gib what the caller grants.

Each fit is also appended to the measurements as a ``kernel: "fit"`` row with its parameters,
R² and maximum relative residual. Units: seconds, GB/s, TFLOP/s, tokens.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlsim.calibration import fit
from rlsim.calibration.model_ops_fit import fit_model_ops
from rlsim.calibration.profile import SCHEMA_VERSION, LinkFit, Profile

# Share of all CPUs taken by other processes above which a row counts as contended.
CONTENDED = 0.15


@dataclass(frozen=True)
class DeviceFacts:
    """What is known about the device apart from the measurements."""

    key: str  # catalog GPU key, or "cpu"
    name: str
    memory_gib: float  # the device's total as CUDA reports it; on the CPU, the RAM share granted
    peak_tflops: float | None = None  # None on the CPU: taken from the GEMM rows
    peak_memory_gbps: float | None = None  # None on the CPU: taken from the stream rows
    datasheet: Profile | None = None  # link figures to fall back on (GPUs)
    software: dict[str, str] = field(default_factory=dict)
    citations: tuple[str, ...] = ()


Fit = fit.SaturatingFit | fit.LatencyBandwidthFit


def fit_all(rows: Sequence[Mapping[str, Any]]) -> dict[str, Fit]:
    """Every fit the rows allow, by quantity name (copy and collective fits per direction/op)."""

    def xy(kernel: str) -> tuple[list[float], list[float]]:
        picked = fit.select(rows, kernel)
        return [r["bytes"] for r in picked], [r["seconds"] for r in picked]

    directions = sorted({r["direction"] for r in rows if r.get("kernel") == "copy"})
    ops = sorted({r["op"] for r in rows if r.get("kernel") == "collective"})
    return {
        "gemm": fit.fit_gemm(rows),
        "train": fit.fit_training(rows),
        "attention": fit.fit_attention(rows),
        "stream": fit.fit_bandwidth(*xy("stream")),
        "weight_read": fit.fit_bandwidth(*xy("weight_read")),
        **{f"copy_{d}": fit.fit_link(rows, "copy", direction=d) for d in directions},
        **{f"collective_{op}": fit.fit_link(rows, "collective", op=op) for op in ops},
    }


def fit_row(quantity: str, f: Fit) -> dict[str, Any]:
    """A fit as a measurement row: formula, parameters (TFLOP/s, tokens, s, GB/s), quality."""
    if isinstance(f, fit.SaturatingFit):
        formula = "flops_per_s = rate_max * t / (t + t_half)"
        params = {"rate_max_tflops": f.rate_max / 1e12, "t_half": f.x_half}
    elif quantity in ("stream", "weight_read"):
        formula = "bandwidth = sum(bytes) / sum(seconds)"
        params = {"gbps": f.bytes_per_s / 1e9}
    else:
        formula = "seconds = latency_s + bytes / bandwidth"
        params = {"latency_s": f.latency_s, "gbps": f.bytes_per_s / 1e9}
    q = f.quality
    return {
        "kernel": "fit",
        "quantity": quantity,
        "formula": formula,
        "params": params,
        "r2": q.r2,
        "max_rel_residual": q.max_rel_residual,
        "n": q.n,
    }


def _gbps(f: Fit) -> float:
    assert isinstance(f, fit.LatencyBandwidthFit)
    return f.bytes_per_s / 1e9


def _span(values: Sequence[float]) -> list[float]:
    return [float(min(values)), float(max(values))]


def _host_link(fits: Mapping[str, Fit]) -> float:
    """Harmonic mean of the copy directions' bandwidths (a round trip's rate), GB/s."""
    rates = [_gbps(f) for name, f in fits.items() if name.startswith("copy_")]
    return len(rates) / sum(1.0 / r for r in rates)


def _links(
    rows: Sequence[Mapping[str, Any]],
    facts: DeviceFacts,
    fits: Mapping[str, Fit],
    notes: list[str],
) -> tuple[LinkFit, LinkFit]:
    """intra_node and inter_node LinkFits, from the all-reduce fit or the fallbacks."""
    if "collective_all_reduce" in fits:
        f = fits["collective_all_reduce"]
        assert isinstance(f, fit.LatencyBandwidthFit)
        intra = LinkFit(busbw_gbps=_gbps(f), latency_s=f.latency_s)
        world = max(r["world"] for r in rows if r.get("kernel") == "collective")
        notes.append(f"intra_node: measured all-reduce over {world} ranks.")
    elif facts.datasheet is not None:
        intra = facts.datasheet.intra_node
        notes.append("intra_node: collectives not measured (one GPU); datasheet figure kept.")
    else:
        copy = min((f for n, f in fits.items() if n.startswith("copy_")), key=_gbps)
        assert isinstance(copy, fit.LatencyBandwidthFit)
        intra = LinkFit(busbw_gbps=_gbps(copy), latency_s=copy.latency_s)
        notes.append("intra_node: collectives not measured; the memcpy link stands in.")
    if facts.datasheet is not None:
        notes.append("inter_node: not measurable on one host; datasheet figure kept.")
        return intra, facts.datasheet.inter_node
    notes.append("inter_node: not measurable on one host; set equal to intra_node.")
    return intra, intra


def _ranges(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """The [min, max] of each swept quantity, so the models can flag extrapolation."""
    attn = fit.select(rows, "attention")
    ranges = {
        "gemm_tokens": _span([r["tokens"] for r in fit.select(rows, "gemm")]),
        "kv_tokens": _span([r["kv_tokens"] for r in attn]),
        "kv_length": _span([r["kv_len_min"] for r in attn] + [r["kv_len_max"] for r in attn]),
        "batch": _span([r["batch"] for r in attn]),
        "train_tokens": _span([r["tokens"] for r in fit.select(rows, "train")]),
        "copy_bytes": _span([r["bytes"] for r in fit.select(rows, "copy")]),
    }
    collective = [r["bytes"] for r in rows if r.get("kernel") == "collective"]
    if collective:
        ranges["collective_bytes"] = _span(collective)
    return ranges


def _gemm_size(
    rows: Sequence[Mapping[str, Any]], gemm: fit.SaturatingFit, weight_read: Fit
) -> tuple[float | None, str, list[dict[str, Any]]]:
    """matmul_tokens_half_params, a note saying where it comes from, and the fit's row.

    The layer-size law is kept only where it describes this device's GEMMs better than one
    half at every size (rms below the flat one's) and the half falls as the layer grows (free
    exponent > 0) with a reference within 100x of the sizes measured; otherwise None (the
    half at every size, as before the sweep existed), with the figures in the note.
    """
    try:
        f = fit.fit_gemm_size(rows, gemm, _gbps(weight_read) * 1e9)
    except ValueError as exc:
        return None, f"matmul_tokens_half_params: not fitted ({exc}); matmul_tokens_half at every layer size.", []
    lo, hi = f.params[0], f.params[-1]
    row = {
        "kernel": "fit",
        "quantity": "gemm_size",
        "formula": "seconds = max(weight bytes / memory_gbps, flops (t + t_half(P)) / (rate_max t)), "
        "t_half(P) = t_half * sqrt(reference_params / P); free: t_half ~ P^-exponent",
        "params": {"reference_params": f.reference_params, "exponent": f.exponent, "layer_params": list(f.params)},
        "rms": f.rms,
        "rms_flat": f.rms_flat,
        "r2": f.quality.r2,
        "max_rel_residual": f.quality.max_rel_residual,
        "n": f.quality.n,
    }
    figures = (
        f"layer sizes {lo:.3g}-{hi:.3g} GEMM parameters per GPU, rms log error {f.rms:.3f} against "
        f"{f.rms_flat:.3f} flat, free fit half ~ P^{-f.exponent:.2f}"
    )
    if f.rms < f.rms_flat and f.exponent > 0 and lo / 100 <= f.reference_params <= hi * 100:
        return f.reference_params, f"matmul_tokens_half_params {f.reference_params:.3g} ({figures}).", [row]
    return None, f"matmul_tokens_half_params: no layer-size law ({figures}); matmul_tokens_half at every size.", [row]


def _notes(rows: Sequence[Mapping[str, Any]], given: Sequence[str]) -> list[str]:
    launch = fit.select(rows, "launch")[0]
    notes = [
        f"Measured with {fit.select(rows, 'gemm')[0]['dtype']} kernels; iteration_overhead_s = "
        f"{launch['seconds_per_launch']:.3g} s per launch x {launch['kernels_per_iteration']} "
        f"kernels ({launch['layers']} layers).",
        *given,
        *(str(r["text"]) for r in rows if r.get("kernel") == "note"),
    ]
    busy = [
        r
        for r in rows
        if (r.get("foreign_cpu") or 0.0) > CONTENDED and str(r.get("timing", "")).startswith("perf_counter")
    ]
    if busy:
        notes.append(
            f"{len(busy)} of {len(rows)} rows were timed on the wall clock while other processes "
            f"used more than {CONTENDED:.0%} of the CPUs: those timings are pessimistic; "
            "recalibrate on an idle host or with one intra-op thread (thread CPU time)."
        )
    return notes


def measured_profile(rows: Sequence[Mapping[str, Any]], facts: DeviceFacts, notes: Sequence[str] = ()) -> Profile:
    """Fit every kernel family in `rows` and build the measured Profile of `facts.key`."""
    fits = fit_all(rows)
    text = _notes(rows, notes)
    gemm, train = fits["gemm"], fits["train"]
    assert isinstance(gemm, fit.SaturatingFit) and isinstance(train, fit.SaturatingFit)
    best_gemm = max(r["tflops"] for r in fit.select(rows, "gemm"))
    peak_tflops = facts.peak_tflops or max(best_gemm, gemm.rate_max / 1e12)
    train_mfu = train.rate_max / 1e12 / peak_tflops
    if train_mfu > 1.0:
        text.append(f"train_mfu fitted {train_mfu:.3f} > 1 (peak is a measured GEMM rate): set 1.")
        train_mfu = 1.0
    intra, inter = _links(rows, facts, fits, text)
    model_ops, ops_fits = fit_model_ops(rows)
    size_reference, size_note, size_fit = _gemm_size(rows, gemm, fits["weight_read"])
    text.append(size_note)
    ranges = _ranges(rows)
    sizes = fit.gemm_sizes(rows)
    if len(sizes) > 1:
        ranges["gemm_layer_params"] = _span(list(sizes))
    return Profile(
        schema_version=SCHEMA_VERSION,
        device=facts.key,
        device_name=facts.name,
        source="measured",
        date=datetime.date.today().isoformat(),
        software=dict(facts.software),
        citations=list(facts.citations),
        notes=" ".join(text),
        memory_gib=facts.memory_gib,
        peak_tflops=peak_tflops,
        peak_memory_gbps=facts.peak_memory_gbps or _gbps(fits["stream"]),
        matmul_tflops=gemm.rate_max / 1e12,
        matmul_tokens_half=gemm.x_half,
        matmul_tokens_half_params=size_reference,
        memory_gbps=_gbps(fits["weight_read"]),
        attention_gbps=_gbps(fits["attention"]),
        iteration_overhead_s=fit.select(rows, "launch")[0]["iteration_overhead_s"],
        train_mfu=train_mfu,
        train_tokens_half=train.x_half,
        host_link_gbps=_host_link(fits),
        intra_node=intra,
        inter_node=inter,
        measured_range=ranges,
        measurements=[*(dict(r) for r in rows), *(fit_row(q, f) for q, f in fits.items()), *size_fit, *ops_fits],
        model_ops=model_ops,
    )
