"""LLM architecture catalog: the config.json facts a performance model needs, and parameter counts.

"Model" here means the LLM being trained, not a performance model (those live in `models/`) nor a
pydantic model. The data lives in `llms.yaml`, transcribed from Hugging Face `config.json` files
with sources; `count_params` is the single recipe that turns an architecture into total and active
parameter counts (absolute numbers, not billions), and `hf_config.llm_from_hf_config` uses it for
architectures that are not in the catalog. KV-cache sizes are bytes per token.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlsim.catalog.lookup import build_index, resolve
from rlsim.catalog.provenance import DateStr, Sources


class MoeSpec(BaseModel):
    """Mixture-of-experts layout: routed experts, top-k, shared experts, leading dense layers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_experts: int = Field(gt=0, description="Routed experts per MoE layer.")
    experts_per_token: int = Field(gt=0, description="Routed experts each token uses (top-k).")
    expert_intermediate_size: int = Field(gt=0, description="FFN width of one expert.")
    shared_experts: int = Field(default=0, ge=0, description="Always-on experts of the same width.")
    dense_layers: int = Field(
        default=0,
        ge=0,
        description="Leading layers with a dense FFN of intermediate_size (DeepSeek first_k_dense_replace).",
    )

    @model_validator(mode="after")
    def _top_k_fits(self) -> MoeSpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token must not exceed num_experts")
        return self


