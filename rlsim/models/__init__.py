"""Performance models: pure functions that say how long a piece of GPU work takes.

Vocabulary. In rlsim "model" means three things, kept apart by folder:
- the LLM being trained: its architecture lives in `rlsim.catalog` (LlmSpec);
- a *performance model* (this package): seconds or bytes as a function of a batch shape,
  an LlmSpec and a calibration `Profile`;
- a pydantic model: the schemas in `rlsim.scenario` and `rlsim.catalog`.
"Step" likewise: an RL step (one policy update of B x G samples), a decode iteration (one token
for every running sequence), or an optimizer step (one of the RL step's minibatches).

Everything here is a pure function of its arguments: no SimPy, no torch, no rich, no I/O
(a test enforces the imports). The simulator calls these functions and yields their results
as timeouts, so a measured profile replaces a datasheet number without touching the simulator.
When the profile holds the simulated LLM's own operators (`Profile.ops_for`: timed at its
shapes by calibration), decode, prefill, training and the cuda_ipc weight sync use those fitted
lines for it instead of the roofline terms; every other model is unaffected.
Units: seconds, bytes, FLOPs, tokens.
"""
