"""The Python API a notebook uses: `rlsim.simulate`, `rlsim.load_scenario`, `rlsim.plan`.

Results serialise to the JSON the CLI writes and to flat records any table library takes;
enums print as their YAML names; `import rlsim` loads none of the heavy dependencies.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import rlsim
from rlsim.cli import app
from rlsim.scenario import Mode


def test_import_rlsim_is_light():
    code = (
        "import sys, rlsim; heavy = [m for m in ('pydantic', 'simpy', 'numpy', 'rich', 'torch') "
        "if m in sys.modules]; print(heavy); assert callable(rlsim.simulate)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_simulate_to_dict_is_the_cli_json():
    results = rlsim.simulate("default", mode="async", steps=4)
    assert results.modes == ["async"] and len(results) == 1
    res = CliRunner().invoke(app, ["simulate", "default", "--mode", "async", "--steps", "4", "--json", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == json.loads(json.dumps(results.to_dict()))


def test_records_are_flat_rows_per_mode():
    results = rlsim.simulate("default", modes=["sync", "async"], steps=4)
    records = results.to_records()
    assert [r["mode"] for r in records] == ["sync", "async"]
    for row in records:
        assert all(not isinstance(v, dict | list) for v in row.values())
        assert row["inference_gpus"] == 4 and row["cost_provider"] == "AWS"
        assert row["gpu_seconds_decode"] > 0 and 0 <= row["tail_fraction"] <= 1
    assert results["async"].metrics.staleness_max == records[1]["staleness_max"]
    with pytest.raises(KeyError, match="have sync, async"):
        results["streaming"]
    assert "async:" in repr(results)


def test_scenario_own_mode_by_default_and_all_modes():
    assert rlsim.simulate("long-cot", steps=3).modes == ["async"]
    assert rlsim.simulate("default", modes="all", steps=3).modes == [m.value for m in Mode]


def test_load_scenario_from_a_mapping_and_enum_names():
    sc = rlsim.load_scenario("long-cot", ["pipeline.mode=streaming"])
    assert str(sc.pipeline.mode) == "streaming" and f"{sc.pipeline.mode}" == "streaming"
    assert repr(sc.pipeline.mode) == "'streaming'" and "Mode." not in repr(sc)
    again = rlsim.load_scenario(sc.model_dump(mode="json"), ["steps=2"])
    assert again.steps == 2 and again.pipeline.mode is Mode.streaming
    assert rlsim.load_scenario(again).steps == 2


def test_plan_from_python():
    result = rlsim.plan("default", max_gpus=8, modes=["sync", "async"], steps=2, run_steps=100, workers=1)
    data = result.to_dict()
    assert data["recommended"] == result.recommended.candidate.index
    assert data["run_steps"] == 100 and data["evaluations"] == result.to_records()
    assert {"label", "run_usd", "tail_fraction", "stale_price"} <= set(data["evaluations"][0])
