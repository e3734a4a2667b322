"""The trend benchmark's lengths are the published rows' own scenarios: its 1K and 8K points
must be the 1K and 8K rows' predictions, so its 2K and 4K points check the same setup."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlsim.validation.published import select_rows
from rlsim.validation.published_run import simulate_row

_spec = importlib.util.spec_from_file_location(
    "bench_trend", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_trend.py"
)
bench_trend = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_trend)


def test_the_sweep_ends_are_the_rows_predictions() -> None:
    short, long = select_rows(["openrlhf-verl-1.5b-1k", "openrlhf-verl-1.5b-8k"])
    assert bench_trend.step_at(long.scenario, 1024)[0] == pytest.approx(simulate_row(short)["step_s"])
    assert bench_trend.step_at(long.scenario, 8192)[0] == pytest.approx(simulate_row(long)["step_s"])
