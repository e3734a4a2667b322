"""Planning: run-level cost projections, parameter sweeps and the configuration search.

Everything here is library code that simulates (through `rlsim.simulator`) and returns result
objects; the CLI (`rlsim.commands.planning`) renders them. The pure dollar arithmetic lives in
`rlsim.metrics.cost`.

- `costing.py`: simulate a scenario (at sample points of its length schedule) and price a whole
  run at every catalog row (`rlsim cost`).
- `sweep.py`: a grid over any scenario fields (`rlsim sweep`).
- `candidates.py`: the configurations the planner considers, and pruning of those that cannot
  run (placement) before any simulation.
- `search.py`: simulate the survivors, apply constraints, compute the Pareto frontier and pick a
  recommendation (`rlsim plan`).
- `executors.py`: where simulations run: in-process, a local process pool, or Ray. Results
  come back in input order, so every executor gives identical output.

Here "candidate" means one configuration of the search; "run" means the whole training run a
plan is for (`--steps-run`), as opposed to the few steps simulated per candidate.
"""
