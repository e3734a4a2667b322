"""`rlsim fit` on the command line, and the what-if commands on the scenario it writes."""

from __future__ import annotations

import math

import log_writers as w
import pytest
import yaml
from cli_helpers import one_line_error, runner

from rlsim.cli import app
from rlsim.fit.efficiency import simulated_phases
from rlsim.fit.phases import simulated_steps
from rlsim.placement import resolve
from rlsim.scenario import builtin_scenarios, load_scenario, read_yaml, scenario_from_dict
from rlsim.simulator.run import simulate


def _base() -> dict:
    data = read_yaml(builtin_scenarios()["default"])
    return data | {"steps": 6, "pipeline": data["pipeline"] | {"mode": "colocated"}}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A colocated run 'measured' with slower engines, fitted from its verl console log."""
    folder = tmp_path_factory.mktemp("fit")
    base = _base()
    (folder / "base.yaml").write_text(yaml.safe_dump(base))
    real = scenario_from_dict(base | {"efficiency": {"generation_speed": 0.5}})
    log = w.write_verl_console(simulated_steps(simulate(resolve(real))), folder / "verl.log")
    out = folder / "fitted.yaml"
    res = runner.invoke(app, ["fit", str(log), "--scenario", str(folder / "base.yaml"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "residual" in res.output and "efficiency.generation_speed" in res.output
    return folder, out


def test_fitted_scenario_is_plain_yaml_with_provenance(fitted):
    folder, out = fitted
    data = yaml.safe_load(out.read_text())
    assert data["calibrated_from"]["source"].endswith("verl.log")
    assert data["calibrated_from"]["format"] == "verl-console"
    assert math.isclose(data["efficiency"]["generation_speed"], 0.5, rel_tol=0.03)
    sc = load_scenario(out)  # the loader accepts it unchanged
    assert sc.calibrated_from is not None and sc.pipeline.training.mfu is not None


def test_refuses_to_overwrite_without_force(fitted):
    folder, out = fitted
    args = ["fit", str(folder / "verl.log"), "--scenario", str(folder / "base.yaml"), "-o", str(out)]
    assert "--force" in one_line_error(args)
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    assert "--steps" in one_line_error([*args, "--force", "--steps", "x"])
    assert "--steps" in one_line_error([*args, "--force", "--steps", "50:60"])


def test_what_if_commands_accept_the_fitted_scenario(fitted):
    folder, out = fitted
    res = runner.invoke(app, ["compare", str(out), "--modes", "colocated,one_step_off,async"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sweep", str(out), "--vary", "pipeline.inference.gpus=2,4", "--mode", "one_step_off",
                              "--workers", "1", "--set", "steps=3"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["plan", str(out), "--max-gpus", "8", "--steps", "3", "--modes", "colocated,async"])
    assert res.exit_code == 0, res.output
    report = folder / "review.md"
    res = runner.invoke(app, ["report", str(out), "-o", str(report), "--steps", "3", "--no-sensitivity"])
    assert res.exit_code == 0, res.output
    text = report.read_text()
    assert "Fitted by rlsim fit from" in text and "verl.log" in text and "efficiency.generation_speed" in text


def test_per_sample_lengths_become_a_lengths_file(tmp_path):
    base = _base() | {"steps": 4}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "run").mkdir()
    log = w.write_slime(simulated_steps(simulate(resolve(scenario_from_dict(base)))), tmp_path / "run")
    out = tmp_path / "fitted.yaml"
    args = ["fit", str(log), "--scenario", str(tmp_path / "base.yaml"), "-o", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    sc = load_scenario(out)
    assert sc.workload.response_tokens.kind == "file"
    lengths = (tmp_path / sc.workload.response_tokens.path).read_text().split()
    assert len(lengths) == 3 * 512  # steps 1..3 (the first skipped), 64 x 8 samples each
    out.unlink()
    assert "fitted.lengths.txt" in one_line_error(args)  # the lengths file is not overwritten silently


def test_efficiency_fields_act_where_the_phase_is_timed():
    base = _base() | {"workload": _base()["workload"] | {"reward": {"kind": "none"}}}
    data = base | {"pipeline": base["pipeline"] | {"mode": "sync"}}
    plain = simulated_phases(scenario_from_dict(data))
    eff = {"generation_speed": 2.0, "logprob_speed": 4.0, "weight_sync_s": 7.0}
    fast = simulated_phases(scenario_from_dict(data | {"efficiency": eff}))
    assert math.isclose(fast["generation"], plain["generation"] / 2, rel_tol=1e-9)
    assert math.isclose(fast["logprob"], plain["logprob"] / 4, rel_tol=1e-9)
    assert fast["weight_sync"] == 7.0 and math.isclose(fast["update_actor"], plain["update_actor"])


def test_a_colocated_verl_gen_splits_into_the_engines_time_and_the_switch(tmp_path):
    """verl's hybrid engine times the switch inside `gen`; generate_sequences is the engines' part."""
    from rlsim.fit.run import fit_log

    base = tmp_path / "base.yaml"
    data = read_yaml(builtin_scenarios()["default"])
    data.update(steps=4)
    data["pipeline"] = {**data.get("pipeline", {}), "mode": "colocated"}
    base.write_text(yaml.safe_dump(data))
    log = tmp_path / "verl.log"
    log.write_text(
        "".join(
            f"step:{i} - timing_s/gen:150.0 - timing_s/generate_sequences:110.0 - timing_s/old_log_prob:20.0"
            f" - timing_s/update_actor:60.0 - timing_s/step:260.0\n"
            for i in range(1, 6)
        )
    )
    result = fit_log(str(log), str(base), str(tmp_path / "fitted.yaml"))
    switch = result.scenario.pipeline.colocation.reallocate_s
    fitted = {f.field: f for f in result.calibrated.fitted}
    assert fitted["pipeline.colocation.reallocate_s"].phase == "generation outside the engines"
    res = {r.phase: r for r in result.calibrated.residuals}
    # the engines' speed is fitted to their own time: generate_sequences, the mean engine's
    assert fitted["efficiency.generation_speed"].phase == "engine_generation"
    assert res["engine_generation"].measured_s == pytest.approx(110.0)
    assert res["engine_generation"].simulated_s == pytest.approx(110.0, rel=0.01)
    # gen waits for the slowest engine, which the simulation puts ahead of the mean: less than
    # (150 - 110) / 2 is left for each of the two switches, and gen less them is the slowest engine
    assert 0.0 < switch < 20.0
    assert res["generation"].measured_s == pytest.approx(150.0 - 2 * switch, rel=1e-4)
    assert res["generation"].simulated_s > res["engine_generation"].simulated_s
    assert abs(res["generation"].residual) < 0.05  # the switch is set from one fit, then refitted once


def test_simulated_engine_generation_is_the_mean_engine_and_gen_the_slowest():
    """verl's generate_sequences averages the rollout ranks (reduce_timing, AVG); gen waits for the last."""
    data = _base() | {"steps": 3}
    result = simulate(resolve(scenario_from_dict(data)))
    rec = result.recorder
    engines = [a for a, pool in rec.pools.items() if pool == "inference"]
    assert len(engines) > 1
    for s in simulated_steps(result):
        busy = [
            sum(
                iv.end_s - iv.start_s
                for iv in rec.actor_intervals[a]
                if iv.step == s.step and iv.state in ("prefill", "decode")
            )
            for a in engines
        ]
        assert s.engine_generation_s == pytest.approx(sum(busy) / len(busy))
        assert max(busy) > s.engine_generation_s  # unequal engines: the mean is below the slowest
        assert s.generation_s >= max(busy) - 1e-9  # the trainer waits for the slowest
