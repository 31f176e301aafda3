"""The report as a document: blocks (headings, paragraphs, tables, images), the
formatting of their cells, and their rendering as Markdown and as HTML."""

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Union

from ..plots import embedded_png

# Error examples listed per section.
MAX_EXAMPLES = 12


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Paragraph:
    text: str  # `code` spans are kept in both renderings


@dataclass
class Table:
    header: List[str]
    rows: List[List[str]]
    align: str = ""  # "l" or "r" per column; default: first left, others right


@dataclass
class Image:
    path: Path
    alt: str


Block = Union[Heading, Paragraph, Table, Image]


def pct(value: Any, digits: int = 2) -> str:
    """A share as a percentage with `digits` decimals; "-" when it is not a number."""
    return f"{value * 100:.{digits}f}" if isinstance(value, (int, float)) else "-"


def duration(seconds: Any) -> str:
    """Seconds as h:mm:ss; "-" when they are not a number."""
    if not isinstance(seconds, (int, float)):
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def short(text: str, n: int = 100) -> str:
    """The text on one line, cut to n characters (an ellipsis marks the cut)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: List[Block]) -> str:
    """The blocks as GitHub-flavoured Markdown; images are linked by file name."""
    out: List[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            out.append(block.text)
        elif isinstance(block, Table):
            align = _align(block)
            out.append("| " + " | ".join(_md_cell(h) for h in block.header) + " |")
            out.append("|" + "|".join("---:" if a == "r" else ":---" for a in align) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
        elif isinstance(block, Image):
            out.append(f"![{block.alt}]({block.path.name})")
        out.append("")
    return "\n".join(out)


def _align(table: Table) -> str:
    n = len(table.header)
    return (table.align or "l" + "r" * (n - 1)).ljust(n, "r")


def _inline_html(text: str) -> str:
    escaped = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def to_html(blocks: List[Block], title: str) -> str:
    """The blocks as one self-contained HTML page, the PNGs embedded."""
    body: List[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{_inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_inline_html(block.text)}</p>")
        elif isinstance(block, Table):
            align = _align(block)
            head = "".join(
                f'<th class="{a}">{_inline_html(h)}</th>' for h, a in zip(block.header, align)
            )
            rows = "".join(
                "<tr>"
                + "".join(f'<td class="{a}">{_inline_html(c)}</td>' for c, a in zip(row, align))
                + "</tr>"
                for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Image):
            body.append(embedded_png(block.path, block.alt))
    joined = "\n".join(body)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222;
  padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.25em 0.8em; vertical-align: top; }}
th {{ background: #f4f4f4; }}
.r {{ text-align: right; font-variant-numeric: tabular-nums; }} .l {{ text-align: left; }}
code {{ background: #f4f4f4; padding: 0 0.2em; border-radius: 3px; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; height: auto; }}
figcaption {{ color: #666; font-size: 0.85em; }}
</style>
</head>
<body>
{joined}
</body>
</html>
"""
