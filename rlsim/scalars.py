"""What counts as a number or a boolean in a scenario: one rule for every field, by its type.

Pydantic's lax mode takes `true` for the integer 1 and `1` or `"yes"` for a boolean, and takes
integers of any size; a scenario written `tp: true` would then silently run with TP 1. The
scenario models pass their raw input through `strict_fields` before pydantic converts it (one
`model_validator(mode="before")` on their base class), so no field has to repeat it:

- a boolean is refused where the field's type holds no `bool`;
- a field whose only type is `bool` takes only true/false;
- integers are bounded by `MAX_INT` (2**53, exact as a float) at any nesting inside lists;
- text holds no control character: names and paths are echoed into tables, traces and error
  lines, where `\x1b[...` would drive the user's terminal.

Non-finite floats are refused by the models' config (`allow_inf_nan=False`) and, in files and
`--set` values, already by the YAML reader (`rlsim.inputs`).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from rlsim.errors_format import has_control, shown

MAX_INT = 2**53


def leaf_types(annotation: Any) -> set[Any]:
    """The plain types an annotation admits: unions, Optional, Annotated, list/tuple unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return leaf_types(get_args(annotation)[0])
    if origin is Literal:
        return {type(v) for v in get_args(annotation)}
    if origin in (Union, types.UnionType, list, tuple, set, frozenset, dict):
        out: set[Any] = set()
        for arg in get_args(annotation):
            if arg is not Ellipsis:
                out |= leaf_types(arg)
        return out
    return {annotation}


@dataclass(frozen=True)
class _Rule:
    """What one field's type admits, worked out once per model class."""

    nested_model: bool  # a mapping here is a nested model's to check
    bool_only: bool  # only true/false (or null)
    allows_bool: bool
    numeric: bool

    @classmethod
    def of(cls, annotation: Any) -> _Rule:
        leaves = leaf_types(annotation)
        return cls(
            nested_model=any(isinstance(t, type) and issubclass(t, BaseModel) for t in leaves),
            bool_only=leaves <= {bool, type(None)},
            allows_bool=bool in leaves,
            numeric=int in leaves or float in leaves,
        )


def strict_scalar(value: Any, annotation: Any) -> Any:
    """`value` unchanged, or a ValueError saying why its booleans, integers or text are refused."""
    return _check(value, _Rule.of(annotation))


def _check(value: Any, rule: _Rule) -> Any:
    if rule.nested_model and isinstance(value, dict):
        return value
    if rule.bool_only:
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {shown(value)}")
        return value
    _check_item(value, rule)
    return value


def _check_item(item: Any, rule: _Rule) -> None:
    """Booleans, integers and text at any depth of lists and tuples (mappings: nested models)."""
    if isinstance(item, bool):
        if not rule.allows_bool and rule.numeric:
            raise ValueError(f"must be a number, not the boolean {str(item).lower()}")
    elif isinstance(item, int):
        if abs(item) > MAX_INT:
            raise ValueError(f"integer {_short(item)} is out of range (at most 2**53)")
    elif isinstance(item, str):
        if has_control(item):
            raise ValueError(f"{shown(item)} holds control characters (terminal escapes, newlines)")
    elif isinstance(item, list | tuple):
        for x in item:
            _check_item(x, rule)


def _short(n: int) -> str:
    return str(n) if n.bit_length() <= 64 else f"of {n.bit_length():,} bits"


@cache
def _rules(model: type[BaseModel]) -> dict[str, _Rule]:
    return {name: _Rule.of(f.annotation) for name, f in model.model_fields.items()}


def strict_fields(model: type[BaseModel], data: Any) -> Any:
    """`data` unchanged, or a ValidationError locating every field `strict_scalar` refuses."""
    if not isinstance(data, dict):
        return data
    errors = []
    rules = _rules(model)
    for name, value in data.items():
        rule = rules.get(name) if isinstance(name, str) else None
        if rule is None:
            continue  # unknown fields are pydantic's to report
        try:
            _check(value, rule)
        except ValueError as exc:
            kind = PydanticCustomError("strict_scalar", str(exc))
            errors.append(InitErrorDetails(type=kind, loc=(name,), input=value))
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)
    return data
