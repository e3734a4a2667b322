"""Where results go: refusing outputs that would be lost, and JSON that is always valid JSON.

Checked before any work runs, so a long sweep never ends in an unwritable path:

- nothing a user wrote is overwritten without `--force`;
- two outputs of one command never share a file (the second would silently replace the
  first), and at most one writes to stdout ('-'), else stdout would hold two documents;
- the folder of a new file exists and is writable, and the path is not a folder.

A write that still fails (a full disk, `/dev/full`) raises OSError, which the CLI's boundary
prints as one line. `json_text` writes NaN and infinities as null: `json.dumps` would write
`NaN`/`Infinity`, which no strict JSON parser reads.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from rlsim.errors import ScenarioError


def check_output(path: str | None, force: bool, field: str, creates_folder: bool = False) -> None:
    """One output path (None or '-': nothing to check) can be written without losing a file.

    `creates_folder`: the command makes the file's folder itself (`calibrate --out`).
    """
    if not path or path == "-":
        return
    p = Path(path).expanduser()
    if p.is_dir():
        raise ScenarioError(field, f"'{path}' is a folder; give a file path")
    if p.exists():
        if not force:
            raise ScenarioError(field, f"'{path}' exists; pass --force to overwrite it")
        if not os.access(p, os.W_OK):
            raise ScenarioError(field, f"cannot write '{path}': permission denied")
        return
    folder = p.absolute().parent
    if creates_folder:
        return
    if not folder.is_dir():
        raise ScenarioError(field, f"cannot write '{path}': folder '{folder}' does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ScenarioError(field, f"cannot write '{path}': folder '{folder}' is not writable")


def check_outputs(outputs: dict[str, str | None], force: bool) -> None:
    """Every output of one command (option name -> path): each writable, no two on one target."""
    given = {option: path for option, path in outputs.items() if path}
    to_stdout = [option for option, path in given.items() if path == "-"]
    if len(to_stdout) > 1:
        raise ScenarioError(
            to_stdout[1], f"{' and '.join(to_stdout)} both write to stdout ('-'); give all but one a file"
        )
    seen: dict[str, str] = {}
    for option, path in given.items():
        if path == "-":
            continue
        target = os.path.realpath(Path(path).expanduser())
        if target in seen:
            raise ScenarioError(option, f"'{path}' is also the {seen[target]} file; give each output its own")
        seen[target] = option
        check_output(path, force, option)


def finite(data: Any) -> Any:
    """`data` with every NaN or infinite float replaced by None (JSON null)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    return data


def json_text(data: Any, **dumps: Any) -> str:
    """`json.dumps` of `data` with non-finite floats as null: always valid (strict) JSON."""
    return json.dumps(finite(data), allow_nan=False, **dumps)


def write_text(text: str, path: str) -> None:
    """Write `text` to `path`, or to stdout when path is '-'; a failed write names the path."""
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        Path(path).expanduser().write_text(text)
    except OSError as exc:  # a write error (ENOSPC) carries no file name of its own
        raise OSError(exc.errno, exc.strerror, path) from None
