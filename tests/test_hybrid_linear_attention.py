"""Hybrid linear-attention models (Gated DeltaNet layers) against hand-computed values.

Each test pins one effect of `LlmSpec.linear_attention`: parameters, the per-token KV cache of the
full-attention layers only, the per-sequence state and the room it takes from the KV pool, a
decode iteration's state term without a context term, and FLOPs linear in the length.
"""

from __future__ import annotations

import pytest

from rlsim.calibration.profile import datasheet_profile
from rlsim.catalog import get_llm
from rlsim.catalog.llms import LinearAttentionSpec, LlmSpec, count_params
from rlsim.errors import ScenarioError
from rlsim.models import footprint, weight_sync
from rlsim.models.decode import iteration_cost
from rlsim.models.kv_cache import kv_capacity_tokens
from rlsim.placement import resolve
from tests.small_scenarios import make

H100 = datasheet_profile("h100-sxm")
Q35 = get_llm("qwen3.5-35b-a3b")
NEXT = get_llm("qwen3-next-80b-a3b")
GDN_35 = LinearAttentionSpec(
    full_attention_interval=4, num_key_heads=16, num_value_heads=32, key_head_dim=128, value_head_dim=128,
    conv_kernel_size=4, state_dtype_bytes=4,
)  # fmt: skip


def _all_attention(llm: LlmSpec) -> LlmSpec:
    """The same model with full attention in every layer (the twin a hybrid is compared with)."""
    return llm.model_copy(update={"linear_attention": None})


# --- catalog: layers and parameters ---------------------------------------------------------


def test_layer_pattern_every_fourth_full() -> None:
    assert (Q35.full_attention_layers, Q35.linear_attention_layers) == (10, 30)
    assert (NEXT.full_attention_layers, NEXT.linear_attention_layers) == (12, 36)
    dense = get_llm("qwen3-30b-a3b")
    assert (dense.full_attention_layers, dense.linear_attention_layers) == (48, 0)


def test_gated_deltanet_layer_params_by_hand() -> None:
    """One Qwen3.5 GDN layer: in_proj_qkvz + in_proj_ba + conv1d + dt_bias/A_log + norm + out_proj."""
    h = 2048
    qkvz = h * (2 * 16 * 128 + 2 * 32 * 128)  # 25,165,824
    ba = h * 2 * 32  # 131,072
    conv = (2 * 16 * 128 + 32 * 128) * 4  # 32,768, depthwise, no bias
    by_hand = qkvz + ba + conv + 2 * 32 + 128 + 32 * 128 * h
    assert by_hand == 33_718_464
    args = dict(
        hidden_size=h, intermediate_size=512, num_attention_heads=16, num_kv_heads=2, head_dim=256,
        vocab_size=1000, tie_word_embeddings=True, qk_norm=True,
    )  # fmt: skip
    # 8 layers: every 4th full is 2 full + 6 GDN, every 8th 1 full + 7 GDN; one layer swaps its mixer
    four = count_params(num_layers=8, linear_attention=GDN_35, **args)
    every_8th = GDN_35.model_copy(update={"full_attention_interval": 8})
    eight = count_params(num_layers=8, linear_attention=every_8th, **args)
    gated_attention = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256
    assert eight.total - four.total == by_hand - gated_attention


def test_published_totals() -> None:
    """Qwen3-Next-80B-A3B: 80B total (0.4% off); Qwen3.5-35B-A3B's language model 34.66B of the
    published 35B, which also counts the vision tower (~0.4B)."""
    assert abs(NEXT.counted_params().total / 80e9 - 1) < 0.005
    assert abs(Q35.counted_params().total / 35e9 - 1) < 0.015
    # the ~3B active excludes the embeddings: 3.25B and 2.44B without them
    next_embed = 2 * NEXT.vocab_size * NEXT.hidden_size
    assert 3.0e9 < NEXT.counted_params().active - next_embed < 3.5e9


# --- KV cache and the per-sequence state ----------------------------------------------------


def test_kv_per_token_is_the_full_attention_layers_only() -> None:
    assert Q35.kv_bytes_per_token() == 2 * 10 * 2 * 256 * 2 == 20480
    assert Q35.kv_bytes_per_token() * 4 == _all_attention(Q35).kv_bytes_per_token()
    assert footprint.engine_kv_bytes_per_token(Q35, 4) == 20480 * 2  # 2 KV heads replicated at TP4


