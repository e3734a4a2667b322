"""The fitted parts of a scenario: measured efficiency overrides and the log they came from.

`rlsim fit` reads a real run's log and writes a scenario whose datasheet-derived predictions are
corrected to what that run measured. The corrections that existing fields cannot carry live in
one block, `efficiency`, each a multiplier on (or a replacement of) a performance model's answer,
applied where the simulator asks its cost oracle (`rlsim.simulator.costs`). Training MFU and the
per-step controller overhead use their existing fields (`pipeline.training.mfu`,
`pipeline.training.step_overhead_s`). `calibrated_from` records where every fitted number came
from, so a fitted scenario stays plain YAML a user can read, diff and edit; the simulator never
reads it. Defaults change nothing: a scenario without these blocks simulates as before.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Efficiency(BaseModel):
    """Measured corrections to the profile's predictions (1 / None: the model's own answer)."""

    model_config = _FROZEN
    generation_speed: float = Field(
        default=1.0,
        gt=0,
        description="Multiplier on the inference engines' speed: every decode iteration and prefill takes the "
        "profile's time divided by it (rlsim fit sets it from a log's generation time).",
    )
    logprob_speed: float = Field(
        default=1.0,
        gt=0,
        description="Multiplier on the speed of the trainer's forward-only passes (old log-probs, reference, "
        "values): their time at the training MFU is divided by it (rlsim fit sets it from old_log_prob + ref).",
    )
    weight_sync_s: float | None = Field(
        default=None,
        ge=0,
        description="Measured seconds of one weight update, used in every mode instead of the transport model "
        "(rlsim fit sets it from the log's weight-update time; remove it when a what-if changes the transport).",
    )


class FittedValue(BaseModel):
    """One scenario field set by the fit, and the log phase that identified it."""

    model_config = _FROZEN
    field: str = Field(description="Dotted path of the scenario field that was fitted.")
    value: float = Field(description="The fitted value (units of that field).")
    phase: str = Field(description="The log phase (or length statistic) it was fitted from.")


class PhaseResidual(BaseModel):
    """A phase's mean per-step time in the log and in the fitted simulation."""

    model_config = _FROZEN
    phase: str = Field(description="Phase name: generation, logprob, update_actor, weight_sync or step.")
    measured_s: float = Field(description="Mean seconds per step in the log over the steps used.")
    simulated_s: float = Field(description="Mean seconds per step of the fitted scenario's simulation.")
    residual: float | None = Field(description="(simulated - measured) / measured; None when 0 s was measured.")


class CalibratedFrom(BaseModel):
    """Provenance of a fitted scenario: the log, the steps used, each fitted value, residuals."""

    model_config = _FROZEN
    source: str = Field(description="The log file the scenario was fitted from, as given to rlsim fit.")
    format: str = Field(description="The reader that parsed it (see `rlsim fit --help`).")
    sha256: str = Field(description="SHA-256 of the log file's bytes.")
    steps: list[int] = Field(description="[first, last] log step used (inclusive).")
    fitted: list[FittedValue] = Field(default_factory=list, description="Every value the fit set.")
    kept: list[str] = Field(
        default_factory=list, description="Fields the log could not identify, kept from the base scenario."
    )
    residuals: list[PhaseResidual] = Field(default_factory=list, description="Per-phase fit residuals.")
