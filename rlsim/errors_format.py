"""Turning errors into the one-line-per-field messages users see, safe to print to a terminal.

Values a user wrote are echoed back in error lines, so `printable` escapes control characters
(a value holding `\\e]0;title\\a` must not retitle or recolour the user's terminal, and a
newline must not break the one-line promise) and `shown` cuts a long value short.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only named in annotations: `rlsim --help` need not load pydantic
    from pydantic import ValidationError

_TAGS = {"lognormal", "constant", "histogram", "file", "str", "ModelConfigJson"}
SHOWN_CHARS = 60  # the most of a user's value echoed in an error line


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (C0, DEL, C1, line/paragraph separators)."""
    return _CONTROL.search(text) is not None


def printable(text: str) -> str:
    """`text` with every control character (C0, DEL, C1) written as a visible escape."""
    if not has_control(text):
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code < 0xA0 or ch in "\u2028\u2029":
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def shown(value: object) -> str:
    """A user's value as it appears in an error line: repr, at most SHOWN_CHARS characters."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length():,} bits"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _loc(loc: tuple) -> str:
    parts = [str(p) for p in loc if str(p) not in _TAGS and not str(p).startswith("function-")]
    return ".".join(parts) or "scenario"


def validation_lines(exc: ValidationError) -> list[str]:
    """'field.path: why (got value)' for each field, in pydantic's order.

    A value that fails every branch of a union (`model: 5` is neither a name nor a mapping) is one
    problem: the branches' reasons share its line, joined by 'or'. A mapping refused by a scalar
    branch while a model branch reports on its fields was meant for the model: only those count.
    """
    reasons: dict[str, list[str]] = {}
    errors = exc.errors()
    wheres = [_loc(err["loc"]) for err in errors]
    for err, where in zip(errors, wheres):
        msg = err["msg"].removeprefix("Value error, ")
        if isinstance(err.get("input"), dict) and any(w.startswith(f"{where}.") for w in wheres):
            continue
        if err["type"] == "extra_forbidden":
            msg = "unknown field (not part of the scenario schema; see `rlsim schema`)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif (
            "input" in err
            and not isinstance(err["input"], dict | list)
            and err["type"] not in ("value_error", "strict_scalar")
        ):
            msg = f"{msg} (got {shown(err['input'])})"
        if msg not in reasons.setdefault(where, []):
            reasons[where].append(msg)
    return [f"{where}: {' or '.join(msgs)}" for where, msgs in reasons.items()]
