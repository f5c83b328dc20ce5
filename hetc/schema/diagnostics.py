"""Diagnostics: one problem, positioned in a file, in the form editors and CI parse.

Every check in hetc reports through `Diagnostic`, so the command line, `--json` and the
pre-commit hook all print the same `FILE:LINE:COL: dotted.path: what is wrong (what is right)`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Path = tuple[str | int, ...]
Severity = Literal["error", "warning"]


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def printable(text: str) -> str:
    """`text` with every character that could break a one-line diagnostic or a terminal
    (controls, line and paragraph separators, lone surrogates, odd spaces) escaped."""
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def dotted(path: Sequence[str | int]) -> str:
    """`('zones', 0, 'pools', 1, 'device')` -> `zones[0].pools[1].device`; the root is `(root)`.

    A key that is not a plain name is written as a quoted index, spaces escaped, so the path
    stays one unambiguous word: `training["my\\x20key"]`, `[""]`.
    """
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}" if text else part
        else:
            quoted = json.dumps(part, ensure_ascii=False).replace(" ", "\\x20")
            text += f"[{printable(quoted)}]"
    return text or "(root)"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in one file; line and column are 1-based."""

    file: str
    line: int
    column: int
    path: str
    message: str
    severity: Severity = "error"

    def format(self) -> str:
        """The one-line form `FILE:LINE:COL: path: [warning: ]message`, safe to print."""
        prefix = "warning: " if self.severity == "warning" else ""
        return printable(
            f"{self.file}:{self.line}:{self.column}: {self.path}: {prefix}{self.message}"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "severity": self.severity,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem at a path in the document, before it is given a file position."""

    path: Path
    message: str
    severity: Severity = "error"
    at_key: bool = False
    """Point at the key rather than the value (unknown keys, duplicate names)."""


class EnvironmentProblem(Exception):
    """The file could not be read, or output could not be written: not the spec's fault."""

    def __init__(self, what: str, to_fix: str) -> None:
        super().__init__(what)
        self.what = what
        self.to_fix = to_fix


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """` (did you mean 'X'?)` for the closest candidate, or an empty string."""
    import difflib

    folded = {c.casefold(): c for c in candidates}
    if word.casefold() in folded:
        return f" (did you mean {folded[word.casefold()]!r}?)"
    close = difflib.get_close_matches(word.casefold(), list(folded), n=1, cutoff=0.6)
    return f" (did you mean {folded[close[0]]!r}?)" if close else ""
