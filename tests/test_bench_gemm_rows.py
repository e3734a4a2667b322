"""The datasheet profile's GEMM layer-size reference comes from the measured H100 kernels: the
benchmark's fit of Vidur's operator timings reproduces it, and the law it sets beats a flat
half-saturation on the measured layers it was fitted to and at the shapes it matters for."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from rlsim.calibration.profile import datasheet_profile

_spec = importlib.util.spec_from_file_location(
    "bench_gemm_rows", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gemm_rows.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

H100 = datasheet_profile("h100-sxm")
DATA = bench.load()


def test_the_reference_layer_size_is_the_measured_kernels_fit() -> None:
    assert len(DATA) == 21  # 5 models x TP 1, 2, 4, 8 and phi-2 at TP1
    assert bench.reference_params(H100, DATA) == pytest.approx(H100.matmul_tokens_half_params, rel=5e-3)


def test_a_qwen3_8b_sized_layer_at_256_rows_is_timed_closer_to_the_measurement() -> None:
    """Llama-2-7B at TP1 (202M GEMM parameters a layer, Qwen3-8B's 193M): 260 us measured at 256
    rows. Flat, 96 rows: max(404.5 MB / 2.68 TB/s = 151 us, 2 x 202.4M x (256 + 96) / 794.5 TFLOPS
    = 179 us) = 179 us (-31%); scaled, half = 96 x sqrt(6.97e8 / 2.024e8) = 178 rows: 221 us (-15%)."""
    rows = DATA[("meta-llama/Llama-2-7b-hf", 1)]
    measured = sum(r["seconds"] for r in rows if r["tokens"] == 256)
    assert measured == pytest.approx(260e-6, rel=0.01)
    params = sum(r["k"] * r["n"] for r in rows if r["tokens"] == 256)
    assert params == 4096 * (12288 + 4096 + 22016) + 11008 * 4096
    half = 96 * math.sqrt(6.97e8 / params)
    assert bench.model_layer_s(H100, rows, 256) == pytest.approx(2 * params * (256 + half) / 794.5e12, rel=1e-9)
    flat = H100.model_copy(update={"matmul_tokens_half_params": None})
    assert bench.model_layer_s(flat, rows, 256) / measured - 1 == pytest.approx(-0.31, abs=0.01)
    assert bench.model_layer_s(H100, rows, 256) / measured - 1 == pytest.approx(-0.15, abs=0.01)


def test_the_a100_file_holds_the_same_configurations_and_shapes() -> None:
    """Vidur's A100 profiles of the same 21 configurations, extracted as the H100 file is: the
    same (model, TP) keys, ops, shapes and token counts, only the times differ (and are slower)."""
    a100 = bench.load(bench.MEASURED["a100-80gb"])
    assert set(a100) == set(DATA)
    for key, rows in DATA.items():
        shapes = [(r["layer"], r["k"], r["n"], r["tokens"]) for r in rows]
        assert [(r["layer"], r["k"], r["n"], r["tokens"]) for r in a100[key]] == shapes, key
        assert sum(r["seconds"] for r in a100[key]) > sum(r["seconds"] for r in rows), key


def _pooled(rms: list[float]) -> float:
    return math.sqrt(sum(r * r for r in rms) / len(rms))


def test_the_a100s_own_reference_follows_its_assumed_rate_and_gains_less_than_the_rate() -> None:
    """Why the A100 keeps the H100's reference (docs/validation.md, the layer-size GEMM row): fitted
    at the profile's 271.2 TFLOPS its own reference lies above 6.97e8 (the half grows to absorb a
    rate the kernels do not reach); fitted with the rate (~240 TFLOPS) it lies below, with an
    exponent near -1/2; and the shipped law with the rate alone fitted is closer than the own
    reference at the profile's rate. On the H100 the own reference is the shipped one within 10%."""
    a100 = datasheet_profile("a100-80gb")
    laws = {name: (p, _pooled(rms)) for name, p, rms in bench.law_table(a100, bench.load(bench.MEASURED["a100-80gb"]))}
    ref = {name: bench.REFERENCE * (p["half"] / a100.matmul_tokens_half) ** 2 for name, (p, _) in laws.items()}
    assert ref["own reference, profile rate"] > 1.2 * bench.REFERENCE
    assert ref["own reference + rate"] < 0.8 * bench.REFERENCE
    assert 235 < laws["own reference + rate"][0]["tflops"] < 250
    assert 0.4 < laws["own reference + exponent + rate"][0]["exponent"] < 0.5
    shipped, own_ref, rate_only = (
        laws[n][1] for n in ("shipped law (profile)", "own reference, profile rate", "shipped law, own rate")
    )
    assert rate_only < own_ref < shipped and shipped - own_ref < 0.01
    h100 = {name: p for name, p, _ in bench.law_table(H100, DATA)}
    assert h100["own reference, profile rate"]["half"] == pytest.approx(H100.matmul_tokens_half, rel=0.05)


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb"])
def test_rlsim_calibrates_fit_on_these_kernels_keeps_the_law_near_the_datasheets(gpu: str) -> None:
    """The five models Vidur timed at TP 1-8, fed to calibration's fits as a GPU sweep would be
    (TP1 as the gemm sweep, TP 2-8 as gemm_size rows): on both GPUs the layer-size law beats one
    half at every size for every model, the free exponents lie between -0.35 and -0.8, and the
    half each fit implies at 6.97e8 parameters is within 0.7-1.35x the datasheet profile's
    (H100: 73-113 rows against 96; A100: 45-65 against 49.8)."""
    profile = datasheet_profile(gpu)
    fits = bench.calibration_fits(profile, bench.load(bench.MEASURED[gpu]))
    assert len(fits) == 5
    for model, (gemm, size) in fits.items():
        assert size.rms < size.rms_flat and 0.35 < size.exponent < 0.8, model
        half = gemm.x_half * math.sqrt(size.reference_params / profile.matmul_tokens_half_params)
        assert 0.7 < half / profile.matmul_tokens_half < 1.35, (model, half)
