"""Timing for the calibration kernels, in the style of nanoGPT `bench.py` and vidur `cuda_timer.py`.

`measure` runs a kernel through a burn-in (warm-up) phase, then a timed phase of `repeats`
samples, and returns the median seconds per call. A sample runs the kernel `inner` times
back to back, with `inner` chosen so that one sample lasts at least `min_sample_s` (timer
resolution and Python overhead stay below ~1% of a sample). The clock:

- CUDA: CUDA events around the calls, with `torch.cuda.synchronize()` before the start and
  after the end, so queued work never leaks into a sample.
- CPU: `time.perf_counter` (wall clock). With one intra-op thread (`torch.set_num_threads(1)`)
  every kernel runs on the calling thread, and the clock is `time.thread_time`, that thread's
  CPU time: on a shared host it leaves out the time the OS gave to other processes, which
  wall-clock timing cannot (measured here: a GEMM took 110-128 ms of wall time next to other
  jobs, 38-43 ms of thread time, 36 ms of wall time alone). Waits (collectives) must use the
  wall clock: pass ``clock="wall"``.

`row` builds a measurement row: the kernel's shapes and sizes, seconds, dtype, device name,
torch and CUDA versions, and the timing method. This module imports torch: import it lazily
(only `calibrate` does). Units: seconds.
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
from typing import Any, Literal

import torch

Row = dict[str, Any]
# One point of a sweep: a label for the progress bar and a thunk that measures and returns rows.
Case = tuple[str, Callable[[], list[Row]]]


@dataclass(frozen=True)
class Timing:
    """Median seconds per kernel call, the raw per-call samples, and how they were taken."""

    seconds: float
    samples: list[float]
    inner: int
    method: str
    # Share of all CPUs' time that *other* processes used during the timed phase (Linux, CPU
    # device only; None elsewhere). Other work on a shared host slows wall-clock CPU timings,
    # and multi-threaded kernels collapse when their threads lose their cores.
    foreign_cpu: float | None = None


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy jiffies of the whole machine, jiffies of this process), or None off Linux."""
    try:
        # First line: cpu user nice system idle iowait irq softirq steal ... (jiffies).
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        # After the ")" closing the command name, fields[11] and [12] are utime and stime.
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    return sum(v) - v[3] - v[4], int(fields[11]) + int(fields[12])


def _foreign_share(before: tuple[int, int] | None, after: tuple[int, int] | None, wall_s: float) -> float | None:
    if before is None or after is None or wall_s <= 0:
        return None
    capacity = wall_s * os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1)
    other = (after[0] - before[0]) - (after[1] - before[1])
    return min(1.0, max(0.0, other / capacity))


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on `device` (a no-op on the CPU, where calls are synchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_clock(clock: Literal["auto", "wall"] = "auto") -> Callable[[], float]:
    """The CPU clock `measure` uses: thread CPU time with one intra-op thread, else wall time."""
    if clock == "auto" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


def _one_sample(fn: Callable[[], object], device: torch.device, inner: int, clock: Callable[[], float]) -> float:
    synchronize(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        synchronize(device)
        return start.elapsed_time(end) / 1e3 / inner  # elapsed_time is in milliseconds
    t0 = clock()
    for _ in range(inner):
        fn()
    return (clock() - t0) / inner


def measure(
    fn: Callable[[], object],
    device: torch.device,
    *,
    warmup: int = 2,
    repeats: int = 5,
    min_sample_s: float = 0.01,
    max_inner: int = 10_000,
    inner: int | None = None,
    clock: Literal["auto", "wall"] = "auto",
) -> Timing:
    """Burn in `fn`, then time `repeats` samples; median seconds per call.

    `inner` fixes the calls per sample (ranks of a collective must agree on it); by default
    it is chosen from the last warm-up call so a sample lasts at least `min_sample_s`.
    """
    tick = cpu_clock(clock)
    for _ in range(max(warmup, 1)):
        first = _one_sample(fn, device, 1, tick)
    if inner is None:
        inner = min(max_inner, max(1, math.ceil(min_sample_s / max(first, 1e-9))))
    before, t0 = (_cpu_jiffies() if device.type == "cpu" else None), time.perf_counter()
    samples = [_one_sample(fn, device, inner, tick) for _ in range(repeats)]
    foreign = _foreign_share(before, _cpu_jiffies() if before else None, time.perf_counter() - t0)
    if device.type == "cuda":
        method = "cuda_events+synchronize"
    else:
        method = "thread_time" if tick is time.thread_time else "perf_counter"
    return Timing(
        seconds=statistics.median(samples),
        samples=samples,
        inner=inner,
        method=f"{method}, median of {repeats} samples x {inner} calls",
        foreign_cpu=foreign,
    )


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
def _device_name(device_type: str, index: int) -> str:
    return torch.cuda.get_device_name(index) if device_type == "cuda" else _cpu_name()


def environment(device: torch.device) -> Row:
    """Device name, torch and CUDA versions, and the CPU threads of a measurement row."""
    index = device.index if device.index is not None else 0
    if device.type == "cuda" and device.index is None:
        index = torch.cuda.current_device()
    env: Row = {"device_name": _device_name(device.type, index), "torch": torch.__version__}
    if device.type == "cuda":
        return {**env, "cuda": torch.version.cuda or "", "gpus": torch.cuda.device_count()}
    return {**env, "cuda": "", "threads": torch.get_num_threads(), "cpus": os.cpu_count()}


def row(kernel: str, device: torch.device, dtype: torch.dtype | None, timing: Timing, **fields: Any) -> Row:
    """One measurement row: kernel, shapes/sizes (`fields`), seconds, dtype and environment."""
    return {
        "kernel": kernel,
        **fields,
        "seconds": timing.seconds,
        "timing": timing.method,
        "foreign_cpu": timing.foreign_cpu,
        "dtype": str(dtype).removeprefix("torch.") if dtype is not None else "",
        **environment(device),
    }
