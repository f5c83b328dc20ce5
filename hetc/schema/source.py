"""Reading a spec file into plain Python data plus the line and column of every node.

check-jsonschema and friends lose positions; users want `file:line:col`. We parse with
ruamel.yaml's round-trip loader, which keeps marks, then copy the tree into plain dicts, lists
and scalars (what the schema validator and the rest of hetc expect), recording each position.
The copy is also where hostile input is stopped: alias bombs and deep nesting. (ruamel itself
turns a recursive alias into null, which the schema then reports where it stands.)
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hetc.schema.diagnostics import EnvironmentProblem, Path

MAX_FILE_BYTES = 256 * 1024
"""Specs are a few kilobytes; anything over 256 KiB (about 2,000 one-pool zones) is refused
before parsing, with that reason: the YAML reader takes about 8 us a byte, so a larger spec
would spend more than the planner's whole budget (docs/planner.md, Budgets) being read, and
the planner's bounded work would not bound the command."""
MAX_NODES = 100_000
"""Nodes after alias expansion; a billion-laughs document exceeds this at once."""
MAX_DEPTH = 64
"""Nesting depth; a real spec uses about six levels."""


class SyntaxProblem(Exception):
    """The file is not a YAML document hetc can read; carries one positioned message, and the
    document path it concerns where there is one (a duplicated key's)."""

    def __init__(self, line: int, column: int, message: str, path: Path = ()) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.message = message
        self.path = path

    @property
    def problems(self) -> tuple[SyntaxProblem, ...]:
        """Every problem this one stands for, each to be reported where it stands."""
        return (self,)


class SyntaxProblems(SyntaxProblem):
    """Several positioned problems found at once (every duplicated key of a file), so that
    each is reported where it stands rather than only the first; a caller that reads one
    SyntaxProblem sees the first."""

    def __init__(self, problems: Sequence[SyntaxProblem]) -> None:
        first = problems[0]
        super().__init__(first.line, first.column, first.message, first.path)
        self._all = tuple(problems)

    @property
    def problems(self) -> tuple[SyntaxProblem, ...]:
        return self._all


@dataclass
class SourceMap:
    """1-based (line, column) of each value and each mapping key, by document path."""

    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: Path, at_key: bool = False) -> tuple[int, int]:
        """Position of `path`, or of its nearest ancestor that exists in the file."""
        if at_key and path in self.keys:
            return self.keys[path]
        probe = tuple(path)
        while probe:
            if probe in self.values:
                return self.values[probe]
            probe = probe[:-1]
        return self.values.get((), (1, 1))


@contextmanager
def _reading(filename: str) -> Iterator[None]:
    """Turn the OS's reasons for not reading `filename` into an `EnvironmentProblem`."""
    try:
        yield
    except FileNotFoundError:
        raise EnvironmentProblem(f"{filename}: no such file", "check the path") from None
    except IsADirectoryError:
        raise EnvironmentProblem(
            f"{filename} is a directory", "pass files, for example dir/*.yaml"
        ) from None
    except PermissionError:
        raise EnvironmentProblem(
            f"{filename}: permission denied", "make the file readable (chmod +r)"
        ) from None
    except OSError as exc:
        raise EnvironmentProblem(f"{filename}: {exc.strerror or exc}", "check the path") from None


def read_text(filename: str) -> str:
    """The file's text as UTF-8 (a BOM is accepted), or a positioned / environment problem."""
    with _reading(filename), open(filename, "rb") as handle:
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise SyntaxProblem(
            1,
            1,
            f"file is larger than the {MAX_FILE_BYTES // 1024} KiB cap for a spec (about 2,000"
            " zones; reading more would take longer than the planner's whole budget): split"
            " the spec, or merge zones of one region that differ only in name",
        )
    return decode(raw)


def read_plain_text(filename: str) -> str:
    """A whole UTF-8 file (plans, profiles), with unreadable files as `EnvironmentProblem`."""
    with _reading(filename), open(filename, encoding="utf-8") as handle:
        return handle.read()


