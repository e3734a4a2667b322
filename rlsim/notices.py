"""Warnings a user must read: answers that rest on a default, and settings that contradict each other.

A wrong answer given silently is worse than an error, but these are not errors: the run is
possible, only perhaps not what was meant. Library code calls `warn`, which raises an ordinary
Python warning of category `RlsimWarning` (a notebook shows it once); the CLI prints each one as a
single `warning: ...` line on stderr. The checks here are pure functions of the scenario (and,
after a simulation, of its observed staleness); they return the text instead of printing it.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from rlsim.modes import Mode

if TYPE_CHECKING:  # the CLI's start-up imports this module; the scenario model (pydantic) waits
    from rlsim.scenario import Scenario


class RlsimWarning(UserWarning):
    """A result rests on a default or on settings that contradict each other."""


def warn(text: str) -> None:
    """Emit one rlsim warning (one line, naming the field or option it is about)."""
    warnings.warn(text, RlsimWarning, stacklevel=3)


def staleness_warning(sc: Scenario, observed_max: int | None = None) -> str | None:
    """Policy `bound` does not enforce `max_lag`: say so when the pipeline lets samples lag further.

    Before a simulation the buffer depth says how far an async pipeline may run ahead; after one,
    `observed_max` (the simulated largest staleness) is the evidence (streaming lags beyond depth).
    """
    stale, pipe = sc.pipeline.staleness, sc.pipeline
    from rlsim.scenario import StalenessPolicy

    if stale.policy is not StalenessPolicy.bound:
        return None
    if observed_max is not None:
        if observed_max <= stale.max_lag:
            return None
        how = f"the simulated {pipe.mode.value} pipeline trained samples {observed_max} versions old"
    elif pipe.mode in (Mode.async_, Mode.streaming) and pipe.depth > stale.max_lag:
        how = f"{pipe.mode.value} with buffer_depth {pipe.depth} lets samples lag up to {pipe.depth} versions"
    else:
        return None
    return (
        f"pipeline.staleness: policy 'bound' with max_lag {stale.max_lag} does not limit lag, and {how}; "
        f"raise max_lag, lower buffer_depth, or use policy 'reject'"
    )
