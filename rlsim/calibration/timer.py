"""Timing for the calibration kernels, in the style of nanoGPT `bench.py` and vidur `cuda_timer.py`.

`measure` runs a kernel through a burn-in (warm-up) phase, then a timed phase of `repeats`
samples and returns the median seconds per call. On CUDA each sample is bracketed by CUDA
events with a `torch.cuda.synchronize()` before the start and after the end, so queued work
never leaks into a sample; on the CPU it is `time.perf_counter`. A sample runs the kernel
`inner` times back to back, with `inner` chosen so that one sample lasts at least
`min_sample_s` (timer resolution and Python overhead stay below ~1% of a sample).

`environment` gives the fields every measurement row carries: device name, torch and CUDA
versions, timing method. This module imports torch: import it lazily (only `calibrate` does).
Units: seconds.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

Row = dict[str, Any]
# One point of a sweep: a label for the progress bar and a thunk that measures and returns rows.
Case = tuple[str, Callable[[], list[Row]]]


@dataclass(frozen=True)
class Timing:
    """Median seconds per kernel call and the raw per-call samples."""

    seconds: float
    samples: list[float]
    inner: int


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on `device` (a no-op on the CPU, where calls are synchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _one_sample(fn: Callable[[], object], device: torch.device, inner: int) -> float:
    synchronize(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        synchronize(device)
        return start.elapsed_time(end) / 1e3 / inner  # elapsed_time is in milliseconds
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def measure(
    fn: Callable[[], object],
    device: torch.device,
    *,
    warmup: int = 2,
    repeats: int = 5,
    min_sample_s: float = 0.01,
    max_inner: int = 10_000,
    inner: int | None = None,
) -> Timing:
    """Burn in `fn`, then time `repeats` samples; median seconds per call.

    `inner` fixes the calls per sample (ranks of a collective must agree on it); by default
    it is chosen from the last warm-up call so a sample lasts at least `min_sample_s`.
    """
    for _ in range(max(warmup, 1)):
        first = _one_sample(fn, device, 1)
    if inner is None:
        inner = min(max_inner, max(1, math.ceil(min_sample_s / max(first, 1e-9))))
    samples = [_one_sample(fn, device, inner) for _ in range(repeats)]
    return Timing(seconds=statistics.median(samples), samples=samples, inner=inner)


def timing_method(device: torch.device) -> str:
    """How `measure` timed on this device, recorded in every row."""
    if device.type == "cuda":
        return "cuda_events+synchronize, median of repeats"
    return "perf_counter, median of repeats"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


@cache
def _environment(device_type: str, index: int) -> tuple[tuple[str, Any], ...]:
    if device_type == "cuda":
        name = torch.cuda.get_device_name(index)
        extra: dict[str, Any] = {"cuda": torch.version.cuda or "", "gpus": torch.cuda.device_count()}
    else:
        name = _cpu_name()
        extra = {"cuda": "", "threads": torch.get_num_threads(), "cpus": os.cpu_count()}
    return tuple({"device_name": name, "torch": torch.__version__, **extra}.items())


def environment(device: torch.device) -> Row:
    """Device name, torch/CUDA versions and timing method for a measurement row."""
    index = device.index if device.index is not None else 0
    if device.type == "cuda" and device.index is None:
        index = torch.cuda.current_device()
    return {**dict(_environment(device.type, index)), "timing": timing_method(device)}


def row(kernel: str, device: torch.device, dtype: torch.dtype | None, timing: Timing, **fields: Any) -> Row:
    """One measurement row: kernel, shapes/sizes (`fields`), seconds, dtype and environment."""
    return {
        "kernel": kernel,
        **fields,
        "seconds": timing.seconds,
        "inner": timing.inner,
        "repeats": len(timing.samples),
        "dtype": str(dtype).removeprefix("torch.") if dtype is not None else "",
        **environment(device),
    }