def decode(raw: bytes) -> str:
    """UTF-8 text of `raw`, with a positioned message for the first byte that is not UTF-8."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise SyntaxProblem(1, 1, "file is UTF-16: save it as UTF-8")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        bad = raw[exc.start]
        raise SyntaxProblem(
            line, column, f"byte 0x{bad:02x} is not UTF-8: save the file as UTF-8 text"
        ) from None


def _position_of_offset(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def parse(text: str) -> tuple[Any, SourceMap]:
    """Parse YAML text into plain data and its source map, or raise `SyntaxProblem`."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    if not text.strip():
        raise SyntaxProblem(1, 1, "the file is empty: a spec is a mapping that starts `version: 1`")
    _check_flow_depth(text)
    yaml = YAML(typ="rt")
    try:
        document = yaml.load(text)
    except ReaderError as exc:
        line, column = _position_of_offset(text, exc.position)
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise SyntaxProblem(
            line, column, f"control character {char!r} (U+{ord(char):04X}) is not allowed in YAML"
        ) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = str(exc.problem or exc.context or "invalid YAML")
        if problem.startswith("found duplicate key"):
            duplicates = _duplicate_keys(text)
            if duplicates:
                raise SyntaxProblems(duplicates) from None
        if problem == "but found another document":
            raise SyntaxProblem(
                line,
                column,
                "a second YAML document starts here: a spec file holds one document (delete"
                " this `---` and what follows, or put each spec in its own file)",
            ) from None
        raise SyntaxProblem(line, column, _explain(problem)) from None
    except YAMLError as exc:
        raise SyntaxProblem(1, 1, f"invalid YAML: {exc}") from None
    except TypeError as exc:
        # ruamel's constructor raises this for a mapping or list used as a mapping key.
        raise SyntaxProblem(
            1, 1, f"YAML that hetc cannot read ({exc}): mapping keys must be plain names"
        ) from None
    except RecursionError:
        raise SyntaxProblem(
            1, 1, f"nesting is too deep to read (a spec needs at most {MAX_DEPTH} levels)"
        ) from None
    if document is None:
        raise SyntaxProblem(
            1, 1, "the file holds no data: a spec is a mapping that starts `version: 1`"
        )
    return _Copier().copy(document)


def _check_flow_depth(text: str) -> None:
    """Refuse deeply nested `[`/`{` before ruamel's scanner, which slows quadratically on them.

    Brackets inside quotes and comments are skipped; a stray bracket in a plain scalar may be
    counted, which matters only past MAX_DEPTH unclosed ones.
    """
    depth, quote, comment = 0, "", False
    previous = "\n"
    for offset, char in enumerate(text):
        if comment:
            comment = char != "\n"
        elif quote:
            if char == quote and not (quote == '"' and previous == "\\"):
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and previous in " \t\n":
            comment = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise SyntaxProblem(
                    *_position_of_offset(text, offset),
                    f"nesting is deeper than {MAX_DEPTH} levels: a spec needs about six",
                )
        elif char in "]}":
            depth = max(0, depth - 1)
        previous = char


def _explain(problem: str) -> str:
    if "'\\t'" in problem:
        return f"YAML syntax: {problem} (indent with spaces; YAML forbids tabs there)"
    if problem.startswith("found duplicate key"):
        return f"{problem}: each key may appear once in a mapping"
    return f"YAML syntax: {problem}"


