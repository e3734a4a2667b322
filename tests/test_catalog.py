"""Catalog tests: provenance on every entry, reference numbers, lookups, parameter counts,
config.json parsing, user price files and the default-price rule."""

from __future__ import annotations

import json
import random
from datetime import date
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlsim.catalog import (
    GpuSpec,
    LlmSpec,
    MoeSpec,
    PriceRow,
    count_params,
    default_price,
    get_gpu,
    get_llm,
    is_stale,
    llm_from_hf_config,
    load_gpus,
    load_llms,
    load_prices,
)
from rlsim.catalog.lookup import build_index
from rlsim.errors import ScenarioError

GPU_KEYS = [
    "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gb200",
    "l40s", "a10g", "l4", "mi300x", "mi325x", "h20", "h800",
]  # fmt: skip
ARCH_FIELDS = {
    "num_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_kv_heads",
    "head_dim", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "qkv_bias",
    "qk_norm", "moe", "mla", "linear_attention",
}  # fmt: skip


def is_date_or_unknown(value: str) -> bool:
    if value == "unknown":
        return True
    date.fromisoformat(value)
    return True


# --- provenance on every entry ----------------------------------------------------------------


@pytest.mark.parametrize("spec", [*load_gpus().values(), *load_llms().values()], ids=lambda s: s.key)
def test_every_gpu_and_llm_has_sources_and_date(spec: GpuSpec | LlmSpec) -> None:
    assert spec.sources and all(s.strip() for s in spec.sources)
    assert is_date_or_unknown(spec.date)


def test_every_price_row_has_source_date_and_catalog_gpu() -> None:
    rows = load_prices()
    assert len(rows) > 50
    for row in rows:
        assert row.source.strip()
        assert is_date_or_unknown(row.observed)
        assert row.gpu in load_gpus()


@pytest.mark.parametrize("bad", ["2026-13-01", "20261129", "yesterday", ""])
def test_date_must_be_iso_or_unknown(bad: str) -> None:
    entry = load_gpus()["h100-sxm"].model_dump() | {"date": bad}
    with pytest.raises(ValidationError, match="ISO date"):
        GpuSpec.model_validate(entry)


def test_entries_are_frozen() -> None:
    with pytest.raises(ValidationError):
        get_gpu("h100-sxm").bf16_tflops = 1.0  # type: ignore[misc]


# --- GPUs ---------------------------------------------------------------------------------


def test_gpu_keys_are_exactly_the_simulators_names() -> None:
    assert list(load_gpus()) == GPU_KEYS


def test_h100_sxm_matches_reference() -> None:
    gpu = get_gpu("h100-sxm")
    assert (gpu.bf16_tflops, gpu.fp8_tflops, gpu.hbm_gb, gpu.hbm_tbps) == (989, 1979, 80, 3.35)
    assert (gpu.scaleup_gbps, gpu.pcie_gbps, gpu.internode_gbps_per_gpu) == (450, 63, 50)
    assert (gpu.gpus_per_node, gpu.tdp_w) == (8, 700)


def test_export_variants_differ_from_h100_where_expected() -> None:
    h100, h800, h20 = get_gpu("h100-sxm"), get_gpu("h800"), get_gpu("h20")
    assert (h800.bf16_tflops, h800.hbm_gb, h800.hbm_tbps) == (h100.bf16_tflops, 80, 3.35)
    assert h800.scaleup_gbps == 200  # NVLink 400 GB/s bidirectional
    assert (h20.bf16_tflops, h20.fp8_tflops, h20.hbm_gb, h20.hbm_tbps) == (148, 296, 96, 4.0)
    assert h20.scaleup_gbps == 450


def test_assumed_values_are_labelled() -> None:
    for key in ["l40s", "a10g", "l4", "h100-pcie", "h20", "h800", "mi325x"]:
        assert "ASSUMPTION" in get_gpu(key).notes, key


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        ("H100 SXM 80GB", "h100-sxm"),
        ("h100_sxm", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("NVIDIA H100 SXM5 80GB", "h100-sxm"),
        ("A100 SXM 40GB", "a100-40gb"),
        ("GB200 (Blackwell GPU 186GB)", "gb200"),
        ("mi300x 192gb", "mi300x"),
        ("H800 SXM", "h800"),
        ("  H200   141GB ", "h200"),
    ],
)
def test_gpu_aliases_resolve(spelling: str, key: str) -> None:
    assert get_gpu(spelling).key == key


