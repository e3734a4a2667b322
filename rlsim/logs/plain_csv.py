"""A plain CSV for any framework: one row per RL step, columns named after StepLog's fields.

Columns (any subset; `step` required, unknown columns ignored): step, generation_s,
old_log_prob_s, ref_s, update_actor_s, weight_sync_s, step_s (seconds); response_mean,
response_max, response_min, response_clip_ratio, prompt_mean (tokens, fraction). Empty cells mean
"not measured". A row with fewer cells than the header (a truncated file) is an error naming the
line; a cell that is not a number is an error naming the line and the column.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rlsim.logs.record import LENGTHS, PHASES, RunLog, build_steps, csv_cells, log_error, number, require_any

FORMAT = "csv"
COLUMNS = ("step", *PHASES, *LENGTHS)


def read(path: str) -> RunLog:
    with Path(path).open(newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        if "step" not in header:
            raise log_error(path, 1, f"the header needs a 'step' column (columns: {', '.join(COLUMNS)})")
        rows = []
        for lineno, cells in csv_cells(path, reader, len(header)):
            row = dict(zip(header, (c.strip() for c in cells)))
            rows.append((lineno, int(number(path, lineno, "step", row["step"])), row))
    keymap = {name: name for name in PHASES + LENGTHS}
    return require_any(RunLog(path, FORMAT, build_steps(path, rows, keymap)), ", ".join(COLUMNS[1:]))
