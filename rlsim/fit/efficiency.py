"""Fitting the efficiency terms a log's phases identify, by simulating the base scenario.

Each term belongs to the phase that identifies it: the engines' speed (`efficiency.
generation_speed`) to the engines' own time where the log has it (verl's `generate_sequences`,
the mean engine's), else to generation (the trainer's wait, which is the slowest engine's and,
colocated, holds the switch too), the training MFU (`pipeline.training.mfu`) to the actor update,
the forward-pass speed (`efficiency.logprob_speed`) to old_log_prob + ref, the measured weight
update (`efficiency.weight_sync_s`) to weight_sync, and the controller's per-step host work
(`pipeline.training.step_overhead_s`) to whatever of the step the other phases leave (only when
generation and update are logged too, else it would absorb every miss). A term is fitted only
when its phase is in the log; the others keep the base scenario's value. A weight update logged
as zero (a loop whose generator is the trained model) says nothing about a transport: not fitted.

`scipy.optimize.least_squares` minimises the relative per-phase misses of the simulated run
(the same step window and seed as the fit's). Speeds and the MFU are fitted in log space; seconds
directly, bounded below by 0 (and the MFU above by 1). The Jacobian is the one the phase
structure implies (a phase's time is inversely proportional to its speed and the step is the
sum of its phases), recomputed from each simulation, so an iteration costs one simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from dataclasses import field as dc_field

import numpy as np
from scipy import optimize

from rlsim.fit.phases import phase_means, simulated_steps
from rlsim.placement import resolve
from rlsim.scenario import Scenario, set_path
from rlsim.simulator.costs import Costs
from rlsim.simulator.run import simulate


@dataclass(frozen=True)
class Term:
    """One fitted scenario field: its phase, and whether it is a speed (log space) or seconds."""

    field: str
    phase: str
    speed: bool
    upper: float = math.inf


TERMS = (
    Term("efficiency.generation_speed", "engine_generation", speed=True),
    Term("pipeline.training.mfu", "update_actor", speed=True, upper=1.0),
    Term("efficiency.logprob_speed", "logprob", speed=True),
    Term("efficiency.weight_sync_s", "weight_sync", speed=False),
    Term("pipeline.training.step_overhead_s", "step", speed=False),
)


@dataclass(frozen=True)
class EfficiencyFit:
    values: dict[str, float]  # field -> fitted value
    kept: list[str]  # fields whose phase is missing from the log (or absent from the base run)
    simulated: dict[str, float]  # phase -> mean seconds per step of the fitted simulation
    evaluations: int
    phases: dict[str, str] = dc_field(default_factory=dict)  # fitted field -> the phase it was fitted to


def _with(sc: Scenario, values: dict[str, float]) -> Scenario:
    data = sc.model_dump(mode="json")
    for field, value in values.items():
        set_path(data, field, value)
    return Scenario.model_validate(data)


def simulated_phases(sc: Scenario, skip_first: bool = True) -> dict[str, float]:
    """Mean per-step phase seconds of a simulation (its first step skipped, as the log's is)."""
    steps = simulated_steps(simulate(resolve(sc)))
    return phase_means(steps[1:] if skip_first and len(steps) > 1 else steps)


def base_value(sc: Scenario, term: Term) -> float:
    """The term's value in the base scenario (the profile's MFU when it has no override)."""
    if term.field == "pipeline.training.mfu":
        return sc.pipeline.training.mfu or resolve(sc).profile.train_mfu
    if term.field == "efficiency.weight_sync_s" and sc.efficiency.weight_sync_s is None:
        return Costs(resolve(sc)).sync_s  # the transport model's answer
    node = sc
    for key in term.field.split("."):
        node = getattr(node, key)
    return float(node)


def _terms(measured: dict[str, float]) -> tuple[Term, ...]:
    """TERMS, the engines' speed on the trainer's generation wait when the log lacks their own time."""
    if "engine_generation" in measured:
        return TERMS
    return tuple(replace(t, phase="generation") if t.phase == "engine_generation" else t for t in TERMS)


def fit_efficiency(sc: Scenario, measured: dict[str, float]) -> EfficiencyFit:
    """Fit every term whose phase `measured` holds; `sc` already has the fitted workload."""
    first = simulated_phases(sc)
    all_terms = _terms(measured)
    terms = [t for t in all_terms if t.phase in measured and (not t.speed or first.get(t.phase, 0.0) > 0)]
    if not (
        {"generation", "engine_generation"} & measured.keys() and "update_actor" in measured
    ):  # else the overhead would absorb every miss
        terms = [t for t in terms if t.phase != "step"]
    if measured.get("weight_sync", 1.0) <= 0.0:  # no update at all: the trainer is the generator, no transport
        terms = [t for t in terms if t.phase != "weight_sync"]
    kept = [t.field for t in all_terms if t not in terms]
    if not terms:
        return EfficiencyFit({}, kept, first, 1)
    start = {t.field: base_value(sc, t) for t in terms}
    cache: dict[bytes, dict[str, float]] = {}

    def values_of(x: np.ndarray) -> dict[str, float]:
        return {t.field: float(math.exp(v) if t.speed else v) for t, v in zip(terms, x)}

    def run(x: np.ndarray) -> dict[str, float]:
        key = x.tobytes()
        if key not in cache:
            cache[key] = simulated_phases(_with(sc, values_of(x)))
        return cache[key]

    phases = [t.phase for t in terms]
    scale = np.array([max(measured[p], 1e-9) for p in phases])

    def residuals(x: np.ndarray) -> np.ndarray:
        sim = run(x)
        return np.array([sim.get(p, 0.0) for p in phases]) / scale - 1.0

    jac = _structural_jacobian(terms, phases, run, scale)
    x0 = np.array([math.log(start[t.field]) if t.speed else start[t.field] for t in terms])
    lo = np.array([-np.inf if t.speed else 0.0 for t in terms])
    hi = np.array([math.log(t.upper) if t.speed else np.inf for t in terms])
    x0 = np.clip(x0, lo, np.where(np.isfinite(hi), hi - 1e-12, hi))
    sol = optimize.least_squares(residuals, x0, jac=jac, bounds=(lo, hi), xtol=1e-10, ftol=1e-10, max_nfev=60)
    return EfficiencyFit(values_of(sol.x), kept, run(sol.x), len(cache), {t.field: t.phase for t in terms})


def _structural_jacobian(terms, phases, run: Callable, scale: np.ndarray) -> Callable:
    """d(residual of phase i)/d(x_j) from one simulation: speeds scale their phase as e^-x; the
    step holds every phase (of the engines' time, the slowest engine's: generation); seconds add
    one to one."""

    def jac(x: np.ndarray) -> np.ndarray:
        sim = run(x)
        out = np.zeros((len(phases), len(terms)))
        for j, t in enumerate(terms):
            in_step = "generation" if t.phase == "engine_generation" else t.phase
            for i, p in enumerate(phases):
                if p == t.phase or (p == "step" and t.phase != "step"):
                    part = t.phase if p == t.phase else in_step
                    out[i, j] = (-sim.get(part, 0.0) if t.speed else 1.0) / scale[i]
        return out

    return jac
