"""Writers of each supported log format, from StepLog records (tests only).

Each writes what the library's own logging writes, key for key as the readers document it: the
round-trip test simulates a scenario, writes its steps in every format, and fits them back.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rlsim.logs.nemo_rl import KEYS as NEMO_KEYS
from rlsim.logs.plain_csv import COLUMNS
from rlsim.logs.record import StepLog
from rlsim.logs.slime import KEYS as SLIME_KEYS
from rlsim.logs.trl_state import KEYS as TRL_KEYS
from rlsim.logs.verl_keys import VERL_KEYS


def _row(step: StepLog, keymap: dict[str, str]) -> dict[str, float]:
    return {k: getattr(step, f) for k, f in keymap.items() if hasattr(step, f) and getattr(step, f) is not None}


def write_verl_jsonl(steps: list[StepLog], path: Path) -> Path:
    path.write_text("".join(json.dumps({"step": s.step, **_row(s, VERL_KEYS)}) + "\n" for s in steps))
    return path


def write_verl_console(steps: list[StepLog], path: Path) -> Path:
    lines = ["(TaskRunner pid=123) Training Progress: 0%|"]
    for s in steps:  # verl's concat_dict_to_str: "step:N - key:value:.3f - ..."
        lines.append(
            "(TaskRunner pid=123) "
            + " - ".join([f"step:{s.step}"] + [f"{k}:{v:.3f}" for k, v in _row(s, VERL_KEYS).items()])
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def write_verl_wandb_csv(steps: list[StepLog], path: Path, run: str = "my-run") -> Path:
    keys = list(VERL_KEYS)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Step"] + [f"{run} - {k}" for k in keys] + [f"{run} - {keys[0]}__MIN"])
        for s in steps:
            row = _row(s, VERL_KEYS)
            w.writerow([s.step] + [row.get(k, "") for k in keys] + [0])
    return path


def write_verl_tensorboard(steps: list[StepLog], folder: Path) -> Path:
    from torch.utils.tensorboard import SummaryWriter  # what verl's _TensorboardAdapter uses

    writer = SummaryWriter(str(folder))
    for s in steps:
        for k, v in _row(s, VERL_KEYS).items():
            writer.add_scalar(k, v, s.step)
    writer.close()
    return folder


def write_nemo_rl_json(steps: list[StepLog], path: Path) -> Path:
    doc: dict[str, dict[str, float]] = {}
    for s in steps:
        row = _row(s, NEMO_KEYS)
        if s.ref_s is not None:
            row["timing/train/policy_and_reference_logprobs"] = (s.old_log_prob_s or 0.0) + s.ref_s
        for k, v in row.items():
            doc.setdefault(k, {})[str(s.step)] = v
    path.write_text(json.dumps(doc, indent=2))
    return path


def write_slime(steps: list[StepLog], folder: Path, per_sample: bool = True) -> Path:
    lines = []
    for s in steps:
        row = _row(s, SLIME_KEYS)
        rollout = {k: v for k, v in row.items() if k.startswith("rollout/") or k == "perf/rollout_time"}
        train = {k: v for k, v in row.items() if k not in rollout}
        lines.append(f"[2026-12-01 08:00:00] rollout.py:120 - perf {s.step}: {rollout!r}")
        lines.append(f"[2026-12-01 08:00:01] train_metric_utils.py:80 - perf {s.step}: {train!r}")
        if per_sample and s.response_lengths:
            (folder / f"rollout_{s.step}.jsonl").write_text(
                "".join(json.dumps({"index": i, "response_length": n}) + "\n" for i, n in enumerate(s.response_lengths))
            )
    path = folder / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_trl_state(steps: list[StepLog], path: Path) -> Path:
    history, clock = [], 1.0e9
    keys = {k: f for k, f in TRL_KEYS.items() if k != "step_time_s"}
    for s in steps:
        clock += s.step_s or 0.0
        history.append({"step": s.step, "timestamp": clock, "loss": 0.1, **_row(s, keys)})
    history.append({"step": steps[-1].step, "train_runtime": 100.0})
    path.write_text(json.dumps({"global_step": steps[-1].step, "log_history": history}, indent=2))
    return path


def write_plain_csv(steps: list[StepLog], path: Path) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for s in steps:
            w.writerow([s.step] + ["" if getattr(s, c) is None else getattr(s, c) for c in COLUMNS[1:]])
    return path
