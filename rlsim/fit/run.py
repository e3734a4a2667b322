"""`rlsim fit`: a base scenario plus a real run's log -> a fitted scenario that reproduces it.

The base says what a log cannot (model, GPUs, mode, batch); the log gives the workload (response
lengths) and the phase times that fit the efficiency terms (rlsim.fit.efficiency). The result is
the base YAML with the fitted fields set and a `calibrated_from` block (source, sha256, steps,
each fitted value with its phase, per-phase residuals of the written scenario's simulation).
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsim.calibrated import CalibratedFrom, FittedValue, PhaseResidual
from rlsim.errors import ScenarioError
from rlsim.fit.efficiency import fit_efficiency, simulated_phases
from rlsim.fit.lengths import fit_lengths
from rlsim.fit.phases import phase_means
from rlsim.logs import RunLog, read_log
from rlsim.scenario import Scenario, read_yaml, scenario_from_dict, set_path

UNFITTED = ("generation_wait_s", "trainer_idle_ratio", "rollouter_idle_ratio")


@dataclass(frozen=True)
class FitResult:
    """The fitted scenario (validated), the YAML mapping to write, and the observed lengths file."""

    scenario: Scenario
    data: dict[str, Any]
    calibrated: CalibratedFrom
    lengths: np.ndarray | None
    lengths_path: Path | None
    unfitted: dict[str, float]  # means of logged pipelined-run figures the fit does not use


def parse_steps(text: str | None) -> tuple[int | None, int | None]:
    """'A:B' -> (A, B), inclusive; either side may be empty."""
    if text is None:
        return None, None
    a, sep, b = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return (int(a) if a.strip() else None), (int(b) if b.strip() else None)
    except ValueError:
        raise ScenarioError("--steps", f"'{text}' must look like A:B (log step numbers, inclusive)") from None


def _window(log: RunLog, steps: str | None) -> RunLog:
    first, last = parse_steps(steps)
    if steps is None and len(log.steps) >= 3:
        first = log.steps[1].step  # the first step also pays for start-up (compile, caches, warm-up)
    win = log.window(first, last)
    if not win.steps:
        raise ScenarioError("--steps", f"no step of {log.path} lies in {steps}")
    return win


def _sig(value: float) -> float:
    return float(f"{value:.6g}")


def fit_log(
    log_path: str, base_path: str, out_path: str, fmt: str | None = None, steps: str | None = None
) -> FitResult:
    """Read the log, fit the base scenario to it, and return what `rlsim fit` writes."""
    log = _window(read_log(log_path, fmt), steps)
    data = read_yaml(Path(base_path))
    base_dir, out_dir = Path(base_path).parent.resolve(), Path(out_path).parent.resolve()
    if base_dir != out_dir:
        data["base_dir"] = str(base_dir)  # the base's relative paths (profile, config.json) keep working
    base = scenario_from_dict(data, base_dir=str(out_dir))
    used = list(log.steps)
    lf = fit_lengths(used, base.workload.response_tokens, base.algorithm.samples_per_step)
    lengths_path = Path(out_path).with_suffix(".lengths.txt") if lf.observed is not None else None
    if lengths_path is not None:
        lf.dist["path"] = lengths_path.name if base_dir == out_dir else str(lengths_path.resolve())
    set_path(data, "workload.response_tokens", {k: _sig(v) if isinstance(v, float) else v for k, v in lf.dist.items()})
    measured = phase_means(used)
    switch = _colocated_switch(base, used, measured)
    if switch is not None:  # the hybrid engine's switch, not its engines: a switch cost, not a speed
        set_path(data, "pipeline.colocation.reallocate_s", _sig(switch))
    with tempfile.TemporaryDirectory(prefix="rlsim-fit-") as scratch:
        sim = _Simulable(data, out_dir, Path(scratch), lf.observed, max(3, len(used) + 1))
        eff = fit_efficiency(sim.scenario(), measured)
        if switch is not None:  # the switch is what `gen` holds beyond the slowest engine, not the mean one
            gen = measured.pop("_gen")
            better = max(0.0, (gen - eff.simulated.get("generation", 0.0)) / 2.0)
            measured["generation"] = gen - 2.0 * better
            if abs(better - switch) > 0.01 * max(switch, 1.0):
                switch = better
                set_path(data, SWITCH_FIELD, _sig(switch))
                eff = fit_efficiency(sim.scenario(), measured)
        for field, value in eff.values.items():
            set_path(data, field, _sig(value))
        simulated = simulated_phases(sim.scenario())
    fitted = [FittedValue(field=f, value=_sig(v), phase=src) for f, (v, src) in lf.fitted.items()]
    fitted += [FittedValue(field=f, value=_sig(v), phase=eff.phases[f]) for f, v in eff.values.items()]
    if switch is not None:
        fitted.append(FittedValue(field=SWITCH_FIELD, value=_sig(switch), phase="generation outside the engines"))
    calibrated = CalibratedFrom(
        source=str(log_path),
        format=log.format,
        sha256=_sha256(log_path),
        steps=[used[0].step, used[-1].step],
        fitted=fitted,
        kept=lf.kept + eff.kept,
        residuals=[_residual(p, m, simulated.get(p, 0.0)) for p, m in measured.items()],
    )
    data["calibrated_from"] = calibrated.model_dump(mode="json")
    scenario = scenario_from_dict(data, base_dir=str(out_dir))
    return FitResult(scenario, data, calibrated, lf.observed, lengths_path, _unfitted(used))


SWITCH_FIELD = "pipeline.colocation.reallocate_s"


def _colocated_switch(base: Scenario, steps: list, measured: dict[str, float]) -> float | None:
    """A first guess of a colocated verl log's switch: `gen` minus `generate_sequences`, halved; or None.

    verl's hybrid engine times, inside `gen`, what the GPUs do to turn from training to
    generation and back (weights resharded into the engine, the engine woken and put to sleep,
    its KV cache rebuilt) around the engines' generation. That part is the colocated switch,
    which a disaggregated what-if does not pay, so the engines' speed is fitted to
    `generate_sequences` alone (`engine_generation`) and the rest becomes the switch's fixed cost
    (two switches per step). `generate_sequences` is the ranks' mean (verl's reduce_timing
    averages them) while `gen` waits for the slowest engine, so this guess also counts the slowest
    engine's lead over the mean as switch: `fit_log` replaces it by `gen` less the fitted
    simulation's slowest engine. `measured["generation"]` is moved to `measured["_gen"]`. A log
    that times the weight update on its own (verl's later `timing_s/update_weights`) has no switch
    inside `gen`: None.
    """
    from rlsim.scenario import Mode

    pairs = [(s.generation_s, s.engine_generation_s) for s in steps]
    pairs = [(g, e) for g, e in pairs if g is not None and e is not None]
    if base.pipeline.mode is not Mode.colocated or not pairs:
        return None
    if any(s.weight_sync_s is not None for s in steps):  # a verl that times the switch on its own (update_weights)
        return None
    gen, engine = float(np.mean([g for g, _ in pairs])), float(np.mean([e for _, e in pairs]))
    if engine <= 0 or engine > gen:
        return None
    measured["_gen"] = measured.pop("generation")
    return (gen - engine) / 2.0


def _residual(phase: str, measured_s: float, simulated_s: float) -> PhaseResidual:
    rel = _sig(simulated_s / measured_s - 1.0) if measured_s > 0 else None
    return PhaseResidual(phase=phase, measured_s=_sig(measured_s), simulated_s=_sig(simulated_s), residual=rel)


def _unfitted(steps: list) -> dict[str, float]:
    out = {}
    for name in UNFITTED:
        values = [getattr(s, name) for s in steps if getattr(s, name) is not None]
        if values:
            out[name] = float(np.mean(values))
    return out


@dataclass(frozen=True)
class _Simulable:
    """The scenario `data` describes (as it is now), with `sim_steps` steps, for simulating.

    Observed lengths are read from a scratch copy: the fit simulates before anything is written.
    """

    data: dict[str, Any]
    out_dir: Path
    scratch: Path
    observed: np.ndarray | None
    sim_steps: int

    def scenario(self) -> Scenario:
        d = dict(self.data, steps=self.sim_steps)
        if self.observed is not None:
            path = self.scratch / "observed.lengths.txt"
            if not path.exists():
                path.write_text("\n".join(str(int(n)) for n in self.observed) + "\n")
            dist = dict(d["workload"]["response_tokens"], path=str(path))
            d["workload"] = dict(d["workload"], response_tokens=dist)
        return scenario_from_dict(d, base_dir=str(self.out_dir))


def _sha256(path: str) -> str:
    p = Path(path)
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()


def write_fit(result: FitResult, out_path: str) -> None:
    """Write the fitted scenario (and its observed-lengths file) to disk."""
    import yaml

    if result.lengths is not None and result.lengths_path is not None:
        result.lengths_path.write_text("\n".join(str(int(n)) for n in result.lengths) + "\n")
    Path(out_path).write_text(yaml.safe_dump(result.data, sort_keys=False))