def test_every_alias_and_name_resolves_to_its_own_gpu() -> None:
    for key, gpu in load_gpus().items():
        for spelling in [key, gpu.name, *gpu.aliases]:
            assert get_gpu(spelling).key == key


def test_unknown_gpu_names_field_and_suggests() -> None:
    with pytest.raises(ScenarioError) as info:
        get_gpu("h100-sxm4", field="pipeline.inference.gpu")
    assert info.value.field == "pipeline.inference.gpu"
    assert "unknown GPU 'h100-sxm4'" in info.value.reason
    assert "did you mean 'h100-sxm'" in info.value.reason
    assert "known: a100-40gb, a100-80gb" in info.value.reason


def test_alias_claimed_by_two_keys_is_a_catalog_error() -> None:
    with pytest.raises(ValueError, match="names both"):
        build_index({"a": ["x_y"], "b": ["X-Y"]}, "GPU")


# --- LLM architectures ----------------------------------------------------------------------


def test_all_reference_models_present() -> None:
    assert len(load_llms()) == 18
    for key in ["qwen2.5-7b", "qwen2.5-32b", "qwen3-30b-a3b", "llama-3.1-70b",
                "deepseek-r1-distill-qwen-7b", "deepseek-v3", "qwen3.5-35b-a3b", "qwen3-next-80b-a3b"]:  # fmt: skip
        assert key in load_llms()


@pytest.mark.parametrize("name", ["qwen2.5-7b", "Qwen2.5-7B", "qwen/qwen2.5-7b", "QWEN2.5_7B"])
def test_llm_lookup_by_key_name_or_hf_id(name: str) -> None:
    assert get_llm(name).key == "qwen2.5-7b"


def test_unknown_model_names_field_and_suggests() -> None:
    with pytest.raises(ScenarioError) as info:
        get_llm("qwen2.5-7")
    assert info.value.field == "model"
    assert "unknown model 'qwen2.5-7'" in info.value.reason
    assert "'qwen2.5-7b'" in info.value.reason and "known: " in info.value.reason


def test_kv_bytes_per_token_gqa() -> None:
    qwen = get_llm("qwen2.5-7b")
    assert qwen.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57344
    assert qwen.kv_bytes_per_token(dtype_bytes=1) == 28672


def test_kv_bytes_per_token_mla() -> None:
    dsv3 = get_llm("deepseek-v3")
    assert dsv3.mla is not None
    assert dsv3.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70272


def _close(value: float, expected: float, rel: float = 0.005) -> bool:
    return abs(value / expected - 1) <= rel


def test_count_params_qwen25_7b() -> None:
    counted = count_params(
        num_layers=28, hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
        num_kv_heads=4, head_dim=128, vocab_size=152064, tie_word_embeddings=False, qkv_bias=True,
    )  # fmt: skip
    assert _close(counted.total, 7.616e9) and counted.active == counted.total


def test_count_params_qwen3_30b_a3b() -> None:
    counted = count_params(
        num_layers=48, hidden_size=2048, intermediate_size=6144, num_attention_heads=32,
        num_kv_heads=4, head_dim=128, vocab_size=151936, tie_word_embeddings=False, qk_norm=True,
        moe=MoeSpec(num_experts=128, experts_per_token=8, expert_intermediate_size=768),
    )  # fmt: skip
    assert _close(counted.total, 30.532e9) and _close(counted.active, 3.353e9)


def test_count_params_llama31_8b() -> None:
    counted = count_params(
        num_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_kv_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
    )  # fmt: skip
    assert _close(counted.total, 8.030e9)


@pytest.mark.parametrize("spec", load_llms().values(), ids=lambda s: s.key)
def test_count_params_reproduces_every_catalog_count(spec: LlmSpec) -> None:
    counted = spec.counted_params()
    assert _close(counted.total, spec.total_params)
    assert _close(counted.active, spec.active_params)


def test_inconsistent_heads_rejected() -> None:
    entry = get_llm("qwen2.5-7b").model_dump() | {"num_kv_heads": 3}
    with pytest.raises(ValidationError, match="multiple of num_kv_heads"):
        LlmSpec.model_validate(entry)


# --- config.json -------------------------------------------------------------------------

