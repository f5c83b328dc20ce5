"""hetc.console: plain tables with each header over its column, rich tables that never cut a
cell, and HETC_COLOR choosing between them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hetc import console
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


def test_an_unknown_hetc_color_is_warned_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in HETC_COLOR gets one stderr line naming always | never | auto, once per
    value; unset, empty and the accepted values get none."""
    monkeypatch.setattr(console, "_warned_values", set())
    for quiet in ("always", "never", "auto", "", "AUTO"):
        monkeypatch.setenv("HETC_COLOR", quiet)
        color_mode()
    monkeypatch.delenv("HETC_COLOR")
    color_mode()
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("HETC_COLOR", "alway")
    assert color_mode() == "auto"
    assert styled_output() is False
    assert capsys.readouterr().err == (
        "hetc: warning: HETC_COLOR='alway' is not one of always | never | auto; using auto\n"
    )


def test_the_cli_warns_of_an_unknown_hetc_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """`hetc plan` of an example with HETC_COLOR=colour: the warning on stderr, the plans on
    stdout as with HETC_COLOR=never (the header line, which holds the search's seconds,
    aside)."""
    from typer.testing import CliRunner

    from hetc.cli import app

    monkeypatch.setattr(console, "_warned_values", set())
    example = str(Path(__file__).resolve().parent.parent / "examples" / "local-cpu.yaml")
    result = CliRunner().invoke(app, ["plan", example, "--top", "1"], env={"HETC_COLOR": "colour"})
    assert result.exit_code == 0, result.output
    assert "HETC_COLOR='colour' is not one of always | never | auto" in result.stderr
    plain = CliRunner().invoke(app, ["plan", example, "--top", "1"], env={"HETC_COLOR": "never"})
    assert result.stdout.splitlines()[1:] == plain.stdout.splitlines()[1:]
