"""Name lookup and error wording shared by the catalogs: forgiving spellings, strict failures.

A user may write "H100_SXM", "h100 sxm" or "h100-sxm"; all normalise to the same token. A name
that matches nothing raises ScenarioError naming the field, the closest known names (difflib)
and the full list, never a silent default (style guide section 8). `first_error` turns a pydantic
ValidationError into the (field, reason) pair of a one-line ScenarioError.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from pydantic import ValidationError

from rlsim.errors import ScenarioError

_SEPARATORS = re.compile(r"[\s_\-]+")


def normalize(name: str) -> str:
    """Case-fold and treat runs of spaces, '_' and '-' as one '-'."""
    return _SEPARATORS.sub("-", name.strip().lower()).strip("-")


def build_index(spellings: Mapping[str, Iterable[str]], what: str) -> dict[str, str]:
    """Map every normalised spelling to its catalog key.

    `spellings` maps each key to the other names it answers to. Two keys claiming one spelling
    is a catalog bug, so it raises instead of letting the last entry win.
    """
    index: dict[str, str] = {}
    for key, names in spellings.items():
        for spelling in (key, *names):
            token = normalize(spelling)
            owner = index.setdefault(token, key)
            if owner != key:
                raise ValueError(f"{what} catalog: '{spelling}' names both '{owner}' and '{key}'")
    return index


def resolve(name: str, index: Mapping[str, str], known: list[str], field: str, what: str) -> str:
    """The catalog key for `name`, or ScenarioError with suggestions."""
    key = index.get(normalize(name))
    if key is not None:
        return key
    close = difflib.get_close_matches(normalize(name), list(index), n=3, cutoff=0.6)
    suggestions = list(dict.fromkeys(index[token] for token in close))
    hint = f" (did you mean {' or '.join(repr(s) for s in suggestions)}?)" if suggestions else ""
    raise ScenarioError(field, f"unknown {what} '{name}'{hint}; known: {', '.join(known)}")


def unknown_name(name: str, known: list[str], what: str) -> str:
    """'unknown <what> 'x' (did you mean 'y'?); known: ...' for names outside a catalog index."""
    by_token = {normalize(k): k for k in known}
    close = difflib.get_close_matches(normalize(name), list(by_token), n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(by_token[c]) for c in close)}?)" if close else ""
    return f"unknown {what} '{name}'{hint}; known: {', '.join(known)}"


def first_error(exc: ValidationError) -> tuple[str, str]:
    """(dotted location, reason) of the first problem pydantic found, without its prefixes."""
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"])
    cause = error.get("ctx", {}).get("error")
    reason = str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]
    return location, reason
