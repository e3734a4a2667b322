"""Tables that stay readable at the terminal's width (80 columns when piped).

Rich shrinks a table that is too wide by splitting words and cropping cells. `fitted_table`
instead keeps every column at least as wide as its longest word (header included), so text wraps
between words and numbers never wrap; when the table still does not fit, it drops the columns
the caller marked optional, in order, and says which below the table (JSON and CSV keep them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlsim.commands.common import console
from rlsim.errors_format import printable

if TYPE_CHECKING:
    from rich.console import RenderableType


def fitted_table(
    title: str,
    columns: list[str],
    rows: list[list[str]],
    caption: str | None = None,
    text_columns: int = 1,
    max_text_width: int | None = 28,
    optional: Sequence[str] = (),
    elsewhere: str = "see --json or --csv",
) -> RenderableType:
    """The first `text_columns` columns are text (left-aligned), the rest numbers (right).

    Readable at 80 columns when piped: no column is narrower than its longest word (header
    included), so text wraps between words, never inside one, and numbers (as wide as their
    widest cell) never wrap; when the table is still wider than the terminal, the `optional`
    columns are dropped, in that order, and the caption says so (`elsewhere`: where to find
    them). Spare width goes to text columns first, then to headers that would wrap. The caption
    is printed below the table as wrapped text.
    """
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def widest_word(i: int) -> int:
        """Text cells wrap at spaces, number cells never; headers wrap at spaces."""
        cells = [r[i] for r in rows]
        words = [w for c in cells for w in c.split()] if i < text_columns else cells
        return max([len(w) for w in [*columns[i].split(), *words]] + [1])

    keep = list(range(len(columns)))
    dropped = []
    for name in optional:
        if sum(widest_word(i) + 3 for i in keep) < console.width:  # padding and separator
            break
        if name in columns and columns.index(name) in keep:
            keep.remove(columns.index(name))
            dropped.append(name)
    widths = {i: widest_word(i) for i in keep}  # numbers: their widest cell; text: wraps
    room = console.width - 1 - sum(w + 3 for w in widths.values())
    for i in [i for i in keep if i < text_columns]:  # text columns grow to their longest cell
        longest = max(len(c) for c in [columns[i], *(r[i] for r in rows)])
        cap = max(widths[i], max_text_width) if max_text_width else longest
        grow = max(0, min(longest, cap) - widths[i])
        widths[i] += min(grow, max(room, 0))
        room -= min(grow, max(room, 0))
    for i in keep:  # then headers on one line where there is room
        grow = max(0, len(columns[i]) - widths[i])
        if 0 < grow <= room:
            widths[i] += grow
            room -= grow
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for i in keep:
        t.add_column(
            columns[i],
            justify="left" if i < text_columns else "right",
            width=widths[i],
            overflow="fold",
        )
    for row in rows:
        t.add_row(*(printable(row[i]) for i in keep))  # a price file's text reaches the terminal
    if dropped:
        note = f"Not shown at this width: {', '.join(dropped)} ({elsewhere})."
        caption = f"{caption}\n{note}" if caption else note
    return Group(t, Text(caption)) if caption else t
