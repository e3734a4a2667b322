"""`rlsim validate --from-log`: fit the sync trainer's log, predict the async trainer, measure it.

The mapping from the sync run to the base and from the fit to the async prediction is checked on
synthetic documents; the command runs once end to end (`--quick --steps 3`, the session's CLI
profile) with a limit no run can miss: two shared cores make the measured speedup noisy, so the
figure is reported (docs/LOG.md), not asserted.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from cli_helpers import runner
from test_calibrate_cli import cli_profile  # noqa: F401  (the shared session fixture)
from test_validate import FILES, _doc

from rlsim.cli import app
from rlsim.scenario import Mode, load_scenario, scenario_from_dict
from rlsim.validation.from_log import async_prediction, base_scenario


def test_the_base_knows_only_the_setup() -> None:
    sc = scenario_from_dict(base_scenario(_doc("sync"), FILES))
    assert sc.pipeline.mode is Mode.colocated and sc.pipeline.training.step_overhead_s == 0.0
    assert sc.workload.response_tokens.kind == "lognormal" and sc.workload.response_tokens.max == 8


def test_the_prediction_is_the_fit_under_the_async_architecture() -> None:
    from rlsim.trainer.async_loop import AsyncConfig

    fitted = base_scenario(_doc("sync"), FILES)
    fitted["workload"]["response_tokens"] = {"kind": "lognormal", "mean": 2.5, "sigma": 0.2, "max": 8}
    fitted["pipeline"]["training"] |= {"mfu": 0.3, "step_overhead_s": 0.001}
    fitted["efficiency"] = {"generation_speed": 0.6}
    cfg = AsyncConfig(steps=10, prompts_per_step=4, minibatches=2)
    sc = scenario_from_dict(async_prediction(fitted, cfg, _doc("sync"), FILES))
    assert sc.pipeline.mode is Mode.async_ and sc.pool_gpus == (1, 1)
    assert sc.pipeline.depth == asdict(cfg)["queue_depth"]
    assert sc.efficiency.generation_speed == 0.6 and sc.pipeline.training.mfu == 0.3
    assert sc.pipeline.training.step_overhead_s == 0.001 and sc.workload.response_tokens.mean == 2.5


@pytest.mark.slow
def test_validate_from_log_end_to_end(cli_profile: Path, tmp_path: Path) -> None:  # noqa: F811
    out, keep = tmp_path / "v.json", tmp_path / "inputs"
    args = ["validate", "--from-log", "--quick", "--steps", "3", "--profile", str(cli_profile),
            "--json", str(out), "--keep", str(keep), "--tolerance", "1000"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "speedup: predicted" in res.output
    data = json.loads(out.read_text())
    for key in ("sync_measured_s", "sync_fitted_s", "async_predicted_s", "async_measured_s", "measured_speedup"):
        assert data[key] > 0, key
    assert abs(data["sync_fitted_s"] / data["sync_measured_s"] - 1) < 0.02  # the fit reproduces its log
    fitted = load_scenario(keep / "fitted.yaml")
    assert fitted.calibrated_from.format == "verl-jsonl"
    assert fitted.calibrated_from.source.endswith("sync-metrics.jsonl")
    assert "efficiency.generation_speed" in {v.field for v in fitted.calibrated_from.fitted}