QWEN25_7B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "_name_or_path": "Qwen/Qwen2.5-7B", "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 131072, "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 152064,
}  # fmt: skip
QWEN3_MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
    "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 2048, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "mlp_only_layers": [], "moe_intermediate_size": 768,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "tie_word_embeddings": False,
    "vocab_size": 151936,
}  # fmt: skip
DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
    "max_position_embeddings": 163840, "tie_word_embeddings": False, "attention_bias": False,
    "num_nextn_predict_layers": 1,
}  # fmt: skip

# Qwen3-Next-80B-A3B: the keys transformers' Qwen3NextConfig defaults to (huggingface/transformers@008e574)
QWEN3_NEXT_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": 151936,
    "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 262144,
    "tie_word_embeddings": False, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "decoder_sparse_step": 1, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "num_experts_per_tok": 10, "num_experts": 512, "mlp_only_layers": [], "full_attention_interval": 4,
}  # fmt: skip
# Qwen3.5-35B-A3B: a vision-language config whose text_config is the language model (verl@1dda039's
# tests/utils/test_flops_counter.py fields, with the transformers class's remaining defaults)
QWEN35_MOE_CONFIG = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
    "tie_word_embeddings": False, "vision_config": {"depth": 27, "hidden_size": 1152},
    "text_config": {
        "model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048,
        "num_hidden_layers": 40, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "max_position_embeddings": 262144, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8,
        "num_experts": 256, "mamba_ssm_dtype": "float32", "attn_output_gate": True,
        "layer_types": ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(40)],
    },
}  # fmt: skip


def write_config(tmp_path, data: dict | str, folder: str = "my-model") -> Path:
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize(
    ("config", "catalog_key"),
    [
        (QWEN25_7B_CONFIG, "qwen2.5-7b"),
        (QWEN3_MOE_CONFIG, "qwen3-30b-a3b"),
        (DEEPSEEK_V3_CONFIG, "deepseek-v3"),
        (QWEN3_NEXT_CONFIG, "qwen3-next-80b-a3b"),
        (QWEN35_MOE_CONFIG, "qwen3.5-35b-a3b"),
    ],
)
def test_hf_config_matches_catalog_entry(tmp_path: Path, config: dict, catalog_key: str) -> None:
    spec = llm_from_hf_config(write_config(tmp_path, config))
    catalog = get_llm(catalog_key)
    assert spec.model_dump(include=ARCH_FIELDS) == catalog.model_dump(include=ARCH_FIELDS)
    assert _close(spec.total_params, catalog.total_params)
    assert _close(spec.active_params, catalog.active_params)
    assert spec.kv_bytes_per_token() == catalog.kv_bytes_per_token()
    assert spec.sources and spec.date == "unknown"


def test_hf_config_names_from_name_or_path_or_folder(tmp_path: Path) -> None:
    spec = llm_from_hf_config(write_config(tmp_path, QWEN25_7B_CONFIG))
    assert (spec.key, spec.name, spec.hf_id) == ("qwen2.5-7b", "Qwen2.5-7B", "Qwen/Qwen2.5-7B")
    spec = llm_from_hf_config(write_config(tmp_path, QWEN3_MOE_CONFIG, folder="My_MoE"))
    assert (spec.key, spec.name, spec.hf_id) == ("my-moe", "My_MoE", None)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ({k: v for k, v in QWEN25_7B_CONFIG.items() if k != "hidden_size"}, "lacks 'hidden_size'"),
        (QWEN25_7B_CONFIG | {"num_hidden_layers": "28"}, "'num_hidden_layers' must be an integer"),
        (QWEN25_7B_CONFIG | {"num_key_value_heads": 3}, "multiple of num_kv_heads"),
        (QWEN3_MOE_CONFIG | {"decoder_sparse_step": 2}, "interleaved dense/MoE layers"),
        (QWEN25_7B_CONFIG | {"tie_word_embeddings": "no"}, "must be true or false"),
        (QWEN3_NEXT_CONFIG | {"shared_expert_intermediate_size": 1024}, "shared experts of another width"),
        (QWEN3_NEXT_CONFIG | {"layer_types": ["full_attention", "linear_attention"] * 24}, "every n-th layer"),
        (QWEN3_NEXT_CONFIG | {"layer_types": ["linear_attention"] * 3}, "must list 48 layer types"),
    ],
)
def test_hf_config_errors_name_field_and_reason(tmp_path: Path, content: dict | str | None, reason: str) -> None:
    missing = tmp_path / "missing" / "config.json"
    path = missing if content is None else write_config(tmp_path, content)
    with pytest.raises(ScenarioError) as info:
        llm_from_hf_config(path, field="model.config_json")
    assert info.value.field == "model.config_json"
    assert reason in info.value.reason
    assert "\n" not in str(info.value)


