"""Calibration profiles: the achieved fractions of hardware peak that the performance models use.

A profile is a versioned JSON file (device, software versions, date, raw measurements, fitted
parameters). Performance models in `rlsim.models` read only the fitted fields of `Profile`; they
never look at the GPU catalog's peak numbers directly, so a measured profile replaces a datasheet
one without touching any model. Built-in profiles are *derived* here from the GPU catalog and the
published efficiency figures in `datasheet_efficiencies.yaml` (labelled `source: datasheet`).
A measured profile may also hold `model_ops`: one model's own operators timed at its shapes
(`ModelOps`), which the models use for that model instead of the generic terms; the section is
optional, so files written before it existed still load as schema version 1.

This module must not import torch: the planner runs without it.
Units: seconds, GB/s (decimal), TFLOP/s, tokens; device memory in GiB (2^30 bytes), as CUDA reports
it. Files written before `memory_gib` existed carry `memory_gb` (decimal GB) and still load.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rlsim.errors import ScenarioError
from rlsim.inputs import JSON_LIMIT_BYTES, load_json, load_shipped_yaml, read_text
from rlsim.outputs import json_text

if TYPE_CHECKING:
    from rlsim.catalog import LlmSpec

SCHEMA_VERSION = 1
GIB_BYTES = 1 << 30


class LinkFit(BaseModel):
    """A communication link fitted as latency + bytes / bandwidth (per collective call)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    busbw_gbps: float = Field(gt=0, description="Achieved bus bandwidth in GB/s (nccl-tests busbw convention).")
    latency_s: float = Field(ge=0, description="Fixed cost of one collective call in seconds.")


