"""Sweeps and executors: grid order, per-point errors, the CLI contract, and identical results
from every executor (in-process, local process pool, local Ray)."""

from __future__ import annotations

import json

import pytest
import yaml
from small_scenarios import SMALL, make
from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.errors import ScenarioError
from rlsim.planner.executors import LocalExecutor, RayExecutor, make_executor
from rlsim.planner.sweep import grid, parse_vary, run_sweep

runner = CliRunner(env={"COLUMNS": "200"})
VARY = ["pipeline.mode=sync,async", "pipeline.inference.tp=1,2"]


def _dump(result):
    return [
        (
            p.index,
            p.values,
            p.metrics.model_dump() if p.metrics else None,
            p.cost.model_dump() if p.cost else None,
            p.error,
        )
        for p in result.points
    ]


def test_grid_first_axis_slowest():
    axes = parse_vary(["a.b=1,2", "c=x,y,z"])
    assert axes == [("a.b", ["1", "2"]), ("c", ["x", "y", "z"])]
    assert grid(axes)[:4] == [
        ["a.b=1", "c=x"],
        ["a.b=1", "c=y"],
        ["a.b=1", "c=z"],
        ["a.b=2", "c=x"],
    ]


@pytest.mark.parametrize("bad", [[], ["novalue"], ["a=1", "a=2"], ["a="]])
def test_parse_vary_rejects(bad):
    with pytest.raises(ScenarioError, match="--vary"):
        parse_vary(bad)


def test_invalid_point_gets_its_error_not_a_crash():
    base = make(overrides=["cluster.gpus_per_node=8"])  # the catalog rents H100s by 1 or 8
    result = run_sweep(base, ["pipeline.inference.gpus=1,7"], executor=LocalExecutor(1))
    ok, bad = result.points
    assert ok.metrics is not None and ok.error is None and ok.cost is not None
    assert bad.metrics is None and "exceeds the cluster's 8 GPUs" in bad.error
    # a 4-GPU node: no catalog product builds it, so the point has metrics but no price
    four = run_sweep(make(), ["pipeline.inference.gpus=1"], executor=LocalExecutor(1)).points[0]
    assert four.metrics is not None and four.cost is None


def test_unknown_mode_is_a_user_error():
    with pytest.raises(ScenarioError, match="--mode"):
        run_sweep(make(), VARY, mode="turbo")


def test_process_pool_matches_in_process():
    serial = run_sweep(make(), VARY, executor=LocalExecutor(1))
    seen = []
    pooled = run_sweep(make(), VARY, executor=LocalExecutor(2), progress=lambda d, t: seen.append((d, t)))
    assert _dump(serial) == _dump(pooled)
    assert seen[-1] == (4, 4)


def test_ray_matches_local():
    pytest.importorskip("ray")
    local = run_sweep(make(), VARY, executor=LocalExecutor(2))
    ray_result = run_sweep(make(), VARY, executor=RayExecutor(workers=2))
    assert _dump(local) == _dump(ray_result)


def test_make_executor_rejects():
    with pytest.raises(ScenarioError, match="--executor"):
        make_executor("dask")
    with pytest.raises(ScenarioError, match="--ray-address"):
        make_executor("local", address="ray://x:10001")


def test_sweep_cli_json_and_table(tmp_path):
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(SMALL | {"cluster": {**SMALL["cluster"], "gpus_per_node": 8}}))
    out = tmp_path / "sweep.json"
    res = runner.invoke(
        app,
        [
            "sweep",
            str(path),
            "--vary",
            "pipeline.inference.tp=1,2",
            "--mode",
            "async",
            "--workers",
            "1",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "tp = pipeline.inference.tp" in res.output and "stale mean/max" in res.output
    assert "tail" in res.output

    data = json.loads(out.read_text())
    assert data["mode"] == "async" and [p["values"] for p in data["points"]] == [
        {"pipeline.inference.tp": 1},
        {"pipeline.inference.tp": 2},
    ]
    assert all(p["step_time_s"] > 0 and p["usd_per_step"] > 0 for p in data["points"])
    res = runner.invoke(
        app,
        ["sweep", str(path), "--vary", "pipeline.inference.tp=1", "--workers", "1", "--csv", "-"],
    )
    assert res.exit_code == 0 and res.output.startswith("index,pipeline.inference.tp,step_time_s")
    res = runner.invoke(app, ["sweep", str(path)])
    assert res.exit_code == 2 and "--vary" in res.output


def test_sweep_table_fits_80_columns_when_piped(tmp_path):
    """Piped (no terminal), rich renders 80 columns: no line is wider, no header word is split,
    and the columns left out are named."""
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(SMALL | {"cluster": {**SMALL["cluster"], "gpus_per_node": 8}}))
    vary = ["--vary", "pipeline.inference.gpus=1,2", "--vary", "pipeline.buffer_depth=1,2"]
    res = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["sweep", str(path), *vary, "--mode", "async", "--workers", "1"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80
    header = next(x for x in lines if "rollouts/s" in x or "idle" in x)
    assert "buffer_depth" in header and "gpus" in header
    assert "Not shown at this width: error" in res.stdout
