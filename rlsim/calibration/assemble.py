"""Measured rows -> a `Profile` (source "measured"): the fits, the peaks, the notes.

Pure: no torch, so it is tested on synthetic rows. What each profile field comes from:

| field | from |
|---|---|
| matmul_tflops, matmul_tokens_half | saturating fit of the pooled GEMM rate per token count |
| memory_gbps | total bytes / total seconds of cold one-token GEMVs through every layer's weights |
| attention_gbps | latency + bandwidth fit of decode attention on bytes read |
| iteration_overhead_s | launch probe: seconds per launch · kernels per iteration |
| train_mfu, train_tokens_half | saturating fit of block forward+backward FLOP/s, over peak_tflops |
| host_link_gbps | CUDA: harmonic mean of h2d and d2h bandwidths (a round trip of B bytes each way costs 2B / host_link); CPU: the memcpy stand-in |
| intra_node | all-reduce latency + busbw fit; one GPU: the datasheet profile's figure |
| inter_node | the datasheet profile's figure (one host cannot measure it); CPU: intra_node |
| peak_tflops, peak_memory_gbps, memory_gb | GPU: the catalog. CPU: the best GEMM rate (or the fitted asymptote if higher), the stream bandwidth, and the `memory_gb` the caller grants |

Each fit is also appended to the measurements as a ``kernel: "fit"`` row with its parameters,
R² and maximum relative residual. Units: seconds, GB/s, TFLOP/s, tokens.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlsim.calibration import fit
from rlsim.calibration.profile import SCHEMA_VERSION, LinkFit, Profile


@dataclass(frozen=True)
class DeviceFacts:
    """What is known about the device apart from the measurements."""

    key: str  # catalog GPU key, or "cpu"
    name: str
    memory_gb: float
    peak_tflops: float | None = None  # None on the CPU: taken from the GEMM rows
    peak_memory_gbps: float | None = None  # None on the CPU: taken from the stream rows
    datasheet: Profile | None = None  # link figures to fall back on (GPUs)
    software: dict[str, str] = field(default_factory=dict)
    citations: tuple[str, ...] = ()


def _fit_row(quantity: str, formula: str, f: Any, **params: float) -> dict[str, Any]:
    q = f.quality
    return {
        "kernel": "fit", "quantity": quantity, "formula": formula, "params": params,
        "r2": q.r2, "max_rel_residual": q.max_rel_residual, "n": q.n,
    }  # fmt: skip


def _span(values: Sequence[float]) -> list[float]:
    return [float(min(values)), float(max(values))]


def _links(rows: Sequence[Mapping[str, Any]], facts: DeviceFacts, host: LinkFit, fits: list, notes: list):
    """intra_node and inter_node LinkFits, from all-reduce rows or the fallbacks."""
    has = {r.get("op") for r in rows if r.get("kernel") == "collective"}
    for op in sorted(has):
        f = fit.fit_link(rows, "collective", op=op)
        fits.append(_fit_row(f"collective_{op}", "seconds = latency_s + bus_bytes / busbw", f,
                             latency_s=f.latency_s, busbw_gbps=f.bytes_per_s / 1e9))  # fmt: skip
    if "all_reduce" in has:
        f = fit.fit_link(rows, "collective", op="all_reduce")
        intra = LinkFit(busbw_gbps=f.bytes_per_s / 1e9, latency_s=f.latency_s)
        world = max(r["world"] for r in rows if r.get("kernel") == "collective")
        notes.append(f"intra_node: measured all-reduce over {world} ranks.")
    elif facts.datasheet is not None:
        intra = facts.datasheet.intra_node
        notes.append("intra_node: collectives not measured (one GPU); datasheet figure kept.")
    else:
        intra = host
        notes.append("intra_node: collectives not measured; the memcpy link stands in.")
    if facts.datasheet is not None:
        inter = facts.datasheet.inter_node
        notes.append("inter_node: not measurable on one host; datasheet figure kept.")
    else:
        inter = intra
        notes.append("inter_node: not measurable on one host; set equal to intra_node.")
    return intra, inter


def _host_link(rows: Sequence[Mapping[str, Any]], fits: list) -> LinkFit:
    dirs = sorted({r["direction"] for r in rows if r.get("kernel") == "copy"})
    rates = []
    for d in dirs:
        f = fit.fit_link(rows, "copy", direction=d)
        fits.append(_fit_row(f"copy_{d}", "seconds = latency_s + bytes / bandwidth", f,
                             latency_s=f.latency_s, gbps=f.bytes_per_s / 1e9))  # fmt: skip
        rates.append((f.bytes_per_s / 1e9, f.latency_s))
    gbps = len(rates) / sum(1.0 / r for r, _ in rates)  # harmonic mean: a round trip's rate
    return LinkFit(busbw_gbps=gbps, latency_s=max(lat for _, lat in rates))


def measured_profile(rows: Sequence[Mapping[str, Any]], facts: DeviceFacts, notes: Sequence[str] = ()) -> Profile:
    """Fit every kernel family in `rows` and build the measured Profile of `facts.key`."""
    fits: list[dict[str, Any]] = []
    notes = list(notes) + [str(r["text"]) for r in rows if r.get("kernel") == "note"]

    gemm = fit.fit_gemm(rows)
    fits.append(_fit_row("gemm", "flops_per_s = rate_max * t / (t + t_half)", gemm,
                         rate_max_tflops=gemm.rate_max / 1e12, tokens_half=gemm.x_half))  # fmt: skip
    best_gemm = max(r["tflops"] for r in rows if r.get("kernel") == "gemm")
    peak_tflops = facts.peak_tflops or max(best_gemm, gemm.rate_max / 1e12)

    stream = fit.fit_bandwidth([r["bytes"] for r in fit.select(rows, "stream")],
                               [r["seconds"] for r in fit.select(rows, "stream")])  # fmt: skip
    fits.append(_fit_row("stream", "bandwidth = sum(bytes) / sum(seconds)", stream, gbps=stream.bytes_per_s / 1e9))
    weights = fit.fit_bandwidth([r["bytes"] for r in fit.select(rows, "weight_read")],
                                [r["seconds"] for r in fit.select(rows, "weight_read")])  # fmt: skip
    fits.append(_fit_row("weight_read", "bandwidth = sum(bytes) / sum(seconds)", weights,
                         gbps=weights.bytes_per_s / 1e9))  # fmt: skip
    attn = fit.fit_attention(rows)
    fits.append(_fit_row("attention", "seconds = latency_s + read_bytes / bandwidth", attn,
                         latency_s=attn.latency_s, gbps=attn.bytes_per_s / 1e9))  # fmt: skip
    train = fit.fit_training(rows)
    fits.append(_fit_row("train", "flops_per_s = rate_max * t / (t + t_half)", train,
                         rate_max_tflops=train.rate_max / 1e12, tokens_half=train.x_half))  # fmt: skip
    train_mfu = train.rate_max / 1e12 / peak_tflops
    if train_mfu > 1.0:
        notes.append(f"train_mfu fitted {train_mfu:.3f} > 1 (peak is a measured GEMM rate); clamped to 1.")
        train_mfu = 1.0
    launch = fit.select(rows, "launch")[0]
    host = _host_link(rows, fits)
    intra, inter = _links(rows, facts, host, fits, notes)

    gemm_t = [r["tokens"] for r in fit.select(rows, "gemm")]
    attn_rows = fit.select(rows, "attention")
    ranges = {
        "gemm_tokens": _span(gemm_t),
        "kv_tokens": _span([r["kv_tokens"] for r in attn_rows]),
        "kv_length": _span([r["kv_len_min"] for r in attn_rows] + [r["kv_len_max"] for r in attn_rows]),
        "batch": _span([r["batch"] for r in attn_rows]),
        "train_tokens": _span([r["tokens"] for r in fit.select(rows, "train")]),
        "copy_bytes": _span([r["bytes"] for r in fit.select(rows, "copy")]),
    }
    coll = [r["bytes"] for r in rows if r.get("kernel") == "collective"]
    if coll:
        ranges["collective_bytes"] = _span(coll)
    dtype = fit.select(rows, "gemm")[0]["dtype"]
    notes.insert(0, f"Measured with {dtype} kernels; iteration_overhead_s = {launch['seconds_per_launch']:.3g} s "
                    f"per launch x {launch['kernels_per_iteration']} kernels ({launch['layers']} layers).")  # fmt: skip
    return Profile(
        schema_version=SCHEMA_VERSION,
        device=facts.key,
        device_name=facts.name,
        source="measured",
        date=datetime.date.today().isoformat(),
        software=dict(facts.software),
        citations=list(facts.citations),
        notes=" ".join(notes),
        memory_gb=facts.memory_gb,
        peak_tflops=peak_tflops,
        peak_memory_gbps=facts.peak_memory_gbps or stream.bytes_per_s / 1e9,
        matmul_tflops=gemm.rate_max / 1e12,
        matmul_tokens_half=gemm.x_half,
        memory_gbps=weights.bytes_per_s / 1e9,
        attention_gbps=attn.bytes_per_s / 1e9,
        iteration_overhead_s=launch["iteration_overhead_s"],
        train_mfu=train_mfu,
        train_tokens_half=train.x_half,
        host_link_gbps=host.busbw_gbps,
        intra_node=intra,
        inter_node=inter,
        measured_range=ranges,
        measurements=[*(dict(r) for r in rows), *fits],
    )
