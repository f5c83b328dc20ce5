"""Reading spec files: positions of every node, and hostile input stopped with one message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hetc.schema import EnvironmentProblem, check_file, check_text
from hetc.schema.source import MAX_FILE_BYTES, parse


def test_positions_of_values_and_keys() -> None:
    """Block and flow nodes get their own 1-based line and column."""
    data, positions = parse("a:\n  b: [10, {c: x}]\nd: 4\n")
    assert data == {"a": {"b": [10, {"c": "x"}]}, "d": 4}
    assert positions.values[("a", "b", 0)] == (2, 7)
    assert positions.values[("a", "b", 1, "c")] == (2, 15)
    assert positions.keys[("d",)] == (3, 1)
    assert positions.values[("d",)] == (3, 4)
    assert positions.locate(("a", "b", 1, "missing")) == (2, 11)


def _only(text: str) -> str:
    result = check_text(text, "s.yaml")
    assert len(result.diagnostics) == 1, result.diagnostics
    return result.diagnostics[0].format()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "s.yaml:1:1: (root): the file is empty"),
        ("# only a comment\n", "s.yaml:1:1: (root): the file holds no data"),
        ("- 1\n- 2\n", "s.yaml:1:1: (root): a spec is a mapping of keys"),
        ("42\n", "s.yaml:1:1: (root): a spec is a mapping of keys"),
        ("a: 1\na: 2\n", "s.yaml:2:1: a: key 'a' is given twice in this mapping"),
        ("a:\n\t- 1\n", "s.yaml:2:1: (root): YAML syntax: found character '\\t'"),
        ("a: [1,\n", "s.yaml:2:1: (root): YAML syntax"),
        ("a: *nothing\n", "s.yaml:1:4: (root): YAML syntax: found undefined alias"),
        ("a: 1\n---\nb: 2\n", "s.yaml:2:1: (root): a second YAML document starts here"),
        ("a: b\x00c\n", "s.yaml:1:5: (root): control character"),
    ],
)
def test_broken_yaml_gives_one_positioned_line(text: str, expected: str) -> None:
    """Unreadable YAML is reported once, where the parser stopped, never as a traceback."""
    assert _only(text).startswith(expected)


def test_alias_bomb_is_stopped() -> None:
    """A billion-laughs document (10^6 nodes here) is refused by node count, not expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 10)}]" for i in range(1, 6)]
    assert "expands to more than" in _only("\n".join(lines) + "\n")


def test_recursive_alias_becomes_a_positioned_error() -> None:
    """A node that contains itself through an alias is read as null and reported there."""
    text = "version: 1\nname: &x [1, *x]\n"
    messages = [d.format() for d in check_text(text, "s.yaml").diagnostics]
    assert "s.yaml:2:7: name: expected a string, got a list" in messages


@pytest.mark.parametrize("depth", [70, 5000])
def test_deep_nesting_is_stopped(depth: int) -> None:
    """Nesting far beyond a spec's is refused, however deep (the parser's recursion included)."""
    message = _only("a: " + "[" * depth + "]" * depth + "\n")
    assert "64 levels" in message


def test_bom_is_accepted(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark (some Windows editors add one) is not an error."""
    path = tmp_path / "bom.yaml"
    path.write_bytes(
        b"\xef\xbb\xbf"
        + (Path(__file__).parent.parent / "examples" / "opt350m-a100.yaml").read_bytes()
    )
    assert check_file(str(path)).errors == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"name: caf\xe9\n", "s.yaml:1:10: (root): byte 0xe9 is not UTF-8"),
        (b"\xff\xfen\x00a\x00", "s.yaml:1:1: (root): file is UTF-16"),
        (bytes(range(256)) * 4, "s.yaml:2:118: (root): byte 0x80 is not UTF-8"),
    ],
)
def test_bad_encodings_are_positioned(tmp_path: Path, raw: bytes, expected: str) -> None:
    """Non-UTF-8 bytes and binary garbage get one positioned message."""
    path = tmp_path / "s.yaml"
    path.write_bytes(raw)
    result = check_file(str(path))
    assert len(result.diagnostics) == 1
    assert result.diagnostics[0].format().replace(str(tmp_path) + os.sep, "").startswith(expected)


def test_size_cap_checked_before_parsing(tmp_path: Path) -> None:
    """A file over the cap is refused, naming the cap, without being parsed."""
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * MAX_FILE_BYTES + "\n")
    (diagnostic,) = check_file(str(path)).diagnostics
    assert f"{MAX_FILE_BYTES // 1024} KiB cap" in diagnostic.message


@pytest.mark.parametrize("kind", ["missing", "directory", "unreadable"])
def test_unreadable_files_are_environment_problems(tmp_path: Path, kind: str) -> None:
    """Missing files, directories and permission errors raise EnvironmentProblem with a fix."""
    path = tmp_path / "spec.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "unreadable":
        path.write_text("version: 1\n")
        path.chmod(0)
        if os.access(path, os.R_OK):  # root reads anything: use a path through a file instead
            path = path / "child.yaml"
    with pytest.raises(EnvironmentProblem) as caught:
        check_file(str(path))
    assert caught.value.to_fix


def test_collection_as_mapping_key_is_a_positioned_problem() -> None:
    """A mapping used as a key (ruamel raises TypeError on it) is reported, not crashed on."""
    assert "keys must be" in _only("model: {{a: {b: 1}}: 2}\n")
    assert _only("model: {{a: 1}: 2}\n").startswith("s.yaml:1:9: (root): a list or mapping is")
    assert _only("? [a, b]\n: 1\n").startswith("s.yaml:1:3: (root): a list or mapping is used")
