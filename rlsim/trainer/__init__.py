"""The small real GRPO trainer whose measured timeline validates the simulator.

A tiny GPT policy (`model.py`) learns small-number addition (`task.py`) with GRPO (`grpo.py`:
the pure math), in two modes that share the rollout (`rollout.py`) and the update
(`learner.py`): synchronous (`sync_loop.py`, one process) and asynchronous (`async_loop.py`, a
generator and a trainer process, a bounded queue, versioned weights in shared memory). Both
record the simulator's state names (`timeline.py`) and write one JSON document.

Words: "model" here is the policy network; "step" is an RL step (one rollout batch trained on),
and a version is the number of RL steps whose weights the generator has; decode iterations and
optimizer steps are intervals within a step. Importing this package does not import torch; the
modules below it do, and nothing outside `rlsim/trainer/` may import them.
"""


def run_trainer(config, logger=None) -> dict:
    """Run the loop of `config`'s type (SyncConfig or AsyncConfig); return the timeline document."""
    from rlsim.trainer.async_loop import AsyncConfig, run_async
    from rlsim.trainer.sync_loop import SyncConfig, run_sync

    if isinstance(config, AsyncConfig):
        return run_async(config, logger=logger)
    if isinstance(config, SyncConfig):
        return run_sync(config, logger=logger)
    raise TypeError(f"config: expected SyncConfig or AsyncConfig, got {type(config).__name__}")
