"""Typer options shared by every command, defined once (help text included)."""

from __future__ import annotations

from typing import Annotated

import typer

ScenarioArg = Annotated[
    str | None,
    typer.Argument(
        help="Scenario YAML file or built-in name (see `rlsim examples`); default: the built-in default."
    ),
]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="Override a field: key.path=value (repeatable).")
]
JsonOpt = Annotated[
    str | None, typer.Option("--json", help="Write results as JSON to PATH ('-' for stdout).")
]
CsvOpt = Annotated[
    str | None, typer.Option("--csv", help="Write result rows as CSV to PATH ('-' for stdout).")
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Overwrite output files that already exist.")
]