def _duplicate_keys(text: str) -> list[SyntaxProblem]:
    """Every key given twice in a mapping of `text`, each at its own position and path (the
    loader stops at the first); [] if the text cannot be composed (the loader's message is
    then the one to give)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

    try:
        root = YAML(typ="rt").compose(text)
    except (YAMLError, RecursionError):
        return []
    found: list[SyntaxProblem] = []
    pending: list[tuple[Any, Path]] = [(root, ())]
    seen: set[int] = set()
    while pending:
        node, path = pending.pop()
        if id(node) in seen:  # an alias repeats a node: report its keys once
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            pending += [(item, (*path, i)) for i, item in enumerate(node.value)]
        elif isinstance(node, MappingNode):
            first: dict[str, tuple[int, int]] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, ScalarNode) else None
                if name is None or name == "<<":
                    continue
                where = (key.start_mark.line + 1, key.start_mark.column + 1)
                if name in first:
                    line, column = first[name]
                    found.append(
                        SyntaxProblem(
                            *where,
                            f"key {name!r} is given twice in this mapping (first at line"
                            f" {line}, column {column}): each key may appear once",
                            (*path, name),
                        )
                    )
                else:
                    first[name] = where
                pending.append((value, (*path, name)))
    return sorted(found, key=lambda p: (p.line, p.column))


class _Copier:
    """Copies a ruamel round-trip tree into plain data, recording positions and counting nodes."""

    def __init__(self) -> None:
        self.positions = SourceMap()
        self.nodes = 0

    def copy(self, document: Any) -> tuple[Any, SourceMap]:
        self.positions.values[()] = _start(document)
        return self._copy(document, (), 0), self.positions

    def _copy(self, node: Any, path: Path, depth: int) -> Any:
        from ruamel.yaml.comments import CommentedMap, CommentedSeq

        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise SyntaxProblem(
                *self.positions.locate(path),
                f"the document expands to more than {MAX_NODES} nodes"
                " (aliases repeating large parts?): a spec is far smaller",
            )
        if depth > MAX_DEPTH:
            raise SyntaxProblem(
                *self.positions.locate(path),
                f"nesting is deeper than {MAX_DEPTH} levels: a spec needs about six",
            )
        if isinstance(node, CommentedMap):
            return self._copy_map(node, path, depth)
        if isinstance(node, CommentedSeq):
            return self._copy_seq(node, path, depth)
        return _scalar(node)

    def _copy_map(self, node: Any, path: Path, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key in node:
            if isinstance(key, (tuple, list, dict, set)) or hasattr(key, "items"):
                line, col = node.lc.key(key)
                raise SyntaxProblem(
                    line + 1, col + 1, "a list or mapping is used as a key: keys must be names"
                )
            name = key if isinstance(key, str) else str(_scalar(key))
            child = (*path, name)
            try:
                key_line, key_col = node.lc.key(key)
                self.positions.keys[child] = (key_line + 1, key_col + 1)
                value_line, value_col = node.lc.value(key)
                self.positions.values[child] = (value_line + 1, value_col + 1)
            except (KeyError, TypeError, AttributeError):
                self.positions.values[child] = self.positions.locate(path)
            value = node[key]
            if _has_position(value):
                self.positions.values[child] = _start(value)
            result[name] = self._copy(value, child, depth + 1)
        return result

    def _copy_seq(self, node: Any, path: Path, depth: int) -> list[Any]:
        result: list[Any] = []
        for index, value in enumerate(node):
            child = (*path, index)
            try:
                line, col = node.lc.item(index)
                self.positions.values[child] = (line + 1, col + 1)
            except (KeyError, TypeError, AttributeError):
                self.positions.values[child] = self.positions.locate(path)
            if _has_position(value):
                self.positions.values[child] = _start(value)
            result.append(self._copy(value, child, depth + 1))
        return result


def _has_position(node: Any) -> bool:
    lc = getattr(node, "lc", None)
    return lc is not None and getattr(lc, "line", None) is not None


def _start(node: Any) -> tuple[int, int]:
    if _has_position(node):
        return node.lc.line + 1, node.lc.col + 1
    return 1, 1


def _scalar(value: Any) -> Any:
    """Plain Python for a ruamel scalar: bool, int, float, str or None; others become text."""
    from ruamel.yaml.comments import TaggedScalar
    from ruamel.yaml.scalarbool import ScalarBoolean

    if value is None or isinstance(value, (bool, str)):
        return str(value) if isinstance(value, str) else value
    if isinstance(value, ScalarBoolean):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        # JSON Schema counts 4.0 as an integer; making it one here keeps every later check
        # (and the typed spec) from seeing two spellings of the same number.
        return int(value) if value.is_integer() else float(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, TaggedScalar):
        return str(value.value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (set, frozenset)):
        return sorted(str(v) for v in value)
    return str(value)
