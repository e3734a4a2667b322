"""The review as one self-contained HTML or Markdown file.

Self-contained means a reviewer can open it offline, attach it to a ticket or archive it: styles
are inline, pictures are base64 PNG data URIs, and no src or href points outside the file
(links are only to the file's own sections). Citations and price sources stay plain text.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from rlsim.report.document import Block, Bullets, Paragraph, Picture, Review, Table
from rlsim.report.formats import report_format

CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330;
       background: #fff; margin: 0; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 26px; margin: 8px 0 12px; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #e3e7ee; }
.summary { background: #f3f7fd; border-left: 4px solid #1f77b4; padding: 12px 16px; }
nav ol { columns: 2; margin: 8px 0 0; }
nav a { color: #1f5fa0; text-decoration: none; }
table { border-collapse: collapse; margin: 10px 0 6px; font-size: 13px; width: 100%; }
caption { caption-side: bottom; text-align: left; color: #5a6475; font-size: 12.5px;
          padding-top: 6px; }
th, td { border: 1px solid #d9dee7; padding: 4px 6px; vertical-align: top; }
th { background: #eef2f7; text-align: left; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.nowrap { white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafbfd; }
figure { margin: 14px 0; }
figure img { max-width: 100%; border: 1px solid #e3e7ee; }
figcaption { color: #5a6475; font-size: 12.5px; }
li { margin: 2px 0; overflow-wrap: anywhere; }
footer { margin-top: 40px; color: #5a6475; font-size: 12.5px; }
"""


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html_block(b: Block) -> str:
    if isinstance(b, Paragraph):
        return f"<p>{escape(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        head = "".join(f"<th>{escape(h)}</th>" for h in b.headers)
        cls = {"l": "", "n": ' class="nowrap"', "r": ' class="num"'}
        body = "".join(
            "<tr>" + "".join(f"<td{cls[b.column_align(i)]}>{escape(c)}</td>" for i, c in enumerate(row)) + "</tr>"
            for row in b.rows
        )
        cap = f"<caption>{escape(b.caption)}</caption>" if b.caption else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    cap = f"<figcaption>{escape(b.caption)}</figcaption>" if b.caption else ""
    return f'<figure><img src="{_data_uri(b.png)}" alt="{escape(b.alt)}">{cap}</figure>'


def to_html(review: Review) -> str:
    """One HTML page: summary, table of contents, numbered sections, footer."""
    toc = "".join(f'<li><a href="#{s.key}">{escape(s.title)}</a></li>' for s in review.sections)
    sections = "".join(
        f'<section id="{s.key}"><h2>{n}. {escape(s.title)}</h2>'
        + "".join(_html_block(b) for b in s.blocks)
        + "</section>"
        for n, s in enumerate(review.sections, 1)
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(review.title)}</title><style>{CSS}</style></head><body><main>"
        f'<h1>{escape(review.title)}</h1><p class="summary">{escape(review.summary)}</p>'
        f"<nav><strong>Contents</strong><ol>{toc}</ol></nav>{sections}"
        f"<footer>{escape(review.footer)}</footer></main></body></html>\n"
    )


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_block(b: Block) -> str:
    if isinstance(b, Paragraph):
        return b.text
    if isinstance(b, Bullets):
        return "\n".join(f"- {i}" for i in b.items)
    if isinstance(b, Table):
        lines = [
            "| " + " | ".join(_md_cell(h) for h in b.headers) + " |",
            "|" + "|".join("---" for _ in b.headers) + "|",
        ]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
        return "\n".join(lines) + (f"\n\n*{b.caption}*" if b.caption else "")
    assert isinstance(b, Picture)
    return f"![{b.alt}]({_data_uri(b.png)})" + (f"\n\n*{b.caption}*" if b.caption else "")


def to_markdown(review: Review) -> str:
    """The same content as Markdown, pictures as data URIs (so the file stands alone)."""
    parts = [f"# {review.title}", f"> {review.summary}"]
    for n, s in enumerate(review.sections, 1):
        parts.append(f"## {n}. {s.title}")
        parts += [_md_block(b) for b in s.blocks]
    parts.append(f"---\n\n{review.footer}")
    return "\n\n".join(parts) + "\n"


def write_review(review: Review, path: str) -> None:
    """HTML for .html/.htm, Markdown for .md/.markdown."""
    text = to_html(review) if report_format(path) == "html" else to_markdown(review)
    Path(path).write_text(text, encoding="utf-8")
