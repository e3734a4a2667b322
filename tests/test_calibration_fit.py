"""Calibration without torch: fits on synthetic data, rows -> profile, profile errors, imports."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlsim.calibration import fit
from rlsim.calibration.assemble import DeviceFacts, measured_profile
from rlsim.calibration.profile import datasheet_profile, load_profile, resolve_profile, save_profile
from rlsim.errors import ScenarioError

NOISE = 0.01  # ±1% multiplicative noise, seeded: the fits must still land within 2%


def _noisy(y: np.ndarray, seed: int) -> np.ndarray:
    return y * (1.0 + NOISE * np.random.default_rng(seed).uniform(-1, 1, size=y.shape))


def _close(got: float, want: float, tol: float = 0.02) -> bool:
    return abs(got - want) <= tol * abs(want)


# ---- 3. fitting recovers known parameters -----------------------------------------------------


@pytest.mark.parametrize(("rate_max", "x_half"), [(0.8e15, 96.0), (2.3e11, 12.0), (1.0, 500.0)])
def test_saturating_fit_recovers_parameters(rate_max: float, x_half: float) -> None:
    x = np.geomspace(1, 8192, 14)
    f = fit.fit_saturating(x, _noisy(rate_max * x / (x + x_half), seed=1))
    assert _close(f.rate_max, rate_max) and _close(f.x_half, x_half)
    assert f.quality.r2 > 0.99 and f.quality.max_rel_residual < 2 * NOISE


@pytest.mark.parametrize(("latency_s", "gbps"), [(2e-5, 370.0), (6e-4, 0.9), (1e-6, 25.0)])
def test_latency_bandwidth_fit_recovers_parameters(latency_s: float, gbps: float) -> None:
    nbytes = np.geomspace(1e3, 1e9, 13)
    f = fit.fit_latency_bandwidth(nbytes, _noisy(latency_s + nbytes / (gbps * 1e9), seed=2))
    assert _close(f.latency_s, latency_s) and _close(f.bytes_per_s, gbps * 1e9)
    assert f.quality.max_rel_residual < 2 * NOISE


def test_bandwidth_fit_and_quality_of_a_perfect_line() -> None:
    nbytes = np.array([1e8, 2e8, 4e8])
    f = fit.fit_bandwidth(nbytes, nbytes / 18e9)
    assert f.bytes_per_s == pytest.approx(18e9) and f.latency_s == 0.0
    assert f.quality.r2 == pytest.approx(1.0) and f.quality.max_rel_residual == pytest.approx(0.0, abs=1e-12)


def test_fits_reject_unusable_input() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        fit.fit_saturating([1.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        fit.fit_latency_bandwidth([1.0, 0.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="no 'gemm'"):
        fit.fit_gemm([{"kernel": "stream"}])


def _synthetic_rows() -> list[dict]:
    """Rows of every kernel family generated from known parameters (see test below)."""
    rows: list[dict] = []
    for t in (1, 4, 16, 64, 256, 1024, 4096):
        for k, n in ((1024, 1536), (1024, 5632)):  # two layers, same rate: the pooled rate is exact
            flops = 2.0 * t * k * n
            rate = 200e9 * t / (t + 40.0)
            rows.append(
                {
                    "kernel": "gemm",
                    "tokens": t,
                    "flops": flops,
                    "seconds": flops / rate,
                    "tflops": rate / 1e12,
                    "dtype": "float32",
                }
            )
        flops = 6.0 * 1e7 * t
        rows.append(
            {
                "kernel": "train",
                "tokens": t,
                "flops": flops,
                "seconds": flops / (150e9 * t / (t + 300.0)),
            }
        )
    for b, n in ((1, 512), (4, 2048), (16, 2048), (64, 4096)):
        read = b * n * 2048.0
        rows.append(
            {
                "kernel": "attention",
                "read_bytes": read,
                "useful_bytes": read,
                "seconds": 3e-5 + read / 12e9,
                "kv_tokens": b * n,
                "kv_len_min": n,
                "kv_len_max": n,
                "batch": b,
            }
        )
    for nbytes in (2.5e8, 5e8):
        rows.append({"kernel": "stream", "bytes": 2 * nbytes, "seconds": 2 * nbytes / 18e9})
    rows += [{"kernel": "weight_read", "bytes": b, "seconds": b / 15e9} for b in (4e6, 2e7, 3e7)]
    for direction, gbps in (("h2d", 50.0), ("d2h", 25.0)):
        rows += [
            {
                "kernel": "copy",
                "direction": direction,
                "bytes": b,
                "bus_bytes": b,
                "seconds": 1e-5 + b / (gbps * 1e9),
            }
            for b in (1e6, 1e8, 1e9)
        ]
    rows += [
        {
            "kernel": "collective",
            "op": "all_reduce",
            "world": 8,
            "bytes": b,
            "bus_bytes": b,
            "seconds": 2e-5 + b / 370e9,
        }
        for b in (1e4, 1e6, 1e8, 1e9)
    ]
    rows.append(
        {
            "kernel": "launch",
            "seconds_per_launch": 4e-6,
            "kernels_per_iteration": 344,
            "layers": 28,
            "iteration_overhead_s": 4e-6 * 344,
        }
    )
    return rows


def test_measured_profile_from_synthetic_rows_recovers_every_field() -> None:
    facts = DeviceFacts(
        key="h100-sxm",
        name="test GPU",
        memory_gib=74.5,
        peak_tflops=0.5,
        peak_memory_gbps=3350.0,
        datasheet=datasheet_profile("h100-sxm"),
    )
    p = measured_profile(_synthetic_rows(), facts)
    expected = {
        "matmul_tflops": 0.2,
        "matmul_tokens_half": 40.0,
        "train_mfu": 0.15 / 0.5,
        "train_tokens_half": 300.0,
        "attention_gbps": 12.0,
        "memory_gbps": 15.0,
        "host_link_gbps": 2 / (1 / 50 + 1 / 25),
        "iteration_overhead_s": 4e-6 * 344,
    }
    for name, want in expected.items():
        assert _close(getattr(p, name), want), (name, getattr(p, name), want)
    assert _close(p.intra_node.busbw_gbps, 370.0) and _close(p.intra_node.latency_s, 2e-5)
    assert p.inter_node == facts.datasheet.inter_node and "datasheet figure kept" in p.notes
    assert p.source == "measured" and p.measured_range["gemm_tokens"] == [1.0, 4096.0]
    fits = {r["quantity"]: r for r in p.measurements if r["kernel"] == "fit"}
    assert fits["attention"]["params"]["latency_s"] == pytest.approx(3e-5, rel=0.02)
    assert all(r["r2"] > 0.999 for r in fits.values())


# ---- 4. unusable profile files are one-line ScenarioErrors --------------------------------------


@pytest.fixture
def h100_json(tmp_path):
    path = tmp_path / "h100.json"
    save_profile(datasheet_profile("h100-sxm"), path)
    return path


def _one_line_error(call, match: str) -> None:
    with pytest.raises(ScenarioError, match=match) as info:
        call()
    assert "\n" not in str(info.value) and info.value.field == "profile"


def test_corrupt_json_is_a_scenario_error(tmp_path) -> None:
    bad = tmp_path / "corrupt.json"
    bad.write_text("{ this is not json")
    _one_line_error(lambda: load_profile(bad), "not valid JSON")


def test_truncated_file_is_a_scenario_error(h100_json) -> None:
    text = h100_json.read_text()
    h100_json.write_text(text[: len(text) // 2])
    _one_line_error(lambda: load_profile(h100_json), "corrupt or truncated")


def test_wrong_schema_version_is_a_scenario_error(h100_json) -> None:
    raw = json.loads(h100_json.read_text())
    raw["schema_version"] = 99
    h100_json.write_text(json.dumps(raw))
    _one_line_error(lambda: resolve_profile(str(h100_json), "h100-sxm"), "schema_version 99")


def test_profile_for_another_gpu_is_a_scenario_error(h100_json) -> None:
    _one_line_error(lambda: resolve_profile(str(h100_json), "a100-80gb"), "for device 'h100-sxm'")


def test_cpu_profile_for_a_gpu_scenario_is_a_scenario_error(tmp_path) -> None:
    cpu = datasheet_profile("h100-sxm").model_copy(update={"device": "cpu", "source": "measured"})
    path = tmp_path / "cpu.json"
    save_profile(cpu, path)
    _one_line_error(lambda: resolve_profile(str(path), "h100-sxm"), "for device 'cpu'")


def test_a_saved_profile_round_trips(h100_json) -> None:
    assert load_profile(h100_json) == datasheet_profile("h100-sxm")
    assert resolve_profile(str(h100_json), "h100") == datasheet_profile("h100-sxm")


# ---- 5. the torch-free modules stay torch-free ---------------------------------------------------


def test_profile_and_fit_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import rlsim.calibration, rlsim.calibration.profile, rlsim.calibration.fit\n"
        "import rlsim.calibration.assemble, rlsim.calibration.run, rlsim.calibration.shapes\n"
        "rlsim.calibration.calibrate  # the lazy attribute resolves without torch too\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('torch'))\n"
        "assert not loaded, loaded\n"
    )
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=root)
    assert result.returncode == 0, result.stderr


def test_torch_gpu_names_map_to_catalog_keys() -> None:
    from rlsim.calibration.run import catalog_gpu

    assert catalog_gpu("NVIDIA H200").key == "h200"
    assert catalog_gpu("NVIDIA A100-SXM4-80GB").key == "a100-80gb"
    with pytest.raises(ScenarioError, match="gpus.yaml"):
        catalog_gpu("NVIDIA Imaginary 9000")


def test_sweeps_shrink_to_free_memory() -> None:
    from rlsim.calibration.sweeps import MB, SWEEPS, fit_to_memory

    big = SWEEPS[("cuda", False)]
    small = fit_to_memory(big, free=20_000 * MB)  # a 24 GB card with 20 GB free
    assert small.pool_bytes == 8000 * MB and max(small.stream_bytes) * 2 <= 8000 * MB
    assert max(small.copy_bytes) <= 4000 * MB and small.gemm_tokens == big.gemm_tokens
    assert fit_to_memory(big, free=10**12) == big


def test_catalog_models_give_the_sweep_shapes() -> None:
    from rlsim.calibration.shapes import QWEN25_7B_SHAPE, resolve_shape, shape_from_catalog

    assert shape_from_catalog("Qwen2.5-7B") == QWEN25_7B_SHAPE == resolve_shape(None, "cuda")
    assert shape_from_catalog("qwen3-30b-a3b").intermediate == 768  # one expert's FFN width
    assert resolve_shape(None, "cpu").hidden == 1024
    with pytest.raises(ScenarioError, match="model"):
        shape_from_catalog("gpt-17")


# ---- 5. the layer-size law of the GEMM half-saturation (matmul_tokens_half_params) --------------


def _size_rows(exponent: float, rate: float = 300e9, half_at: float = 90.0, at_params: float = 3e8) -> list[dict]:
    """GEMM rows of the small shape at TP 1, 2, 4, 8 from a known law: every GEMM of a size runs at
    rate x t / (t + half_at x (at_params / P)^exponent), P the size's layer parameters per GPU.
    With the synthetic weight reads (15 GB/s, 4 bytes a weight) the GEMM term binds at every row
    (its time over the reads' is (t + half) x 15e9 / (2 x 300e9) = (t + half) / 40 > 1)."""
    from rlsim.calibration.shapes import SMALL_SHAPE

    rows = []
    for tp in (1, 2, 4, 8):
        layers = SMALL_SHAPE.gemm_layers(tp)
        params = sum(k * n for name, (k, n) in layers.items() if name != "lm_head")
        half = half_at * (at_params / params) ** exponent
        for t in (1, 4, 16, 64, 256, 1024, 4096):
            for name, (k, n) in layers.items():
                flops = 2.0 * t * k * n
                kernel = "gemm" if tp == 1 else "gemm_size"
                r = rate * t / (t + half)
                rows.append(
                    {"kernel": kernel, "layer": name, "tp": tp, "tokens": t, "k": k, "n": n}
                    | {"flops": flops, "seconds": flops / r, "tflops": r / 1e12, "dtype": "float32"}
                )
    return rows


def _with_gemms(gemms: list[dict]) -> list[dict]:
    """The synthetic rows of every other kernel family, with these GEMM rows."""
    return [r for r in _synthetic_rows() if r["kernel"] != "gemm"] + gemms


def _facts() -> DeviceFacts:
    return DeviceFacts(key="h100-sxm", name="test GPU", memory_gib=74.5, datasheet=datasheet_profile("h100-sxm"))


def test_tp_shards_hold_a_tp_th_of_the_layer() -> None:
    """SMALL_SHAPE (hidden 1024, FFN 2816, 16 x 64 query and 4 x 64 KV heads, vocab 8192) at TP4:
    QKV 1024 -> 1536 / 4, output 1024 / 4 -> 1024, gate/up 1024 -> 5632 / 4, down 2816 / 4 -> 1024."""
    from rlsim.calibration.shapes import SMALL_SHAPE

    assert SMALL_SHAPE.gemm_layers(4) == {
        "qkv": (1024, 384),
        "attn_out": (256, 1024),
        "mlp_gate_up": (1024, 1408),
        "mlp_down": (704, 1024),
        "lm_head": (1024, 2048),
    }
    sizes = fit.gemm_sizes(_size_rows(0.5))
    assert sorted(sizes) == [1024 * 11008 / tp for tp in (8, 4, 2, 1)]  # 11.27M / tp


def test_the_size_fit_recovers_a_square_root_law() -> None:
    """Halves of 90 x sqrt(3e8 / P): 464 rows at TP1 (P 11.27M), 1312 at TP8. The TP1 fit gives
    464, so the law through it has its reference at the TP1 size, and at every size the profile's
    `decode.tokens_half` is the synthetic half."""
    from rlsim.models.decode import tokens_half

    rows = _size_rows(0.5)
    gemm = fit.fit_gemm(r for r in rows if r["kernel"] == "gemm")
    assert gemm.x_half == pytest.approx(90 * math.sqrt(3e8 / 11272192), rel=1e-3)
    f = fit.fit_gemm_size(rows, gemm, 15e9)
    assert f.reference_params == pytest.approx(11272192, rel=1e-3)
    assert f.exponent == pytest.approx(0.5, abs=0.01) and f.rms < 1e-4 < f.rms_flat
    p = measured_profile(_with_gemms(rows), _facts())
    assert p.matmul_tokens_half_params is not None and "matmul_tokens_half_params" in p.notes
    assert p.measured_range["gemm_layer_params"] == [11272192 / 8, 11272192]
    for tp in (1, 2, 4, 8):
        want = 90 * math.sqrt(3e8 * tp / 11272192)
        assert tokens_half(p, 11272192 / tp) == pytest.approx(want, rel=0.02), tp


def test_the_size_fit_reports_a_gentler_law_and_rejects_none() -> None:
    """Half ~ P^-0.3: the free exponent is 0.3 and the square-root law still beats one half at
    every size (kept); half the same at every size, or growing with P: no law (None, with a note)."""
    rows = _size_rows(0.3)
    f = fit.fit_gemm_size(rows, fit.fit_gemm(r for r in rows if r["kernel"] == "gemm"), 15e9)
    assert f.exponent == pytest.approx(0.3, abs=0.01) and f.rms < f.rms_flat
    for exponent in (0.0, -0.3):
        p = measured_profile(_with_gemms(_size_rows(exponent)), _facts())
        assert p.matmul_tokens_half_params is None, exponent
        assert "no layer-size law" in p.notes
    p = measured_profile(_synthetic_rows(), _facts())  # no sizes measured (a file from before)
    assert p.matmul_tokens_half_params is None and "not fitted" in p.notes
