"""Calibration kernels end to end: one quick CPU calibration, its profile, held-out predictions.

The module fixture calibrates once (quick sweep, under a minute on two idle cores) with torch
on one intra-op thread, so CPU kernels are timed by their thread's CPU time: this host is
shared, and wall-clock timings of multi-threaded kernels collapse when a neighbour takes a
core. Held-out kernels are compared with the profile's prediction only while the host runs
the same family's sweep kernels within 10% of their calibration time, and the prediction is
scaled by that measured drift (`_steady_host`); otherwise they skip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

torch = pytest.importorskip("torch")

from rlsim.calibration import calibrate  # noqa: E402
from rlsim.calibration.attention import attention_row  # noqa: E402
from rlsim.calibration.gemm import gemm_row  # noqa: E402
from rlsim.calibration.pool import ColdPool  # noqa: E402
from rlsim.calibration.profile import Profile, load_profile, save_profile  # noqa: E402
from rlsim.calibration.run import select_device  # noqa: E402
from rlsim.calibration.shapes import SMALL_SHAPE  # noqa: E402
from rlsim.calibration.sweeps import SWEEPS  # noqa: E402
from rlsim.errors import ScenarioError  # noqa: E402

CPU = torch.device("cpu")
TOLERANCE = 0.15  # held-out prediction error the issue asks for
STEADY = 0.10  # sweep kernels re-timed around a held-out one must match themselves this well
T = TypeVar("T")
QUICK = SWEEPS[("cpu", True)]


@pytest.fixture(scope="module")
def calibrated():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    calls: list[tuple[int, int, str]] = []
    try:
        profile = calibrate("cpu", quick=True, progress=lambda d, t, label: calls.append((d, t, label)))
        yield profile, calls
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def profile(calibrated) -> Profile:
    return calibrated[0]


def _fit(profile: Profile, quantity: str) -> dict:
    return next(r for r in profile.measurements if r["kernel"] == "fit" and r["quantity"] == quantity)


def _rows(profile: Profile, kernel: str) -> list[dict]:
    return [r for r in profile.measurements if r["kernel"] == kernel]


def _steady_host(recorded_s: float, measure_ref: Callable[[], float], measure: Callable[[], T]) -> tuple[float, T]:
    """Run `measure` between two re-runs of sweep kernels; (host speed factor, its result).

    This host is shared: its speed changes by 10-40% within seconds (measured: one-thread GEMMs
    at 100 and 140 GFLOP/s a few seconds apart; KV reads slow down when a neighbour streams
    memory). So the same family's sweep kernels (several, summed, so one noisy row cannot
    decide) are re-timed around the held-out one. If they disagree with themselves, or run more
    than STEADY off their calibration time, the comparison means nothing and the test skips;
    otherwise the prediction is scaled by their drift (at most STEADY: a factor taken from raw
    timings, never from the fit).
    """
    before = measure_ref()
    result = measure()
    after = measure_ref()
    if abs(after / before - 1) > STEADY:
        pytest.skip(f"host speed changed during the measurement ({after / before - 1:+.0%})")
    drift = (before * after) ** 0.5 / recorded_s
    if abs(drift - 1) > STEADY:
        pytest.skip(f"host runs the sweep kernels {drift - 1:+.0%} off their calibration time")
    return drift, result


# ---- 1. a quick CPU calibration gives a valid, round-tripping profile ----------------------------


def test_quick_cpu_calibration_is_a_measured_profile(profile: Profile) -> None:
    assert profile.source == "measured" and profile.device == "cpu" and profile.schema_version == 1
    assert profile.peak_tflops >= profile.matmul_tflops > 0 and 0 < profile.train_mfu <= 1
    assert profile.peak_memory_gbps > 0 and profile.attention_gbps > 0 and profile.iteration_overhead_s > 0
    assert profile.software["torch"] == torch.__version__
    assert profile.measured_range["gemm_tokens"] == [min(QUICK.gemm_tokens), max(QUICK.gemm_tokens)]
    assert {"kv_tokens", "batch", "train_tokens"} <= set(profile.measured_range)


def test_profile_round_trips_through_json(profile: Profile, tmp_path) -> None:
    path = tmp_path / "cpu.json"
    save_profile(profile, path)
    assert load_profile(path) == profile


def test_every_row_records_shapes_dtype_device_and_timing(profile: Profile) -> None:
    measured = [r for r in profile.measurements if r["kernel"] not in ("fit", "note")]
    kernels = {r["kernel"] for r in measured}
    assert {
        "gemm",
        "attention",
        "stream",
        "weight_read",
        "launch",
        "copy",
        "train",
        "collective",
    } <= kernels
    for r in measured:
        assert r["device_name"] and r["torch"] == torch.__version__ and r["dtype"]
        clock = "perf_counter" if r["kernel"] == "collective" else "thread_time"  # one thread
        assert r["timing"].startswith(clock) and "median" in r["timing"]
    assert all({"tokens", "k", "n", "flops"} <= set(r) for r in _rows(profile, "gemm"))
    mixed = [r for r in _rows(profile, "attention") if r["mixed"]]
    assert mixed and all(r["useful_bytes"] < r["read_bytes"] for r in mixed)  # padding is not useful
    assert all("stand-in" in r["note"] for r in _rows(profile, "copy"))


def test_collectives_ran_over_gloo_and_give_the_links(profile: Profile) -> None:
    rows = _rows(profile, "collective")
    assert {r["op"] for r in rows} == {"broadcast", "all_reduce", "all_gather"}
    assert all(r["backend"] == "gloo" and r["world"] == 2 for r in rows)
    assert profile.intra_node.busbw_gbps == pytest.approx(_fit(profile, "collective_all_reduce")["params"]["gbps"])


def test_progress_reports_every_case_then_the_end(calibrated) -> None:
    _, calls = calibrated
    total = calls[0][1]
    assert [d for d, _, _ in calls] == list(range(total + 1)) and calls[-1][0] == total
    assert all(t == total for _, t, _ in calls) and calls[0][2].startswith("gemm")


# ---- 2. held-out kernels are predicted within 15% ------------------------------------------------


def _gemm_seconds(tokens: int, k: int, n: int, repeats: int = 9) -> float:
    return gemm_row("fresh", tokens, k, n, CPU, torch.float32, warmup=2, repeats=repeats)["seconds"]


def _attention(lengths: tuple[int, ...], pool: ColdPool, repeats: int = 9) -> dict:
    return attention_row(lengths, SMALL_SHAPE, pool, CPU, torch.float32, warmup=2, repeats=repeats)


@pytest.mark.timing
def test_gemm_prediction_for_a_held_out_shape(profile: Profile) -> None:
    """A forward's GEMMs at 512 tokens (not swept), predicted the way the prefill model does.

    The fitted rate depends on tokens only and pools every layer of the shape by time, so the
    held-out case is every layer GEMM of the calibration shape at an unswept token count: the
    compute term 2·P·t / rate(t) the prefill and decode models evaluate. (A single GEMM of a
    width between the swept ones ran up to 18% faster than the pooled rate: width is not a
    dimension of this model, see docs/calibration.md.)
    """
    tokens = 512
    assert tokens not in QUICK.gemm_tokens
    layers = list(SMALL_SHAPE.gemm_layers().values())
    refs = [r for r in _rows(profile, "gemm") if r["tokens"] == max(QUICK.gemm_tokens)]
    drift, measured = _steady_host(
        sum(r["seconds"] for r in refs),
        lambda: sum(_gemm_seconds(r["tokens"], r["k"], r["n"], repeats=3) for r in refs),
        lambda: sum(_gemm_seconds(tokens, k, n) for k, n in layers),
    )
    rate = profile.matmul_tflops * 1e12 * tokens / (tokens + profile.matmul_tokens_half)
    flops = sum(2.0 * tokens * k * n for k, n in layers)
    predicted = flops / rate * drift  # the models' GEMM time, at today's host speed
    assert abs(predicted / measured - 1) < TOLERANCE, (predicted, measured, drift)


@pytest.mark.timing
def test_decode_attention_prediction_for_a_held_out_batch(profile: Profile) -> None:
    lengths = (3000,) * 6  # batch 6 and KV length 3000 are not in the sweep
    assert lengths not in [(n,) * b for b, n in QUICK.attention_grid]
    pool = ColdPool(QUICK.pool_bytes, CPU, torch.float32)
    refs = [r for r in _rows(profile, "attention") if not r["mixed"]]
    drift, fresh = _steady_host(
        sum(r["seconds"] for r in refs),
        lambda: sum(_attention((r["kv_len_max"],) * r["batch"], pool, 5)["seconds"] for r in refs),
        lambda: _attention(lengths, pool),
    )
    latency = _fit(profile, "attention")["params"]["latency_s"]
    predicted = (latency + fresh["read_bytes"] / (profile.attention_gbps * 1e9)) * drift
    assert abs(predicted / fresh["seconds"] - 1) < TOLERANCE, (predicted, fresh["seconds"], drift)


# ---- device selection --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tpu", "cuda:x9"])
def test_unknown_device_is_a_scenario_error(name: str) -> None:
    with pytest.raises(ScenarioError, match="device"):
        select_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_without_a_gpu_is_a_scenario_error() -> None:
    with pytest.raises(ScenarioError, match="no CUDA GPU"):
        select_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_quick_cuda_calibration() -> None:
    profile = calibrate("cuda", quick=True)
    assert profile.source == "measured" and profile.device != "cpu"
    assert profile.matmul_tflops <= profile.peak_tflops and profile.memory_gbps < profile.peak_memory_gbps
