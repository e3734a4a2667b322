"""Typer options shared by every command, defined once (help text included)."""

from __future__ import annotations

import math
from typing import Annotated

import typer

ScenarioArg = Annotated[
    str | None,
    typer.Argument(help="Scenario YAML file or built-in name (see `rlsim examples`); default: the built-in default."),
]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a field: key.path=value (repeatable).")]
JsonOpt = Annotated[str | None, typer.Option("--json", help="Write results as JSON to PATH ('-' for stdout).")]
CsvOpt = Annotated[str | None, typer.Option("--csv", help="Write result rows as CSV to PATH ('-' for stdout).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite output files that already exist.")]


def scenario_overrides(
    sets: list[str] | None, mode: str | None = None, steps: int | None = None, seed: int | None = None
) -> list[str]:
    """The --set overrides plus the dedicated --mode/--steps/--seed options, as key=value strings."""
    out = list(sets or [])
    for key, value in (("pipeline.mode", mode), ("steps", steps), ("seed", seed)):
        if value is not None:
            out.append(f"{key}={value}")
    return out


def check_number(value: float | None, option: str, *, minimum: float = 0.0, above: bool = False) -> None:
    """A float option is finite (typer takes 'nan' and 'inf') and at least (or above) `minimum`."""
    from rlsim.errors import ScenarioError

    if value is None:
        return
    if not math.isfinite(value):
        raise ScenarioError(option, f"must be a finite number, got {value}")
    if value < minimum or (above and value == minimum):
        raise ScenarioError(option, f"must be {'>' if above else '>='} {minimum:g}, got {value:g}")
