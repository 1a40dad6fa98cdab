"""Laying text panels out on a fixed screen: the layout half of ``sluice top``, apart from its data.

A frame is a header (chunks packed into lines) and a stack of
:class:`Section` s, each a titled table.  The layout is made for 80×24 first:

* **Columns are dropped, never cut**: a column holds whole values (ids are
  never shortened); only the one ``flex`` column (a title) is truncated with
  an ellipsis, and when even that leaves it narrower than ``flex_min``,
  columns are dropped in their ``drop`` order (lowest first) until it fits.
* **Rows are shared out by priority**: every section first gets its
  ``min_rows`` (in the order given, so the queue's rows come before the
  events'), then what is left goes to each section in turn up to its
  ``max_rows``.  A section that loses rows says how many it shows; one with
  no room at all is left out.

Everything here is pure: sections in, ``rich.text.Text`` lines out.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from sluice.core.recordclass import field, recordclass

GAP = 2  # spaces between two columns


@recordclass(frozen=True)
class Column:
    name: str
    right: bool = False  # numbers: right-aligned, and so is their header
    flex: bool = False  # takes what is left of the width, truncated with an ellipsis
    drop: int = 0  # 0 never dropped; otherwise dropped lowest first when the width runs out
    flex_min: int = 12


@recordclass
class Section:
    """A titled table: ``rows`` are tuples of cells (str or Text), one per column."""

    title: str
    columns: list[Column]
    rows: list[tuple] = field(default_factory=list)
    min_rows: int = 1
    max_rows: int | None = None
    empty: str = "none"
    header: bool = True  # show the column names
    row_styles: list[str] = field(default_factory=list)
    total: int | None = None  # rows in all when only the first were made (a long queue); None: len(rows)

    def wanted(self) -> int:
        count = max(1, len(self.rows))  # an empty table still says so, in one line
        return count if self.max_rows is None else min(count, self.max_rows)

    def chrome(self) -> int:
        return 1 + (1 if self.header and self.rows else 0)


def _cell(value) -> Text:
    return value.copy() if isinstance(value, Text) else Text("" if value is None else str(value))


def fit_columns(columns: list[Column], rows: list[tuple], width: int) -> tuple[list[int], list[int]]:
    """(kept column indexes, their widths) for ``width`` cells: drop columns rather than cut values."""
    natural = [max([cell_len(c.name)] + [_cell(r[i]).cell_len for r in rows]) for i, c in enumerate(columns)]
    kept = list(range(len(columns)))
    droppable = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop)
    while True:
        fixed = sum(natural[i] for i in kept if not columns[i].flex) + GAP * (len(kept) - 1)
        flex = [i for i in kept if columns[i].flex]
        room = width - fixed
        need = sum(min(natural[i], columns[i].flex_min) for i in flex)
        if room >= need or not droppable:
            break
        kept.remove(droppable.pop(0)[1])
    flex_width = {i: max(1, min(natural[i], room)) for i in flex}  # 1 when there is no room at all
    return kept, [flex_width.get(i, natural[i]) for i in kept]


def _line(cells: list[Text], widths: list[int], right: list[bool], width: int, style: str = "") -> Text:
    line = Text(style=style, no_wrap=True, overflow="ellipsis")
    for n, (cell, size, to_right) in enumerate(zip(cells, widths, right, strict=True)):
        if n:
            line.append(" " * GAP)
        if cell.cell_len > size:
            cell.truncate(size, overflow="ellipsis")
        pad = " " * (size - cell.cell_len)
        if to_right:
            line.append(pad)
            line.append_text(cell)
        else:
            line.append_text(cell)
            if n < len(cells) - 1:
                line.append(pad)
    line.truncate(width, overflow="ellipsis")
    return line


def table_lines(section: Section, width: int, rows: int) -> list[Text]:
    """The section's title line, column names and its first ``rows`` rows, each at most ``width`` cells."""
    shown = section.rows[:rows]
    total = len(section.rows) if section.total is None else section.total
    title = section.title if len(shown) == total or not section.rows \
        else f"{section.title} — {len(shown)} of {total} shown"
    head = Text(f"─ {title} ", style="bold cyan", no_wrap=True, overflow="ellipsis")
    head.append("─" * max(0, width - head.cell_len), style="cyan")
    head.truncate(width)
    out = [head]
    if not section.rows:
        out.append(Text(f"  {section.empty}", style="dim"))
        return out
    kept, widths = fit_columns(section.columns, shown, width)  # what is shown, not every row made
    right = [section.columns[i].right for i in kept]
    if section.header:
        out.append(_line([Text(section.columns[i].name) for i in kept], widths, right, width, "bold"))
    styles = section.row_styles or [""] * len(section.rows)
    for row, style in zip(shown, styles, strict=False):
        out.append(_line([_cell(row[i]) for i in kept], widths, right, width, style))
    return out


def share_rows(sections: list[Section], height: int) -> list[int]:
    """Rows of content per section (0: left out) so that the whole stack fits ``height`` lines."""
    rows = [0] * len(sections)
    left = height
    for n, section in enumerate(sections):  # minimums first, in priority order
        chrome = section.chrome()
        if left < chrome + 1:
            continue
        rows[n] = min(section.wanted(), max(1, section.min_rows), left - chrome)
        left -= chrome + rows[n]
    for n, section in enumerate(sections):  # then the rest, in the same order
        if rows[n]:
            more = min(section.wanted() - rows[n], left)
            rows[n], left = rows[n] + more, left - more
    return rows


def pack(chunks: list[Text], width: int) -> list[Text]:
    """Chunks joined two spaces apart, a new line where the next would not fit (a chunk is never split)."""
    lines: list[Text] = []
    for chunk in chunks:
        if chunk.plain == "\n":
            lines.append(Text())
            continue
        if lines and lines[-1].cell_len and lines[-1].cell_len + GAP + chunk.cell_len <= width:
            lines[-1].append(" " * GAP)
            lines[-1].append_text(chunk)
        elif lines and not lines[-1].cell_len:
            lines[-1].append_text(chunk)
        else:
            lines.append(chunk.copy())
    for line in lines:
        line.no_wrap, line.overflow = True, "ellipsis"
        line.truncate(width, overflow="ellipsis")
    return lines


def frame(head: list[Text], sections: list[Section], width: int, height: int) -> Text:
    """The whole screen as one Text of at most ``height`` lines, none wider than ``width``."""
    lines = head[: max(1, height)]
    for section, rows in zip(sections, share_rows(sections, height - len(lines)), strict=True):
        if rows:
            lines += table_lines(section, width, rows)
    return Text("\n", no_wrap=True, overflow="ellipsis").join(lines[:height])
