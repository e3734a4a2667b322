"""Two adjustments to typer's own behaviour, applied once when `rlsim.cli` builds the app.

- Flags show as flags in --help: typer prints a type after every option, so `--force` read
  `--force <bool>` as if it took a value. A flag's type column is left empty instead.
- A missing value needs no pydantic: typer (0.2x) coerces every parameter through a pydantic
  `TypeAdapter` it builds on first use, even when the value is missing (None), which it then
  returns unchanged (None, or () for a repeatable option). The group's own `--help` and
  `--install-completion` are such values, so `rlsim simulate --help` imported pydantic (~80 ms,
  a third of its start-up). A missing value now goes through typer's own pass-through coercion,
  which returns the same None or (); a given value still gets the TypeAdapter.

Both check that the typer internals they adjust exist and leave typer alone otherwise (older
typer releases convert with click and never import pydantic).
"""

from __future__ import annotations

from typing import Any

import typer


def flags_take_no_value() -> None:
    """A flag's type column in --help is empty (`--force`, not `--force <bool>`)."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "_rlsim_flags", False):
        return

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich._rlsim_flags = True
    option.display_type_rich = display_type_rich


def missing_values_without_pydantic() -> None:
    """A parameter whose value is missing is coerced without building a pydantic TypeAdapter."""
    try:
        from typer._coercion import PassThroughRuntimeParam as pass_through
    except ImportError:  # typer before its pydantic coercion
        return
    parameter = getattr(typer.core, "_TyperParameter", None)
    processed = getattr(parameter, "process_value", None)
    if processed is None or pass_through is None or getattr(processed, "_rlsim_missing", False):
        return

    def process_value(self, ctx, value: Any) -> Any:  # noqa: ANN001
        if value is not None or getattr(self, "_runtime_param", False) is not None:
            return processed(self, ctx, value)
        described = self.type_descriptor
        self._runtime_param = pass_through(parameter_info=described.parameter_info, annotation=described.annotation)
        try:
            return processed(self, ctx, value)
        finally:
            self._runtime_param = None  # a later, given value still builds typer's TypeAdapter

    process_value._rlsim_missing = True
    parameter.process_value = process_value
