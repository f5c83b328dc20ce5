"""hetc.console: plain tables with each header over its column, rich tables that never cut a
cell, and HETC_COLOR choosing between them."""

from __future__ import annotations

import re

import pytest

from hetc.console import Column, color_mode, emphasis, render_table, styled_output

ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLUMNS = [Column("rank"), Column("device"), Column("total", "right"), Column("capacity", "right")]
ROWS = [
    ["a", "A100-40GB", "1.00", "37.3"],
    ["a-very-long-rank-name@zone-with-a-long-name/n17#3", "V100", "23.88", "14.9"],
]


def _starts(line: str, cells: list[str]) -> list[int]:
    """Where each cell starts in `line`, searching left to right."""
    found, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        found.append(at)
        at += len(cell)
    return found


def test_plain_headers_sit_over_their_columns() -> None:
    """Left columns start where their header starts, right columns end where it ends, on
    every row, whatever the length of a rank name or a header (the 'replicas' header bug;
    mutation-checked: sizing columns by their cells alone fails it)."""
    lines = render_table(COLUMNS, ROWS, styled=False).splitlines()
    header = _starts(lines[0], [c.header for c in COLUMNS])
    for line, row in zip(lines[1:], ROWS, strict=True):
        starts = _starts(line, row)
        assert starts[:2] == header[:2]
        assert starts[2] + len(row[2]) == header[2] + len("total")
        assert starts[3] + len(row[3]) == header[3] + len("capacity")


def test_plain_table_indent_and_no_trailing_spaces() -> None:
    """indent shifts every line; no line ends in spaces; there are no escape codes."""
    text = render_table(COLUMNS, ROWS, styled=False, indent=2)
    assert all(line.startswith("  ") and line == line.rstrip() for line in text.splitlines())
    assert not ANSI.search(text)


def test_styled_table_keeps_every_cell_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal narrower than the table, rich prints every cell in full (no '…')."""
    monkeypatch.setenv("COLUMNS", "30")
    text = ANSI.sub("", render_table(COLUMNS, ROWS, styled=True))
    assert "…" not in text
    for row in ROWS:
        assert all(cell in text for cell in row)
    header = text.splitlines()[0]
    body = next(line for line in text.splitlines() if "A100-40GB" in line)
    assert header.index("device") == body.index("A100-40GB")


def test_row_width_must_match() -> None:
    """A row with a missing cell is a programming error, said as such."""
    with pytest.raises(ValueError, match="one cell per column"):
        render_table(COLUMNS, [["only one"]], styled=False)


@pytest.mark.parametrize(
    ("value", "mode", "styled"),
    [("always", "always", True), ("never", "never", False), ("bogus", "auto", False)],
)
def test_hetc_color_chooses_the_output(
    monkeypatch: pytest.MonkeyPatch, value: str, mode: str, styled: bool
) -> None:
    """HETC_COLOR=always forces rich output, never forbids it, anything else asks whether
    stdout is a terminal (under pytest it is not)."""
    monkeypatch.setenv("HETC_COLOR", value)
    assert color_mode() == mode
    assert styled_output() is styled


def test_emphasis_only_when_styled(monkeypatch: pytest.MonkeyPatch) -> None:
    """emphasis() adds escape codes when styled, returns the text untouched otherwise, and
    NO_COLOR drops the colour."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert emphasis("plan 1", "bold", styled=False) == "plan 1"
    assert emphasis("plan 1", "bold", styled=True) == "\x1b[1mplan 1\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert emphasis("plan 1", "red", styled=True) == "plan 1"
