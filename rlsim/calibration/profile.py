"""Calibration profiles: the achieved fractions of hardware peak that the performance models use.

A profile is a versioned JSON file (device, software versions, date, raw measurements, fitted
parameters). Performance models in `rlsim.models` read only the fitted fields of `Profile`; they
never look at the GPU catalog's peak numbers directly, so a measured profile replaces a datasheet
one without touching any model. Built-in profiles are *derived* here from the GPU catalog and the
published efficiency figures in `datasheet_efficiencies.yaml` (labelled `source: datasheet`).

This module must not import torch: the planner runs without it.
Units: seconds, GB/s (decimal), TFLOP/s, tokens.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlsim.errors import ScenarioError

SCHEMA_VERSION = 1


class LinkFit(BaseModel):
    """A communication link fitted as latency + bytes / bandwidth (per collective call)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    busbw_gbps: float = Field(gt=0, description="Achieved bus bandwidth in GB/s (nccl-tests busbw convention).")
    latency_s: float = Field(ge=0, description="Fixed cost of one collective call in seconds.")


class Profile(BaseModel):
    """Fitted efficiencies of one device; what the performance models consume."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = Field(description="Profile file format version; only 1 exists.")
    device: str = Field(description="Catalog GPU key this profile describes, or 'cpu'.")
    device_name: str = Field(description="Human-readable device name as measured or as in the catalog.")
    source: Literal["datasheet", "measured"] = Field(
        description="'datasheet': derived from specs and published efficiencies; 'measured': fitted from kernels."
    )
    date: str = Field(description="ISO date the profile was made.")
    software: dict[str, str] = Field(default_factory=dict, description="Software versions (torch, CUDA, driver).")
    citations: list[str] = Field(default_factory=list, description="Sources of every efficiency used.")
    notes: str = Field(default="", description="Assumptions and caveats, in words.")

    memory_gb: float = Field(gt=0, description="Device memory capacity in GB (HBM, or RAM granted to the CPU device).")
    peak_tflops: float = Field(gt=0, description="Peak dense bf16 FLOP/s in TFLOP/s; MFU is relative to this.")
    peak_memory_gbps: float = Field(gt=0, description="Peak memory bandwidth in GB/s.")

    matmul_tflops: float = Field(gt=0, description="Saturating achieved GEMM rate in TFLOP/s (large token counts).")
    matmul_tokens_half: float = Field(
        ge=0, description="GEMM token count (rows) at which the achieved rate is half of matmul_tflops."
    )
    memory_gbps: float = Field(gt=0, description="Achieved streaming bandwidth for weight reads in decode, GB/s.")
    attention_gbps: float = Field(gt=0, description="Achieved bandwidth of KV-cache reads in decode attention, GB/s.")
    iteration_overhead_s: float = Field(
        ge=0, description="Fixed cost of one decode iteration (kernel launches, sampling, scheduling), s."
    )
    train_mfu: float = Field(gt=0, le=1, description="Training MFU at large micro-batches (fraction of peak_tflops).")
    train_tokens_half: float = Field(
        ge=0, description="Micro-batch tokens per device at which training MFU is half of train_mfu."
    )
    host_link_gbps: float = Field(gt=0, description="Achieved host<->device copy bandwidth, GB/s (offload/reload).")
    intra_node: LinkFit = Field(description="Collectives between devices of one node (NVLink/XGMI).")
    inter_node: LinkFit = Field(description="Collectives across nodes, per GPU (IB/RoCE/EFA).")

    measured_range: dict[str, list[float]] = Field(
        default_factory=dict,
        description="Per fitted quantity, the [min, max] of the measured sweep (e.g. 'gemm_tokens').",
    )
    measurements: list[dict[str, Any]] = Field(default_factory=list, description="Raw measurement rows.")

    def outside_range(self, quantity: str, value: float) -> bool:
        """True when `value` lies outside the measured sweep of `quantity` (extrapolation)."""
        span = self.measured_range.get(quantity)
        return bool(span) and not (span[0] <= value <= span[1])


@cache
def _efficiency_table() -> dict[str, Any]:
    text = resources.files("rlsim.calibration").joinpath("datasheet_efficiencies.yaml").read_text()
    return yaml.safe_load(text)


def datasheet_profile(gpu_key: str) -> Profile:
    """The built-in profile of a catalog GPU: its datasheet peaks times published efficiencies."""
    from rlsim.catalog import get_gpu

    gpu = get_gpu(gpu_key, field="profile")
    table = _efficiency_table()
    eff = {**table["default"], **table.get("gpus", {}).get(gpu.key, {})}
    cites = list(dict.fromkeys([*gpu.sources, *table["default_citations"], *eff.get("citations", [])]))
    peak_gbps = gpu.hbm_tbps * 1000.0
    matmul = eff.get("matmul_tflops") or gpu.bf16_tflops * eff["matmul_fraction"]
    return Profile(
        schema_version=SCHEMA_VERSION,
        device=gpu.key,
        device_name=gpu.name,
        source="datasheet",
        date=table["date"],
        citations=cites,
        notes=eff.get("notes", table["default_notes"]),
        memory_gb=gpu.hbm_gb,
        peak_tflops=gpu.bf16_tflops,
        peak_memory_gbps=peak_gbps,
        matmul_tflops=matmul,
        matmul_tokens_half=eff["matmul_tokens_half"],
        memory_gbps=peak_gbps * eff["memory_fraction"],
        attention_gbps=peak_gbps * eff["attention_fraction"],
        iteration_overhead_s=eff["iteration_overhead_s"],
        train_mfu=eff["train_mfu"],
        train_tokens_half=eff["train_tokens_half"],
        host_link_gbps=gpu.pcie_gbps * eff["host_link_fraction"],
        intra_node=LinkFit(
            busbw_gbps=gpu.scaleup_gbps * eff["intra_node_fraction"], latency_s=eff["intra_node_latency_s"]
        ),
        inter_node=LinkFit(
            busbw_gbps=gpu.internode_gbps_per_gpu * eff["inter_node_fraction"],
            latency_s=eff["inter_node_latency_s"],
        ),
    )


def load_profile(path: str | Path, field: str = "profile") -> Profile:
    """Read a profile JSON file; every way it can be unusable is one ScenarioError line."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise ScenarioError(field, f"profile file '{p}' does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(field, f"cannot read profile '{p}': {exc}") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(field, f"profile '{p}' is not valid JSON (corrupt or truncated): {exc.msg}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(field, f"profile '{p}' must be a JSON object")
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ScenarioError(
            field, f"profile '{p}' has schema_version {version!r}; this rlsim reads version {SCHEMA_VERSION}"
        )
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ScenarioError(field, f"profile '{p}' is invalid at '{loc}': {err['msg']}") from None


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write a profile as indented JSON (atomically, so a crash never leaves half a file)."""
    p = Path(path)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(profile.model_dump(mode="json"), indent=2, sort_keys=False) + "\n")
    tmp.replace(p)


def resolve_profile(spec: str | None, gpu_key: str, field: str = "profile") -> Profile:
    """A scenario's `profile` value -> Profile: None or a GPU key (datasheet) or a JSON path.

    A measured profile for a different device than the cluster's GPU is an error: its
    efficiencies describe other hardware.
    """
    if spec is None or spec in ("datasheet", ""):
        if gpu_key == "cpu":
            raise ScenarioError(field, "cluster.gpu 'cpu' needs a measured profile: run 'rlsim calibrate --device cpu'")
        return datasheet_profile(gpu_key)
    if spec.endswith(".json") or "/" in spec:
        profile = load_profile(spec, field=field)
    else:
        profile = datasheet_profile(spec)
    if (profile.device == "cpu") != (gpu_key == "cpu"):
        raise ScenarioError(field, f"profile is for device '{profile.device}' but cluster.gpu is '{gpu_key}'")
    if gpu_key != "cpu":
        from rlsim.catalog import get_gpu

        if get_gpu(profile.device, field=field).key != get_gpu(gpu_key).key:
            raise ScenarioError(field, f"profile is for device '{profile.device}' but cluster.gpu is '{gpu_key}'")
    return profile
