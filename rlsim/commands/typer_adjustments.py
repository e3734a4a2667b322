"""Three adjustments to typer's own behaviour, applied once when `rlsim.cli` builds the app.

- Flags show as flags in --help: typer prints a type after every option, so `--force` read
  `--force <bool>` as if it took a value. A flag's type column is left empty instead.
- A missing value needs no pydantic: typer (0.2x) coerces every parameter through a pydantic
  `TypeAdapter` it builds on first use, even when the value is missing (None), which it then
  returns unchanged (None, or () for a repeatable option). The group's own `--help` and
  `--install-completion` are such values, so `rlsim simulate --help` imported pydantic (~80 ms,
  a third of its start-up). A missing value now goes through typer's own pass-through coercion,
  which returns the same None or (); a given value still gets the TypeAdapter.
- Help without markdown or tracebacks: typer's rich help module imports `rich.markdown`
  (markdown-it, pygments) and `rich.traceback` (pygments, attrs) at its top, for help written in
  markdown (rlsim's is in rich markup) and for pretty tracebacks (only on a crash). Together they
  were ~40% of the instructions of `rlsim simulate --help`. The module now gets stand-ins for the
  two classes, which import the real ones on first use; the real modules import as usual.

Each checks that the typer internals it adjusts exist and leaves typer alone otherwise (older
typer releases convert with click and never import pydantic).
"""

from __future__ import annotations

import importlib
import sys
import types
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


class _Deferred(type):
    """A class whose real one (`_module`.`__name__`) is imported when it is first used."""

    def _real(cls) -> type:
        return getattr(importlib.import_module(cls._module), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:  # Traceback.from_exception, ...
        return getattr(cls._real(), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._real())


DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}  # what typer.rich_utils takes from each


def help_without_markdown_or_tracebacks() -> None:
    """typer's rich help module imports without `rich.markdown` and `rich.traceback`."""
    if "typer.rich_utils" in sys.modules or any(name in sys.modules for name in DEFERRED):
        return  # too late, or nothing to save
    stand_ins = {}
    for name, cls in DEFERRED.items():
        module = types.ModuleType(name)
        setattr(module, cls, _Deferred(cls, (), {"_module": name}))
        stand_ins[name] = sys.modules[name] = module
    try:
        import typer.rich_utils  # noqa: F401
    except ImportError:  # typer without rich
        pass
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
