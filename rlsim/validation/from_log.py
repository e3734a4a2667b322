"""`validate --from-log`: fit the synchronous trainer's log, predict the asynchronous trainer.

The workflow `rlsim fit` offers a real run, on a run this repository makes: run the synchronous
trainer, which writes verl-style metrics (`timing_s/*`, `response_length/*`; rlsim.trainer.
verl_log); describe its setup as a base scenario that knows only what a user would write down
(the model, the pools, the batch, the verifier; the lengths a guess, no host overhead); fit the
base to the log (`rlsim.fit.run.fit_log`); change the fitted scenario's architecture to the
asynchronous trainer's (its pools, queue depth, staleness and weight sync, from the trainer's
config alone); simulate it; then run the asynchronous trainer and measure it. The speedup
predicted from the log is compared with the one measured. The CPU profile (quick calibration
unless given) is what the datasheet is for a GPU run: the fit corrects it. Units: seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from rlsim.calibrated import CalibratedFrom
from rlsim.errors import ScenarioError
from rlsim.validation.mapping import RunFiles, scenario_for_run, write_inputs
from rlsim.validation.phases import phase_times, simulated_timeline, trainer_timeline
from rlsim.validation.profiles import calibrate_cpu, check_profile, with_policy_ops, write_policy_config
from rlsim.validation.run import (
    DEFAULT_STEPS,
    QUICK_STEPS,
    Progress,
    inputs_folder,
    run_trainer,
    torch_threads_pinned,
    trainer_config,
)

FITTED_FIELDS = ("efficiency", "calibrated_from")


@dataclass(frozen=True)
class FromLogResult:
    """Step times: measured sync (its log), fitted sync, predicted and measured async."""

    sync_measured_s: float
    sync_fitted_s: float
    async_predicted_s: float
    async_measured_s: float
    calibrated: CalibratedFrom
    folder: str | None

    @property
    def predicted_speedup(self) -> float:
        return self.sync_measured_s / self.async_predicted_s

    @property
    def measured_speedup(self) -> float:
        return self.sync_measured_s / self.async_measured_s

    @property
    def speedup_error(self) -> float:
        return self.predicted_speedup / self.measured_speedup - 1.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "calibrated": self.calibrated.model_dump(mode="json"),
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup,
            "speedup_error": self.speedup_error,
        }


def base_scenario(doc: dict[str, Any], files: RunFiles) -> dict[str, Any]:
    """The sync run's setup as a user would write it: lengths guessed, no host overhead."""
    data = scenario_for_run(doc, files)
    cap = int(doc["config"]["max_new_tokens"])
    data["workload"]["response_tokens"] = {"kind": "lognormal", "mean": cap / 2, "sigma": 0.5, "max": cap}
    data["pipeline"]["training"]["step_overhead_s"] = 0.0
    return data


def async_prediction(fitted: dict[str, Any], async_cfg: Any, sync_doc: dict[str, Any], files: RunFiles) -> dict:
    """The fitted scenario under the asynchronous trainer's architecture (from its config only)."""
    pseudo = {
        "mode": "async",
        "config": asdict(async_cfg),
        "samples": sync_doc["samples"][:1],  # the prompt length
        "summary": {"timing/score_mean_s": sync_doc["summary"].get("timing/score_mean_s", 0.0)},
    }
    data = scenario_for_run(pseudo, files)
    data["workload"]["response_tokens"] = fitted["workload"]["response_tokens"]
    for key in ("mfu", "step_overhead_s"):
        if key in fitted["pipeline"]["training"]:
            data["pipeline"]["training"][key] = fitted["pipeline"]["training"][key]
    return data | {k: fitted[k] for k in FITTED_FIELDS if k in fitted}


def validate_from_log(
    steps: int | None = None,
    quick: bool = False,
    profile: str | None = None,
    keep: str | None = None,
    progress: Progress | None = None,
) -> FromLogResult:
    """Fit the sync trainer's log, predict the async trainer, measure it (see the module doc)."""
    from rlsim.fit.efficiency import simulated_phases
    from rlsim.fit.run import fit_log, write_fit
    from rlsim.runs import run_mode
    from rlsim.scenario import scenario_from_dict

    steps = steps if steps is not None else (QUICK_STEPS if quick else DEFAULT_STEPS)
    if steps < 3:
        raise ScenarioError("--steps", f"{steps}: fitting skips the first step and needs two more")
    if profile:
        check_profile(profile)
    with inputs_folder(keep) as folder, torch_threads_pinned():
        sync_cfg = trainer_config("sync", steps, quick, folder / "sync-timeline.json")
        sync_cfg = replace(sync_cfg, metrics_path=str(folder / "sync-metrics.jsonl"))
        async_cfg = trainer_config("async", steps, quick, folder / "async-timeline.json")
        policy = write_policy_config(sync_cfg, folder)
        path = (
            with_policy_ops(Path(profile), policy, folder, progress)
            if profile
            else calibrate_cpu(folder, progress, policy)
        )
        sync_doc, _ = run_trainer(sync_cfg, progress)
        files = write_inputs(folder, sync_doc, path)
        (folder / "base.yaml").write_text(yaml.safe_dump(base_scenario(sync_doc, files), sort_keys=False))
        if progress:
            progress("fitting the sync trainer's log", 0, 0)
        fit = fit_log(sync_cfg.metrics_path, str(folder / "base.yaml"), str(folder / "fitted.yaml"))
        write_fit(fit, str(folder / "fitted.yaml"))
        predicted = async_prediction(fit.data, async_cfg, sync_doc, files)
        (folder / "async-predicted.yaml").write_text(yaml.safe_dump(predicted, sort_keys=False))
        sim = run_mode(scenario_from_dict(predicted, base_dir=str(folder)))
        async_predicted = phase_times(simulated_timeline(sim.result.recorder), steps=async_cfg.steps).step_s
        sync_fitted = simulated_phases(fit.scenario.model_copy(update={"steps": steps}))["step"]
        async_doc, _ = run_trainer(async_cfg, progress)
    return FromLogResult(
        sync_measured_s=phase_times(trainer_timeline(sync_doc)).step_s,
        sync_fitted_s=sync_fitted,
        async_predicted_s=async_predicted,
        async_measured_s=phase_times(trainer_timeline(async_doc)).step_s,
        calibrated=fit.calibrated,
        folder=keep,
    )