class ModelOps(BaseModel):
    """One model's own operators timed on this device at its shapes, fitted into linear terms.

    The generic fields of a profile describe kernels (GEMM rates, bandwidths, a launch probe)
    measured on a reference shape; a small model run eagerly spends its time elsewhere (operator
    dispatch, sampling over the vocabulary, KV-cache bookkeeping, Python per call). Like Vidur's
    per-model operator profiles, these terms come from timing the model's real module
    (`rlsim.calibration.model_ops`); the performance models use them, instead of the generic
    terms, for the model with this entry's key (`model_key`) on one device (tp = pp = 1).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="Name of the measured model (its config.json _name_or_path or file name).")
    model_type: str = Field(description="config.json model_type of the module that was timed.")
    dtype: str = Field(description="Parameter and activation dtype the operators ran in (e.g. 'float32').")
    decode_fixed_s: float = Field(ge=0, description="Seconds of one decode iteration at any batch and cache size.")
    decode_per_sequence_s: float = Field(
        ge=0, description="Decode iteration seconds per running sequence (rows, sampling, bookkeeping)."
    )
    decode_per_kv_token_s: float = Field(
        ge=0, description="Decode iteration seconds per cached token of the batch (KV gather and concat, attention)."
    )
    prefill_fixed_s: float = Field(ge=0, description="Seconds of one prefill call (first token sampled) at any size.")
    prefill_per_sequence_s: float = Field(ge=0, description="Prefill seconds per prompt (sampling, bookkeeping).")
    prefill_per_token_s: float = Field(ge=0, description="Prefill seconds per prompt token.")
    train_fixed_s: float = Field(
        ge=0, description="Seconds of one training forward + loss + backward pass of a micro-batch, at any size."
    )
    train_per_token_s: float = Field(ge=0, description="Training pass seconds per token (sequence length x rows).")
    forward_fixed_s: float = Field(ge=0, description="Seconds of one no-grad log-prob forward pass, at any size.")
    forward_per_token_s: float = Field(ge=0, description="Log-prob forward seconds per token.")
    optimizer_s: float = Field(ge=0, description="Seconds of one optimizer step (gradient clipping, AdamW, zeroing).")
    weight_bytes: float = Field(gt=0, description="Bytes of the parameters in `dtype`: what one weight update copies.")
    weight_sync_latency_s: float = Field(
        ge=0, description="Seconds of one in-memory weight update beyond its bytes (per-tensor copies, the lock)."
    )
    weight_copy_gbps: float = Field(gt=0, description="Achieved bandwidth of the update's memory copy, GB/s.")
    measured_range: dict[str, list[float]] = Field(
        default_factory=dict,
        description="Per swept quantity, the [min, max] timed (e.g. 'decode_batch', 'train_tokens').",
    )


def model_key(llm: LlmSpec) -> str:
    """The identity a model's operators are filed under: its architecture, not its name.

    Layers, widths, heads, vocabulary, positions and the parameter count (which tells a
    two-matrix MLP or a learned position table apart) fix the operators a forward runs.
    """
    return (
        f"L{llm.num_layers}-H{llm.hidden_size}-I{llm.intermediate_size}-A{llm.num_attention_heads}"
        f"-KV{llm.num_kv_heads}-D{llm.head_dim}-V{llm.vocab_size}-T{llm.max_position_embeddings}"
        f"-P{int(llm.total_params)}"
    )


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

    memory_gib: float = Field(
        gt=0,
        description="Device memory as the runtime reports its total (torch.cuda.mem_get_info()[1]; a datasheet "
        "profile: the catalog's visible_memory), GiB: what engine memory shares (vLLM gpu_memory_utilization, "
        "SGLang mem_fraction_static) and training memory are sized against. CPU: the RAM granted to the CPU "
        "device. A file with the older 'memory_gb' (decimal GB) is read as memory_gb x 1e9 bytes.",
    )
    peak_tflops: float = Field(gt=0, description="Peak dense bf16 FLOP/s in TFLOP/s; MFU is relative to this.")
    peak_memory_gbps: float = Field(gt=0, description="Peak memory bandwidth in GB/s.")

    matmul_tflops: float = Field(gt=0, description="Saturating achieved GEMM rate in TFLOP/s (large token counts).")
    matmul_tokens_half: float = Field(
        ge=0, description="GEMM token count (rows) at which the achieved rate is half of matmul_tflops."
    )
    matmul_tokens_half_params: float | None = Field(
        default=None,
        gt=0,
        description="Per-GPU GEMM parameters of one dense decoder layer (QKV, output, gate/up and down "
        "projections) at which matmul_tokens_half holds; a dense model whose layer has P of them per GPU "
        "half-saturates at matmul_tokens_half x sqrt(this / P) rows (`decode.tokens_half`). Datasheet "
        "profiles: the H100 kernels' fit; measured: fitted to the calibrated GEMMs at TP 1-8. None: "
        "matmul_tokens_half at every shape (a measured profile whose sizes showed no such law, or older).",
    )
    memory_gbps: float = Field(gt=0, description="Achieved streaming bandwidth for weight reads in decode, GB/s.")
    attention_gbps: float = Field(gt=0, description="Achieved bandwidth of KV-cache reads in decode attention, GB/s.")
    iteration_overhead_s: float = Field(
        ge=0, description="Fixed cost of one decode iteration (kernel launches, sampling, scheduling), s."
    )
    eager_layer_launch_s: float = Field(
        default=3.4e-4,
        ge=0,
        description="Host seconds to launch one transformer layer's kernels of a decode iteration without CUDA "
        "graphs (vLLM enforce_eager); an eager iteration takes at least layers x this. Default: vLLM measurement "
        "in the datasheet citations.",
    )
    moe_layer_floor_s: float = Field(
        default=3.17e-5,
        ge=0,
        description="Least seconds of one MoE layer's expert GEMMs in a decode iteration (the fused-MoE kernel is "
        "latency-bound at a few tokens per expert); default: SGLang's kernel timing in the datasheet citations.",
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
    model_ops: dict[str, ModelOps] = Field(
        default_factory=dict,
        description="Operators of specific models timed on this device, keyed by model_key; "
        "absent or empty: every model gets the generic terms above.",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_memory_gb(cls, data: Any) -> Any:
        """A profile saved before `memory_gib` holds `memory_gb` in decimal GB: the same bytes, in GiB."""
        if isinstance(data, dict) and "memory_gb" in data and "memory_gib" not in data:
            data = dict(data)
            old = data.pop("memory_gb")
            is_number = isinstance(old, int | float) and not isinstance(old, bool)
            data["memory_gib"] = old * 1e9 / GIB_BYTES if is_number else old
        return data

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes (memory_gib x 2^30)."""
        return self.memory_gib * GIB_BYTES

    @property
    def memory_gb(self) -> float:
        """Device memory in decimal GB (memory_bytes / 1e9); the field's name before memory_gib."""
        return self.memory_bytes / 1e9

    def ops_for(self, llm: LlmSpec) -> ModelOps | None:
        """This model's measured operators, or None (then the models use the generic terms)."""
        return self.model_ops.get(model_key(llm)) if self.model_ops else None

    def outside_range(self, quantity: str, value: float) -> bool:
        """True when `value` lies outside the measured sweep of `quantity` (extrapolation)."""
        span = self.measured_range.get(quantity)
        return bool(span) and not (span[0] <= value <= span[1])


