"""Partial-rollout metrics: what each step carried into the next, and how old the trained tokens are.

Under partial rollouts (simulator/partial.py) a step's generation ends when B groups are done;
the unfinished sequences keep their tokens and resume next step, so a trained sample can hold
tokens of several policy versions. The usual staleness (trainer step - version at a sample's
first token) shows the oldest; the token lag weighs every response token by the version of the
policy that produced it (slime's and APRIL's concern: how off-policy the carried part is).
Nothing is thrown away: dropped tokens stay 0 unless another mechanism drops some.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from rlsim.simulator.recorder import Recorder


class PartialRolloutMetrics(BaseModel):
    """Carried work per step and the token lag of trained samples (pipeline.partial_rollout)."""

    prompts_in_flight: int = Field(description="Prompts (groups) generating per step, carried ones included.")
    carried_groups_per_step: float = Field(description="Mean groups moved to the next step at a step's end.")
    carried_sequences_per_step: float = Field(
        description="Mean started, unfinished sequences carried with their tokens at a step's end."
    )
    carried_tokens_per_step: float = Field(description="Mean response tokens those sequences held (kept, not lost).")
    resumed_prefill_tokens: int = Field(
        description="Prompt + response tokens prefilled again when carried sequences resumed (the run's total)."
    )
    trained_carried_fraction: float = Field(
        description="Share of trained samples carried unfinished at least once (generated over several steps)."
    )
    token_lag_mean: float = Field(
        description="Mean over trained response tokens of (trainer step - version of the policy that produced it)."
    )
    token_lag_max: int = Field(description="Largest token lag of a trained response token.")


def partial_metrics(rec: Recorder, prompts_in_flight: int, samples: int) -> PartialRolloutMetrics:
    """From the recorder's carry records (one per step); `samples`: trained samples of the run."""
    carries = rec.carries
    n = len(carries) or 1
    tokens = sum(c.trained_tokens for c in carries)
    return PartialRolloutMetrics(
        prompts_in_flight=prompts_in_flight,
        carried_groups_per_step=sum(c.groups for c in carries) / n,
        carried_sequences_per_step=sum(c.sequences for c in carries) / n,
        carried_tokens_per_step=sum(c.tokens for c in carries) / n,
        resumed_prefill_tokens=sum(c.resumed_prefill_tokens for c in carries),
        trained_carried_fraction=sum(c.trained_carried for c in carries) / samples if samples else 0.0,
        token_lag_mean=sum(c.token_lag_sum for c in carries) / tokens if tokens else 0.0,
        token_lag_max=max((c.token_lag_max for c in carries), default=0),
    )
