"""Library presets: one YAML overlay per RL library mode, and the loader that applies them.

A preset (`rlsim/presets/<name>.yaml`) holds a `preset:` block of metadata (the library, the
mode it models, the survey's partial-rollout and LoRA columns, and the sources of every claim,
each with a commit or a date) and an `overlay:` mapping deep-merged into a user's scenario.
The overlay only sets architecture axes (`ALLOWED_OVERLAY` below): it never touches the model,
the workload, the cluster or the inference/training GPU split, so two presets applied to one
scenario compare libraries on the same hardware and the same tokens.

What a preset models and what it does not (implementation speed, kernels, bugs) is written
down in docs/presets.md; the mapping of each library's own knobs to scenario fields is in the
comments of each YAML file and in docs/knobs.md.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlsim.errors import ScenarioError
from rlsim.inputs import load_shipped_yaml
from rlsim.scenario import Scenario, Transport, read_yaml, scenario_from_dict

PRESET_DIR = Path(__file__).parent

# The only scenario fields an overlay may set: the pipeline axes of the design. `True` means
# any value; a set lists the allowed keys of a mapping. Model, workload, cluster and the GPU
# split (inference.gpus / training.gpus) stay the user's.
ALLOWED_OVERLAY: dict[str, Any] = {
    "pipeline": {
        "mode": True,
        "buffer_depth": True,
        "staleness_threshold": True,
        "staleness": {"policy", "max_lag"},
        "weight_sync": {"transport", "every_steps", "interrupt", "bucket_mb"},
        "inference": {"dispatch", "keep_groups_together"},
        "colocation": {"offload_optimizer", "offload_engine_weights"},
        "training": {"tp", "pp", "data_parallel"},
    }
}

LoraSupport = Literal["none", "full_sync", "adapter_sync", "only"]


class Preset(BaseModel):
    """One library mode as a scenario overlay, with the provenance of each axis it sets."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(description="Preset name (the YAML file stem), e.g. 'verl-fully-async'.")
    library: str = Field(description="The library as the survey names it, e.g. 'verl'.")
    description: str = Field(description="The library mode this preset models, in one or two sentences.")
    orchestration: str = Field(description="Orchestration primitive (survey axis 1); display only.")
    partial_rollouts: str = Field(
        description="What in-flight generation does on a weight update (survey axis 5); display only."
    )
    lora: LoraSupport = Field(
        description="LoRA RL support: none (LoRA scenarios are refused), full_sync (adapters train, "
        "merged weights sync), adapter_sync (only adapters sync), only (LoRA-only library)."
    )
    lora_rank: int | None = Field(
        default=None, gt=0, description="Rank added when lora='only' and the scenario has no LoRA."
    )
    training_backend: str = Field(description="Training backend and parallelism (survey axis 7); display only.")
    sources: list[str] = Field(
        min_length=1, description="Repository paths (owner/repo@commit path) or pages (URL, date) backing the axes."
    )
    unconfirmed: list[str] = Field(default_factory=list, description="Axes set without a confirming source.")
    gaps: list[str] = Field(
        default_factory=list, description="Library behaviour the scenario cannot express (closest fields used)."
    )
    overlay: dict[str, Any] = Field(description="Mapping deep-merged into the scenario (ALLOWED_OVERLAY keys only).")

    @field_validator("overlay")
    @classmethod
    def _overlay_allowed(cls, overlay: dict[str, Any]) -> dict[str, Any]:
        _check_keys(overlay, ALLOWED_OVERLAY, "overlay")
        return overlay


