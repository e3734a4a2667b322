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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlsim.catalog.lookup import build_index, resolve
from rlsim.catalog.provenance import DateStr, Sources
from rlsim.inputs import load_shipped_yaml


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


class LinearAttentionSpec(BaseModel):
    """Hybrid linear attention with Gated DeltaNet layers (Qwen3-Next, Qwen3.5).

    Every `full_attention_interval`-th layer is standard (gated) attention with a per-token KV
    cache; the others are Gated DeltaNet layers, which keep a fixed-size recurrent state per
    sequence instead: num_value_heads x key_head_dim x value_head_dim, plus a causal-conv1d state
    of (conv_kernel_size - 1) x (2 x key width + value width). Field names follow the Hugging Face
    config (linear_num_key_heads, linear_key_head_dim, linear_conv_kernel_dim, ...).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    full_attention_interval: int = Field(
        gt=1,
        description="Every n-th layer (layer i with (i + 1) % n == 0) is full attention, the rest Gated DeltaNet "
        "(HF full_attention_interval, or the period of layer_types).",
    )
    num_key_heads: int = Field(gt=0, description="Query/key heads of a Gated DeltaNet layer (linear_num_key_heads).")
    num_value_heads: int = Field(
        gt=0, description="Value heads of a Gated DeltaNet layer, one recurrent state each (linear_num_value_heads)."
    )
    key_head_dim: int = Field(gt=0, description="Query/key width per head (linear_key_head_dim).")
    value_head_dim: int = Field(gt=0, description="Value width per head (linear_value_head_dim).")
    conv_kernel_size: int = Field(
        gt=1, description="Causal depthwise conv1d kernel over q, k, v (linear_conv_kernel_dim)."
    )
    state_dtype_bytes: int = Field(
        ge=1,
        le=4,
        description="Bytes per element of the recurrent state vLLM caches (its mamba_ssm_cache_dtype: 4 where the "
        "config sets mamba_ssm_dtype float32, as Qwen3.5's, else the model dtype, 2).",
    )
    attention_output_gate: bool = Field(
        default=True,
        description="The full-attention layers' q_proj also emits a sigmoid output gate (twice the query width).",
    )

    @model_validator(mode="after")
    def _heads_group(self) -> LinearAttentionSpec:
        if self.num_value_heads % self.num_key_heads:
            raise ValueError("num_value_heads must be a multiple of num_key_heads")
        return self

    @property
    def key_width(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_width(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv1d: q, k and v concatenated."""
        return 2 * self.key_width + self.value_width

    @property
    def recurrent_state_elements(self) -> int:
        """Elements of one layer's recurrent state for one sequence (one dk x dv matrix per value head)."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim


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
    linear_attention: LinearAttentionSpec | None = Field(
        default=None, description="Gated DeltaNet layout of a hybrid model; None when every layer is full attention."
    )
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
        if self.linear_attention is not None and self.full_attention_layers == 0:
            raise ValueError("linear_attention.full_attention_interval leaves no full-attention layer")
        return self

    @property
    def full_attention_layers(self) -> int:
        """Layers with (softmax) attention and a per-token KV cache: all of them unless hybrid."""
        if self.linear_attention is None:
            return self.num_layers
        return self.num_layers // self.linear_attention.full_attention_interval

    @property
    def linear_attention_layers(self) -> int:
        """Gated DeltaNet layers (0 unless hybrid): a fixed-size state per sequence, no per-token cache."""
        return self.num_layers - self.full_attention_layers

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> float:
        """KV-cache bytes one token occupies across all its full-attention layers.

        Standard attention caches K and V for every KV head; MLA caches one latent of
        kv_lora_rank plus the shared rotary key of qk_rope_head_dim per layer. A hybrid model's
        Gated DeltaNet layers cache nothing per token (their state is per sequence).
        """
        layers = self.full_attention_layers
        if self.mla is not None:
            return float(layers * (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * dtype_bytes)
        return float(2 * layers * self.num_kv_heads * self.head_dim * dtype_bytes)

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
            linear_attention=self.linear_attention,
        )


def _attention_params(
    h: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool, qk_norm: bool, output_gate: bool = False
) -> int:
    """Q, K, V and output projections with GQA, plus optional biases, q/k norms and an output gate
    (Qwen3-Next's q_proj emits the gate beside the query: twice the query width)."""
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    params = h * q_width * (2 if output_gate else 1) + 2 * h * kv_width + q_width * h
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


def _gated_deltanet_params(h: int, gdn: LinearAttentionSpec) -> int:
    """One Gated DeltaNet layer, as Hugging Face's Qwen3NextGatedDeltaNet builds it.

    in_proj_qkvz (h -> 2 x key width + 2 x value width: q, k, v and the output gate z),
    in_proj_ba (h -> 2 x value heads: beta and the decay's a), the depthwise conv1d over q, k, v
    (no bias), dt_bias and A_log (one per value head), the gated RMSNorm (value_head_dim) and
    out_proj (value width -> h). Qwen3.5 splits the same projections into four tensors.
    """
    projections = h * (2 * gdn.key_width + 2 * gdn.value_width) + h * 2 * gdn.num_value_heads
    conv = gdn.conv_channels * gdn.conv_kernel_size
    per_head = 2 * gdn.num_value_heads
    return projections + conv + per_head + gdn.value_head_dim + gdn.value_width * h


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
    linear_attention: LinearAttentionSpec | None = None,
) -> ParamCount:
    """Total and per-token active parameters of a decoder-only transformer.

    The usual decoder-only recipe: GQA attention (+QKV bias, +q/k norm), SwiGLU
    MLP = 3*h*ffn, two RMSNorms per layer and a final one, input embedding, an LM head unless
    tied, and for MoE a router of h*E per MoE layer. A hybrid model's Gated DeltaNet layers
    (`_gated_deltanet_params`) replace the attention of all but every full_attention_interval-th
    layer, whose attention carries the output gate. Multi-token-prediction heads, and the
    one-output shared-expert gate of Qwen2-MoE-style layers (h per layer), are excluded.
    """
    h = hidden_size
    gate = linear_attention is not None and linear_attention.attention_output_gate
    if mla is not None:
        attention = _mla_params(h, num_attention_heads, mla)
    else:
        attention = _attention_params(h, num_attention_heads, num_kv_heads, head_dim, qkv_bias, qk_norm, gate)
    full_layers, mixers = num_layers, 0
    if linear_attention is not None:
        full_layers = num_layers // linear_attention.full_attention_interval
        mixers = (num_layers - full_layers) * _gated_deltanet_params(h, linear_attention)
    dense_mlp = 3 * h * intermediate_size
    total = active = full_layers * attention + mixers + num_layers * 2 * h
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
    specs = [LlmSpec.model_validate(entry) for entry in load_shipped_yaml(text)["models"]]
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
