"""Validation: the small real trainer's measured timeline against the simulator's prediction.

Run the GRPO trainer (`rlsim.trainer`), describe the same
configuration as a scenario, simulate it with a profile measured on the same device, and compare
predicted with measured time per phase.

- `mapping.py`: a trainer run (its JSON document) -> the scenario that describes it (pure), and
  the files that scenario points at (the policy's config.json, its response lengths);
- `phases.py`: intervals in the shared state names -> per-step phase times and idle fractions,
  one function for both sides, with adapters from the trainer's document and the simulator's
  recorder;
- `compare.py`: predicted and measured phase times -> rows with errors, limits and verdicts,
  and the issue's headline targets (pure);
- `profiles.py`: the profile to simulate with, measured now or given, holding the policy's own
  operators (`model_ops`);
- `run.py`: the orchestration `validate()` that calibrates, runs the trainer, simulates and
  compares. Only it and `profiles.py` import torch, inside their functions.

Words: a *phase* is a state or a group of states of one pool (generation = prefill + decode on
the inference pool; training = logprob + train + optimizer on the training pool); *per step*
means averaged over the steady-state window from the end of the first RL step to the end of the
last one. Units: seconds, fractions in [0, 1].
"""
