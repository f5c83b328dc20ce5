"""Documentation that is generated or promised stays true."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_spec_reference_is_up_to_date() -> None:
    """docs/spec-reference.md is exactly what the schema generates (rerun the script if not)."""
    generator = runpy.run_path(str(ROOT / "scripts" / "spec_reference.py"))
    assert (ROOT / "docs" / "spec-reference.md").read_text(encoding="utf-8") == generator[
        "render"
    ]()


def test_readme_commands_are_the_ci_commands() -> None:
    """The README's two commands exist, and .ci/run runs the README's test command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert (ROOT / "scripts" / "demo.sh").exists()
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_example_is_listed_in_the_readme() -> None:
    """Each bundled example appears in the README's table."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for example in (ROOT / "examples").glob("*.yaml"):
        assert f"examples/{example.name}" in readme
