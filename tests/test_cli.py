"""CLI contracts: the no-argument default, help, and one clear line (exit 2) for each bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from cli_helpers import one_line_error
from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.scenario import builtin_scenarios

runner = CliRunner()


def _scenario_file(tmp_path: Path, **changes) -> str:
    data = yaml.safe_load(builtin_scenarios()["default"].read_text())
    for dotted, value in changes.items():
        node = data
        keys = dotted.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_default_simulate_compares_all_modes() -> None:
    res = runner.invoke(app, ["simulate", "--steps", "2", "--set", "algorithm.prompts_per_step=8", "--json", "-"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [m["metrics"]["mode"] for m in data["modes"]] == ["colocated", "sync", "one_step_off", "async", "streaming"]
    first = data["modes"][0]
    assert first["cost"]["usd_per_step"] > 0 and first["metrics"]["pools"][0]["gpu_seconds_by_state"]


def test_simulate_table_names_the_price() -> None:
    res = runner.invoke(app, ["simulate", "--steps", "2", "--set", "algorithm.prompts_per_step=8"])
    assert res.exit_code == 0, res.output
    assert "Price:" in res.output and "/GPU-hour" in res.output and "streaming" in res.output


def test_help_and_version() -> None:
    assert runner.invoke(app, ["-h"]).exit_code == 0
    assert "rlsim" in runner.invoke(app, ["--version"]).output
    assert json.loads(runner.invoke(app, ["schema"]).output)["title"] == "Scenario"


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model: [unclosed\n")
    assert one_line_error(["simulate", str(path)]).startswith("error: scenario: ")


def test_missing_file() -> None:
    assert "does not exist" in one_line_error(["simulate", "nope.yaml"])


def test_unknown_key(tmp_path: Path) -> None:
    line = one_line_error(["simulate", _scenario_file(tmp_path, pipeline__warp_speed=9)])
    assert line.startswith("error: pipeline.warp_speed: unknown field")


def test_unknown_gpu(tmp_path: Path) -> None:
    line = one_line_error(["simulate", _scenario_file(tmp_path, cluster__gpu="h1000")])
    assert line.startswith("error: cluster.gpu: ") and "h1000" in line


def test_unknown_model(tmp_path: Path) -> None:
    line = one_line_error(["simulate", _scenario_file(tmp_path, model="qwen9-7b")])
    assert line.startswith("error: model: ") and "qwen9-7b" in line


@pytest.mark.parametrize(
    "field,value",
    [("pipeline.inference.tp", 0), ("algorithm.prompts_per_step", -4), ("steps", 0), ("cluster.nodes", 0)],
)
def test_non_positive_sizes(field: str, value: int) -> None:
    line = one_line_error(["simulate", "--set", f"{field}={value}"])
    assert line.startswith(f"error: {field}: ") and "greater than" in line


def test_model_that_does_not_fit() -> None:
    line = one_line_error(["simulate", "--set", "model=qwen2.5-72b"])
    assert line.startswith("error: pipeline.inference.tp: ") and "raise tp" in line


def test_training_that_does_not_fit() -> None:
    line = one_line_error(["simulate", "--set", "model=qwen2.5-32b", "--set", "pipeline.inference.tp=2"])
    assert line.startswith("error: pipeline.training.gpus: ")


def test_tp_that_does_not_divide_heads() -> None:
    line = one_line_error(
        [
            "simulate",
            "--set",
            "pipeline.inference.tp=3",
            "--set",
            "pipeline.inference.gpus=3",
            "--set",
            "pipeline.training.gpus=5",
        ]
    )
    assert line.startswith("error: pipeline.inference.tp: ") and "28 attention heads" in line


def test_more_gpus_than_the_cluster() -> None:
    line = one_line_error(["simulate", "--set", "pipeline.inference.gpus=6", "--set", "pipeline.training.gpus=4"])
    assert "exceeds the cluster's 8 GPUs" in line


def test_unknown_mode() -> None:
    assert "pipeline.mode" in one_line_error(["simulate", "--mode", "turbo"])


def test_json_output_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("mine")
    assert "--force" in one_line_error(["simulate", "--steps", "1", "--json", str(out)])
    assert out.read_text() == "mine"


def test_simulate_leaves_torch_and_matplotlib_out() -> None:
    code = textwrap.dedent("""
        import sys
        from typer.testing import CliRunner
        from rlsim.cli import app
        res = CliRunner().invoke(app, ["simulate", "--steps", "1", "--set", "algorithm.prompts_per_step=8"])
        assert res.exit_code == 0, res.output
        print("torch" in sys.modules, "matplotlib" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_unknown_builtin_name_suggests_the_closest() -> None:
    line = one_line_error(["simulate", "lon-cot"])
    assert line.startswith("error: scenario: unknown built-in scenario 'lon-cot' (did you mean 'long-cot'?)")


def test_short_version_flag_and_mode_choices() -> None:
    res = runner.invoke(app, ["-V"])
    assert res.exit_code == 0 and res.output.startswith("rlsim ")
    text = " ".join(runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "colocated, sync, one_step_off, async or streaming" in text
    res = runner.invoke(app, ["cost", "--mode", "turbo"])
    assert res.exit_code == 2 and "colocated" in res.output and "streaming" in res.output


def test_help_shows_flags_as_flags_and_offers_shell_completion() -> None:
    res = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0
    force = next(line for line in res.output.splitlines() if "--force" in line)
    assert "<bool>" not in force  # a flag takes no value
    assert "<str>" in next(line for line in res.output.splitlines() if "--plot" in line)
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert "--install-completion" in top.output and "<bool>" not in top.output


def test_commands_share_one_module_not_the_cli() -> None:
    """commands/*.py import the consoles and the error boundary from commands.common."""
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "rlsim" / "commands"
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "rlsim.cli" not in imported, path.name
