"""Cold buffers: one large tensor whose slices stand in for distinct weights or KV caches.

A decode iteration reads each layer's weights and KV cache once, after every other layer's,
so nothing it reads is still in the last-level cache (GPU L2 of ~50 MB, CPU L3). A kernel
that re-reads one small tensor would measure cache bandwidth instead. The kernels therefore
cycle through disjoint slices of a pool several times larger than that cache. Units: bytes.
"""

from __future__ import annotations

import torch

_BLOCK = 1 << 20


class ColdPool:
    """A flat tensor of about `nbytes`; `views` cuts it into disjoint tensors of one shape."""

    def __init__(self, nbytes: float, device: torch.device, dtype: torch.dtype) -> None:
        elem = torch.empty((), dtype=dtype).element_size()
        n = max(int(nbytes // elem), _BLOCK)
        if device.type == "cpu":
            # Tiling one random block is ~10x faster than randn over a GB on two cores, and
            # random values avoid the denormal and all-zero fast paths.
            self.flat = _random(_BLOCK, device, dtype).repeat(-(-n // _BLOCK))[:n].contiguous()
        else:
            self.flat = _random(n, device, dtype)
        self.nbytes = n * elem

    def views(self, shape: tuple[int, ...], group: int = 1) -> list[tuple[torch.Tensor, ...]]:
        """As many disjoint groups of `group` tensors of `shape` as the pool holds (>= 1 group)."""
        size = 1
        for dim in shape:
            size *= dim
        count = self.flat.numel() // (group * size)
        if count < 1:
            raise ValueError(f"cold pool of {self.nbytes / 1e9:.2f} GB cannot hold {group} x {shape}")
        return [
            tuple(self.flat[(g * group + j) * size : (g * group + j + 1) * size].view(shape) for j in range(group))
            for g in range(count)
        ]


def _random(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(n, device=device, dtype=dtype)
    return torch.randint(0, 100, (n,), device=device, dtype=dtype)
