"""The named states a GPU's time is split into, shared by the simulator and the real trainer.

A neutral module: the simulator records these states, the small trainer's timeline
(`rlsim.trainer.timeline`) records the same names, and neither imports the other.

Busy states are work (`score`: a GPU reward model, judge or teacher scoring completions); the
two idle states say what the GPU waits for: an inference GPU waits for new weights (the trainer
has not produced the next policy, or the generator may not run further ahead); a training GPU
waits for data (rollouts are not ready).
"""

DECODE = "decode"
PREFILL = "prefill"
TRAIN = "train"
LOGPROB = "logprob"
OPTIMIZER = "optimizer"
SYNC = "sync"
SWITCH = "switch"
SCORE = "score"
IDLE_DATA = "idle-waiting-for-data"
IDLE_WEIGHTS = "idle-waiting-for-weights"

BUSY_STATES = (DECODE, PREFILL, TRAIN, LOGPROB, OPTIMIZER, SYNC, SWITCH, SCORE)
IDLE_STATES = (IDLE_DATA, IDLE_WEIGHTS)
ALL_STATES = BUSY_STATES + IDLE_STATES
# States only an optional pool records (a GPU reward model's scoring); outputs list them only
# for runs that have such a pool, so a two-pool run's outputs keep the states they always had.
OPTIONAL_STATES = (SCORE,)
CORE_STATES = tuple(s for s in ALL_STATES if s not in OPTIONAL_STATES)
