"""`rlsim calibrate` end to end, and unusable profiles on the command line (one line, exit 2).

`cli_profile` runs `rlsim calibrate --quick --device cpu --threads 1` once per session (about a
minute on two cores) and is shared with tests/test_validate.py (which imports it): the file is
cached in the session's base temporary folder, so a second module asking for it reuses it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from cli_helpers import one_line_error
from typer.testing import CliRunner

from rlsim.calibration import load_profile, save_profile
from rlsim.calibration.profile import datasheet_profile
from rlsim.cli import app

runner = CliRunner()
SCENARIO = {  # a small catalog model on the CPU "device": simulated in well under a second
    "name": "cpu-small",
    "model": "qwen2.5-0.5b",
    "cluster": {"gpu": "cpu", "nodes": 1, "gpus_per_node": 2},
    "algorithm": {"prompts_per_step": 4, "group_size": 4, "minibatches": 2},
    "workload": {
        "prompt_tokens": {"kind": "constant", "value": 32},
        "response_tokens": {"kind": "lognormal", "mean": 64, "sigma": 0.5, "max": 256},
    },
    "pipeline": {"mode": "sync", "training": {"micro_batch_tokens": 1024}},
    "steps": 2,
}


@pytest.fixture(scope="session")
def cli_profile(tmp_path_factory) -> Path:
    """A quick CPU profile written by the CLI (cached for the session).

    Under pytest-xdist every worker has a base temporary folder of its own inside one shared
    parent: the profile goes in that parent, under a file lock, so the workers calibrate once.
    """
    from filelock import FileLock  # torch's dependency, so here whenever calibration can run

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "cli-calibration" / "cpu.json"
    with FileLock(str(root / "cli-calibration.lock")):
        if not path.exists():
            args = ["calibrate", "--quick", "--device", "cpu", "--threads", "1", "--out", str(path)]
            res = runner.invoke(app, args)
            assert res.exit_code == 0, res.output
            (path.parent / "output.txt").write_text(res.output)
    return path


def _scenario(tmp_path: Path, **changes) -> str:
    path = tmp_path / "cpu-scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO | changes))
    return str(path)


# ---- calibrate ------------------------------------------------------------------------------------


def test_quick_cpu_calibration_writes_a_valid_profile(cli_profile: Path) -> None:
    profile = load_profile(cli_profile)
    assert profile.source == "measured" and profile.device == "cpu"
    assert profile.iteration_overhead_s > 0 and 0 < profile.train_mfu <= 1
    assert any(r["kernel"] == "fit" for r in profile.measurements)
    output = (cli_profile.parent / "output.txt").read_text()
    for text in ("GEMM efficiency at 16 tokens", "training MFU at 4096", "Fit quality", "R²", f"Wrote {cli_profile}"):
        assert text in output, output


def test_the_simulator_runs_a_cpu_scenario_on_the_profile(cli_profile: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", _scenario(tmp_path, profile=str(cli_profile)), "--mode", "sync",
                              "--json", "-"])  # fmt: skip
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.output)["modes"][0]["metrics"]
    assert metrics["steps"] == 2 and metrics["step_time_s"] > 0
    # --profile on the command line does the same
    res = runner.invoke(app, ["simulate", _scenario(tmp_path), "--profile", str(cli_profile), "--mode", "sync"])
    assert res.exit_code == 0, res.output


def test_calibrate_refuses_to_overwrite_without_force(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "mine.json"
    out.write_text("keep me")
    assert "--force" in one_line_error(["calibrate", "--device", "cpu", "--out", str(out)])
    assert out.read_text() == "keep me"
    # with --force it writes (calibrate patched: the sweep itself is covered above)
    fake = datasheet_profile("h100-sxm")
    monkeypatch.setattr("rlsim.calibration.run.calibrate", lambda **kw: fake)
    res = runner.invoke(app, ["calibrate", "--out", str(out), "--force"])
    assert res.exit_code == 0, res.output
    assert load_profile(out) == fake


@pytest.mark.parametrize("law", [True, False])
def test_calibrate_prints_the_gemm_half_and_its_layer_size_law(tmp_path: Path, monkeypatch, law: bool) -> None:
    fake = datasheet_profile("h100-sxm")
    if not law:
        fake = fake.model_copy(update={"matmul_tokens_half_params": None})
    monkeypatch.setattr("rlsim.calibration.run.calibrate", lambda **kw: fake)
    res = runner.invoke(app, ["calibrate", "--out", str(tmp_path / "p.json")])
    assert res.exit_code == 0, res.output
    rows = f"{fake.matmul_tokens_half:,.1f} rows"
    if law:
        assert f"{rows} x sqrt(6.97e+08 / P)" in res.output
    else:
        assert f"{rows}, any layer size" in res.output


@pytest.mark.parametrize(("args", "field"), [(["--device", "tpu"], "device"), (["--model", "qwen9-7b"], "model")])
def test_calibrate_bad_input_is_one_line(tmp_path: Path, args: list[str], field: str) -> None:
    line = one_line_error(["calibrate", "--out", str(tmp_path / "p.json"), *args])
    assert line.startswith(f"error: {field}: ")
    assert not (tmp_path / "p.json").exists()


# ---- unusable profiles through `rlsim simulate --profile` -----------------------------------------


@pytest.fixture
def h100_json(tmp_path: Path) -> Path:
    path = tmp_path / "h100.json"
    save_profile(datasheet_profile("h100-sxm"), path)
    return path


def test_corrupt_profile(tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.json"
    bad.write_text("{ not json")
    line = one_line_error(["simulate", "--profile", str(bad)])
    assert line.startswith("error: profile: ") and "not valid JSON" in line


def test_truncated_profile(h100_json: Path) -> None:
    text = h100_json.read_text()
    h100_json.write_text(text[: len(text) // 2])
    assert "corrupt or truncated" in one_line_error(["simulate", "--profile", str(h100_json)])


def test_wrong_version_profile(h100_json: Path) -> None:
    raw = json.loads(h100_json.read_text()) | {"schema_version": 7}
    h100_json.write_text(json.dumps(raw))
    assert "schema_version 7" in one_line_error(["simulate", "--profile", str(h100_json)])


def test_missing_profile(tmp_path: Path) -> None:
    assert "does not exist" in one_line_error(["simulate", "--profile", str(tmp_path / "none.json")])


def test_profile_for_another_device(h100_json: Path, cli_profile: Path, tmp_path: Path) -> None:
    # a GPU profile for a CPU scenario, a CPU profile for the (H100) default scenario
    line = one_line_error(["simulate", _scenario(tmp_path), "--profile", str(h100_json)])
    assert line.startswith("error: profile: ") and "cluster.gpu is 'cpu'" in line
    line = one_line_error(["simulate", "--profile", str(cli_profile)])
    assert line.startswith("error: profile: ") and "for device 'cpu'" in line


def test_cpu_scenario_without_a_profile(tmp_path: Path) -> None:
    assert "rlsim calibrate --device cpu" in one_line_error(["simulate", _scenario(tmp_path)])
