"""A wandb CSV export of a verl run: one row per logged step, one column per metric.

wandb's "Export CSV" writes a step column (`_step` or `Step`) and one column per key; panel
exports name columns "<run name> - <key>" and add "<...>__MIN"/"__MAX" companions, which are
skipped. Keys read: `verl_keys.VERL_KEYS`. A row with fewer cells than the header (a truncated
file) or a step that is not a number is an error naming the line.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rlsim.logs.record import RunLog, build_steps, csv_cells, log_error, number, require_any
from rlsim.logs.verl_keys import EXPECTED, VERL_KEYS

FORMAT = "verl-wandb-csv"
STEP_COLUMNS = ("_step", "Step", "step", "global_step", "trainer/global_step")


def _key(column: str) -> str:
    return column.rsplit(" - ", 1)[-1].strip()


def read(path: str) -> RunLog:
    with Path(path).open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise log_error(path, 1, "empty file: expected a header row")
        keys = [_key(c) for c in header]
        step_col = next((i for i, k in enumerate(keys) if k in STEP_COLUMNS), None)
        if step_col is None:
            raise log_error(path, 1, f"no step column (one of {', '.join(STEP_COLUMNS)})")
        rows = []
        for lineno, cells in csv_cells(path, reader, len(header)):
            row = {k: c for k, c in zip(keys, cells) if not k.endswith(("__MIN", "__MAX"))}
            rows.append((lineno, int(number(path, lineno, keys[step_col], cells[step_col])), row))
    return require_any(RunLog(path, FORMAT, build_steps(path, rows, VERL_KEYS)), EXPECTED)
