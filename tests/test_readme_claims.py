"""README.md and the docs claim what the code does, no less: the capability matrix
(docs/capabilities.yaml) against the CLI, the spec schema, the docs and the tests.

Mutation check (done): putting back the old README sentence "ZeRO 1/2 and checkpoints are
still being built" makes `test_no_sentence_calls_a_capability_unfinished` fail naming it;
likewise "Dropout is not implemented" in hetc/runtime/model.py's docstring, and a README
command line with a flag the CLI lacks (`hetc plan spec.yaml --topp 3`) fails
`test_every_command_line_of_the_readme_exists`.
"""

from __future__ import annotations

import ast
import re
import runpy
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema.structure import spec_schema

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GENERATOR = runpy.run_path(str(ROOT / "scripts" / "capabilities.py"))
CAPABILITIES: list[dict[str, Any]] = GENERATOR["capabilities"]()
runner = CliRunner()

UNFINISHED = re.compile(
    r"\b(not yet|(still )?being built|still to (be )?(built|done)|not (been )?implemented"
    r"|unimplemented|not supported yet|coming soon|(is|are) planned|work in progress|TODO)\b",
    re.IGNORECASE,
)
"""Words that mark something as unfinished."""


def _command(words: list[str]) -> tuple[Any, list[str]]:
    """The (typer-built click) command that `hetc WORDS...` names, and the words after it."""
    command: Any = typer.main.get_command(app)
    rest = list(words)
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    return command, rest


def _flags(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def _readme_command_lines() -> list[str]:
    """Every `hetc ...` line of the README's shell blocks, without its comment."""
    text = README.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            code = line.split("  #", 1)[0].strip()
            if code.startswith("hetc "):
                lines.append(code)
    return lines


def _sentences(text: str) -> list[str]:
    """Prose cut into sentences (and list items), line breaks joined."""
    joined = re.sub(r"\s*\n\s*", " ", text)
    return [s for s in re.split(r"(?<=[.;:!?])\s+|\s+- |\|", joined) if s.strip()]


def _prose() -> dict[str, str]:
    """README.md, every docs/*.md and every hetc module's docstring, by name."""
    texts = {"README.md": README.read_text(encoding="utf-8")}
    for doc in sorted((ROOT / "docs").glob("*.md")):
        texts[f"docs/{doc.name}"] = doc.read_text(encoding="utf-8")
    for module in sorted((ROOT / "hetc").rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(module.read_text(encoding="utf-8")))
        if docstring:
            texts[module.relative_to(ROOT).as_posix()] = docstring
    return texts


def unfinished_claims(texts: dict[str, str]) -> list[str]:
    """`where: sentence` for each sentence that names a capability and calls it unfinished."""
    terms = [
        (entry["capability"], re.compile(term, re.IGNORECASE))
        for entry in CAPABILITIES
        for term in entry["terms"]
    ]
    found = []
    for where, text in texts.items():
        for sentence in _sentences(text):
            if not UNFINISHED.search(sentence):
                continue
            named = sorted({cap for cap, term in terms if term.search(sentence)})
            if named:
                found.append(f"{where}: {sentence.strip()!r} calls unfinished: {named}")
    return found


def test_the_readme_table_is_the_capability_matrix() -> None:
    """README.md's "What works today" table is what scripts/capabilities.py generates."""
    text = README.read_text(encoding="utf-8")
    assert GENERATOR["render"](text) == text, "run python scripts/capabilities.py"


def test_every_planner_test_file_backs_a_capability() -> None:
    """Each tests/test_solver_*.py and tests/test_search_*.py is named by some capability, so
    the table lists what the planner's claims rest on (new test files included)."""
    named = {test for entry in CAPABILITIES for test in entry["tests"]}
    files = sorted((ROOT / "tests").glob("test_solver_*.py"))
    files += sorted((ROOT / "tests").glob("test_search_*.py"))
    unlisted = [f"tests/{f.name}" for f in files if f"tests/{f.name}" not in named]
    assert files and not unlisted, f"add to docs/capabilities.yaml: {unlisted}"


@pytest.mark.parametrize("entry", CAPABILITIES, ids=lambda e: str(e["capability"])[:40])
def test_each_capability_names_a_real_command_doc_spec_key_and_tests(
    entry: dict[str, Any],
) -> None:
    """Each capability's command and flags exist, its doc and tests exist and mention it."""
    assert (ROOT / entry["doc"]).is_file(), entry["doc"]
    assert entry["tests"], "a capability without a test is a claim"
    for test in entry["tests"]:
        assert (ROOT / test).is_file() and "def test_" in (ROOT / test).read_text("utf-8"), test
    if entry.get("command"):
        words = entry["command"].split()
        assert words[0] == "hetc"
        command, rest = _command(words[1:])
        assert all(w.startswith("--") for w in rest), f"not a command: {entry['command']}"
        assert set(rest) <= _flags(command), set(rest) - _flags(command)
        result = runner.invoke(app, [*words[1 : len(words) - len(rest)], "--help"])
        assert result.exit_code == 0, result.output
    if entry.get("spec"):
        node: Any = spec_schema()
        for key in entry["spec"].split("."):
            node = node["properties"][key]
    assert entry["terms"] and all(re.compile(t) for t in entry["terms"])


def test_every_command_line_of_the_readme_exists() -> None:
    """Each `hetc ...` line in README's shell blocks names a real command with real flags."""
    lines = _readme_command_lines()
    assert len(lines) >= 20
    for line in lines:
        words = [w for w in shlex.split(line.split(" > ", 1)[0]) if w != "hetc"]
        command, rest = _command(words)
        assert not hasattr(command, "commands"), f"{line}: no such command"
        flags = {w.split("=", 1)[0] for w in rest if w.startswith("-")}
        assert flags <= _flags(command), f"{line}: {sorted(flags - _flags(command))}"
        help_words = words[: len(words) - len(rest)]
        assert runner.invoke(app, [*help_words, "--help"]).exit_code == 0, line


def test_every_relative_link_of_the_readme_exists() -> None:
    """Each relative link in README.md points at a file of the checkout."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert "docs/capabilities.yaml" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []


def test_no_sentence_calls_a_capability_unfinished() -> None:
    """No sentence of README, docs or a module docstring says a capability is not done."""
    assert unfinished_claims(_prose()) == []


def test_the_check_finds_a_stale_claim() -> None:
    """The check itself: the issue's stale README sentence is caught, a real limitation not."""
    stale = "ZeRO 1/2 and checkpoints are still being built."
    limitation = "ZeRO stage 3 is refused (stages 0, 1 and 2 run)."
    assert len(unfinished_claims({"README.md": stale})) == 1
    assert unfinished_claims({"README.md": limitation}) == []
    assert unfinished_claims({"m.py": "Dropout is not implemented (rate 0)."}) != []
