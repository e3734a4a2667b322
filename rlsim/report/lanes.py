"""Lanes: each simulated GPU named the way RL trainers name their workers.

verl, AReaL and NeMo-RL call the generation side "rollout" (vLLM/SGLang engines) and the
training side "actor" (NeMo-RL: "policy"); a colocated GPU runs both, verl's hybrid
"actor_rollout" worker. A GPU reward model's own GPUs are "reward" lanes (verl's "rm" worker);
on the trainer's GPUs its scoring shows on the actor lane, on the engines' (with_inference) on
the rollout lanes. The trace and the plots share these names, so a thread in Perfetto and a row
in the Gantt chart read the same. docs/outputs.md maps them to each framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlsim.runs import ModeRun
from rlsim.simulator.recorder import Recorder
from rlsim.simulator.states import DECODE, IDLE_WEIGHTS, PREFILL, SCORE

ROLLOUT, ACTOR, COLOCATED, REWARD = "rollout", "actor", "colocated", "reward"
ROLES = (ROLLOUT, ACTOR, COLOCATED)  # the roles of every run (a reward pool's lanes come on top)
# States only an inference engine records (`score`: a reward model placed with_inference); on a
# colocated GPU every other state is the trainer's.
ENGINE_STATES = (DECODE, PREFILL, IDLE_WEIGHTS, SCORE)


@dataclass(frozen=True)
class Lane:
    """One GPU: its role (process in the trace), its thread name and the actors on it."""

    gpu: int
    role: str
    name: str
    engine: str | None
    trainer: str | None
    scorer: str | None = None  # a GPU reward model's scoring engine

    def owner(self, state: str) -> str:
        """The actor a state belongs to (a colocated GPU merges the trainer's and an engine's)."""
        if self.scorer and (state == SCORE or (self.trainer is None and self.engine is None)):
            return self.scorer
        if self.engine and (state in ENGINE_STATES or self.trainer is None):
            return self.engine
        return self.trainer or ""


@dataclass(frozen=True)
class Row:
    """A Gantt row: GPUs with identical timelines (an engine's TP group, or the trainer's)."""

    label: str
    gpus: tuple[int, ...]
    role: str


def gpu_lanes(rec: Recorder) -> list[Lane]:
    """Every GPU of the run as a lane, in GPU order."""
    lanes = []
    for gpu in sorted(rec.gpu_actors):
        actors = rec.gpu_actors[gpu]
        engine = next((a for a in actors if rec.pools[a] == "inference"), None)
        trainer = next((a for a in actors if rec.pools[a] == "training"), None)
        scorer = next((a for a in actors if rec.pools[a] == "reward"), None)
        if engine and trainer:
            role, name = COLOCATED, f"actor_rollout/gpu{gpu}"
        elif engine:
            role, name = ROLLOUT, f"rollout/{engine}/gpu{gpu}"
        elif trainer:
            role, name = ACTOR, f"actor/train/gpu{gpu}"
        else:
            role, name = REWARD, f"reward/{scorer}/gpu{gpu}"
        lanes.append(Lane(gpu, role, name, engine, trainer, scorer))
    return lanes


def gpu_span(gpus: tuple[int, ...]) -> str:
    """'gpu4-7' for a contiguous range, else 'gpu0,2'."""
    if len(gpus) > 1 and gpus == tuple(range(gpus[0], gpus[-1] + 1)):
        return f"gpu{gpus[0]}-{gpus[-1]}"
    return "gpu" + ",".join(str(g) for g in gpus)


def timeline_rows(rec: Recorder, max_rows: int = 10) -> tuple[list[Row], int]:
    """Gantt rows (GPUs sharing the same actors collapse into one), and how many were left out.

    Large clusters have dozens of identical engines; the chart keeps every training and reward row and the
    first engines up to `max_rows`, so the picture stays readable.
    """
    groups: dict[tuple[str | None, str | None, str | None], list[Lane]] = {}
    for lane in gpu_lanes(rec):
        groups.setdefault((lane.engine, lane.trainer, lane.scorer), []).append(lane)
    rows = []
    for (engine, _, scorer), lanes in groups.items():
        gpus = tuple(lane.gpu for lane in lanes)
        role = lanes[0].role
        head = {
            ROLLOUT: f"rollout/{engine}",
            ACTOR: "actor/train",
            COLOCATED: "actor_rollout",
            REWARD: f"reward/{scorer}",
        }[role]
        rows.append(Row(f"{head} {gpu_span(gpus)}", gpus, role))
    training = [r for r in rows if r.role in (ACTOR, REWARD)]  # every trainer and scorer row stays
    others = [r for r in rows if r.role not in (ACTOR, REWARD)]
    keep = max(1, max_rows - len(training))
    hidden = max(0, len(others) - keep)
    return others[:keep] + training, hidden


def run_labels(runs: Sequence[ModeRun]) -> list[str]:
    """'sync', or 'scenario:sync' when the runs come from several scenarios."""
    one_scenario = len({r.scenario.name for r in runs}) == 1
    return [r.metrics.mode if one_scenario else f"{r.scenario.name}:{r.metrics.mode}" for r in runs]
