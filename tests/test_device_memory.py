"""Device memory as CUDA reports it: the catalog's visible_memory, Profile.memory_gib, and their effect.

vLLM multiplies gpu_memory_utilization by torch.cuda.mem_get_info()'s total; an H100 SXM reports
81106 MiB (85.05e9 bytes) there, 6.3% more than its nominal "80GB" read as 80e9 bytes. These tests
pin the catalog figures, the profile's units (and old files' memory_gb), and the room each sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsim.calibration.profile import GIB_BYTES, Profile, datasheet_profile, load_profile, save_profile
from rlsim.catalog import get_llm, load_gpus
from rlsim.errors import ScenarioError
from rlsim.models import footprint, memory
from rlsim.models.kv_cache import ACTIVATION_RESERVE_GB_PER_GPU, kv_capacity_tokens
from rlsim.placement import resolve
from tests.small_scenarios import make

MIB = 1 << 20
Q7 = get_llm("qwen2.5-7b")


@pytest.mark.parametrize("gpu", load_gpus().values(), ids=lambda g: g.key)
def test_visible_memory_is_a_plausible_reading_with_its_source(gpu) -> None:
    vm = gpu.visible_memory
    nominal_mib = gpu.hbm_gb * 1e9 / MIB
    if vm.basis == "nominal":
        assert vm.total_mib == pytest.approx(nominal_mib, abs=0.01)
        assert vm.source.startswith("nominal")
    else:
        # a reading in the wrong unit (GB for GiB, MB for MiB) lands far outside this band
        assert 0.95 < vm.total_mib / nominal_mib < 1.10
        assert "github" in vm.source and ("@" in vm.source or "https://" in vm.source)


def test_h100_sxm_reading_is_the_deviceQuery_total() -> None:
    vm = load_gpus()["h100-sxm"].visible_memory
    assert vm.basis == "runtime" and vm.total_bytes == pytest.approx(85045477376, abs=MIB / 100)
    assert datasheet_profile("h100-sxm").memory_bytes == pytest.approx(85045477376, abs=MIB / 100)


def test_datasheet_profile_memory_is_the_catalog_reading_in_gib() -> None:
    for key, gpu in load_gpus().items():
        assert datasheet_profile(key).memory_gib == pytest.approx(gpu.visible_memory.total_mib / 1024, rel=1e-12)


def test_h100_engine_kv_room_by_hand() -> None:
    """TP1 at fraction 0.9: (81105.69 MiB x 0.9 - reserve - weights) / KV bytes per token."""
    h100 = datasheet_profile("h100-sxm")
    weights = footprint.weight_bytes(Q7)
    budget = 81105.69 * MIB * 0.9 - ACTIVATION_RESERVE_GB_PER_GPU * 1e9 - weights
    assert kv_capacity_tokens(Q7, h100, 1, 0.9) == int(budget // Q7.kv_bytes_per_token())
    nominal = h100.model_copy(update={"memory_gib": 80e9 / GIB_BYTES})
    old_budget = 80e9 * 0.9 - ACTIVATION_RESERVE_GB_PER_GPU * 1e9 - weights
    assert kv_capacity_tokens(Q7, nominal, 1, 0.9) == int(old_budget // Q7.kv_bytes_per_token())
    # the extra 5.05e9 x 0.9 bytes are all KV room: +8.2% tokens for a 7B model on one H100
    gained = kv_capacity_tokens(Q7, h100, 1, 0.9) - kv_capacity_tokens(Q7, nominal, 1, 0.9)
    assert gained == pytest.approx((85045477376 - 80e9) * 0.9 / Q7.kv_bytes_per_token(), abs=2)


def test_sglang_share_excludes_the_reserve_but_uses_the_same_total() -> None:
    h200 = datasheet_profile("h200")
    budget = 143771 * MIB * 0.85 - footprint.weight_bytes(Q7)
    assert kv_capacity_tokens(Q7, h200, 1, 0.85, reserve_in_fraction=False) == int(budget // Q7.kv_bytes_per_token())


def _micro_batch_tokens_needing(per_gpu_bytes: float) -> int:
    """Micro-batch tokens at which Qwen2.5-7B on 2 training GPUs (TP1, recompute) needs these bytes."""
    states = memory.train_bytes_per_gpu(Q7, 2, 1, 0, True, Q7.total_params)
    per_token = memory.train_bytes_per_gpu(Q7, 2, 1, 1, True, Q7.total_params) - states
    return int((per_gpu_bytes - states) / per_token)


def test_training_fits_in_the_memory_cuda_reports() -> None:
    """A micro-batch needing 82.5e9 bytes per GPU fits an H100 (85.05e9 to CUDA), not 80e9 bytes."""
    tokens = _micro_batch_tokens_needing(82.5e9)
    assert 82e9 < memory.train_bytes_per_gpu(Q7, 2, 1, tokens, True, Q7.total_params) < 83e9
    scenario = make({"model": "qwen2.5-7b", "pipeline": {"training": {"gpus": 2, "micro_batch_tokens": tokens}}})
    assert resolve(scenario).profile.memory_bytes == pytest.approx(85045477376, abs=MIB / 100)


def test_training_past_the_reported_memory_names_the_field_in_gib(tmp_path: Path) -> None:
    path = tmp_path / "nominal.json"
    save_profile(datasheet_profile("h100-sxm").model_copy(update={"memory_gib": 80e9 / GIB_BYTES}), path)
    tokens = _micro_batch_tokens_needing(82.5e9)
    training = {"gpus": 2, "micro_batch_tokens": tokens}
    scenario = make({"model": "qwen2.5-7b", "profile": str(path), "pipeline": {"training": training}})
    with pytest.raises(ScenarioError) as err:
        resolve(scenario)
    assert err.value.field == "pipeline.training.gpus"
    assert "77 GiB per GPU" in err.value.reason and "a GPU has 75 GiB" in err.value.reason


def _saved(profile: Profile, tmp_path: Path, edit) -> Path:
    raw = profile.model_dump(mode="json")
    edit(raw)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    return path


def test_profile_saved_with_memory_gb_loads_as_the_same_bytes(tmp_path: Path) -> None:
    def to_old(raw: dict) -> None:
        raw["memory_gb"] = 80.0
        del raw["memory_gib"]

    old = load_profile(_saved(datasheet_profile("h100-sxm"), tmp_path, to_old))
    assert old.memory_bytes == pytest.approx(80e9, rel=1e-12) and old.memory_gb == pytest.approx(80.0)
    assert "memory_gb" not in old.model_dump() and old.model_dump()["memory_gib"] == pytest.approx(74.505806)
    # a profile written before the catalog had visible_memory sizes KV room as it did then
    budget = 80e9 * 0.9 - ACTIVATION_RESERVE_GB_PER_GPU * 1e9 - footprint.weight_bytes(Q7)
    assert kv_capacity_tokens(Q7, old, 1, 0.9) == int(budget // Q7.kv_bytes_per_token())


def test_profile_with_both_memory_fields_is_one_clear_error(tmp_path: Path) -> None:
    path = _saved(datasheet_profile("h100-sxm"), tmp_path, lambda raw: raw.update(memory_gb=80.0))
    with pytest.raises(ScenarioError) as err:
        load_profile(path, field="profile")
    assert err.value.field == "profile" and "memory_gb" in err.value.reason


def test_profile_with_a_non_numeric_memory_gb_names_the_field(tmp_path: Path) -> None:
    def to_bad(raw: dict) -> None:
        raw["memory_gb"] = "eighty"
        del raw["memory_gib"]

    with pytest.raises(ScenarioError) as err:
        load_profile(_saved(datasheet_profile("h100-sxm"), tmp_path, to_bad))
    assert "memory_gib" in err.value.reason


def test_cpu_device_memory_is_half_the_ram_in_gib() -> None:
    torch = pytest.importorskip("torch")
    import os

    from rlsim.calibration.run import CPU_MEMORY_SHARE, device_facts

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    facts = device_facts(torch.device("cpu"))
    assert facts.memory_gib == pytest.approx(CPU_MEMORY_SHARE * ram / GIB_BYTES, abs=0.05)
