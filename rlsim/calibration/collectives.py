"""Collective kernels: broadcast, all-reduce and all-gather over torch.distributed.

Needs two or more devices. On GPUs: one process per visible GPU (up to 8), NCCL. On the
CPU: two local processes with gloo, each on one thread; they stand in for a device link
(gloo over loopback, not NVLink) so the CPU path of the whole pipeline runs. Processes are
spawned with ``torch.multiprocessing`` and meet through a ``file://`` rendezvous in a
temporary folder (no port to pick, nothing left behind). One GPU: nothing to measure;
`calibrate` then keeps the datasheet link figures and says so in the profile's notes.

Sizes follow nccl-tests: ``bytes`` is the broadcast buffer, the all-reduce buffer, or the
all-gather *output*; ``bus_bytes = bytes · factor`` with factor 1 (broadcast),
2(n-1)/n (all-reduce), (n-1)/n (all-gather), so that busbw = bus_bytes / seconds is
comparable across collectives and `fit.fit_link` gives ``latency_s + bus_bytes / busbw``.
Each size is timed on every rank with the same number of calls (ranks agree on it first, or
they would deadlock), on the wall clock (a collective waits for its peers); the row keeps the
slowest rank's median. Units: seconds, bytes.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlsim.calibration.timer import Row, Timing, measure, row

OPS = ("broadcast", "all_reduce", "all_gather")
_TIMEOUT_S = 300.0


def bus_factor(op: str, world: int) -> float:
    """nccl-tests busbw / algbw for `op` on `world` ranks."""
    return {
        "broadcast": 1.0,
        "all_reduce": 2.0 * (world - 1) / world,
        "all_gather": (world - 1) / world,
    }[op]


def _collective(op: str, nbytes: int, world: int, device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    elem = torch.empty((), dtype=dtype).element_size()
    if op == "all_gather":
        inp = torch.ones(max(1, nbytes // elem // world), device=device, dtype=dtype)
        if device.type == "cuda":
            out = torch.empty(inp.numel() * world, device=device, dtype=dtype)
            return lambda: dist.all_gather_into_tensor(out, inp)
        outs = [torch.empty_like(inp) for _ in range(world)]
        return lambda: dist.all_gather(outs, inp)
    buf = torch.ones(max(1, nbytes // elem), device=device, dtype=dtype)
    if op == "broadcast":
        return lambda: dist.broadcast(buf, src=0)
    return lambda: dist.all_reduce(buf)


def _agreed_timing(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> Timing:
    """Median seconds per call, the maximum over ranks; every rank makes the same calls."""
    probe = torch.tensor(
        [measure(fn, device, warmup=warmup, repeats=1, max_inner=1, clock="wall").seconds],
        device=device,
    )
    dist.all_reduce(probe, op=dist.ReduceOp.MAX)
    inner = min(1000, max(1, math.ceil(0.01 / max(float(probe), 1e-9))))
    timing = measure(fn, device, warmup=1, repeats=repeats, inner=inner, clock="wall")
    slowest = torch.tensor([timing.seconds], device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return replace(timing, seconds=float(slowest))


def _worker(rank: int, world: int, folder: str, backend: str, sizes: list[int], warmup: int, repeats: int) -> None:
    if backend == "gloo":
        torch.set_num_threads(1)  # two processes share the CPU's cores
    dist.init_process_group(
        backend,
        init_method=f"file://{folder}/rendezvous",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=_TIMEOUT_S),
    )
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows: list[Row] = []
    for op in OPS:
        for nbytes in sizes:
            fn = _collective(op, nbytes, world, device, dtype)
            dist.barrier()
            timing = _agreed_timing(fn, device, warmup, repeats)
            bus = nbytes * bus_factor(op, world)
            rows.append(
                row(
                    "collective",
                    device,
                    dtype,
                    timing,
                    op=op,
                    backend=backend,
                    world=world,
                    bytes=nbytes,
                    bus_bytes=bus,
                    busbw_gbps=bus / timing.seconds / 1e9,
                )
            )
    if rank == 0:
        Path(folder, "rows.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def collective_world(device: torch.device) -> int:
    """How many ranks a collective sweep uses on this device type (0: cannot run)."""
    if device.type == "cuda":
        n = torch.cuda.device_count()
        return min(n, 8) if n >= 2 else 0
    return 2


def collective_rows(sizes: Sequence[int], device: torch.device, *, warmup: int, repeats: int) -> list[Row]:
    """Spawn the ranks, run every op at every size, return rank 0's rows (timeout: RuntimeError)."""
    world = collective_world(device)
    if world < 2:
        return []
    backend = "nccl" if device.type == "cuda" else "gloo"
    with tempfile.TemporaryDirectory(prefix="rlsim-collectives-") as folder:
        args = (world, folder, backend, list(sizes), warmup, repeats)
        ctx = mp.start_processes(_worker, args=args, nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + _TIMEOUT_S
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{backend} collectives did not finish in {_TIMEOUT_S:.0f} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
        return json.loads(Path(folder, "rows.json").read_text())
