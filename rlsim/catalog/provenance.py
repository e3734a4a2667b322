"""Provenance fields shared by every catalog entry: where a fact came from and when.

Style guide section 8 asks that every catalog fact carry a source and a date. A date is an ISO
calendar date (YYYY-MM-DD) or the literal "unknown" when the source gave none; anything else is
rejected at load time so that a typo cannot pass for a date and staleness checks stay exact.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

UNKNOWN_DATE = "unknown"
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _date_to_str(value: object) -> object:
    """YAML reads an unquoted 2026-11-20 as a date; keep it as the ISO string it was."""
    return value.isoformat() if isinstance(value, date) else value


def _check_date(value: str) -> str:
    """Accept an ISO date or "unknown"; reject everything else with the reason."""
    if value == UNKNOWN_DATE:
        return value
    # The pattern keeps out the other forms fromisoformat accepts (20261129, 2026-W48-1).
    if _ISO_DAY.fullmatch(value):
        try:
            date.fromisoformat(value)
            return value
        except ValueError:
            pass
    raise ValueError(f"'{value}' is not an ISO date (YYYY-MM-DD) or 'unknown'")


def parse_date(value: str) -> date | None:
    """The date a provenance string stands for, or None when it is "unknown"."""
    return None if value == UNKNOWN_DATE else date.fromisoformat(value)


DateStr = Annotated[str, BeforeValidator(_date_to_str), AfterValidator(_check_date)]
"""An ISO date string or "unknown"."""

Sources = Annotated[
    list[Annotated[str, Field(min_length=1)]],
    Field(min_length=1, description="Where the facts come from: repository@commit path, or URL."),
]
"""A non-empty list of non-empty citation strings."""
