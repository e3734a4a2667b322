"""Readers of real RL runs' logs: verl, NeMo RL, slime/miles, TRL and a plain CSV.

Each module reads one format and documents the keys it reads (and where in the library's code
they are written); all return the same `RunLog` of `StepLog`s (rlsim.logs.record), which
`rlsim fit` turns into a scenario. `read_log` picks the reader by `--format` or by looking at
the file. Readers never import the simulator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from rlsim.logs import nemo_rl, plain_csv, slime, trl_state, verl_console, verl_jsonl, verl_tensorboard, verl_wandb_csv
from rlsim.logs.record import RunLog, StepLog, log_error

__all__ = ["FORMATS", "RunLog", "StepLog", "detect_format", "read_log"]

FORMATS: dict[str, Callable[[str], RunLog]] = {
    m.FORMAT: m.read
    for m in (verl_wandb_csv, verl_tensorboard, verl_console, verl_jsonl, nemo_rl, slime, trl_state, plain_csv)
}


def _head(path: Path, n: int = 1 << 22) -> str:
    with path.open("rb") as f:
        return f.read(n).decode("utf-8", errors="replace")


def detect_format(path: str) -> str:
    """The reader for a file by its name and first bytes; an error asks for --format when unsure."""
    p = Path(path)
    if p.is_dir() or "tfevents" in p.name:
        return verl_tensorboard.FORMAT
    head = _head(p)
    first = head.splitlines()[0] if head else ""
    if p.suffix == ".csv":
        return verl_wandb_csv.FORMAT if "timing_s/" in first or "response_length/" in first else plain_csv.FORMAT
    if p.suffix == ".jsonl":
        return verl_jsonl.FORMAT
    if p.suffix == ".json":
        if '"log_history"' in head:
            return trl_state.FORMAT
        if '"timing/train/' in head:
            return nemo_rl.FORMAT
    if re.search(r"perf \d+: \{", head):
        return slime.FORMAT
    if re.search(r"(?:^|\s)step:\d+ - ", head, re.MULTILINE):
        return verl_console.FORMAT
    if head.lstrip().startswith("{"):
        try:
            json.loads(first)
            return verl_jsonl.FORMAT
        except json.JSONDecodeError:
            pass
    raise log_error(path, None, f"cannot tell the log format; pass --format ({', '.join(FORMATS)})")


def read_log(path: str, fmt: str | None = None) -> RunLog:
    """Parse `path` with the reader `fmt` (None: detected)."""
    if not Path(path).exists():
        raise log_error(path, None, "no such file or folder")
    fmt = fmt or detect_format(path)
    reader = FORMATS.get(fmt)
    if reader is None:
        raise log_error(path, None, f"unknown --format '{fmt}'; choose from {', '.join(FORMATS)}")
    return reader(path)
