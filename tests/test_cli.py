"""The command line: output format, exit codes, --json, and what it imports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema.structure import spec_schema_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
LINE = re.compile(r"^.+:\d+:\d+: \S+: .+$")
runner = CliRunner()


def _bad_spec(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    text = (ROOT / "examples" / "opt350m-a100.yaml").read_text()
    path.write_text(text.replace("A100-40GB", "A100-40G").replace("quota: 128", "quota: -1"))
    return path


def test_all_examples_validate() -> None:
    """Every bundled example is a valid spec; its only warnings say that the runtime refuses
    OPT-350M's and GPT-Neo's model fields."""
    assert len(EXAMPLES) >= 6
    result = runner.invoke(app, ["validate", *map(str, EXAMPLES)])
    assert result.exit_code == 0, result.output
    refused = re.compile(r"^\S+: model\.preset: warning: model (OPT-350M|GPT-Neo-2\.7B) has ")
    assert all(refused.match(line) for line in result.stdout.splitlines()), result.stdout


def test_invalid_file_exits_1_with_positioned_lines(tmp_path: Path) -> None:
    """Problems print one per line as FILE:LINE:COL: path: message; the exit code is 1."""
    bad = _bad_spec(tmp_path)
    result = runner.invoke(app, ["validate", str(EXAMPLES[0]), str(bad)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines and all(LINE.match(line) for line in lines)
    assert f"{bad}:19:18: zones[0].pools[0].device: unknown device 'A100-40G'" in result.stdout
    assert f"{bad}:19:35: zones[0].pools[0].quota: must be at least 1, got -1" in result.stdout
    assert "1 of 2 files valid" in result.stderr


def test_json_output(tmp_path: Path) -> None:
    """--json gives the same diagnostics as data, per file, with an overall verdict."""
    bad = _bad_spec(tmp_path)
    result = runner.invoke(app, ["validate", "--json", str(EXAMPLES[0]), str(bad)])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["valid"] is False
    assert [f["valid"] for f in report["files"]] == [True, False]
    first = next(d for d in report["files"][1]["diagnostics"] if d["severity"] == "error")
    assert first == {
        "file": str(bad),
        "line": 19,
        "column": 18,
        "severity": "error",
        "path": "zones[0].pools[0].device",
        "message": "unknown device 'A100-40G' (did you mean 'A100-40GB'?) (define"
        " it under `devices:` or pick one from the catalog)",
    }


def test_warnings_pass_unless_strict(tmp_path: Path) -> None:
    """A warning alone exits 0; with --strict it exits 1."""
    path = tmp_path / "warn.yaml"
    path.write_text(
        (ROOT / "examples" / "opt350m-a100.yaml").read_text().replace("quota: 128", "quota: 130")
    )
    relaxed = runner.invoke(app, ["validate", str(path)])
    assert relaxed.exit_code == 0
    assert ": warning: quota 130 is not a multiple of gpus_per_node 4" in relaxed.stdout
    assert runner.invoke(app, ["validate", "--strict", str(path)]).exit_code == 1


def test_unreadable_file_exits_4_with_a_fix(tmp_path: Path) -> None:
    """A missing file is an environment problem: exit 4 and a To fix: line, other files checked."""
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml"), str(EXAMPLES[0])])
    assert result.exit_code == 4
    assert "no such file" in result.stderr and "To fix:" in result.stderr
    directory = runner.invoke(app, ["validate", str(tmp_path)])
    assert directory.exit_code == 4 and "is a directory" in directory.stderr


def test_internal_error_prints_one_line_and_saves_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug inside hetc gives exit 3, one line naming a saved traceback, no traceback shown."""
    import hetc.schema

    def explode(filename: str) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(hetc.schema, "check_file", explode)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = runner.invoke(app, ["validate", str(EXAMPLES[0])])
    assert result.exit_code == 70
    assert "Traceback (most recent call last)" not in result.output
    (line,) = result.stderr.splitlines()
    saved = Path(line.rsplit("the traceback is in ", 1)[1])
    assert saved.parent == tmp_path and "KeyError: 'boom'" in saved.read_text()


def test_schema_prints_the_shipped_schema() -> None:
    """`hetc schema` prints the packaged JSON Schema byte for byte."""
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    assert result.stdout == spec_schema_text()
    assert json.loads(result.stdout)["$schema"].startswith("http://json-schema.org/draft-07")


def test_usage_errors_exit_2() -> None:
    """A wrong flag is a usage error (click's exit 2), not a crash."""
    assert runner.invoke(app, ["validate", "--nope", str(EXAMPLES[0])]).exit_code == 2
    assert runner.invoke(app, ["frobnicate"]).exit_code == 2


def test_version() -> None:
    """--version prints the package version."""
    from hetc import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"hetc {__version__}"


# jsonschema too: it is the draft-07 validator's test oracle, too slow to import per run.
HEAVY = ("torch", "deepspeed", "ortools", "numpy", "jsonschema")


@pytest.mark.parametrize("command", [["validate", str(EXAMPLES[0])], ["schema"]])
def test_validate_and_schema_import_nothing_heavy(command: list[str]) -> None:
    """`hetc validate` and `hetc schema` import none of torch, deepspeed, ortools, numpy."""
    probe = (
        "import sys\n"
        "from hetc.cli import app\n"
        f"try:\n    app({command!r}, prog_name='hetc')\nexcept SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        f"heavy = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stderr


def test_module_entry_point_runs() -> None:
    """`python -m hetc` is the same command line."""
    done = subprocess.run(
        [sys.executable, "-m", "hetc", "validate", str(EXAMPLES[0])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