def _check_keys(node: dict[str, Any], allowed: Any, where: str) -> None:
    if not isinstance(node, dict):
        raise ValueError(f"{where} must be a mapping")
    for key, value in node.items():
        spec = allowed.get(key) if isinstance(allowed, dict) else (True if key in allowed else None)
        if spec is None:
            raise ValueError(f"{where}.{key} is not a pipeline axis a preset may set")
        if spec is not True:
            _check_keys(value, spec, f"{where}.{key}")


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """A new mapping: `overlay` wins; nested mappings merge key by key; a None leaf resets a field."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _load(path: Path) -> Preset:
    data = read_yaml(path)
    unknown = set(data) - {"preset", "overlay"}
    if unknown or "preset" not in data or "overlay" not in data:
        raise ScenarioError(f"preset {path.stem}", "a preset file holds exactly a 'preset:' and an 'overlay:' block")
    try:
        preset = Preset.model_validate({**data["preset"], "overlay": data["overlay"]})
    except ValidationError as exc:
        raise ScenarioError(f"preset {path.stem}", str(exc)) from None
    if preset.name != path.stem:
        raise ScenarioError(f"preset {path.stem}", f"preset.name '{preset.name}' must equal the file stem")
    return preset


@lru_cache(maxsize=1)
def _all() -> tuple[Preset, ...]:
    return tuple(_load(p) for p in sorted(PRESET_DIR.glob("*.yaml"), key=lambda p: p.stem))


def list_presets() -> list[Preset]:
    """Every shipped preset, sorted by name."""
    return list(_all())


def get_preset(name: str) -> Preset:
    """The preset called `name`; an unknown name is a ScenarioError with the closest names."""
    by_name = {p.name: p for p in _all()}
    if name in by_name:
        return by_name[name]
    close = difflib.get_close_matches(name, list(by_name), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ScenarioError("preset", f"unknown preset '{name}'{hint} (see `rlsim libraries` for all {len(by_name)})")


def _lora_rule(data: dict[str, Any], preset: Preset) -> None:
    """LoRA is the user's choice; the preset says whether the library can train it and what syncs."""
    pipe = data["pipeline"]
    if preset.lora == "none" and pipe.get("lora") is not None:
        raise ScenarioError(
            "pipeline.lora",
            f"preset '{preset.name}' models {preset.library}, which has no LoRA RL training "
            "(survey axis 6); remove pipeline.lora to compare full-weight training",
        )
    if preset.lora == "only" and pipe.get("lora") is None:
        pipe["lora"] = {"rank": preset.lora_rank}
    if preset.lora in ("adapter_sync", "only") and pipe.get("lora") is not None:
        pipe["weight_sync"] = {**pipe["weight_sync"], "transport": Transport.lora_adapter.value}


def apply_preset(scenario: Scenario, name: str) -> Scenario:
    """The scenario under a library preset: its overlay deep-merged in, validated once again.

    Model, workload, cluster and GPU split are kept; the name becomes '<scenario>+<preset>'.
    """
    preset = get_preset(name)
    overlay = preset.overlay
    lead = {"buffer_depth", "staleness_threshold"} & set(overlay.get("pipeline", {}))
    if lead:  # the two ways to bound the run-ahead exclude each other: the preset's replaces the user's
        reset = {k: None for k in {"buffer_depth", "staleness_threshold"} - lead}
        overlay = deep_merge(overlay, {"pipeline": reset})
    data = deep_merge(scenario.model_dump(mode="json"), overlay)
    _lora_rule(data, preset)
    data["name"] = f"{scenario.name}+{preset.name}"
    return scenario_from_dict(data, base_dir=scenario.base_dir)


@dataclass(frozen=True)
class PresetAxes:
    """The effective axes of a preset (mode defaults resolved), as text for tables."""

    mode: str
    buffer_depth: str
    transport: str
    interrupt: str
    staleness: str
    dispatch: str


def _reference_scenario() -> Scenario:
    # Only to resolve mode defaults (depth, interrupt, transport): any valid scenario will do.
    return scenario_from_dict(load_shipped_yaml(_REFERENCE))


_REFERENCE = """
model: qwen2.5-7b
cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}
algorithm: {prompts_per_step: 8, group_size: 8}
workload:
  prompt_tokens: {kind: constant, value: 256}
  response_tokens: {kind: constant, value: 1024}
"""


def preset_axes(preset: Preset) -> PresetAxes:
    """What the preset sets, with every mode-implied default resolved (for `rlsim libraries`)."""
    sc = apply_preset(_reference_scenario(), preset.name)
    pipe = sc.pipeline
    policy = pipe.staleness.policy.value
    stale = f"{policy} (max_lag {pipe.staleness.max_lag})" if policy == "reject" else policy
    if pipe.depth == 0:
        stale = "none (synchronous)"
    return PresetAxes(
        mode=pipe.mode.value,
        buffer_depth=str(pipe.depth),
        transport=pipe.transport.value,
        interrupt=pipe.interrupt.value,
        staleness=stale,
        dispatch=pipe.dispatch.value,
    )
