"""Host<->device copy kernel: the PCIe (or C2C) link that offload and reload use.

On CUDA, a pinned host buffer (``pin_memory=True``, so the copy engine DMAs it directly; a
pageable buffer would add a staging copy) is copied to the device (``h2d``, reload) and back
(``d2h``, offload) with ``non_blocking=True`` between CUDA events. On the CPU there is no
device link: a memcpy between two host buffers (``direction="memcpy"``) stands in, cycling
through a cold pool so the last-level cache does not flatter it; each row says so.

Bytes are counted once (bytes moved, the PCIe convention), so a row's `bus_bytes` equals its
size and `fit.fit_link(rows, "copy", direction=...)` gives latency + bandwidth per direction.
Units: seconds, bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch

from rlsim.calibration.pool import ColdPool
from rlsim.calibration.timer import Case, Row, measure, row

CPU_NOTE = "CPU stand-in: memcpy between two host buffers (no host<->device link exists)"


def _copy_row(
    direction: str,
    nbytes: int,
    fn: Callable[[], object],
    device: torch.device,
    *,
    pinned: bool,
    note: str,
    warmup: int,
    repeats: int,
) -> Row:
    timing = measure(fn, device, warmup=warmup, repeats=repeats)
    return row(
        "copy",
        device,
        torch.uint8,
        timing,
        direction=direction,
        bytes=nbytes,
        bus_bytes=nbytes,
        pinned=pinned,
        gbps=nbytes / timing.seconds / 1e9,
        note=note,
    )


def _cuda_rows(nbytes: int, buffers: dict[str, torch.Tensor], device: torch.device, **kw: int) -> list[Row]:
    host, dev = buffers["host"][:nbytes], buffers["dev"][:nbytes]
    return [
        _copy_row(
            "h2d",
            nbytes,
            lambda: dev.copy_(host, non_blocking=True),
            device,
            pinned=True,
            note="pinned host -> device",
            **kw,
        ),
        _copy_row(
            "d2h",
            nbytes,
            lambda: host.copy_(dev, non_blocking=True),
            device,
            pinned=True,
            note="device -> pinned host",
            **kw,
        ),
    ]


def copy_cases(
    sizes: Sequence[int], device: torch.device, *, pool_bytes: float, warmup: int, repeats: int
) -> list[Case]:
    """One case per size (both directions on CUDA); the first case allocates, the last frees."""
    buffers: dict[str, torch.Tensor] = {}
    pools: list[ColdPool] = []

    def run(nbytes: int, last: bool) -> list[Row]:
        if device.type == "cuda":
            if not buffers:
                buffers["host"] = torch.empty(max(sizes), dtype=torch.uint8, pin_memory=True)
                buffers["dev"] = torch.empty(max(sizes), dtype=torch.uint8, device=device)
            rows = _cuda_rows(nbytes, buffers, device, warmup=warmup, repeats=repeats)
        else:
            if not pools:
                pools.append(ColdPool(pool_bytes, device, torch.uint8))
            pairs = itertools.cycle(pools[0].views((nbytes,), group=2))

            def fn() -> None:
                src, dst = next(pairs)
                dst.copy_(src)

            rows = [
                _copy_row(
                    "memcpy",
                    nbytes,
                    fn,
                    device,
                    pinned=False,
                    note=CPU_NOTE,
                    warmup=warmup,
                    repeats=repeats,
                )
            ]
        if last:
            buffers.clear()
            pools.clear()
        return rows

    return [(f"copy {n / 1e6:.0f} MB", lambda n=n, i=i: run(n, i == len(sizes) - 1)) for i, n in enumerate(sizes)]
