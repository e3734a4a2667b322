"""GPU catalog: datasheet peaks, link bandwidths and node shape of each accelerator.

The data lives in `gpus.yaml` next to this module, one entry per catalog key, each with its
sources and date; this module only validates and looks it up. Units are in every field name:
TFLOP/s (dense, no sparsity), GB of device memory, TB/s of memory bandwidth, and GB/s per GPU in
ONE direction for every link. Performance models read peaks from here only through a calibration
profile, so a measured profile can replace any of these numbers.

Memory has two figures: `hbm_gb`, the vendor's nominal size ("80GB"), and `visible_memory`, the
total the CUDA/HIP runtime reports (`torch.cuda.mem_get_info()[1]`) in MiB. Engines and trainers
size against the second: vLLM's gpu_memory_utilization and SGLang's mem_fraction_static are
fractions of it, and it is 6-7% more than `hbm_gb` read as decimal GB on HBM parts (an H100 SXM's
"80GB" is 81106 MiB = 85.0e9 bytes to CUDA).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlsim.catalog.lookup import build_index, resolve
from rlsim.catalog.provenance import DateStr, Sources
from rlsim.inputs import load_shipped_yaml

MIB_BYTES = 1 << 20


class VisibleMemory(BaseModel):
    """The device memory the runtime reports as its total, with the reading it comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total_mib: float = Field(
        gt=0,
        description="Total device memory as the CUDA/HIP runtime reports it (cudaMemGetInfo, "
        "torch.cuda.mem_get_info()[1]), MiB (2^20 bytes).",
    )
    basis: Literal["runtime", "nvidia-smi", "nominal"] = Field(
        description="'runtime': a CUDA/HIP total read on the device (deviceQuery's totalGlobalMem, torch); "
        "'nvidia-smi': nvidia-smi's memory.total, which also counts the driver's reserve (an H100 SXM: 81559 "
        "MiB there, 454 MiB reserved, 81106 MiB to CUDA), so it overstates the runtime's by about 0.5%; "
        "'nominal': no reading found, the vendor's hbm_gb read as decimal GB (understates HBM parts by ~7%).",
    )
    source: str = Field(min_length=1, description="Where the reading comes from: repository@commit path, or URL.")
    date: DateStr = Field(description="ISO date the reading was taken or retrieved, or 'unknown'.")

    @property
    def total_bytes(self) -> float:
        """The reported total in bytes."""
        return self.total_mib * MIB_BYTES


class ComputeCapability(BaseModel):
    """An NVIDIA GPU's CUDA compute capability (major.minor), with where it is published."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    major: int = Field(
        ge=1, description="Major revision, the architecture family (9 Hopper, 10 data-center Blackwell)."
    )
    minor: int = Field(ge=0, description="Minor revision within the family.")
    source: str = Field(min_length=1, description="Where the capability is published: URL or repository@commit path.")
    date: DateStr = Field(description="ISO date the source was retrieved, or 'unknown'.")


class GpuSpec(BaseModel):
    """One accelerator as its datasheet (or a labelled assumption) describes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(
        description="Catalog key, lowercase with dashes, e.g. 'h100-sxm'.",
        pattern=r"^[a-z0-9][a-z0-9.\-]*$",
    )
    name: str = Field(description="Full vendor name, e.g. 'NVIDIA H100 SXM5 80GB'.")
    aliases: list[str] = Field(
        default_factory=list,
        description="Other spellings accepted by lookup, including the price sources' GPU labels.",
    )
    bf16_tflops: float = Field(gt=0, description="Dense BF16 tensor peak, TFLOP/s (no sparsity).")
    fp8_tflops: float | None = Field(gt=0, description="Dense FP8 tensor peak, TFLOP/s; None where the GPU has no FP8.")
    hbm_gb: float = Field(gt=0, description="Nominal device memory, vendor GB (the '80' of 'H100 80GB').")
    visible_memory: VisibleMemory = Field(
        description="Device memory the runtime reports as its total: what engines and trainers size against."
    )
    hbm_tbps: float = Field(gt=0, description="Device memory bandwidth, TB/s (decimal).")
    scaleup_gbps: float = Field(
        gt=0,
        description="Per-GPU scale-up link (NVLink/XGMI), GB/s one direction; the PCIe figure for cards without one.",
    )
    pcie_gbps: float = Field(gt=0, description="Host link, GB/s one direction.")
    internode_gbps_per_gpu: float = Field(
        gt=0, description="Typical inter-node NIC bandwidth per GPU, GB/s one direction."
    )
    gpus_per_node: int = Field(gt=0, description="GPUs in a typical node (or compute tray).")
    tdp_w: float | None = Field(gt=0, description="Board power limit, W; None if unpublished.")
    compute_capability: ComputeCapability | None = Field(
        default=None,
        description="CUDA compute capability, which engines key defaults on (vLLM's CUDA-graph capture size); "
        "None: not an NVIDIA GPU, or none cited here.",
    )
    sources: Sources
    date: DateStr = Field(description="ISO date the facts were observed or retrieved, or 'unknown'.")
    notes: str = Field(default="", description="Disagreements between sources and every assumed value.")


@functools.cache
def load_gpus() -> dict[str, GpuSpec]:
    """All built-in GPUs keyed by catalog key, in file order (read once; shared, do not mutate)."""
    text = resources.files("rlsim.catalog").joinpath("gpus.yaml").read_text(encoding="utf-8")
    specs = [GpuSpec.model_validate(entry) for entry in load_shipped_yaml(text)["gpus"]]
    gpus = {spec.key: spec for spec in specs}
    if len(gpus) != len(specs):
        raise ValueError("gpus.yaml: duplicate GPU key")
    return gpus


@functools.cache
def _index() -> dict[str, str]:
    """Normalised spelling (key, name or alias) -> key; built once, checked for clashes."""
    return build_index({k: [g.name, *g.aliases] for k, g in load_gpus().items()}, "GPU")


def get_gpu(name: str, field: str = "cluster.gpu") -> GpuSpec:
    """The GPU called `name` (key, full name or alias; case, '_' and '-' do not matter).

    Raises ScenarioError on `field` with the closest names when nothing matches.
    """
    key = resolve(name, _index(), list(load_gpus()), field, "GPU")
    return load_gpus()[key]
