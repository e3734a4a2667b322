"""The named states a GPU's time is split into, shared by the simulator and the real trainer.

A neutral module: the simulator records these states, the small trainer's timeline
(`rlsim.trainer.timeline`) records the same names, and neither imports the other.

Busy states are work; the two idle states say what the GPU waits for: an inference GPU waits
for new weights (the trainer has not produced the next policy, or the generator may not run
further ahead); a training GPU waits for data (rollouts are not ready).
"""

DECODE = "decode"
PREFILL = "prefill"
TRAIN = "train"
LOGPROB = "logprob"
OPTIMIZER = "optimizer"
SYNC = "sync"
SWITCH = "switch"
IDLE_DATA = "idle-waiting-for-data"
IDLE_WEIGHTS = "idle-waiting-for-weights"

BUSY_STATES = (DECODE, PREFILL, TRAIN, LOGPROB, OPTIMIZER, SYNC, SWITCH)
IDLE_STATES = (IDLE_DATA, IDLE_WEIGHTS)
ALL_STATES = BUSY_STATES + IDLE_STATES
