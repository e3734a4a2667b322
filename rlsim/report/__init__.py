"""Outputs people look at: the Perfetto trace, plots and the architecture-review report.

Everything here reads finished results (`rlsim.runs.ModeRun`, the recorder's intervals and the
metrics); nothing simulates except the report's sensitivity re-runs, which call `run_modes`.
"Lane" means one row of a timeline: a GPU named the way RL trainers name their workers
(`rollout/engine0/gpu0`, `actor/train/gpu4`, `actor_rollout/gpu0` when colocated).
matplotlib is imported only by `plots.py` and `planner_plots.py`, never by this package's
`__init__`, so `rlsim simulate` without `--plot` stays free of it. Times are seconds in the
library and microseconds in the trace file.
"""
