"""Training-throughput kernel: forward + backward of one decoder block at the model's widths.

Training MFU is measured rather than derived from the GEMM fit, because a train step is more
than its GEMMs: backward runs two GEMMs per forward one at other layouts, and norms,
activations, causal attention and gradient writes add memory-bound kernels that the GEMM fit
never sees. A factor on the GEMM rate would be a guess; one block forward + backward is
cheap to measure and carries all of these.

The block is Llama-shaped: RMSNorm, fused QKV, causal grouped-query SDPA, output
projection, RMSNorm, SwiGLU MLP (gate_up fused), residuals. Micro-batch tokens
t = sequences · seq_len, with seq_len = min(t, seq_cap). Model FLOPs counted per step:

    flops = 6 · P_block · t + 6 · heads · head_dim · seq_len · t

(6·P·t for the linear layers, forward + backward; the second term is causal attention,
QKᵀ and AV over half the sequence on average, times 3 for backward). No optimizer step: it
is memory bound and the train-step model charges it separately. `fit.fit_training` fits
``rate(t) = train_mfu · peak · t / (t + train_tokens_half)``. bf16 on CUDA, float32 on CPU.
Units: seconds, FLOPs, tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rlsim.calibration.shapes import LlmShape
from rlsim.calibration.timer import Case, Row, measure, row


class DecoderBlock(nn.Module):
    """One pre-norm decoder layer (nanoGPT `Block` with Llama's GQA and SwiGLU)."""

    def __init__(self, s: LlmShape) -> None:
        super().__init__()
        self.s = s
        q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
        self.norm1, self.norm2 = nn.RMSNorm(s.hidden), nn.RMSNorm(s.hidden)
        self.qkv = nn.Linear(s.hidden, q + 2 * kv, bias=False)
        self.out = nn.Linear(q, s.hidden, bias=False)
        self.gate_up = nn.Linear(s.hidden, 2 * s.intermediate, bias=False)
        self.down = nn.Linear(s.intermediate, s.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, seq, hidden]
        s, (b, t, _) = self.s, x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1
        )
        q = q.view(b, t, s.heads, s.head_dim).transpose(1, 2)  # [b, heads, seq, head_dim]
        k = k.view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)  # [b, kv_heads, seq, head_dim]
        v = v.view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)

    def linear_params(self) -> int:
        """Parameters of the linear layers (the 6·P·t term); norms are negligible."""
        return sum(m.weight.numel() for m in (self.qkv, self.out, self.gate_up, self.down))


def train_row(
    tokens: int,
    seq_cap: int,
    shape: LlmShape,
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
) -> Row:
    """Time forward + backward of one block on a micro-batch of `tokens` tokens."""
    torch.manual_seed(0)
    block = DecoderBlock(shape).to(device=device, dtype=dtype)
    seq = min(tokens, seq_cap)
    x = torch.randn(max(1, tokens // seq), seq, shape.hidden, device=device, dtype=dtype, requires_grad=True)

    def step() -> None:
        block.zero_grad(set_to_none=True)
        x.grad = None  # fresh gradients every step, as in training (no accumulation kernels)
        block(x).float().square().mean().backward()

    timing = measure(step, device, warmup=warmup, repeats=repeats)
    t = x.shape[0] * seq
    flops = 6.0 * block.linear_params() * t + 6.0 * shape.heads * shape.head_dim * seq * t
    return row(
        "train",
        device,
        dtype,
        timing,
        tokens=t,
        seq_len=seq,
        sequences=x.shape[0],
        params=block.linear_params(),
        flops=flops,
        tflops=flops / timing.seconds / 1e12,
        workload="decoder block forward+backward, no optimizer",
    )


def training_cases(
    tokens: Sequence[int],
    seq_cap: int,
    shape: LlmShape,
    device: torch.device,
    dtype: torch.dtype,
    *,
    warmup: int,
    repeats: int,
) -> list[Case]:
    """One case per micro-batch token count."""
    return [
        (
            f"train t={t}",
            lambda t=t: [train_row(t, seq_cap, shape, device, dtype, warmup=warmup, repeats=repeats)],
        )
        for t in tokens
    ]
