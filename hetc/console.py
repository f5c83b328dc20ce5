"""How tables and emphasis reach a person: rich tables and colour when stdout is a terminal,
plain aligned text when it is not (a pipe, a file, a test), so scripts that read `hetc`'s
text get no escape codes and `--json` is never touched.

`HETC_COLOR=always` forces terminal output (golden tests, `less -R`), `HETC_COLOR=never`
plain text; unset or `auto` asks whether stdout is a terminal. The width is rich's: `COLUMNS`
if set, else the terminal's. `NO_COLOR` keeps the tables and drops the colour. Plain tables
are as wide as their contents, so a long rank name widens its column instead of shifting the
columns after it. rich is imported only for terminal output: `hetc validate` piped into a
pre-commit hook does not pay for it.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = [
    "Column",
    "color_mode",
    "diagnostic_line",
    "emphasis",
    "render_table",
    "styled_output",
]

COLOR_VARIABLE = "HETC_COLOR"


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: its header and which side its cells line up on."""

    header: str
    align: Literal["left", "right"] = "left"


COLOR_MODES = ("always", "never", "auto")

_warned_values: set[str] = set()
"""The unknown `HETC_COLOR` values already warned about in this process (each once)."""


def color_mode() -> Literal["always", "never", "auto"]:
    """`HETC_COLOR` read strictly: an unknown value is `auto`, never an error on output, but
    a typo should not go unnoticed, so the first time a process reads one it prints one
    warning line on stderr naming the values accepted. Unset or empty is `auto`, silently."""
    value = os.environ.get(COLOR_VARIABLE, "auto").strip().lower()
    if value in ("always", "never"):
        return value  # type: ignore[return-value]
    if value not in ("", "auto") and value not in _warned_values:
        _warned_values.add(value)
        shown = os.environ.get(COLOR_VARIABLE, "")
        print(
            f"hetc: warning: {COLOR_VARIABLE}={shown!r} is not one of"
            f" {' | '.join(COLOR_MODES)}; using auto",
            file=sys.stderr,
        )
    return "auto"


def styled_output() -> bool:
    """Whether stdout gets rich tables and colour (see the module docstring)."""
    mode = color_mode()
    if mode != "auto":
        return mode == "always"
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _render(renderable: RenderableType) -> str:
    """What rich would print for `renderable` on a terminal of rich's width, as a string."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        force_terminal=True,
        color_system="standard",
        no_color="NO_COLOR" in os.environ,
        highlight=False,
        emoji=False,
        markup=False,
    )
    natural = console.measure(renderable, options=console.options.update_width(10_000)).maximum
    if natural > console.width:
        # wider than the terminal: the terminal wraps the lines rather than rich truncating
        # cells (a cut rank name or number is worse than a wrapped line)
        console.width = natural
    console.print(renderable, crop=False)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").split("\n"))


def render_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], *, styled: bool, indent: int = 0
) -> str:
    """A table with each header over its column: rich's on a terminal, else plain text with
    two spaces between columns, each as wide as its widest cell or header."""
    if any(len(row) != len(columns) for row in rows):
        raise ValueError("every row needs one cell per column")
    if styled:
        from rich import box
        from rich.padding import Padding
        from rich.table import Table

        table = Table(
            box=box.SIMPLE_HEAD,
            header_style="bold",
            pad_edge=False,
            show_edge=False,
            padding=(0, 1, 0, 0),
        )
        for column in columns:
            table.add_column(column.header, justify=column.align, no_wrap=True)
        for row in rows:
            table.add_row(*row)
        return _render(Padding(table, (0, 0, 0, indent), expand=False) if indent else table)
    widths = [max([len(c.header), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    lines = []
    for cells in ([c.header for c in columns], *rows):
        padded = [
            cell.rjust(width) if column.align == "right" else cell.ljust(width)
            for cell, width, column in zip(cells, widths, columns, strict=True)
        ]
        lines.append(" " * indent + "  ".join(padded).rstrip())
    return "\n".join(lines)


def emphasis(text: str, style: str, *, styled: bool) -> str:
    """`text` in a rich style ('bold', 'yellow', 'bold red') on a terminal, else as it is."""
    if not styled:
        return text
    from rich.text import Text

    return _render(Text(text, style=style, no_wrap=True, overflow="ignore"))


def diagnostic_line(line: str, severity: str) -> str:
    """A `hetc validate` diagnostic: red for an error, yellow for a warning on a terminal;
    unchanged otherwise (rich is not even imported, to keep the pre-commit hook fast)."""
    styled = styled_output()
    return emphasis(line, "yellow" if severity == "warning" else "red", styled=styled)
