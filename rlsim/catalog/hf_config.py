"""Read a Hugging Face `config.json` into an LlmSpec, for models that are not in the catalog.

Understands the keys of the Qwen2, Qwen3, Llama, Qwen3-MoE and DeepSeek-V3 configs (and the many
architectures that reuse them), the hybrid Gated DeltaNet configs of Qwen3-Next and Qwen3.5 (a
vision-language config's `text_config` is read for its language model), and GPT-2-style blocks
(`_PLAIN_MLP_TYPES`: a two-matrix MLP and, for some, a learned position table; GPT-2's own key
names are accepted as aliases), which is what the validation trainer's tiny policy writes
(`rlsim.trainer.model.to_hf_config`).
Parameter counts are not trusted from the file: they are computed by `count_params`, the same
recipe that reproduces the catalog's counts (with GPT-2's MLP and position table, `_counts`). A missing or malformed
file, a missing key, or an MoE layout the catalog cannot express (interleaved dense layers,
differently sized shared experts) is a ScenarioError naming the field, never a silent guess.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlsim.catalog.llms import LinearAttentionSpec, LlmSpec, MlaSpec, MoeSpec, count_params
from rlsim.catalog.lookup import first_error
from rlsim.errors import ScenarioError
from rlsim.inputs import JSON_LIMIT_BYTES, load_json, read_text

_QKV_BIAS_TYPES = {"qwen2", "qwen2_moe"}  # Qwen2 projections carry biases without a config key
_QK_NORM_TYPES = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
# vLLM takes the recurrent state's dtype from mamba_ssm_dtype for these model types only (vllm
# 0.33.0 vllm/model_executor/models/config.py Qwen3_5ForConditionalGenerationConfig); for others
# its mamba_ssm_cache_dtype 'auto' is the model dtype
_STATE_DTYPE_FROM_CONFIG_TYPES = {"qwen3_5_text", "qwen3_5_moe_text"}
_STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Non-gated MLP (up, activation, down: 2*h*ffn parameters, not SwiGLU's 3*h*ffn). Keyed on the
# model type, not on hidden_act: Gemma's gelu MLP is gated.
_PLAIN_MLP_TYPES = {"gpt2", "gpt_bigcode", "gpt_neox", "opt", "rlsim-tiny-gpt"}
# A learned position-embedding table of max_position_embeddings x hidden_size (no rotary).
_LEARNED_POSITION_TYPES = {"gpt2", "gpt_bigcode", "opt", "rlsim-tiny-gpt"}
# GPT-2 config.json names -> the Llama-style names read below; GPT-2's FFN defaults to 4*hidden.
_GPT2_ALIASES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
}


def _read_json(path: Path, field: str) -> dict[str, Any]:
    """The JSON object in `path`, or a one-line ScenarioError saying why it cannot be read."""
    data = load_json(read_text(path, field, "config.json", JSON_LIMIT_BYTES), field, str(path))
    if not isinstance(data, dict):
        raise ScenarioError(field, f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


class _Config:
    """Typed access to config.json keys, every failure naming the file and the key."""

    def __init__(self, data: dict[str, Any], path: Path, field: str) -> None:
        self.data, self.path, self.field = data, path, field

    def fail(self, reason: str) -> ScenarioError:
        return ScenarioError(self.field, f"{self.path}: {reason}")

    def get_int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        """The integer at `key` (or `default` when absent), at least `minimum`."""
        value = self.data.get(key, default)
        if value is None:
            raise self.fail(f"config.json lacks '{key}'")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"'{key}' must be an integer >= {minimum}, got {value!r}")
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        """The boolean at `key`, or `default` when absent."""
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"'{key}' must be true or false, got {value!r}")
        return value

    def first_int(self, *keys: str) -> int | None:
        """The first of `keys` present (e.g. num_experts or n_routed_experts), else None."""
        present = [k for k in keys if self.data.get(k) is not None]
        return self.get_int(present[0], minimum=0) if present else None


def _moe(cfg: _Config) -> MoeSpec | None:
    """The MoE layout, or None for a dense model."""
    experts = cfg.first_int("num_experts", "n_routed_experts")
    if not experts:
        return None
    if cfg.data.get("decoder_sparse_step", 1) != 1 or cfg.data.get("mlp_only_layers"):
        raise cfg.fail("interleaved dense/MoE layers (decoder_sparse_step, mlp_only_layers) are not supported")
    width = cfg.get_int("moe_intermediate_size")
    shared = cfg.get_int("n_shared_experts", 0, minimum=0)
    shared_width = cfg.data.get("shared_expert_intermediate_size")
    if shared_width is not None:  # Qwen2-MoE style: one shared expert of this width
        if cfg.get_int("shared_expert_intermediate_size") != width:
            raise cfg.fail("shared_expert_intermediate_size (shared experts of another width) is not supported")
        shared = 1
    return MoeSpec(
        num_experts=experts,
        experts_per_token=cfg.get_int("num_experts_per_tok"),
        expert_intermediate_size=width,
        shared_experts=shared,
        dense_layers=cfg.get_int("first_k_dense_replace", 0, minimum=0),
    )


def _mla(cfg: _Config) -> MlaSpec | None:
    """The MLA layout when the config has a kv_lora_rank, else None."""
    if cfg.data.get("kv_lora_rank") is None:
        return None
    q_lora = cfg.data.get("q_lora_rank")
    return MlaSpec(
        kv_lora_rank=cfg.get_int("kv_lora_rank"),
        qk_rope_head_dim=cfg.get_int("qk_rope_head_dim"),
        qk_nope_head_dim=cfg.get_int("qk_nope_head_dim"),
        v_head_dim=cfg.get_int("v_head_dim"),
        q_lora_rank=None if q_lora is None else cfg.get_int("q_lora_rank"),
    )


def _full_attention_interval(cfg: _Config) -> int:
    """The period of the full-attention layers: full_attention_interval, or read off layer_types."""
    types = cfg.data.get("layer_types")
    if types is None:
        return cfg.get_int("full_attention_interval", 4, minimum=2)  # the Qwen3-Next / Qwen3.5 default
    layers = cfg.get_int("num_hidden_layers")
    if not isinstance(types, list) or len(types) != layers:
        raise cfg.fail(f"'layer_types' must list {layers} layer types")
    full = [i for i, kind in enumerate(types) if kind == "full_attention"]
    interval = full[0] + 1 if full else 0
    periodic = interval > 1 and all(
        kind == ("full_attention" if (i + 1) % interval == 0 else "linear_attention") for i, kind in enumerate(types)
    )
    if not periodic:
        raise cfg.fail("'layer_types' must be linear_attention with every n-th layer full_attention (n > 1)")
    return interval


def _linear_attention(cfg: _Config) -> LinearAttentionSpec | None:
    """The Gated DeltaNet layout when the config has linear-attention heads, else None."""
    if cfg.data.get("linear_num_value_heads") is None:
        return None
    model_type = str(cfg.data.get("model_type", "")).lower()
    dtype = cfg.data.get("mamba_ssm_dtype") if model_type in _STATE_DTYPE_FROM_CONFIG_TYPES else None
    if dtype is not None and dtype not in _STATE_DTYPE_BYTES:
        raise cfg.fail(f"'mamba_ssm_dtype' must be one of {sorted(_STATE_DTYPE_BYTES)}, got {dtype!r}")
    return LinearAttentionSpec(
        full_attention_interval=_full_attention_interval(cfg),
        num_key_heads=cfg.get_int("linear_num_key_heads"),
        num_value_heads=cfg.get_int("linear_num_value_heads"),
        key_head_dim=cfg.get_int("linear_key_head_dim"),
        value_head_dim=cfg.get_int("linear_value_head_dim"),
        conv_kernel_size=cfg.get_int("linear_conv_kernel_dim", minimum=2),
        state_dtype_bytes=_STATE_DTYPE_BYTES[dtype] if dtype else 2,
        attention_output_gate=cfg.get_bool("attn_output_gate", True),
    )


def _names(cfg: _Config) -> tuple[str, str, str | None]:
    """(key, display name, hf_id) from _name_or_path, else from the folder holding the file."""
    origin = str(cfg.data.get("_name_or_path") or "").rstrip("/")
    name = origin.rsplit("/", 1)[-1] or cfg.path.resolve().parent.name or "custom"
    hf_id = origin if origin.count("/") == 1 and not Path(origin).is_absolute() else None
    key = re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-.") or "custom"
    return key, name, hf_id


def _architecture(cfg: _Config) -> dict[str, Any]:
    """The LlmSpec architecture fields (everything but names, counts and provenance)."""
    model_type = str(cfg.data.get("model_type", "")).lower()
    hidden, heads = cfg.get_int("hidden_size"), cfg.get_int("num_attention_heads")
    mla = _mla(cfg)
    if mla is not None:
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    elif cfg.data.get("head_dim") is not None:
        head_dim = cfg.get_int("head_dim")
    elif hidden % heads == 0:
        head_dim = hidden // heads
    else:
        raise cfg.fail("config.json lacks 'head_dim' and hidden_size is not a multiple of heads")
    moe = _moe(cfg)
    # an all-MoE config may carry no dense FFN width (Qwen3.5-MoE): the expert width stands in
    all_moe = moe is not None and moe.dense_layers == 0 and cfg.data.get("intermediate_size") is None
    return dict(
        num_layers=cfg.get_int("num_hidden_layers"),
        hidden_size=hidden,
        intermediate_size=moe.expert_intermediate_size if all_moe else cfg.get_int("intermediate_size"),
        num_attention_heads=heads,
        num_kv_heads=cfg.get_int("num_key_value_heads", heads),
        head_dim=head_dim,
        vocab_size=cfg.get_int("vocab_size"),
        # The Llama/Qwen/DeepSeek config classes default to untied embeddings.
        tie_word_embeddings=cfg.get_bool("tie_word_embeddings", False),
        qkv_bias=cfg.get_bool("attention_bias", model_type in _QKV_BIAS_TYPES),
        qk_norm=model_type in _QK_NORM_TYPES,
        moe=moe,
        mla=mla,
        linear_attention=_linear_attention(cfg),
    )


def _gpt2_names(data: dict[str, Any]) -> dict[str, Any]:
    """A GPT-2-style config with its keys renamed to the Llama-style ones (others untouched)."""
    if str(data.get("model_type", "")).lower() not in _PLAIN_MLP_TYPES:
        return data
    out = dict(data)
    for old, new in _GPT2_ALIASES.items():
        if new not in out and out.get(old) is not None:
            out[new] = out[old]
    if out.get("intermediate_size") is None and isinstance(out.get("hidden_size"), int):
        out["intermediate_size"] = 4 * out["hidden_size"]
    out.setdefault("tie_word_embeddings", True)  # GPT-2's config class ties by default
    return out


def _text_config(data: dict[str, Any]) -> dict[str, Any]:
    """A vision-language config's language model (`text_config`), keeping the file's name and tying."""
    text = data.get("text_config")
    if not isinstance(text, dict) or data.get("num_hidden_layers") is not None:
        return data
    kept = {k: data[k] for k in ("_name_or_path", "tie_word_embeddings") if k in data}
    return {**text, **kept}


def _counts(cfg: _Config, arch: dict[str, Any]) -> tuple[float, float, str]:
    """(total, active) parameters and a note saying how they were counted.

    count_params assumes a gated SwiGLU MLP and rotary positions; GPT-2-style blocks have one
    hidden*ffn matrix less per layer and, for some, a learned position table (read by every token,
    so active, like the token embedding).
    """
    params = count_params(**arch)
    total, active = params.total, params.active
    note = "Read from a user config.json; parameter counts computed by count_params."
    model_type = str(cfg.data.get("model_type", "")).lower()
    if model_type in _PLAIN_MLP_TYPES and arch["moe"] is None:
        fewer = float(arch["num_layers"] * arch["hidden_size"] * arch["intermediate_size"])
        total, active = total - fewer, active - fewer
        note += f" Two-matrix (non-gated) MLP of model_type '{model_type}'."
    if model_type in _LEARNED_POSITION_TYPES:
        table = float(cfg.get_int("max_position_embeddings") * arch["hidden_size"])
        total, active = total + table, active + table
        note += " Learned position embeddings counted."
    return total, active, note


def llm_from_hf_config(path: str | Path, field: str = "model.config_json") -> LlmSpec:
    """An LlmSpec for the Hugging Face config.json at `path`, parameters counted here.

    Raises ScenarioError on `field` when the file is missing, not JSON, lacks a key, or
    describes an inconsistent or unsupported architecture.
    """
    cfg = _Config(_gpt2_names(_text_config(_read_json(Path(path), field))), Path(path), field)
    try:
        arch = _architecture(cfg)
        total, active, notes = _counts(cfg, arch)
        key, name, hf_id = _names(cfg)
        return LlmSpec(
            key=key,
            name=name,
            hf_id=hf_id,
            max_position_embeddings=cfg.get_int("max_position_embeddings"),
            total_params=total,
            active_params=active,
            sources=[f"user config.json {path}"],
            date="unknown",
            notes=notes,
            **arch,
        )
    except ValidationError as exc:
        location, reason = first_error(exc)
        raise cfg.fail(f"{location or 'config'}: {reason}") from None
