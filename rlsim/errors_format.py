"""Turning pydantic validation errors into the one-line-per-field messages users see."""

from __future__ import annotations

from pydantic import ValidationError

_TAGS = {"lognormal", "constant", "histogram", "file", "str", "ModelConfigJson"}


def _loc(loc: tuple) -> str:
    parts = [str(p) for p in loc if str(p) not in _TAGS and not str(p).startswith("function-")]
    return ".".join(parts) or "scenario"


def validation_lines(exc: ValidationError) -> list[str]:
    """'field.path: why (got value)' for each error, deduplicated, in pydantic's order."""
    lines: list[str] = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        where = _loc(err["loc"])
        if err["type"] == "extra_forbidden":
            msg = "unknown field (not part of the scenario schema; see `rlsim schema`)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif "input" in err and not isinstance(err["input"], dict | list) and err["type"] != "value_error":
            msg = f"{msg} (got {err['input']!r})"
        line = f"{where}: {msg}"
        if line not in lines:
            lines.append(line)
    return lines
