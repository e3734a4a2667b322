"""The GPU states, as the simulator's processes name them (defined in the neutral `rlsim.states`)."""

from rlsim.states import (  # noqa: F401
    ALL_STATES,
    BUSY_STATES,
    CORE_STATES,
    DECODE,
    IDLE_DATA,
    IDLE_STATES,
    IDLE_WEIGHTS,
    LOGPROB,
    OPTIMIZER,
    OPTIONAL_STATES,
    PREFILL,
    SCORE,
    SWITCH,
    SYNC,
    TRAIN,
)