# --- prices ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "a100-80gb", "b200"])
def test_on_demand_prices_exist_for_main_gpus(gpu: str) -> None:
    assert any(r.gpu == gpu and r.pricing == "on_demand" for r in load_prices())


def test_default_price_builtin_is_latest_then_cheapest() -> None:
    row = default_price("h100-sxm")
    # Three on-demand H100 SXM rows share the latest date, 2026-11-09: AWS 6.88, Azure 12.29,
    # RunPod 3.99; the cheapest wins.
    assert (row.observed, row.provider, row.usd_per_gpu_hour) == ("2026-11-09", "RunPod", 3.99)
    assert default_price("H100 SXM 80GB") == row


def test_default_price_without_rows_is_a_scenario_error() -> None:
    with pytest.raises(ScenarioError, match="no on-demand price for GPU 'h20'"):
        default_price("h20")


def _row(provider: str, price: float, observed: str, pricing: str = "on_demand") -> PriceRow:
    return PriceRow(
        provider=provider, product="x", gpu="h100-sxm", pricing=pricing,  # type: ignore[arg-type]
        usd_per_gpu_hour=price, observed=observed, source="test",
    )  # fmt: skip


def test_default_price_rule_is_deterministic() -> None:
    rows = [
        _row("Zeta", 1.0, "unknown"),
        _row("Beta", 3.0, "2026-05-01"),
        _row("Alpha", 3.0, "2026-05-01"),
        _row("Gamma", 4.0, "2026-05-01"),
        _row("Cheap", 0.5, "2026-04-30"),
        _row("Spot", 0.1, "2026-06-01", pricing="spot"),
    ]
    winners = set()
    for seed in range(20):
        random.Random(seed).shuffle(rows)
        winners.add(default_price("h100-sxm", rows).provider)
    assert winners == {"Alpha"}  # latest date, then lowest price, then provider name
    assert default_price("h100-sxm", [_row("Zeta", 1.0, "unknown")]).provider == "Zeta"


def test_user_price_file_overrides_and_adds(tmp_path: Path) -> None:
    builtin = load_prices()
    same_key = [r for r in builtin if (r.provider, r.product, r.gpu) == ("RunPod", "H100 SXM Secure", "h100-sxm")]
    assert len(same_key) == 1  # 3.99 on 2026-11-09 (it superseded 3.49 on 2026-09-25)
    path = tmp_path / "prices.yaml"
    path.write_text(
        "- {provider: RunPod, product: H100 SXM Secure, gpu: H100 SXM 80GB, pricing: on_demand,\n"
        "   usd_per_gpu_hour: 2.5, observed: 2026-11-20, source: my quote}\n"
        "- {provider: MyCloud, product: h20x8, gpu: NVIDIA H20, gpus_per_instance: 8,\n"
        "   pricing: committed, region: cn-east, usd_per_gpu_hour: 1.1, observed: '2026-11-01',\n"
        "   source: my contract}\n"
    )
    rows = load_prices(path)
    assert len(rows) == len(builtin) - 1 + 2
    mine = [r for r in rows if r.provider == "RunPod" and r.product == "H100 SXM Secure"]
    assert [(r.usd_per_gpu_hour, r.gpu, r.observed) for r in mine] == [(2.5, "h100-sxm", "2026-11-20")]
    assert any(r.gpu == "h20" and r.pricing == "committed" for r in rows)
    assert default_price("h100-sxm", rows).usd_per_gpu_hour == 2.5
    assert load_prices() == builtin  # the built-in table is untouched


def price_yaml(**fields: str) -> str:
    row = dict(provider="A", product="p", gpu="h100", pricing="spot", usd_per_gpu_hour="1",
               observed="unknown", source="s") | fields  # fmt: skip
    return "- {" + ", ".join(f"{k}: {v}" for k, v in row.items()) + "}"


