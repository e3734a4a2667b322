"""Answers that rest on a default, or on settings that contradict each other, say so.

Warnings go to stderr, one line each (`warning: ...`), and never change stdout; refusals are
one line naming the field (exit 2). Covered here: the run length a projection falls back to, the
staleness policy `bound` that does not bound anything, the model's context length, and the
out-of-memory hint.
"""

from __future__ import annotations

import json
import warnings

import pytest
from cli_helpers import one_line_error
from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.notices import RlsimWarning, staleness_warning
from rlsim.planner.costing import DEFAULT_RUN_STEPS, run_length
from rlsim.scenario import load_scenario

runner = CliRunner(env={"COLUMNS": "200"})


def _warnings(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith("warning: ")]


def test_run_length_comes_from_the_scenario_or_a_warned_default():
    sc = load_scenario("long-cot")
    assert sc.run_steps == 400 and sc.steps == 8  # the run priced, and the few steps simulated
    assert run_length(sc, 50) == 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run_length(sc) == 400  # no warning: the scenario says
    bare = sc.model_copy(update={"run_steps": None})
    with pytest.warns(RlsimWarning, match="run_steps: not set; projecting a 1,000-step run"):
        assert run_length(bare) == DEFAULT_RUN_STEPS


def test_cost_prints_the_run_length_and_warns_once_on_the_default(tmp_path):
    res = runner.invoke(app, ["cost", "long-cot", "--provider", "aws", "--pricing", "on-demand"])
    assert res.exit_code == 0, res.output
    assert "run of 400 steps projected" in res.stdout and not _warnings(res)
    assert "Priced: async on 2x8 h100-sxm: 8 inference + 8 training GPUs, inference tp 2" in res.stdout
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["cost", "long-cot", "--set", "run_steps=null", "--mode", "sync", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert _warnings(res) == [
        "warning: run_steps: not set; projecting a 1,000-step run (set run_steps in the scenario or pass --steps)"
    ]
    data = json.loads(out.read_text())
    assert data["projection"]["steps"] == 1000 and data["priced"].startswith("sync on 2x8 h100-sxm")


def test_bound_with_a_small_max_lag_warns_before_and_after_simulating():
    sc = load_scenario("long-cot", ["pipeline.staleness.max_lag=1"])  # async, buffer depth 2
    assert "async with buffer_depth 2 lets samples lag up to 2 versions" in staleness_warning(sc)
    assert staleness_warning(sc, observed_max=1) is None
    assert "trained samples 4 versions old" in staleness_warning(sc.with_mode("streaming"), 4)
    assert staleness_warning(load_scenario("long-cot")) is None  # max_lag 2 covers depth 2
    strict = load_scenario("long-cot", ["pipeline.staleness.policy=reject"])
    assert staleness_warning(strict, observed_max=5) is None  # reject enforces max_lag


def test_simulate_warns_about_streaming_lag_on_stderr_only():
    args = ["simulate", "long-cot", "--mode", "streaming", "--steps", "6"]
    res = runner.invoke(app, [*args, "--set", "pipeline.staleness.max_lag=1"])
    assert res.exit_code == 0, res.output
    (line,) = _warnings(res)
    assert line.startswith("warning: pipeline.staleness: policy 'bound' with max_lag 1 does not limit lag")
    assert "warning" not in res.stdout
    quiet = runner.invoke(app, [*args, "--set", "pipeline.staleness.max_lag=8"])
    assert quiet.exit_code == 0 and not _warnings(quiet)


def test_lengths_beyond_the_models_positions_are_refused(tmp_path):
    line = one_line_error(["simulate", "long-cot", "--set", "workload.response_tokens.max=200000"])
    assert line.startswith("error: workload.response_tokens.max: 200,000 response tokens")
    assert "131,072 positions (max_position_embeddings); use at most 129,024" in line
    line = one_line_error(["simulate", "--set", "workload.prompt_tokens={kind: constant, value: 140000}"])
    assert line.startswith("error: workload.prompt_tokens.value: 140,000 prompt tokens")
    from test_catalog import QWEN25_7B_CONFIG, write_config

    path = write_config(tmp_path, QWEN25_7B_CONFIG | {"max_position_embeddings": 8192})
    line = one_line_error(
        ["simulate", "--set", f"model={{config_json: {path}}}", "--set", "workload.response_tokens.max=65536"]
    )
    assert line.startswith("error: workload.response_tokens.max: 65,536 response tokens")
    assert "8,192 positions" in line
    hist = "workload.response_tokens={kind: histogram, bins: [[100, 200, 1.0], [9000, 10000, 1.0]]}"
    line = one_line_error(["simulate", "--set", f"model={{config_json: {path}}}", "--set", hist])
    assert line.startswith("error: workload.response_tokens.bins: 10,000 response tokens")
    # the default max (32,768) only warns: lengths drawn from a file may all fit
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("100\n2000\n")
    res = runner.invoke(
        app,
        ["simulate", "--mode", "sync", "--steps", "2", "--set", f"model={{config_json: {path}}}",
         "--set", f"workload.response_tokens={{kind: file, path: {lengths}}}"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _warnings(res) == [
        "warning: workload.response_tokens.max: the default of 32,768 response tokens plus up to 4,096 "
        "prompt tokens exceed Qwen2.5-7B's 8,192 positions (max_position_embeddings); set max to at most 4,096"
    ]


def test_the_oom_hint_suggests_recompute_only_when_it_is_off():
    on = one_line_error(["simulate", "--set", "model=qwen2.5-32b", "--set", "pipeline.inference.tp=2"])
    assert "activation_recompute" not in on and "lower micro_batch_tokens" in on
    off = one_line_error(
        [
            "simulate",
            "--set",
            "model=qwen2.5-32b",
            "--set",
            "pipeline.inference.tp=2",
            "--set",
            "pipeline.training.activation_recompute=false",
        ]
    )
    assert "enable activation_recompute" in off
