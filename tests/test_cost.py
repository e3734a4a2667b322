"""Cost projections: `rlsim cost` against a hand computation, the run projections (steady
steps, length-schedule integration) and the price-row helpers."""

from __future__ import annotations

import json
from datetime import date

import pytest
import yaml
from small_scenarios import SMALL, deep_merge, make
from typer.testing import CliRunner

from rlsim.catalog.prices import is_stale, load_prices
from rlsim.cli import app
from rlsim.metrics.cost import (
    cheapest_row,
    cost_line,
    price_projection,
    project_linear,
    project_points,
    rows_for_gpu,
)
from rlsim.planner.costing import cost_report, sample_scenarios
from rlsim.runs import run_mode
from rlsim.simulator.states import IDLE_STATES

runner = CliRunner(env={"COLUMNS": "200"})
# An 8-GPU node (4 GPUs unassigned): the catalog's H100 products are 1- or 8-GPU instances, and a
# row prices only clusters whose nodes it builds
PRICED = deep_merge(SMALL, {"cluster": {"gpus_per_node": 8}})


def priced(over: dict | None = None, overrides: list[str] = ()):
    return make(over, [*overrides, "cluster.gpus_per_node=8"])


def _write(tmp_path, data, name="sc.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_cost_cli_matches_hand_computation(tmp_path):
    """GPU-hours x price and idle GPU-seconds x price, by hand, match `rlsim cost` to the cent."""
    data = deep_merge(PRICED, {"steps": 4})
    path = _write(tmp_path, data)
    run_steps = 1000
    out = tmp_path / "cost.json"
    res = runner.invoke(app, ["cost", path, "--steps", str(run_steps), "--json", str(out)])
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())

    m = run_mode(priced({"steps": 4})).metrics  # the same simulation, run independently
    # depth 0 (sync): steady after 1 step, measured by 4 steps. Fill once, then steady steps.
    wall_s = m.wall_time_s + (run_steps - m.steps) * m.steady_step_time_s
    used = sum(m.gpu_seconds_by_state.values())
    idle_s = sum(m.gpu_seconds_by_state[s] for s in IDLE_STATES) + (m.gpus * m.wall_time_s - used)
    idle_run_s = idle_s * wall_s / m.wall_time_s  # the simulated idle share, over the whole run
    rows = [r for r in load_prices() if r.gpu == "h100-sxm" and r.gpus_per_instance in (None, 8)]
    assert len(got["lines"]) == len(rows)
    by_key = {(r.provider, r.product, r.pricing, r.region, r.usd_per_gpu_hour): r for r in rows}
    for line in got["lines"]:
        row = by_key[
            (
                line["provider"],
                line["product"],
                line["pricing"],
                line["region"],
                line["usd_per_gpu_hour"],
            )
        ]
        gpu_hours = m.gpus * wall_s / 3600
        assert round(line["gpu_hours_per_run"], 2) == round(gpu_hours, 2)
        assert round(line["usd_per_run"], 2) == round(gpu_hours * row.usd_per_gpu_hour, 2)
        assert round(line["usd_per_step"], 2) == round(gpu_hours * row.usd_per_gpu_hour / run_steps, 2)
        assert round(line["idle_usd_per_run"], 2) == round(idle_run_s / 3600 * row.usd_per_gpu_hour, 2)
        assert line["interruptible"] == (row.pricing == "spot")
        assert line["stale"] == is_stale(row, date.today())
    runs = [line["usd_per_run"] for line in got["lines"]]
    assert runs == sorted(runs)  # cheapest first
    assert got["projection"]["method"] == "steady"


def test_cost_cli_filters_and_table(tmp_path):
    path = _write(tmp_path, PRICED)
    res = runner.invoke(
        app,
        ["cost", path, "--provider", "aws", "--pricing", "spot", "--preemption-overhead", "0.2"],
    )
    assert res.exit_code == 0, res.output
    assert "AWS" in res.output and "spot*" in res.output and "interruptible" in res.output
    res = runner.invoke(app, ["cost", path, "--provider", "nobody"])
    assert res.exit_code == 2 and "unknown provider 'nobody'" in res.output
    res = runner.invoke(app, ["cost", path, "--provider", "lambda", "--pricing", "spot"])
    assert res.exit_code == 2 and "no spot price for GPU 'h100-sxm' from lambda" in res.output
    res = runner.invoke(app, ["cost", path, "--provider", "lamda"])
    assert res.exit_code == 2 and "did you mean 'Lambda'?" in res.output


def test_cost_cli_csv_and_overwrite(tmp_path):
    path = _write(tmp_path, PRICED)
    res = runner.invoke(app, ["cost", path, "--pricing", "on-demand", "--csv", "-"])
    assert res.exit_code == 0, res.output
    assert "warning: run_steps: not set; projecting a 1,000-step run" in res.stderr
    header, *lines = res.stdout.strip().splitlines()
    assert header.startswith("gpu,provider,product,pricing") and all(",on_demand," in x for x in lines)
    res = runner.invoke(app, ["cost", path, "--csv", path])
    assert res.exit_code == 2 and "--force" in res.output