def test_state_bytes_per_sequence_by_hand() -> None:
    """vLLM's page per GDN layer per GPU at TP4, padded to 16-token attention blocks of one layer."""
    conv = (2 * 16 * 128 + 32 * 128) // 4 * 3 * 2  # 12,288: (conv_dim / tp, kernel - 1), bf16
    recurrent = 32 // 4 * 128 * 128 * 4  # 524,288: (heads / tp, dv, dk), fp32
    token_page = 1 * 256 * 2 * 2  # one KV head per GPU, K and V, bf16, one layer
    block = 16 * -(-(conv + recurrent) // (16 * token_page))  # 528 tokens
    assert block == 528
    assert footprint.linear_state_bytes_per_sequence(Q35, 4) == block * token_page * 4 * 30 == 64_880_640
    assert footprint.linear_state_bytes_per_sequence(_all_attention(Q35), 4) == 0.0


def test_state_takes_room_from_the_kv_pool_per_sequence() -> None:
    without = kv_capacity_tokens(Q35, H100, 4, 0.7)
    with_256 = kv_capacity_tokens(Q35, H100, 4, 0.7, state_sequences=256)
    taken = 256 * footprint.linear_state_bytes_per_sequence(Q35, 4) / footprint.engine_kv_bytes_per_token(Q35, 4)
    assert without - with_256 == pytest.approx(taken, abs=1)
    dense = get_llm("qwen3-30b-a3b")
    assert kv_capacity_tokens(dense, H100, 4, 0.7, state_sequences=256) == kv_capacity_tokens(dense, H100, 4, 0.7)


def test_engine_capacity_reserves_max_batch_states() -> None:
    """A scenario's engine sets aside max_batch sequences' states: doubling max_batch costs 128 more."""
    over = {
        "model": "qwen3.5-35b-a3b",
        "cluster": {"nodes": 2, "gpus_per_node": 8},
        "pipeline": {
            "inference": {"gpus": 4, "tp": 4, "max_batch": 128},
            "training": {"gpus": 12, "activation_recompute": True},
        },
    }
    small = resolve(make(over)).kv_capacity_tokens
    over["pipeline"]["inference"]["max_batch"] = 256
    large = resolve(make(over)).kv_capacity_tokens
    per_sequence = footprint.linear_state_bytes_per_sequence(Q35, 4) / footprint.engine_kv_bytes_per_token(Q35, 4)
    assert small - large == pytest.approx(128 * per_sequence, abs=1)


def test_no_room_error_names_the_states() -> None:
    """An engine whose share leaves no room beside max_batch states says so, naming one field."""
    over = {
        "model": "qwen3.5-35b-a3b",
        "cluster": {"nodes": 2, "gpus_per_node": 8},
        "pipeline": {
            "inference": {"gpus": 4, "tp": 4, "max_batch": 256, "kv_memory_fraction": 0.24},
            "training": {"gpus": 12, "activation_recompute": True},
        },
    }
    with pytest.raises(ScenarioError) as info:
        resolve(make(over))
    assert info.value.field == "pipeline.inference.kv_memory_fraction"
    assert "max_batch=256 sequences' Gated DeltaNet states (16.6 GB per engine)" in info.value.reason


# --- decode, prefill and training FLOPs -----------------------------------------------------


def test_decode_state_term_has_no_context_term() -> None:
    """The K slope is the full-attention layers' KV read alone; the GDN states add b x (read + write)."""
    tp, batch = 4, 32
    hybrid = iteration_cost(Q35, H100, tp, batch)
    attn_bw = H100.attention_gbps * 1e9 * tp
    assert hybrid.mem_per_token_s == pytest.approx(footprint.engine_kv_bytes_per_token(Q35, tp) / attn_bw, rel=1e-12)
    twin = iteration_cost(_all_attention(Q35), H100, tp, batch)
    assert hybrid.mem_per_token_s == pytest.approx(twin.mem_per_token_s / 4, rel=1e-12)
    rw = 2 * 30 * ((2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4)  # 128,778,240 bytes per sequence
    assert footprint.linear_state_rw_bytes_per_sequence(Q35) == rw
    double = iteration_cost(Q35, H100, tp, 2 * batch)
    # the state term doubles with the batch; measure it against a model whose GDN layers hold no state
    no_state = _all_attention(Q35)  # the same parameters; its GEMM terms are the hybrid's
    gemm_only = iteration_cost(no_state, H100, tp, batch)
    assert hybrid.mem0_s - gemm_only.mem0_s == pytest.approx(batch * rw / attn_bw, rel=1e-9)
    assert double.mem0_s - iteration_cost(no_state, H100, tp, 2 * batch).mem0_s == pytest.approx(
        2 * batch * rw / attn_bw, rel=1e-9
    )
    # at fixed batch, a longer context adds only the full-attention layers' reads
    assert hybrid.at(200_000) - hybrid.at(100_000) == pytest.approx(100_000 * hybrid.mem_per_token_s, rel=1e-9)


def test_forward_flops_of_gdn_layers_are_linear_in_length() -> None:
    per_token = footprint.linear_attention_flops_per_token(Q35)
    assert per_token == 5 * 32 * 128 * 128 * 30  # verl: 15 x dk x dv x heads per layer, forward + backward
    assert footprint.attention_flops_per_cached_token(Q35) == 4 * 10 * 16 * 256
    # a 16K and a 32K sequence: the linear part doubles, the quadratic part quadruples
    linear_16k = footprint.forward_flops(Q35, 16384.0)
    assert footprint.forward_flops(Q35, 32768.0) == pytest.approx(2 * linear_16k, rel=1e-12)
    assert footprint.forward_flops(Q35, 0.0, 2.0) == 2 * footprint.forward_flops(Q35, 0.0, 1.0)
    twin = _all_attention(Q35)
    assert footprint.forward_flops(twin, 0.0, 1.0) == 4 * footprint.forward_flops(Q35, 0.0, 1.0)
    assert footprint.linear_attention_flops_per_token(twin) == 0.0


def test_lora_targets_attention_only_in_full_layers() -> None:
    rank = 8
    attention = footprint.lora_params(Q35, rank, ["q", "k", "v", "o"])
    q_out, kv_out = 16 * 256, 2 * 256
    per_layer = rank * ((2048 + q_out) + 2 * (2048 + kv_out) + (q_out + 2048))
    assert attention == 10 * per_layer
    assert footprint.lora_params(Q35, rank, ["gate"]) == 40 * rank * (2048 + 512)


def test_weight_sync_sends_the_gdn_tensors() -> None:
    twin = _all_attention(Q35)
    assert weight_sync.tensor_count(Q35) - weight_sync.tensor_count(twin) == 30 * (7 - 6)


def test_value_heads_must_group_key_heads() -> None:
    with pytest.raises(ValueError, match="multiple of num_key_heads"):
        GDN_35.model_validate(GDN_35.model_dump() | {"num_value_heads": 24, "num_key_heads": 16})
    with pytest.raises(ValueError, match="no full-attention layer"):
        LlmSpec.model_validate(Q35.model_dump() | {"num_layers": 3})
