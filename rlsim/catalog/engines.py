"""Inference-engine profiles (vLLM, SGLang): the cited differences `pipeline.inference.engine` selects.

An engine changes exactly two things in a simulation, both read from `engines.yaml`:
- which memory the share `kv_memory_fraction` covers (`kv_budget`): vLLM reserves its share for
  weights, profiled activations and KV, SGLang's `mem_fraction_static` covers weights and the KV
  pool only, so the KV budget differs by the activation reserve;
- the decode speed relative to vLLM, from measured throughput rows; a scenario takes the row
  nearest its model's size (`decode_speed_vs_vllm`), the simulator divides decode iteration times
  by it. vLLM is the reference the performance models describe: exactly 1.0.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlsim.catalog.provenance import DateStr, Sources
from rlsim.errors import ScenarioError
from rlsim.inputs import load_shipped_yaml

ENGINES_YAML = Path(__file__).with_name("engines.yaml")


class DecodeMeasurement(BaseModel):
    """Output tokens per second of SGLang and vLLM on one model, GPU and workload."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: str = Field(description="Model and setup as the source states them.")
    params_b: float = Field(gt=0, description="Nominal size from the model's name, billions of parameters.")
    vllm_tokens_per_s: float = Field(gt=0, description="vLLM output throughput (or a relative 1.0), tokens/s.")
    sglang_tokens_per_s: float = Field(gt=0, description="The engine's output throughput on the same setup, tokens/s.")
    source: str = Field(min_length=1, description="Where the measurement is published.")

    @property
    def ratio(self) -> float:
        return self.sglang_tokens_per_s / self.vllm_tokens_per_s


class EngineProfile(BaseModel):
    """One inference engine as rlsim distinguishes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    key: Literal["vllm", "sglang"] = Field(description="The value of pipeline.inference.engine.")
    name: str = Field(description="Display name.")
    memory_fraction_knob: str = Field(description="The engine's own name for kv_memory_fraction.")
    kv_budget: Literal["activations_inside", "activations_outside"] = Field(
        description="Whether the activation reserve comes out of the memory share (vLLM) or not (SGLang)."
    )
    kv_allocation: str = Field(description="How the engine allocates its KV cache, in words (display only).")
    decode_measurements: list[DecodeMeasurement] = Field(
        description="Measured throughput against vLLM; empty for the reference engine."
    )
    sources: Sources
    date: DateStr

    @property
    def reserve_in_fraction(self) -> bool:
        return self.kv_budget == "activations_inside"

    def decode_measurement(self, total_params: float) -> DecodeMeasurement | None:
        """The row nearest `total_params` in log size (a tie takes the smaller model); None for vLLM."""
        if not self.decode_measurements:
            return None
        size_b = total_params / 1e9
        return min(self.decode_measurements, key=lambda m: (abs(math.log(size_b / m.params_b)), m.params_b))

    def decode_speed_vs_vllm(self, total_params: float) -> float:
        """Decode throughput relative to vLLM for a model of `total_params` parameters (vLLM: 1.0)."""
        row = self.decode_measurement(total_params)
        return 1.0 if row is None else row.ratio


@lru_cache(maxsize=1)
def load_engines() -> dict[str, EngineProfile]:
    data = load_shipped_yaml(ENGINES_YAML.read_text(encoding="utf-8"))
    profiles = [EngineProfile.model_validate(e) for e in data["engines"]]
    return {p.key: p for p in profiles}


def get_engine(key: str, field: str = "pipeline.inference.engine") -> EngineProfile:
    engines = load_engines()
    if key not in engines:
        raise ScenarioError(field, f"unknown engine '{key}'; choose from {', '.join(engines)}")
    return engines[key]