def test_user_price_file_overrides(tmp_path):
    prices = tmp_path / "p.yaml"
    prices.write_text(
        yaml.safe_dump(
            [
                {
                    "provider": "MyCloud",
                    "product": "box",
                    "gpu": "h100-sxm",
                    "pricing": "committed",
                    "usd_per_gpu_hour": 0.5,
                    "observed": "2020-01-01",
                    "source": "my invoice",
                }
            ]
        )
    )
    report = cost_report(make(), prices_file=prices, pricing="committed", today=date(2026, 1, 1))
    first = report.lines[0]
    assert (first.provider, first.usd_per_gpu_hour, first.stale) == ("MyCloud", 0.5, True)


def test_spot_preemption_overhead_inflates_time():
    m = run_mode(make()).metrics
    spot = next(r for r in load_prices() if r.gpu == "h100-sxm" and r.pricing == "spot")
    base = price_projection(project_linear(m, 100), spot)
    slow = price_projection(project_linear(m, 100), spot, preemption_overhead=0.25)
    assert slow.usd_per_run == pytest.approx(1.25 * base.usd_per_run)
    assert slow.wall_days_per_run == pytest.approx(1.25 * base.wall_days_per_run)
    assert base.interruptible


def test_cost_line_is_linear_projection():
    m = run_mode(make()).metrics
    row = cheapest_row(load_prices(), "h100-sxm")
    assert cost_line(m, row, run_steps=30) == price_projection(project_linear(m, 30), row)
    assert cost_line(m, row).usd_per_run == pytest.approx(m.gpus * m.wall_time_s / 3600 * row.usd_per_gpu_hour)


def _metrics_with(m, *, steps, wall_s, steady_s, tokens):
    return m.model_copy(
        update={
            "steps": steps,
            "wall_time_s": wall_s,
            "step_time_s": wall_s / steps,
            "steady_step_time_s": steady_s,
            "generated_tokens": tokens,
        }
    )


def test_project_points_trapezoid_by_hand():
    """Step time 10, 20, 40 s at fractions 0, 0.5, 1: trapezoid mean (15*0.5 + 30*0.5) = 22.5 s."""
    m = run_mode(make()).metrics
    pts = [
        (0.0, _metrics_with(m, steps=4, wall_s=46.0, steady_s=10.0, tokens=400)),
        (0.5, _metrics_with(m, steps=4, wall_s=86.0, steady_s=20.0, tokens=800)),
        (1.0, _metrics_with(m, steps=4, wall_s=166.0, steady_s=40.0, tokens=1600)),
    ]
    p = project_points(pts, 1000)
    assert p.method == "schedule" and p.sample_fractions == [0.0, 0.5, 1.0]
    assert p.wall_time_s == pytest.approx(6.0 + 1000 * 22.5)  # fill of the first point, then steps
    assert p.generated_tokens == pytest.approx(1000 * (150 * 0.5 + 300 * 0.5))
    # too few steps to measure steady state for a pipeline that takes 3 steps to fill: average steps
    avg = project_points(pts, 1000, fill_steps=3)
    assert avg.method == "schedule-average"
    assert avg.wall_time_s == pytest.approx(1000 * ((11.5 + 21.5) / 4 + (21.5 + 41.5) / 4))


def test_project_points_single_point():
    m = run_mode(make({"steps": 4})).metrics
    assert project_points([(0.0, m)], 2) == project_linear(m, 2)  # run shorter than the simulation
    p = project_points([(0.0, m)], 100)
    assert p.wall_time_s == pytest.approx(m.wall_time_s + 96 * m.steady_step_time_s)
    assert project_points([(0.0, m)], 100, fill_steps=3).method == "linear"
    with pytest.raises(ValueError):
        project_points([(0.5, m), (0.0, m)], 100)


def test_length_schedule_sample_points_and_integration():
    sc = priced(
        overrides=[
            "workload.length_schedule.start_mean=100",
            "workload.length_schedule.end_mean=500",
        ]
    )
    samples = sample_scenarios(sc, 5)
    assert [f for f, _ in samples] == [0.0, 0.25, 0.5, 0.75, 1.0]
    means = [s.workload.length_schedule.start_mean for _, s in samples]
    assert means == [100, 200, 300, 400, 500]
    assert all(s.workload.length_schedule.end_mean == s.workload.length_schedule.start_mean for _, s in samples)
    assert sample_scenarios(make(), 5) == [(0.0, make())]

    grow = cost_report(sc, run_steps=200)
    short = cost_report(priced(overrides=["workload.response_tokens.mean=100"]), run_steps=200)
    long = cost_report(priced(overrides=["workload.response_tokens.mean=500"]), run_steps=200)
    assert grow.projection.method == "schedule" and len(grow.metrics) == 5
    assert short.projection.wall_time_s < grow.projection.wall_time_s < long.projection.wall_time_s


def test_price_row_helpers():
    rows = load_prices()
    h100 = rows_for_gpu(rows, "h100-sxm", providers=["AWS"], pricing="on_demand")
    assert h100 and all(r.provider == "AWS" and r.pricing == "on_demand" for r in h100)
    best = cheapest_row(rows, "h100-sxm")
    assert best.usd_per_gpu_hour == min(r.usd_per_gpu_hour for r in rows_for_gpu(rows, "h100-sxm", pricing="on_demand"))
    assert cheapest_row(rows, "h20") is None or cheapest_row(rows, "h20").gpu == "h20"
