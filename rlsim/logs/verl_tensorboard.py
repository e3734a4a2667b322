"""verl's tensorboard event files: one scalar per key per step (`SummaryWriter.add_scalar`).

verl's tensorboard backend calls `writer.add_scalar(key, value, step)` for every metric
(volcengine/verl@03e1b65793f0f2dcc526cf6bf087028ca8c900e9:verl/utils/tracking.py,
`_TensorboardAdapter`). Read with tensorboard's own `EventAccumulator` (the `logs` extra:
pip install 'rlsim[logs]'); LOG is an event file or the folder holding it. Keys read:
`verl_keys.VERL_KEYS`. A file that is not an event file, or whose last record is cut off, is
an error naming the file.
"""

from __future__ import annotations

import struct
from pathlib import Path

from rlsim.logs.record import RunLog, build_steps, log_error, require_any
from rlsim.logs.verl_keys import EXPECTED, VERL_KEYS

FORMAT = "verl-tensorboard"


def _event_files(path: str) -> list[Path]:
    p = Path(path)
    files = sorted(p.rglob("*tfevents*")) if p.is_dir() else [p]
    if not files:
        raise log_error(path, None, "no tensorboard event file (*tfevents*) in this folder")
    return files


def _check_records(path: Path) -> None:
    """Walk the TFRecord framing (length, crc, data, crc) so a cut-off file is an error, not a gap."""
    data = path.read_bytes()
    pos, n = 0, 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise log_error(str(path), None, f"record {n + 1} is cut off at byte {pos} (truncated file)")
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        end = pos + 12 + length + 4
        if end > len(data):
            raise log_error(str(path), None, f"record {n + 1} is cut off at byte {pos} (truncated file)")
        pos, n = end, n + 1
    if n == 0:
        raise log_error(str(path), None, "empty event file")


def read(path: str) -> RunLog:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        need = "reading tensorboard files needs the 'logs' extra: pip install 'rlsim[logs]'"
        raise log_error(path, None, need) from None
    rows = []
    for file in _event_files(path):
        _check_records(file)
        acc = EventAccumulator(str(file), size_guidance={"scalars": 0})
        try:
            acc.Reload()
        except Exception as exc:  # tensorboard raises its own DataLossError and friends
            raise log_error(str(file), None, f"not a readable event file ({type(exc).__name__})") from None
        for tag in acc.Tags().get("scalars", []):
            if tag in VERL_KEYS:
                rows += [(f"tag '{tag}' step {e.step}", e.step, {tag: e.value}) for e in acc.Scalars(tag)]
    return require_any(RunLog(path, FORMAT, build_steps(path, rows, VERL_KEYS)), EXPECTED)
