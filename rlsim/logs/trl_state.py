"""TRL's trainer_state.json: `log_history`, one entry per logging step of the GRPO trainer.

GRPOTrainer logs `completions/{mean_length, max_length, min_length, clipped_ratio}` into the
Trainer's log_history, saved in trainer_state.json with each entry's `step` (huggingface/trl,
trl/trainer/grpo_trainer.py `_metrics[mode]["completions/..."]`). Phase timings are not part of
it (TRL sends `profiling/Time taken: ...` to wandb only), so this reader gives lengths and, when
entries carry a wall-clock `timestamp` (or `time`) in seconds, the step time from consecutive
entries (divided by the steps between them). Malformed JSON is an error naming the line; a bad
entry is an error naming the entry and the key.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlsim.logs.record import RunLog, build_steps, log_error, number, require_any

FORMAT = "trl-state"
KEYS = {
    "completions/mean_length": "response_mean",
    "completions/max_length": "response_max",
    "completions/min_length": "response_min",
    "completions/clipped_ratio": "response_clip_ratio",
    "step_time_s": "step_s",
}
CLOCKS = ("timestamp", "time")


def read(path: str) -> RunLog:
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise log_error(path, exc.lineno, f"not valid JSON ({exc.msg}; truncated?)") from None
    history = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(history, list):
        raise log_error(path, None, "key 'log_history' is missing or not a list")
    rows, prev = [], None
    for i, entry in enumerate(history):
        where = f"log_history[{i}]"
        if not isinstance(entry, dict) or "step" not in entry:
            raise log_error(path, where, "key 'step' is missing")
        if not any(k in entry for k in KEYS):
            continue  # eval / final-summary entries
        row = dict(entry)
        step = int(number(path, where, "step", entry["step"]))
        clock = next((k for k in CLOCKS if k in entry), None)
        if clock is not None:
            t = number(path, where, clock, entry[clock])
            if prev is not None and step > prev[0]:
                row["step_time_s"] = (t - prev[1]) / (step - prev[0])
            prev = (step, t)
        rows.append((where, step, row))
    return require_any(RunLog(path, FORMAT, build_steps(path, rows, KEYS)), ", ".join(KEYS))
