"""CLI contracts of `rlsim libraries` and `rlsim compare-presets`: exit codes, JSON, sorting."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.presets import list_presets

runner = CliRunner()
SHORT = ["--steps", "2", "--set", "algorithm.prompts_per_step=8"]


def test_help_lists_both_commands():
    out = runner.invoke(app, ["--help"]).output
    assert "libraries" in out and "compare-presets" in out


def test_libraries_table_and_json():
    res = runner.invoke(app, ["libraries"])
    assert res.exit_code == 0, res.output
    assert "Library presets" in res.output and "verl" in res.output
    res = runner.invoke(app, ["libraries", "--json", "-"])
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert [d["name"] for d in data] == [p.name for p in list_presets()]
    verl = next(d for d in data if d["name"] == "verl")
    assert verl["axes"]["transport"] == "cuda_ipc" and verl["sources"]


def test_libraries_sources_prints_provenance():
    res = runner.invoke(app, ["libraries", "--sources"])
    assert res.exit_code == 0
    assert "unconfirmed:" in res.output and "huggingface/blog@" in res.output


def test_compare_presets_json_is_sorted_by_cost():
    res = runner.invoke(
        app, ["compare-presets", "default", "--presets", "trl-server,verl,verl-fully-async", "--json", "-", *SHORT]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert {p["preset"] for p in data["presets"]} == {"trl-server", "verl", "verl-fully-async"}
    costs = [p["cost"]["usd_per_step"] for p in data["presets"]]
    assert costs == sorted(costs)


def test_compare_presets_table_and_unrunnable_rows():
    res = runner.invoke(app, ["compare-presets", "--presets", "slime,verl", "--set", "pipeline.lora={rank: 8}", *SHORT])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # rich wraps at the terminal width
    assert "cannot run" in text and "no LoRA RL" in text


def test_compare_presets_unknown_name_is_a_user_error():
    res = runner.invoke(app, ["compare-presets", "--presets", "verl,pipeline-rl", *SHORT])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "unknown preset 'pipeline-rl'" in text and "pipelinerl" in text
    assert "Traceback" not in res.output


def test_compare_presets_bad_override_is_a_user_error():
    res = runner.invoke(app, ["compare-presets", "--presets", "verl", "--set", "pipeline.mode=warp"])
    assert res.exit_code == 2 and "pipeline.mode" in res.output
