"""Output formats chosen by file extension, checked before any simulation runs.

Kept apart from the plotting modules so the CLI can reject `--plot out.jpg` without importing
matplotlib, and fail in a second rather than after a long simulation.
"""

from __future__ import annotations

from pathlib import Path

from rlsim.errors import ScenarioError

FIGURE_FORMATS = {".png": "png", ".svg": "svg"}
REPORT_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


def _by_extension(path: str, formats: dict[str, str], field: str) -> str:
    fmt = formats.get(Path(path).suffix.lower())
    if fmt is None:
        choices = ", ".join(sorted(formats))
        raise ScenarioError(field, f"'{path}' has no known extension; use one of {choices}")
    return fmt


def figure_format(path: str, field: str = "--plot") -> str:
    """'png' or 'svg' from the file name."""
    return _by_extension(path, FIGURE_FORMATS, field)


def report_format(path: str, field: str = "--output") -> str:
    """'html' or 'md' from the file name."""
    return _by_extension(path, REPORT_FORMATS, field)
