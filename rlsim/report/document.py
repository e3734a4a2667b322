"""The report as data: sections of paragraphs, bullet lists, tables and pictures.

`review.py` fills it, `render.py` writes it as HTML or Markdown, so both formats carry the same
content and the sections exist in exactly one place (SECTIONS, which a test checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# (anchor, title) of every section, in order. OPTIONAL ones appear only when asked for.
SECTIONS = [
    ("scenario", "Scenario"),
    ("assumptions", "Assumptions and calibration profile"),
    ("architectures", "Architectures compared"),
    ("libraries", "Libraries compared"),
    ("timelines", "Timelines and GPU time"),
    ("cost", "Cost per provider"),
    ("staleness", "Staleness"),
    ("recommendation", "Recommendation"),
    ("sensitivity", "Sensitivity"),
]
TITLES = dict(SECTIONS)
OPTIONAL = {"libraries"}  # `rlsim report --presets a,b,...`


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    """Rows of text cells. `align` has one letter per column: 'l' left, 'n' left without wrapping,
    'r' right-aligned numbers; empty means a text first column and number columns after it."""

    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    align: str = ""

    def column_align(self, i: int) -> str:
        return self.align[i] if i < len(self.align) else ("l" if i == 0 else "r")


@dataclass(frozen=True)
class Picture:
    """A PNG image, embedded in the report itself (no file beside it, no network)."""

    png: bytes
    alt: str
    caption: str = ""


Block = Paragraph | Bullets | Table | Picture


@dataclass
class Section:
    key: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def title(self) -> str:
        return TITLES[self.key]


@dataclass
class Review:
    """An architecture-review report: a title, a one-paragraph summary and the sections."""

    title: str
    summary: str
    sections: list[Section]
    footer: str = ""
