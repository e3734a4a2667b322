"""Round trip: simulate a scenario, write its steps as each supported log format, fit it back.

The original scenario has known efficiencies and a known length distribution; BASE is the same
run with those unknown (defaults, a wrong length guess). Fitting BASE to the log must recover
every value the format identifies within 3%, and the fitted scenario's simulation must match the
log within 2% per phase.
"""

from __future__ import annotations

import copy
import math

import log_writers as w
import pytest
import yaml

from rlsim.fit.lengths import truncated_mean
from rlsim.fit.phases import simulated_steps
from rlsim.fit.run import fit_log
from rlsim.placement import resolve
from rlsim.scenario import read_yaml, scenario_from_dict
from rlsim.simulator.run import simulate

TRUE = {
    "efficiency.generation_speed": 0.6,
    "pipeline.training.mfu": 0.3,
    "efficiency.logprob_speed": 1.4,
    "efficiency.weight_sync_s": 2.5,
    "pipeline.training.step_overhead_s": 4.0,
}
LENGTHS = {"kind": "lognormal", "mean": 3000.0, "sigma": 0.9, "max": 8192}
ALL_PHASES = {"generation", "logprob", "update_actor", "weight_sync", "step"}


def _base(mode: str) -> dict:
    data = read_yaml(load_scenario_path("default"))
    data["workload"]["group_correlation"] = 0.0  # the extremes' expectations assume independent samples
    data["pipeline"]["mode"] = mode
    data["steps"] = 11
    data["workload"]["response_tokens"] = {"kind": "lognormal", "mean": 1000.0, "sigma": 0.5, "max": 16384}
    return data


def load_scenario_path(name: str):
    from rlsim.scenario import builtin_scenarios

    return builtin_scenarios()[name]


def _original(base: dict) -> dict:
    data = copy.deepcopy(base)
    data["workload"]["response_tokens"] = dict(LENGTHS)
    data["efficiency"] = {k.split(".")[1]: v for k, v in TRUE.items() if k.startswith("efficiency.")}
    data["pipeline"]["training"] |= {"mfu": 0.3, "step_overhead_s": 4.0}
    return data


@pytest.fixture(scope="module", params=["sync", "colocated"])
def run(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    base = _base(request.param)
    steps = simulated_steps(simulate(resolve(scenario_from_dict(_original(base)))))
    return folder, base, steps


# format -> (writer, what the format identifies: "all", or the fields it cannot)
FORMATS = {
    "verl-jsonl": w.write_verl_jsonl,
    "verl-console": w.write_verl_console,
    "verl-wandb-csv": w.write_verl_wandb_csv,
    "verl-tensorboard": w.write_verl_tensorboard,
    "nemo-rl-json": w.write_nemo_rl_json,
    "slime": w.write_slime,
    "trl-state": w.write_trl_state,
    "csv": w.write_plain_csv,
}


def _write(fmt: str, steps, folder):
    target = folder / fmt
    if fmt in ("verl-tensorboard", "slime"):
        target.mkdir()
        return FORMATS[fmt](steps, target)
    suffix = {"verl-jsonl": ".jsonl", "verl-console": ".log", "nemo-rl-json": ".json", "trl-state": ".json"}
    return FORMATS[fmt](steps, folder / f"{fmt}{suffix.get(fmt, '.csv')}")


def _close(got: float, want: float, rel: float = 0.03) -> bool:
    return math.isclose(got, want, rel_tol=rel)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_fit_recovers_the_original(run, fmt):
    folder, base, steps = run
    base = copy.deepcopy(base)
    if fmt == "nemo-rl-json":  # NeMo RL logs the mean length only: the base carries spread and cap
        base["workload"]["response_tokens"] |= {"sigma": LENGTHS["sigma"], "max": LENGTHS["max"]}
    (folder / f"base-{fmt}.yaml").write_text(yaml.safe_dump(base))
    log = _write(fmt, steps, folder)
    res = fit_log(str(log), str(folder / f"base-{fmt}.yaml"), str(folder / f"fitted-{fmt}.yaml"))
    cal = res.calibrated
    assert cal.format == fmt and cal.steps == [1, 10] and len(cal.sha256) == 64
    fitted = {v.field: v.value for v in cal.fitted}
    sc = res.scenario

    # the workload
    dist = sc.workload.response_tokens
    if fmt == "slime":  # per-sample lengths: the observed lengths themselves
        assert dist.kind == "file" and res.lengths is not None
        want = truncated_mean(LENGTHS["mean"], LENGTHS["sigma"], LENGTHS["max"])
        assert _close(float(res.lengths.mean()), want)
    else:
        assert dist.kind == "lognormal" and dist.max == LENGTHS["max"]
        assert _close(dist.mean, LENGTHS["mean"]) and _close(dist.sigma, LENGTHS["sigma"])

    if fmt == "trl-state":  # lengths and step time only: no efficiency term is identified
        assert set(TRUE) <= set(cal.kept) and not set(TRUE) & set(fitted)
        return
    for field, value in TRUE.items():
        assert _close(fitted[field], value), (field, fitted[field], value)

    # the fitted scenario reproduces every phase of the log
    # verl logs the engines' own time too (generate_sequences, the mean engine's): the speed's phase
    engines = {"engine_generation"} if fmt.startswith("verl") else set()
    assert {r.phase for r in cal.residuals} == ALL_PHASES | engines
    speed = next(v for v in cal.fitted if v.field == "efficiency.generation_speed")
    assert speed.phase == ("engine_generation" if engines else "generation")
    for r in cal.residuals:
        assert r.residual is not None and abs(r.residual) < 0.02, r
