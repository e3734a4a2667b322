"""Reading the files a user names, with every way they can be unusable as one ScenarioError.

Every file rlsim reads on a user's behalf (a scenario YAML, a `--prices` file, a `--profile` JSON,
a model's config.json, a lengths file) comes through `read_text`, and YAML and JSON through
`load_yaml` / `load_json`, so each gets the same guarantees:

- a bounded read: at most `limit` bytes are read, so `/dev/zero` or an endless pipe is refused
  instead of filling memory; a directory, a missing or unreadable file is one line;
- UTF-8 text only: UTF-16, binary files (NUL bytes) and invalid UTF-8 are named as such;
- bounded shape: nesting deeper than `MAX_DEPTH` and documents of more than `MAX_NODES` values
  (counting what YAML aliases expand to) are refused before anything walks them;
- YAML holds no duplicate key (the last would silently win), no integer too long to convert and
  no `.inf`/`.nan`; JSON holds no `NaN`/`Infinity`. A non-finite number is never a valid input:
  no field means "unlimited" by it, and it would leak into outputs as invalid JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from rlsim.errors import ScenarioError

MIB = 2**20
YAML_LIMIT_BYTES = 2 * MIB  # scenarios and price files are kilobytes; PyYAML parses ~1 MB/s
JSON_LIMIT_BYTES = 32 * MIB  # a profile with its measurements, a config.json
LENGTHS_LIMIT_BYTES = 64 * MIB  # millions of observed lengths, one per line
MAX_DEPTH = 32  # nesting levels of mappings and lists (a scenario needs 5)
MAX_NODES = 1_000_000  # values in one document, aliases expanded
INT64_MAX = 2**63 - 1


def read_text(path: str | Path, field: str, what: str, limit: int) -> str:
    """The UTF-8 text of `path`, read in at most `limit` bytes; `what` names the file in errors."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise ScenarioError(field, f"{what} '{p}' does not exist") from None
    except IsADirectoryError:
        raise ScenarioError(field, f"{what} '{p}' is a directory, not a file") from None
    except PermissionError:
        raise ScenarioError(field, f"cannot read {what} '{p}': permission denied") from None
    except OSError as exc:
        raise ScenarioError(field, f"cannot read {what} '{p}': {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ScenarioError(field, f"{what} '{p}' is larger than {limit / MIB:g} MiB, the most rlsim reads for it")
    return decode(data, field, f"{what} '{p}'")


def decode(data: bytes, field: str, where: str) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped), or a ScenarioError saying what it is."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ScenarioError(field, f"{where} is UTF-16 text; save it as UTF-8")
    if b"\x00" in data:
        raise ScenarioError(field, f"{where} is a binary file (it holds NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
        raise ScenarioError(
            field, f"{where} is not UTF-8 text (byte 0x{bad:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


# ---------------------------------------------------------------- YAML


class RefusedValue(ConstructorError):
    """A YAML value that parses but that rlsim refuses (too long an integer, not finite)."""


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, over-long integers and non-finite floats."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` merges defaults; explicit keys may override them
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: SafeLoader's own error follows
            if duplicate:
                raise RefusedValue(
                    None, None, f"duplicate key '{key}' (the first is earlier in this mapping)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # Python refuses to convert integers of more than 4,300 digits
            too_long = f"integer of {len(node.value):,} characters is too long"
            raise RefusedValue(None, None, too_long, node.start_mark) from None
        if abs(value) > INT64_MAX:
            raise RefusedValue(None, None, "integer is beyond the 64-bit range", node.start_mark)
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise RefusedValue(None, None, f"'{node.value}' is not a finite number", node.start_mark)
        return value


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)


_SHIPPED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_shipped_yaml(text: str) -> Any:
    """A YAML file rlsim ships (its catalog, presets, published rows, profiles), parsed with
    libyaml's C parser where PyYAML was built with it: the same values as SafeLoader on every
    shipped file (tests/test_inputs.py compares them), ~9x faster, and the catalog's parse was
    most of a default `rlsim simulate`'s start. A user's file goes through `load_yaml` (strict).
    """
    return yaml.load(text, Loader=_SHIPPED_LOADER)  # noqa: S506 - SafeLoader or its C twin


def _problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{where}: {getattr(exc, 'problem', None) or 'malformed YAML'}"


def load_yaml(text: str, field: str, where: str) -> Any:
    """Parse YAML text strictly and check its shape; errors name `where` and the line."""
    try:
        data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RefusedValue as exc:
        raise ScenarioError(field, f"{where}{_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(field, f"{where} is not valid YAML{_problem(exc)}") from None
    except RecursionError:
        raise ScenarioError(field, f"{where} is nested more than {MAX_DEPTH} levels deep") from None
    check_shape(data, field, where)
    return data


def load_yaml_value(text: str) -> Any:
    """One `--set`/`--vary` value: strict YAML, or the text itself when it is not YAML at all.

    A value YAML reads but rlsim refuses (a 5,000-digit integer, `.inf`) raises RefusedValue.
    """
    try:
        data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RefusedValue:
        raise
    except (yaml.YAMLError, RecursionError):
        return text
    check_shape(data, "--set", "the value")
    return data


# ---------------------------------------------------------------- JSON


def _non_finite(token: str) -> Any:
    raise ValueError(f"{token} is not a finite number")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # 1e400 overflows to inf
        raise ValueError(f"{token} is not a finite number")
    return value


def load_json(text: str, field: str, where: str) -> Any:
    """Parse JSON text (no NaN/Infinity) and check its shape; errors name `where`."""
    try:
        data = json.loads(text, parse_constant=_non_finite, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            field, f"{where} is not valid JSON (corrupt or truncated: {exc.msg} at line {exc.lineno})"
        ) from None
    except RecursionError:
        raise ScenarioError(field, f"{where} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # parse_constant, or an integer of more than 4,300 digits
        raise ScenarioError(field, f"{where}: {exc}") from None
    check_shape(data, field, where)
    return data


# ---------------------------------------------------------------- shape


def check_shape(data: Any, field: str, where: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH or more than MAX_NODES values (aliases expanded).

    YAML aliases share one object between several places, so a naive walk of `a: &x [*y, *y]`
    chains is exponential; each container is measured once and its size reused.
    """
    measured: dict[int, tuple[int, int]] = {}  # id -> (values, height)

    def measure(node: Any, depth: int) -> tuple[int, int]:
        if not isinstance(node, dict | list):
            return 1, 0
        if id(node) in measured:
            size, height = measured[id(node)]
        else:
            if depth > MAX_DEPTH:
                raise ScenarioError(field, f"{where} is nested more than {MAX_DEPTH} levels deep")
            items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            size, height = 1, 0
            for item in items:
                s, h = measure(item, depth + 1)
                size, height = size + s, max(height, h + 1)
                if size > MAX_NODES:
                    raise ScenarioError(field, f"{where} holds more than {MAX_NODES:,} values")
            measured[id(node)] = (size, height)
        if depth + height > MAX_DEPTH:
            raise ScenarioError(field, f"{where} is nested more than {MAX_DEPTH} levels deep")
        return size, height

    measure(data, 0)
