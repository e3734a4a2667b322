"""pipeline.inference.engine: vllm is the reference (nothing moves); sglang changes KV capacity and decode only."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rlsim.catalog.engines import get_engine, load_engines
from rlsim.cli import app
from rlsim.models.kv_cache import ACTIVATION_RESERVE_GB_PER_GPU
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.costs import Costs

runner = CliRunner()


def _pair(example: str, *sets: str):
    return (
        resolve(load_scenario(example, list(sets))),
        resolve(load_scenario(example, [*sets, "pipeline.inference.engine=sglang"])),
    )


def test_engine_profiles_are_cited_and_vllm_is_the_reference():
    engines = load_engines()
    assert set(engines) == {"vllm", "sglang"}
    assert engines["vllm"].decode_speed_vs_vllm(7e9) == 1.0 and engines["vllm"].reserve_in_fraction
    assert not engines["sglang"].reserve_in_fraction
    for e in engines.values():
        assert e.sources and e.date
        assert all(m.source for m in e.decode_measurements)


@pytest.mark.parametrize(
    ("params", "row_b"), [(0.49e9, 0.5), (7.6e9, 7), (14.8e9, 14), (32.8e9, 32), (70.6e9, 32), (3e9, 7)]
)
def test_sglang_decode_speed_comes_from_the_nearest_measured_size(params, row_b):
    row = get_engine("sglang").decode_measurement(params)
    assert row.params_b == row_b
    assert get_engine("sglang").decode_speed_vs_vllm(params) == row.sglang_tokens_per_s / row.vllm_tokens_per_s


def test_sglang_kv_capacity_keeps_the_activation_reserve_outside_the_share():
    for example in ("default", "long-cot", "llama70b-multinode"):
        v, s = _pair(example)
        tp = v.scenario.pipeline.inference.tp
        extra = ACTIVATION_RESERVE_GB_PER_GPU * 1e9 * tp / v.llm.kv_bytes_per_token()
        assert s.kv_capacity_tokens - v.kv_capacity_tokens == pytest.approx(extra, abs=1)
        assert s.kv_capacity_tokens > v.kv_capacity_tokens


def test_engine_changes_decode_rate_and_nothing_else_in_the_cost_oracle():
    v, s = _pair("default")
    speed = s.decode_speed_vs_vllm
    assert v.decode_speed_vs_vllm == 1.0 and speed == pytest.approx(1.2)  # qwen2.5-7b: the 7B verl row
    assert (v.llm, v.profile, v.trainable_params) == (s.llm, s.profile, s.trainable_params)
    cv, cs = Costs(v), Costs(s)
    for b in (1, 16, 256):
        for kv in (0.0, 1e4, 3e5):
            assert cs.iteration(b).at(kv) == pytest.approx(cv.iteration(b).at(kv) / speed, rel=1e-12)
        assert cs.iteration(b).span_s(1e3, 50) == pytest.approx(cv.iteration(b).span_s(1e3, 50) / speed, rel=1e-12)
    lengths = [300, 900, 1200, 64]
    assert cs.prefill_s(lengths) == cv.prefill_s(lengths)
    assert cs.train_phases(lengths) == cv.train_phases(lengths)
    assert (cs.sync_s, cs.switch_s) == (cv.sync_s, cv.switch_s)
    dv = v.scenario.model_dump(mode="json")
    ds = s.scenario.model_dump(mode="json")
    assert dv["pipeline"]["inference"].pop("engine") == "vllm" and ds["pipeline"]["inference"].pop("engine") == "sglang"
    assert dv == ds


def test_default_engine_is_vllm_and_setting_it_changes_no_output(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = ["simulate", "small-budget", "--steps", "3"]
    assert runner.invoke(app, [*base, "--json", str(a)]).exit_code == 0
    assert runner.invoke(app, [*base, "--set", "pipeline.inference.engine=vllm", "--json", str(b)]).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    c = tmp_path / "c.json"
    assert runner.invoke(app, [*base, "--set", "pipeline.inference.engine=sglang", "--json", str(c)]).exit_code == 0
    mv, ms = (json.loads(p.read_text())["modes"][0]["metrics"] for p in (a, c))
    assert ms["kv_capacity_tokens"] > mv["kv_capacity_tokens"]
    assert ms["output_tokens_per_s"] != mv["output_tokens_per_s"]


def test_unknown_engine_is_one_line_exit_2():
    res = runner.invoke(app, ["simulate", "small-budget", "--set", "pipeline.inference.engine=trtllm"])
    assert res.exit_code == 2
    assert "pipeline.inference.engine" in res.output and "Traceback" not in res.output
