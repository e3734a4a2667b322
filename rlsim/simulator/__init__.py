"""The discrete-event simulation of an RL pipeline (SimPy).

One concept per file: the units of work (`work`), the dispatcher and its queues, an inference
engine (event-skipping `engine`, and the iteration-level `reference_engine` used as the oracle),
the reward pool, the dynamic-sampling filter (DAPO), the rollout buffer, the trainer, the weight
bus, and the recorder that keeps every GPU's time in named states. `pipeline` wires them for a
mode; `run.simulate` is the driver. Processes yield `env.timeout(...)` of durations computed by
`rlsim.models`; they never compute a duration themselves and never format output.

Same-instant ordering: SimPy orders events by time, then priority, then insertion order; every
process here is created in a fixed order and iterates lists, never sets or dicts by hash, so a
seed fixes the whole timeline.
"""
