"""verl metrics as JSON lines: one `{"step": N, "timing_s/gen": ..., ...}` object per RL step.

The flat dict verl's `Tracking.log(data, step)` receives, one line per call, with the step
number under "step" (rlsim's trainer writes this; so does any one-line verl logging hook).
Keys read: see `verl_keys.VERL_KEYS`. A line that is not a JSON object (a truncated last line
included) is an error naming the file and the line.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlsim.logs.record import RunLog, build_steps, log_error, number, require_any
from rlsim.logs.verl_keys import EXPECTED, VERL_KEYS

FORMAT = "verl-jsonl"


def read(path: str) -> RunLog:
    rows = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise log_error(path, lineno, f"not a JSON object ({exc.msg}; truncated?)") from None
        if not isinstance(row, dict) or "step" not in row:
            raise log_error(path, lineno, "expected a JSON object with a 'step' key")
        rows.append((lineno, int(number(path, lineno, "step", row["step"])), row))
    return require_any(RunLog(path, FORMAT, build_steps(path, rows, VERL_KEYS)), EXPECTED)