@pytest.mark.parametrize(
    ("content", "field", "reason"),
    [
        (price_yaml(gpu="h999"), "price_file[0].gpu", "unknown GPU 'h999'"),
        (price_yaml(pricing="reserved"), "price_file[0].pricing", "on_demand"),
        (price_yaml(observed="soon"), "price_file[0].observed", "ISO date"),
        (price_yaml(usd_per_gpu_hour="-2"), "price_file[0].usd_per_gpu_hour", "greater than 0"),
        ("provider: A", "price_file", "must be a YAML list"),
        ("- [unclosed", "price_file", "not valid YAML"),
    ],
)
def test_user_price_file_errors(tmp_path: Path, content: str, field: str, reason: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(content)
    with pytest.raises(ScenarioError) as info:
        load_prices(path)
    assert info.value.field == field
    assert reason in info.value.reason


def test_missing_user_price_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="does not exist"):
        load_prices(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("observed", "stale"),
    [("2026-11-29", False), ("2025-11-29", False), ("2025-11-28", True), ("unknown", True)],
)
def test_is_stale(observed: str, stale: bool) -> None:
    assert is_stale(_row("A", 1.0, observed), today=date(2026, 11, 29)) is stale


def test_catalog_keeps_one_row_per_offer_the_latest():
    """AWS p5 on-demand us-east-1 and Vast.ai's H100 median were each listed twice."""
    from rlsim.catalog.prices import _builtin_prices

    raw = _builtin_prices()
    assert len({r.key for r in raw}) == len(raw)  # the file itself holds no superseded row
    key = ("AWS", "p5.48xlarge", "on_demand", "us-east-1")
    p5 = [r for r in raw if (r.provider, r.product, r.pricing, r.region) == key]
    assert [(r.usd_per_gpu_hour, r.observed) for r in p5] == [(6.88, "2026-11-09")]
    vast = [r for r in raw if r.provider == "Vast.ai" and r.gpu == "h100-sxm"]
    assert [(r.usd_per_gpu_hour, r.observed) for r in vast] == [(2.4024, "2026-10-19")]
    assert all(r.gpus_per_instance for r in raw)  # every built-in row says how many GPUs it rents


def test_latest_rows_keeps_the_latest_observation_per_key():
    from rlsim.catalog.prices import latest_rows

    old, new, undated = _row("A", 2.0, "2025-01-01"), _row("A", 3.0, "2026-01-01"), _row("A", 1.0, "unknown")
    other = _row("B", 1.5, "2024-01-01")
    assert latest_rows([old, other, new, undated]) == [new, other]
    assert latest_rows([undated]) == [undated]


def test_rows_price_only_clusters_their_instances_build():
    from rlsim.catalog.prices import assembles
    from rlsim.metrics.cost import cheapest_row

    rows = load_prices()
    one = next(r for r in rows if (r.provider, r.product) == ("Lambda", "1x H100 SXM"))
    eight = next(r for r in rows if (r.provider, r.product) == ("Lambda", "8x NVIDIA H100 SXM"))
    assert assembles(one, 1) and not assembles(one, 8) and assembles(eight, 8) and not assembles(eight, 4)
    assert cheapest_row(rows, "h100-sxm", gpus_per_node=8).gpus_per_instance == 8
    any_size, eight_gpu = cheapest_row(rows, "h100-sxm"), cheapest_row(rows, "h100-sxm", gpus_per_node=8)
    assert any_size.usd_per_gpu_hour < eight_gpu.usd_per_gpu_hour  # a 1-GPU row is cheaper
    assert default_price("h100-sxm", gpus_per_node=8).gpus_per_instance == 8
    with pytest.raises(ScenarioError, match="in instances of 4 GPUs"):
        default_price("h100-sxm", gpus_per_node=4)


def test_capacity_blocks_are_not_committed_use():
    rows = load_prices()
    blocks = [r for r in rows if "capacityblocks" in r.source]
    assert blocks and all(r.pricing == "capacity_block" for r in blocks)
    assert all(r.source.startswith("https://aws.amazon.com/ec2/capacityblocks/pricing/") for r in blocks)


def test_user_price_file_in_the_catalogs_own_format(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(
        "prices:\n- {provider: MyCloud, product: h100x8, gpu: h100-sxm, gpus_per_instance: 8,\n"
        "   pricing: capacity_block, usd_per_gpu_hour: 1.9, observed: '2026-11-01', source: my quote}\n"
    )
    rows = load_prices(path)
    assert any(r.provider == "MyCloud" and r.pricing == "capacity_block" for r in rows)
