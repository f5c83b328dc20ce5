"""Reading a JSON file (a plan handed to `hetc compile --plan`) into plain data plus the line
and column of every value and key, so that each problem is reported where it stands.

Python's `json` module keeps no positions, and JSON read as YAML changes meaning (`1e-05` is a
string in YAML 1.1), so this is a small recursive-descent reader over the same grammar, with
`json`'s own string decoder and number pattern. It is stricter than `json.loads` where a hand-edited
plan would otherwise be silently misread: a key given twice, NaN or Infinity, trailing data.
"""

from __future__ import annotations

import bisect
import json
import json.scanner
import math
from typing import Any, NoReturn

from hetc.schema.diagnostics import Path
from hetc.schema.source import MAX_DEPTH, MAX_NODES, SourceMap, SyntaxProblem

_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()
"""Reads one string at a time (`raw_decode` at a double quote), with json's own escapes."""
_LITERALS = {"true": True, "false": False, "null": None}


def parse_json(text: str) -> tuple[Any, SourceMap]:
    """Parse JSON text into plain data and its source map, or raise `SyntaxProblem` with the
    position of the first problem."""
    reader = _Reader(text)
    start = reader.skip(0)
    if start == len(text):
        raise SyntaxProblem(1, 1, "the file is empty: expected a JSON object")
    value, end = reader.value(start, (), 0)
    end = reader.skip(end)
    if end != len(text):
        reader.fail(end, "unexpected data after the JSON value: a file holds one value")
    return value, reader.positions


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.positions = SourceMap()
        self.nodes = 0
        self._lines = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]

    def where(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._lines, offset)
        return line, offset - self._lines[line - 1] + 1

    def fail(self, offset: int, message: str) -> NoReturn:
        raise SyntaxProblem(*self.where(offset), message)

    def skip(self, offset: int) -> int:
        text = self.text
        while offset < len(text) and text[offset] in _WHITESPACE:
            offset += 1
        return offset

    def value(self, offset: int, path: Path, depth: int) -> tuple[Any, int]:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(offset, f"more than {MAX_NODES} values: not a plan hetc wrote")
        if depth > MAX_DEPTH:
            self.fail(offset, f"nesting is deeper than {MAX_DEPTH} levels")
        self.positions.values[path] = self.where(offset)
        text = self.text
        char = text[offset] if offset < len(text) else ""
        if char == "{":
            return self.object(offset + 1, path, depth)
        if char == "[":
            return self.array(offset + 1, path, depth)
        if char == '"':
            return self.string(offset)
        number = json.scanner.NUMBER_RE.match(text, offset)
        if number is not None and number.group():
            whole, fraction, exponent = number.groups()
            if not (fraction or exponent):
                return int(whole), number.end()
            real = float(whole + (fraction or "") + (exponent or ""))
            if not math.isfinite(real):
                self.fail(offset, f"{number.group()} is too large for a number")
            # as the YAML reader does: 2.0 is the integer 2 (JSON Schema counts it as one)
            return (int(real) if real.is_integer() else real), number.end()
        for word, literal in _LITERALS.items():
            if text.startswith(word, offset):
                return literal, offset + len(word)
        for word in ("NaN", "Infinity", "-Infinity"):
            if text.startswith(word, offset):
                self.fail(offset, f"{word} is not a JSON number: write a finite value")
        found = f"{char!r}" if char else "the end of the file"
        self.fail(offset, f"expected a JSON value, found {found}")

    def string(self, offset: int) -> tuple[str, int]:
        try:
            value, end = _DECODER.raw_decode(self.text, offset)
        except json.JSONDecodeError as exc:
            self.fail(exc.pos, f"JSON string: {exc.msg}")
        assert isinstance(value, str)
        return value, end

    def object(self, offset: int, path: Path, depth: int) -> tuple[dict[str, Any], int]:
        result: dict[str, Any] = {}
        offset = self.skip(offset)
        if self.text.startswith("}", offset):
            return result, offset + 1
        while True:
            if not self.text.startswith('"', offset):
                self.fail(offset, "expected a key in double quotes")
            key_at = offset
            key, offset = self.string(offset)
            if key in result:
                first = self.positions.keys[(*path, key)]
                self.fail(key_at, f"key {key!r} is given twice (first at line {first[0]})")
            self.positions.keys[(*path, key)] = self.where(key_at)
            offset = self.skip(offset)
            if not self.text.startswith(":", offset):
                self.fail(offset, f"expected ':' after the key {key!r}")
            offset = self.skip(offset + 1)
            result[key], offset = self.value(offset, (*path, key), depth + 1)
            offset = self.skip(offset)
            if self.text.startswith(",", offset):
                offset = self.skip(offset + 1)
            elif self.text.startswith("}", offset):
                return result, offset + 1
            else:
                self.fail(offset, "expected ',' or '}' in the object")

    def array(self, offset: int, path: Path, depth: int) -> tuple[list[Any], int]:
        result: list[Any] = []
        offset = self.skip(offset)
        if self.text.startswith("]", offset):
            return result, offset + 1
        while True:
            item, offset = self.value(offset, (*path, len(result)), depth + 1)
            result.append(item)
            offset = self.skip(offset)
            if self.text.startswith(",", offset):
                offset = self.skip(offset + 1)
            elif self.text.startswith("]", offset):
                return result, offset + 1
            else:
                self.fail(offset, "expected ',' or ']' in the list")
