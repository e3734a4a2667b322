"""`validate()`: measure the CPU, run the trainer, simulate the same run, compare per phase.

For each trainer mode (sync, async): run the real GRPO trainer (`rlsim.trainer`, one torch
thread per pool), write the scenario that describes the run (`mapping.py`: the policy's
config.json, the run's response lengths, the profile), simulate it (`rlsim.runs.run_mode`), read
both timelines the same way (`phases.py`) and compare (`compare.py`). The profile is measured
first (quick CPU sweep, one intra-op thread like the trainer's pools) unless one is given, and
either way holds the policy's own operators (`model_ops`: its decode iteration, prefill,
training pass, optimizer step and weight update timed with its real module at its shapes),
which the performance models use for this model instead of the generic terms.

The trainer runs before the simulation because the scenario uses the run's own response lengths:
what is validated is the time the simulator gives to a workload, not the policy's lengths.
torch is imported inside the functions here (through the trainer and the calibration), never at
module level. Returns data; it prints nothing. Units: seconds, fractions.
"""

from __future__ import annotations

import datetime
import os
import platform
import resource
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from rlsim.errors import ScenarioError
from rlsim.validation import compare
from rlsim.validation.mapping import scenario_for_run, write_inputs
from rlsim.validation.phases import PhaseTimes, phase_times, simulated_timeline, trainer_timeline
from rlsim.validation.profiles import calibrate_cpu, check_profile, with_policy_ops, write_policy_config

MODES = ("sync", "async")
DEFAULT_STEPS = 30
QUICK_STEPS = 6
QUICK_WARMUP_STEPS = 20  # the supervised warm start is not timed; --quick keeps it short
SCHEMA = "rlsim.validation/1"
# (label, done, total): what is running and how far along it is; total 0 = unknown.
Progress = Callable[[str, int, int], None]


@dataclass
class ModeValidation:
    """One trainer mode: its run, the scenario that describes it, both phase times, the rows."""

    mode: str
    doc: dict[str, Any]  # the trainer's JSON document
    scenario: dict[str, Any]  # the scenario mapping (also written as <mode>-scenario.yaml)
    measured: PhaseTimes
    predicted: PhaseTimes
    rows: list[compare.Row]
    cpu_share: float | None  # trainer process CPU time / wall time (sync only; 1.0 = a whole core)


@dataclass
class ValidationResult:
    """Everything `rlsim validate` shows and writes."""

    modes: list[ModeValidation]
    rows: list[compare.Row]
    targets: list[compare.Target]
    profile: dict[str, Any]  # the profile's fitted fields (measurements left out)
    profile_origin: str  # the path given, or "measured now (quick CPU sweep)"
    tolerance: float
    idle_tolerance: float
    machine: dict[str, Any] = field(default_factory=dict)
    folder: str | None = None  # where the inputs were kept, if asked
    repeats: list[list[compare.Row]] = field(default_factory=list)  # each run's rows, when repeated

    @property
    def failures(self) -> list[compare.Row]:
        return compare.failures(self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "machine": self.machine,
            "profile_origin": self.profile_origin,
            "profile": self.profile,
            "tolerance": self.tolerance,
            "idle_tolerance": self.idle_tolerance,
            "modes": [
                {
                    "mode": m.mode,
                    "trainer_config": m.doc["config"],
                    "trainer_summary": m.doc["summary"],
                    "scenario": m.scenario,
                    "measured": asdict(m.measured),
                    "predicted": asdict(m.predicted),
                    "cpu_share": m.cpu_share,
                }
                for m in self.modes
            ],
            "rows": [compare.row_dict(r) for r in self.rows],
            "targets": [compare.target_dict(t) for t in self.targets],
            "failures": len(self.failures),
            "folder": self.folder,
            "repeats": [[compare.row_dict(r) for r in rows] for rows in self.repeats],
        }


def trainer_config(mode: str, steps: int, quick: bool, out_path: Path) -> Any:
    """The trainer's config for a validation run: defaults, one torch thread per pool."""
    from rlsim.trainer.async_loop import AsyncConfig
    from rlsim.trainer.config import GRPOConfig
    from rlsim.trainer.sync_loop import SyncConfig

    warmup = QUICK_WARMUP_STEPS if quick else GRPOConfig.warmup_steps
    common = {"steps": steps, "warmup_steps": warmup, "out_path": str(out_path)}
    if mode == "sync":
        return SyncConfig(threads=1, **common)
    return AsyncConfig(generator_threads=1, trainer_threads=1, **common)


def run_trainer(cfg: Any, progress: Progress | None) -> tuple[dict[str, Any], float | None]:
    """Run the trainer; its document and, for the one-process sync loop, CPU time / wall time."""
    from rlsim.trainer.async_loop import AsyncConfig, run_async
    from rlsim.trainer.sync_loop import run_sync

    mode = "async" if isinstance(cfg, AsyncConfig) else "sync"
    if progress:  # one line, then nothing: redrawing a progress bar while the trainer is timed
        # preempted the pinned async processes and took the sync loop's GIL (+40% on generation)
        progress(f"running the {mode} trainer ({cfg.steps} steps; no redraws while it is timed)", 0, 0)
    if mode == "async":
        return run_async(cfg), None
    usage0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    doc = run_sync(cfg)
    usage1, wall1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    return doc, cpu / (wall1 - wall0)


