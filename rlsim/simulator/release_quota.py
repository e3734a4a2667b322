"""verl's fully-async release rule: how many groups the generator may have started, by version.

verl's fully-async rollouter (verl-project/verl@1dda039 docs/advance/fully_async.md, "Further
Explanation") produces, between two parameter syncs, at most

    (1 + staleness_threshold) x trigger_parameter_sync_step x require_batches x ppo_mini_batch_size

samples, less the stale samples it produced beyond one window in the window before. A window is
`sync_every` trainer steps of B groups. Starting from nothing, window w (after w syncs) therefore
ends with at most (w + 1 + threshold) x sync_every x B groups started in all: the rule is a lead
of `threshold` windows over the synchronous schedule, renewed only when the weights are synced,
not at every optimizer step (which a whole-step `buffer_depth` is). threshold 0 is synchronous;
1 is about one-step-off; a fraction lets part of the next window's groups start early.
"""

from __future__ import annotations

import math


def groups_allowed(trainer_version: int, *, sync_every: int, groups_per_step: int, threshold: float) -> int:
    """Groups the generator may have started in all once the trainer has reached `trainer_version`."""
    window = trainer_version // sync_every
    return math.floor((window + 1 + threshold) * sync_every * groups_per_step + 1e-9)


def synced_version(trainer_version: int, sync_every: int) -> int:
    """The newest weights sent to the engines at `trainer_version` (syncs every `sync_every` steps)."""
    return trainer_version - trainer_version % sync_every
