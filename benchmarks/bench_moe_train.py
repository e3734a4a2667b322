"""MoE training rate: rlsim's training model against Megatron-Bridge's published MoE pretraining.

Run: `python benchmarks/bench_moe_train.py` (from the repository root; about a second). An
independent check of the MoE layer's terms (rlsim/models/moe_layer.py: grouped GEMMs at the rows
per expert, token permutations) and the all-to-all: for each MoE pretraining row of
Megatron-Bridge's performance table (NVIDIA-NeMo/Megatron-Bridge@0a25f911b2ed6c6905a539504fdb8e5b40e3438b
docs/performance-summary-archive.md, 25.11 NeMo container; dropless, experts force-balanced), it
builds the row's layout as a Megatron training shape on the datasheet profile, times one
optimizer step of GBS x sequence tokens, and prints the model TFLOP/s per GPU (3 x forward FLOPs
over the step) with the MoE terms and without them (a dense model of the same FLOPs), against
the published figure.

The BF16 rows on GB200 compare directly. The H100 rows ran in FP8, which speeds up only the
GEMMs, so a BF16 run is at most as fast: the published FP8 rate is an upper bound on the BF16
prediction. Dense Llama rows of the same table are printed for scale. Assumptions: no activation
recompute (the table does not say), one optimizer step, the EP group on NVLink when it fits the
NVLink domain (8 GPUs on DGX-H100, 72 on GB200 NVL72), else the network; the datasheet's training
MFU (0.45 H100, 0.40 GB200: the GB200 one is an assumption, said so in the profile).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsim.calibration.profile import datasheet_profile  # noqa: E402
from rlsim.catalog import get_llm  # noqa: E402
from rlsim.models import footprint, moe_layer, train_step  # noqa: E402

NVLINK_DOMAIN = {"h100-sxm": 8, "gb200": 72}


@dataclass(frozen=True)
class Row:
    """One pretraining row of the table: model, system, layout and published model TFLOP/s/GPU."""

    model: str
    gpu: str
    precision: str
    gpus: int
    gbs: int
    mbs: int
    seq: int
    tp: int
    pp: int
    ep: int
    published_tflops: float


ROWS = (
    Row("deepseek-v3", "gb200", "BF16", 256, 4096, 1, 4096, 1, 4, 64, 782),
    Row("qwen3-235b-a22b", "gb200", "BF16", 256, 8192, 1, 4096, 1, 8, 32, 728),
    Row("qwen3-30b-a3b", "h100-sxm", "FP8", 16, 512, 2, 4096, 1, 2, 8, 121),
    Row("qwen3-235b-a22b", "h100-sxm", "FP8", 256, 2048, 1, 4096, 2, 8, 32, 233),
    Row("llama-3.1-8b", "h100-sxm", "FP8", 8, 128, 1, 8192, 1, 1, 1, 744),
    Row("llama-3.1-70b", "h100-sxm", "FP8", 64, 128, 1, 8192, 4, 8, 1, 719),
)


def predicted_tflops(row: Row, with_moe: bool) -> float:
    """Model TFLOP/s per GPU rlsim predicts for one optimizer step of the row."""
    llm = get_llm(row.model)
    profile = datasheet_profile(row.gpu)
    domain = NVLINK_DOMAIN[row.gpu]
    shape = train_step.TrainShape(
        gpus=row.gpus,
        tp=row.tp,
        pp=row.pp,
        ep=row.ep,
        micro_batch_tokens=row.mbs * row.seq,
        activation_recompute=False,
        minibatches=1,
        trainable_params=llm.total_params,
        megatron_ddp=True,
        a2a_link=profile.intra_node if row.ep * row.tp <= domain else profile.inter_node,
        tp_link=profile.intra_node if row.tp > 1 else None,
        replica_link=profile.inter_node,
    )
    lengths = [row.seq] * row.gbs
    kw = dict(reference_model=False, recompute_old_logprobs=False, critic=False)
    if with_moe:
        phases = train_step.train_phases(llm, profile, shape, lengths, **kw)
    else:  # the same FLOPs as a dense model: no grouped-GEMM or permutation terms
        saved = moe_layer.extra_forward_flops, moe_layer.permute_s
        moe_layer.extra_forward_flops = lambda *a, **k: 0.0
        moe_layer.permute_s = lambda *a, **k: 0.0
        try:
            phases = train_step.train_phases(llm, profile, shape, lengths, **kw)
        finally:
            moe_layer.extra_forward_flops, moe_layer.permute_s = saved
    tokens = float(row.gbs * row.seq)
    flops = 3.0 * footprint.forward_flops(llm, tokens, float(row.gbs * row.seq**2))
    return flops / (phases.train_s + phases.optimizer_s) / row.gpus / 1e12


def main() -> None:
    head = f"{'model':16s} {'gpu':9s} {'prec':4s} {'layout':22s}"
    print(f"{head} {'no MoE':>7s} {'rlsim':>7s} {'published':>9s} {'error':>7s}")
    for row in ROWS:
        base = predicted_tflops(row, with_moe=False)
        moe = predicted_tflops(row, with_moe=True)
        layout = f"{row.gpus} TP{row.tp} PP{row.pp} EP{row.ep} MBS{row.mbs}"
        bound = " (FP8: bound)" if row.precision != "BF16" else ""
        err = moe / row.published_tflops - 1.0
        print(
            f"{row.model:16s} {row.gpu:9s} {row.precision:4s} {layout:22s} {base:7.0f} {moe:7.0f} "
            f"{row.published_tflops:9.0f} {err:+7.0%}{bound}"
        )


if __name__ == "__main__":
    main()