def validate_mode(
    mode: str,
    cfg: Any,
    profile_path: Path,
    folder: Path,
    tolerance: float,
    idle_tolerance: float,
    progress: Progress | None,
) -> ModeValidation:
    """Run one trainer mode, simulate the scenario that describes it, compare."""
    from rlsim.runs import run_mode
    from rlsim.scenario import scenario_from_dict

    doc, cpu_share = run_trainer(cfg, progress)
    files = write_inputs(folder, doc, profile_path)
    data = scenario_for_run(doc, files)
    (folder / f"{mode}-scenario.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    if progress:
        progress(f"simulating the {mode} scenario", 0, 0)
    simulated = run_mode(scenario_from_dict(data, base_dir=str(folder)))
    measured = phase_times(trainer_timeline(doc))
    predicted = phase_times(simulated_timeline(simulated.result.recorder), steps=cfg.steps)
    rows = compare.compare_mode(mode, predicted, measured, tolerance, idle_tolerance)
    return ModeValidation(mode, doc, data, measured, predicted, rows, cpu_share)


@contextmanager
def inputs_folder(keep: str | None) -> Iterator[Path]:
    if keep is not None:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
        return
    with tempfile.TemporaryDirectory(prefix="rlsim-validate-") as tmp:
        yield Path(tmp)


@contextmanager
def torch_threads_pinned() -> Iterator[None]:
    """Give the caller its torch thread count back (the trainer loops set their own)."""
    import torch

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def machine() -> dict[str, Any]:
    """The host, for the record: CPUs, load averages now, platform, date."""
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": datetime.datetime.now().isoformat(timespec="minutes"),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15": list(load) if load else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _origin(given: str | None, used: Path) -> str:
    if given is None:
        return "measured now (quick CPU sweep at the policy's shape with its own operators, one thread)"
    return given if Path(given) == used else f"{given}, with the policy's operators timed now"


def validate(
    modes: Sequence[str] = MODES,
    steps: int | None = None,
    quick: bool = False,
    profile: str | None = None,
    tolerance: float = 0.2,
    idle_tolerance: float = 0.05,
    keep: str | None = None,
    progress: Progress | None = None,
) -> ValidationResult:
    """Calibrate (unless `profile`), run and simulate each mode, compare; see the module doc."""
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ScenarioError("--mode", f"unknown mode {unknown}; choose sync, async or both")
    steps = steps if steps is not None else (QUICK_STEPS if quick else DEFAULT_STEPS)
    if steps < 2:
        raise ScenarioError("--steps", f"{steps}: a step time needs at least 2 RL steps")
    if profile:
        check_profile(profile)
    before = machine()
    with inputs_folder(keep) as folder, torch_threads_pinned():
        configs = {m: trainer_config(m, steps, quick, folder / f"{m}-timeline.json") for m in modes}
        policy = write_policy_config(configs[modes[0]], folder)
        if profile:
            path = with_policy_ops(Path(profile), policy, folder, progress)
        else:
            path = calibrate_cpu(folder, progress, policy)
        fitted = check_profile(str(path))
        runs = [validate_mode(m, configs[m], path, folder, tolerance, idle_tolerance, progress) for m in modes]
    rows = [r for run in runs for r in run.rows]
    by_mode = {run.mode: run for run in runs}
    if set(MODES) <= set(by_mode):
        s, a = by_mode["sync"], by_mode["async"]
        rows.append(compare.speedup_row(s.predicted, a.predicted, s.measured, a.measured, tolerance))
    after = machine()
    info = before | {"load_average_after": after["load_average_1_5_15"]}
    return ValidationResult(
        modes=runs,
        rows=rows,
        targets=compare.targets(rows),
        profile=fitted,
        profile_origin=_origin(profile, path),
        tolerance=tolerance,
        idle_tolerance=idle_tolerance,
        machine=info,
        folder=keep,
    )


def validate_repeated(repeats: int, progress: Progress | None = None, **kwargs: Any) -> ValidationResult:
    """`validate` `repeats` times, calibration included; rows and targets are the medians over runs.

    The last run's trainer documents, scenarios and profile stand for the rest (and are the ones
    `keep` leaves on disk); every run's rows are in `repeats`.
    """
    if repeats < 1:
        raise ScenarioError("--repeats", f"{repeats}: at least one run")
    results = []
    for i in range(repeats):
        label = f"run {i + 1}/{repeats}: " if repeats > 1 else ""
        step_progress = (lambda text, d, t, label=label: progress(label + text, d, t)) if progress else None
        results.append(validate(progress=step_progress, **kwargs))
    if repeats == 1:
        return results[0]
    rows = compare.median_rows([r.rows for r in results])
    last = results[-1]
    last.machine["load_average_1_5_15"] = results[0].machine.get("load_average_1_5_15")
    return replace(last, rows=rows, targets=compare.targets(rows), repeats=[r.rows for r in results])
