"""The LLM shape a calibration sweep uses: layer widths for the GEMMs, KV heads for attention.

Calibration measures the kernels at the shapes of the model the user will simulate (GEMM
efficiency depends on the matrix widths), taken from the LLM catalog by name. Without a
name, a small built-in shape is used on the CPU (so a quick calibration stays under a minute)
and the Qwen2.5-7B shape on a GPU. No torch here. Units: elements (widths), tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlsim.errors import ScenarioError


@dataclass(frozen=True)
class LlmShape:
    """The widths of one decoder layer and the LM head (config.json names, without prefixes)."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    layers: int

    def gemm_layers(self) -> dict[str, tuple[int, int]]:
        """Per GEMM of a layer (plus the LM head): (in_features K, out_features N).

        Gate and up projections are one fused GEMM, as in vLLM's MergedColumnParallelLinear.
        """
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "qkv": (self.hidden, q + 2 * kv),
            "attn_out": (q, self.hidden),
            "mlp_gate_up": (self.hidden, 2 * self.intermediate),
            "mlp_down": (self.intermediate, self.hidden),
            "lm_head": (self.hidden, self.vocab),
        }


# A small dense shape (Llama/Qwen proportions: FFN 2.75x hidden, 4 query heads per KV head)
# whose sweep takes seconds on two CPU cores.
SMALL_SHAPE = LlmShape(
    name="builtin-small", hidden=1024, intermediate=2816, heads=16, kv_heads=4, head_dim=64,
    vocab=8192, layers=16,
)  # fmt: skip
# Qwen2.5-7B config.json (shared/reference/hardware-pricing-models.md §4a): the GPU default
# when no model is named, because a 7B policy is the most common RL setting.
QWEN25_7B_SHAPE = LlmShape(
    name="qwen2.5-7b", hidden=3584, intermediate=18944, heads=28, kv_heads=4, head_dim=128,
    vocab=152064, layers=28,
)  # fmt: skip

_FIELDS = {
    "hidden": ("hidden_size", "hidden"),
    "intermediate": ("intermediate_size", "ffn_size", "intermediate"),
    "heads": ("num_attention_heads", "num_heads", "heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "kv_heads"),
    "head_dim": ("head_dim",),
    "vocab": ("vocab_size", "vocab"),
    "layers": ("num_hidden_layers", "num_layers", "layers"),
}


def _read(spec: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = spec.get(name) if isinstance(spec, dict) else getattr(spec, name, None)
        if value is not None:
            return int(value)
    return None


def shape_from_catalog(model: str, field: str = "model") -> LlmShape:
    """The layer shape of catalog LLM `model` (an unknown name is the catalog's ScenarioError)."""
    from rlsim.catalog import get_llm

    spec = get_llm(model, field=field)
    values = {key: _read(spec, names) for key, names in _FIELDS.items()}
    if values["head_dim"] is None and values["hidden"] and values["heads"]:
        values["head_dim"] = values["hidden"] // values["heads"]
    if values["kv_heads"] is None:
        values["kv_heads"] = values["heads"]
    missing = [k for k, v in values.items() if not v]
    if missing:
        raise ScenarioError(field, f"catalog LLM '{model}' lacks {', '.join(missing)} for calibration")
    key = getattr(spec, "key", None) or getattr(spec, "name", None) or model
    return LlmShape(name=str(key), **values)  # type: ignore[arg-type]


def resolve_shape(model: str | None, device_type: str) -> LlmShape:
    """`model` from the catalog, else the device's default shape."""
    if model:
        return shape_from_catalog(model)
    return SMALL_SHAPE if device_type == "cpu" else QWEN25_7B_SHAPE
