"""The LLM shape a calibration sweep uses: layer widths for the GEMMs, KV heads for attention.

Calibration measures the kernels at the shapes of the model the user will simulate (GEMM
efficiency depends on the matrix widths), taken from the LLM catalog by name or from a
Hugging Face config.json. Without a name, a small built-in shape is used on the CPU (so a quick
calibration stays under a minute) and the Qwen2.5-7B shape on a GPU. No torch here. Units: elements (widths), tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    def gemm_layers(self, tp: int = 1) -> dict[str, tuple[int, int]]:
        """Per GEMM of a layer (plus the LM head): (in_features K, out_features N) on one of `tp` GPUs.

        Gate and up projections are one fused GEMM, as in vLLM's MergedColumnParallelLinear. At
        tensor parallelism `tp` the column-parallel GEMMs (QKV, gate/up, LM head) split N and
        the row-parallel ones (attention output, down) split K (rounded up), as Megatron-style
        TP shards them; every GPU's layer then holds 1/tp of the GEMM parameters, as
        `decode.gemm_layer_params` counts them.
        """
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim

        def part(width: int) -> int:
            return -(-width // tp)

        return {
            "qkv": (self.hidden, part(q + 2 * kv)),
            "attn_out": (part(q), self.hidden),
            "mlp_gate_up": (self.hidden, part(2 * self.intermediate)),
            "mlp_down": (part(self.intermediate), self.hidden),
            "lm_head": (self.hidden, part(self.vocab)),
        }


# A small dense shape (Llama/Qwen proportions: FFN 2.75x hidden, 4 query heads per KV head)
# whose sweep takes seconds on two CPU cores.
SMALL_SHAPE = LlmShape(
    name="builtin-small",
    hidden=1024,
    intermediate=2816,
    heads=16,
    kv_heads=4,
    head_dim=64,
    vocab=8192,
    layers=16,
)
# Qwen2.5-7B config.json (NVIDIA-NeMo/Megatron-Bridge@07d0d14aceb47916885f74abeace7ac5d167aa75
# src/megatron/bridge/models/qwen/qwen_provider.py; as the llms.yaml entry): the GPU default
# when no model is named, because a 7B policy is the most common RL setting.
QWEN25_7B_SHAPE = LlmShape(
    name="qwen2.5-7b",
    hidden=3584,
    intermediate=18944,
    heads=28,
    kv_heads=4,
    head_dim=128,
    vocab=152064,
    layers=28,
)


def shape_from_catalog(model: str, field: str = "model") -> LlmShape:
    """The layer shape of catalog LLM `model`, or of the config.json at that path.

    An unknown name or an unusable file is the catalog's ScenarioError. For a mixture-of-experts
    model the MLP GEMMs take one expert's width (the GEMMs a token's rows meet); MLA models are
    measured with their GQA-equivalent head counts.
    """
    from rlsim.calibration.model_ops_fit import is_config_path
    from rlsim.catalog import get_llm, llm_from_hf_config

    spec = llm_from_hf_config(model, field=field) if is_config_path(model) else get_llm(model, field=field)
    return LlmShape(
        name=spec.key,
        hidden=spec.hidden_size,
        intermediate=spec.moe.expert_intermediate_size if spec.moe else spec.intermediate_size,
        heads=spec.num_attention_heads,
        kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        vocab=spec.vocab_size,
        layers=spec.num_layers,
    )


def resolve_shape(model: str | None, device_type: str) -> LlmShape:
    """`model` (a catalog name or a config.json path), else the device's default shape."""
    if model:
        return shape_from_catalog(model)
    return SMALL_SHAPE if device_type == "cpu" else QWEN25_7B_SHAPE