@cache
def _efficiency_table() -> dict[str, Any]:
    text = resources.files("rlsim.calibration").joinpath("datasheet_efficiencies.yaml").read_text()
    return load_shipped_yaml(text)


def ridge_scale(gpu, reference) -> float:
    """How far a GPU's roofline ridge lies from the one the default half-saturation points assume.

    A GEMM of t tokens against a (k x n) bf16 weight does 2tkn FLOPs on about 2kn bytes: its
    arithmetic intensity is about t FLOPs per byte, so it turns compute-bound where t reaches
    the ridge, peak FLOP/s over memory bandwidth (the roofline model). The token counts at which
    GEMM and training rates reach half their peak therefore move with the ridge: an H20 (148
    TFLOPS on 4.0 TB/s, 37 FLOPs/byte) saturates at an eighth of the tokens an H100 SXM
    (989 TFLOPS on 3.35 TB/s, 295 FLOPs/byte) needs.
    """
    return (gpu.bf16_tflops / gpu.hbm_tbps) / (reference.bf16_tflops / reference.hbm_tbps)


def datasheet_profile(gpu_key: str) -> Profile:
    """The built-in profile of a catalog GPU: its datasheet peaks times published efficiencies."""
    from rlsim.catalog import get_gpu

    gpu = get_gpu(gpu_key, field="profile")
    table = _efficiency_table()
    eff = {**table["default"], **table.get("gpus", {}).get(gpu.key, {})}
    cites = list(dict.fromkeys([*gpu.sources, *table["default_citations"], *eff.get("citations", [])]))
    peak_gbps = gpu.hbm_tbps * 1000.0
    matmul = eff.get("matmul_tflops") or gpu.bf16_tflops * eff["matmul_fraction"]
    ridge = ridge_scale(gpu, get_gpu(table["tokens_half_reference_gpu"], field="profile"))
    return Profile(
        schema_version=SCHEMA_VERSION,
        device=gpu.key,
        device_name=gpu.name,
        source="datasheet",
        date=table["date"],
        citations=cites,
        notes=eff.get("notes", table["default_notes"]),
        memory_gib=gpu.visible_memory.total_bytes / GIB_BYTES,
        peak_tflops=gpu.bf16_tflops,
        peak_memory_gbps=peak_gbps,
        matmul_tflops=matmul,
        matmul_tokens_half=eff["matmul_tokens_half"] * ridge,
        matmul_tokens_half_params=eff.get("matmul_tokens_half_params"),
        memory_gbps=peak_gbps * eff["memory_fraction"],
        attention_gbps=peak_gbps * eff["attention_fraction"],
        iteration_overhead_s=eff["iteration_overhead_s"],
        eager_layer_launch_s=eff["eager_layer_launch_s"],
        moe_layer_floor_s=eff["moe_layer_floor_s"],
        train_mfu=eff["train_mfu"],
        train_tokens_half=eff["train_tokens_half"] * ridge,
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
    raw = load_json(read_text(p, field, "profile file", JSON_LIMIT_BYTES), field, f"profile '{p}'")
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
    tmp.write_text(json_text(profile.model_dump(mode="json"), indent=2, sort_keys=False) + "\n")
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
