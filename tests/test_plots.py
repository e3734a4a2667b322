"""Plots: files of the right format and pixel size for simulate, sweep and plan; matplotlib only
where plotting happens (the plain `simulate` path must not import it)."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from rlsim.runs import run_modes
from rlsim.scenario import load_scenario

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def svg_size_pt(path) -> tuple[float, float]:
    head = path.read_text()[:2000]
    m = re.search(r'<svg[^>]*\bwidth="([\d.]+)pt"[^>]*\bheight="([\d.]+)pt"', head, re.S)
    assert m, head[:300]
    return float(m.group(1)), float(m.group(2))


@pytest.fixture(scope="module")
def runs():
    return run_modes(load_scenario("small-budget", ["steps=3"]))


def _expected_px(fig) -> tuple[int, int]:
    w, h = fig.get_size_inches() * fig.dpi
    return round(w), round(h)


def test_simulate_plot_png_has_the_layout_size(tmp_path, runs):
    from rlsim.cli import app
    from rlsim.report.plots import WIDTH_PX, simulation_figure

    out = tmp_path / "timeline.png"
    res = CliRunner().invoke(app, ["simulate", "small-budget", "--steps", "3", "--plot", str(out)])
    assert res.exit_code == 0, res.output
    assert png_size(out) == _expected_px(simulation_figure(runs))
    assert png_size(out)[0] == WIDTH_PX
    assert out.stat().st_size > 20_000  # five Gantt panels and a bar chart, not a blank canvas


def test_simulate_plot_svg(tmp_path):
    from rlsim.cli import app
    from rlsim.report.plots import DPI, WIDTH_PX

    out = tmp_path / "timeline.svg"
    res = CliRunner().invoke(app, ["simulate", "small-budget", "--steps", "2", "--mode", "async", "--plot", str(out)])
    assert res.exit_code == 0, res.output
    width_pt, height_pt = svg_size_pt(out)
    assert width_pt == pytest.approx(WIDTH_PX * 72 / DPI)
    assert height_pt > 200
    assert "rollout/engine0" in out.read_text()


def test_bad_plot_extension_fails_before_simulating(tmp_path, monkeypatch):
    from rlsim.cli import app

    def boom(*a, **k):
        raise AssertionError("simulated despite a bad --plot path")

    monkeypatch.setattr("rlsim.runs.run_modes", boom)
    res = CliRunner().invoke(app, ["simulate", "--plot", str(tmp_path / "x.jpg")])
    assert res.exit_code == 2
    assert "--plot" in res.output and ".png" in res.output


def test_timeline_and_gpu_time_figures(tmp_path, runs):
    from rlsim.report.plots import (
        WIDTH_PX,
        gpu_minutes_per_step,
        gpu_time_figure,
        save_figure,
        timeline_figure,
    )

    for fig, name in ((timeline_figure(runs, steps=2), "t.png"), (gpu_time_figure(runs), "g.png")):
        save_figure(fig, str(tmp_path / name))
        assert png_size(tmp_path / name) == _expected_px(fig)
        assert _expected_px(fig)[0] == WIDTH_PX
    for r in runs:  # the bar's height is the rented GPU time per step
        per_step = sum(gpu_minutes_per_step(r).values())
        assert per_step == pytest.approx(r.metrics.gpus * r.metrics.wall_time_s / 60 / r.metrics.steps)


SWEEP = [
    {
        "mode": mode,
        "inference_gpus": g,
        "step_time_s": 100 / g + k,
        "usd_per_step": 0.5 * g + k,
        "idle_fraction": 0.1 * k,
    }
    for k, mode in enumerate(["sync", "async"])
    for g in (2, 4, 6)
]


def test_sweep_figure_numeric_and_categorical(tmp_path):
    from rlsim.report.planner_plots import sweep_figure
    from rlsim.report.plots import WIDTH_PX, save_figure

    fig = sweep_figure(
        SWEEP,
        "inference_gpus",
        ["step_time_s", "usd_per_step", "idle_fraction"],
        series="mode",
        labels={"step_time_s": "step time (s)"},
    )
    save_figure(fig, str(tmp_path / "sweep.png"))
    w, h = png_size(tmp_path / "sweep.png")
    assert (w, h) == (WIDTH_PX, 340)
    fig = sweep_figure(SWEEP, "mode", ["usd_per_step"])  # categorical x: modes
    save_figure(fig, str(tmp_path / "sweep.svg"))
    assert "sync" in (tmp_path / "sweep.svg").read_text()
    with pytest.raises(ValueError):
        sweep_figure([], "x", ["y"])


def test_pareto_front_and_frontier_figure(tmp_path):
    from rlsim.report.planner_plots import frontier_figure, pareto_front
    from rlsim.report.plots import WIDTH_PX, save_figure

    pts = [
        {"label": n, "wall_days": d, "usd_per_run": u}
        for n, d, u in [
            ("a", 1.0, 900),
            ("b", 2.0, 500),
            ("c", 2.5, 600),
            ("d", 3.0, 300),
            ("e", 3.0, 350),
        ]
    ]
    assert [p["label"] for p in pareto_front(pts, "wall_days", "usd_per_run")] == ["a", "b", "d"]
    fig = frontier_figure(pts, labels={"wall_days": "days", "usd_per_run": "$ per run"})
    save_figure(fig, str(tmp_path / "frontier.png"))
    assert png_size(tmp_path / "frontier.png") == (WIDTH_PX, 600)
    fig = frontier_figure(pts, frontier=pts[:2])
    save_figure(fig, str(tmp_path / "frontier.svg"))
    assert svg_size_pt(tmp_path / "frontier.svg")[0] == pytest.approx(864)


def test_plain_simulate_does_not_import_matplotlib():
    """A fresh interpreter: simulate (with --json and --trace) must leave matplotlib unloaded."""
    code = textwrap.dedent("""
        import os, sys, tempfile
        from typer.testing import CliRunner
        from rlsim.cli import app
        d = tempfile.mkdtemp()
        args = ["simulate", "small-budget", "--steps", "2", "--json", os.path.join(d, "m.json"),
                "--trace", os.path.join(d, "t.json")]
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
        mpl = [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]
        print("LOADED" if mpl else "CLEAN")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("CLEAN")