class MlaSpec(BaseModel):
    """DeepSeek multi-head latent attention: the KV cache stores one compressed latent per token."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kv_lora_rank: int = Field(gt=0, description="Width of the cached KV latent.")
    qk_rope_head_dim: int = Field(gt=0, description="Rotary part of q/k per head (cached once).")
    qk_nope_head_dim: int = Field(gt=0, description="Non-rotary part of q/k per head.")
    v_head_dim: int = Field(gt=0, description="Value width per head.")
    q_lora_rank: int | None = Field(
        gt=0, description="Width of the query latent; None when queries are projected directly."
    )


class ParamCount(NamedTuple):
    """Parameter counts, absolute (7.6e9, not 7.6)."""

    total: float
    active: float


class LlmSpec(BaseModel):
    """One LLM architecture as its config.json describes it, with parameter counts and sources."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(description="Catalog key, lowercase, e.g. 'qwen2.5-7b'.", pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str = Field(description="Display name, e.g. 'Qwen2.5-7B'.")
    hf_id: str | None = Field(description="Hugging Face repository id, if any.")
    num_layers: int = Field(gt=0, description="Transformer blocks (num_hidden_layers).")
    hidden_size: int = Field(gt=0, description="Residual stream width.")
    intermediate_size: int = Field(gt=0, description="Dense SwiGLU FFN width.")
    num_attention_heads: int = Field(gt=0, description="Query heads.")
    num_kv_heads: int = Field(gt=0, description="Key/value heads (GQA groups).")
    head_dim: int = Field(gt=0, description="Query/key width per head (qk_nope + qk_rope under MLA).")
    vocab_size: int = Field(gt=0, description="Embedding rows.")
    max_position_embeddings: int = Field(gt=0, description="Longest context the config allows, tokens.")
    tie_word_embeddings: bool = Field(description="LM head shares the input embedding matrix.")
    qkv_bias: bool = Field(default=False, description="q/k/v projections carry biases (Qwen2).")
    qk_norm: bool = Field(default=False, description="RMSNorm on q and k per head (Qwen3).")
    moe: MoeSpec | None = Field(default=None, description="MoE layout; None for dense models.")
    mla: MlaSpec | None = Field(default=None, description="MLA layout; None for standard attention.")
    total_params: float = Field(gt=0, description="All parameters, absolute count.")
    active_params: float = Field(gt=0, description="Parameters used per token, absolute count.")
    sources: Sources
    date: DateStr = Field(description="ISO date the facts were observed or retrieved, or 'unknown'.")
    notes: str = Field(default="", description="Disagreements between sources and caveats.")

    @model_validator(mode="after")
    def _consistent(self) -> LlmSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError("num_attention_heads must be a multiple of num_kv_heads")
        if self.moe is not None and self.moe.dense_layers > self.num_layers:
            raise ValueError("moe.dense_layers must not exceed num_layers")
        if self.active_params > self.total_params:
            raise ValueError("active_params must not exceed total_params")
        return self

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> float:
        """KV-cache bytes one token occupies across all layers.

        Standard attention caches K and V for every KV head; MLA caches one latent of
        kv_lora_rank plus the shared rotary key of qk_rope_head_dim per layer.
        """
        if self.mla is not None:
            return float(self.num_layers * (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * dtype_bytes)
        return float(2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes)

    def counted_params(self) -> ParamCount:
        """Parameter counts recomputed from the architecture fields by `count_params`."""
        return count_params(
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_attention_heads=self.num_attention_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            tie_word_embeddings=self.tie_word_embeddings,
            qkv_bias=self.qkv_bias,
            qk_norm=self.qk_norm,
            moe=self.moe,
            mla=self.mla,
        )


def _attention_params(h: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool, qk_norm: bool) -> int:
    """Q, K, V and output projections with GQA, plus optional biases and q/k norms."""
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    params = h * q_width + 2 * h * kv_width + q_width * h
    if qkv_bias:
        params += q_width + 2 * kv_width
    if qk_norm:
        params += 2 * head_dim
    return params


def _mla_params(h: int, heads: int, mla: MlaSpec) -> int:
    """DeepSeek MLA: low-rank query and KV projections with their norms, and the output."""
    qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank is None:
        q = h * heads * qk_dim
    else:
        q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * heads * qk_dim
    kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
    kv += mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + heads * mla.v_head_dim * h


def count_params(
    *,
    num_layers: int,
    hidden_size: int,
    intermediate_size: int,
    num_attention_heads: int,
    num_kv_heads: int,
    head_dim: int,
    vocab_size: int,
    tie_word_embeddings: bool,
    qkv_bias: bool = False,
    qk_norm: bool = False,
    moe: MoeSpec | None = None,
    mla: MlaSpec | None = None,
) -> ParamCount:
    """Total and per-token active parameters of a decoder-only transformer.

    The usual decoder-only recipe: GQA attention (+QKV bias, +q/k norm), SwiGLU
    MLP = 3*h*ffn, two RMSNorms per layer and a final one, input embedding, an LM head unless
    tied, and for MoE a router of h*E per MoE layer. Multi-token-prediction heads are excluded.
    """
    h = hidden_size
    if mla is not None:
        attention = _mla_params(h, num_attention_heads, mla)
    else:
        attention = _attention_params(h, num_attention_heads, num_kv_heads, head_dim, qkv_bias, qk_norm)
    per_layer_fixed = attention + 2 * h
    dense_mlp = 3 * h * intermediate_size
    total = active = num_layers * per_layer_fixed
    if moe is None:
        total += num_layers * dense_mlp
        active = total
    else:
        moe_layers = num_layers - moe.dense_layers
        expert = 3 * h * moe.expert_intermediate_size
        dense_part = moe.dense_layers * dense_mlp
        shared_and_router = moe.shared_experts * expert + h * moe.num_experts
        total += dense_part + moe_layers * (moe.num_experts * expert + shared_and_router)
        active += dense_part + moe_layers * (moe.experts_per_token * expert + shared_and_router)
    # Input embedding, LM head unless tied, final RMSNorm: all touched by every token.
    outer = vocab_size * h * (1 if tie_word_embeddings else 2) + h
    return ParamCount(total=float(total + outer), active=float(active + outer))


@functools.cache
def load_llms() -> dict[str, LlmSpec]:
    """All built-in LLM architectures keyed by catalog key, in file order (read once; shared)."""
    text = resources.files("rlsim.catalog").joinpath("llms.yaml").read_text(encoding="utf-8")
    specs = [LlmSpec.model_validate(entry) for entry in yaml.safe_load(text)["models"]]
    llms = {spec.key: spec for spec in specs}
    if len(llms) != len(specs):
        raise ValueError("llms.yaml: duplicate model key")
    return llms


@functools.cache
def _index() -> dict[str, str]:
    """Normalised spelling (key, name or hf_id) -> key; built once, checked for clashes."""
    spellings = {k: [m.name, *([m.hf_id] if m.hf_id else [])] for k, m in load_llms().items()}
    return build_index(spellings, "model")


def get_llm(name: str, field: str = "model") -> LlmSpec:
    """The catalog LLM called `name` (key, display name or hf_id; case-insensitive).

    Raises ScenarioError on `field` with the closest names when nothing matches.
    """
    key = resolve(name, _index(), list(load_llms()), field, "model")
    return load_llms()[key]
