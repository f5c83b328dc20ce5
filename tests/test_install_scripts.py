"""scripts/install-compiled.sh installs into the environment the user is in, not ./.venv.

The interpreter choice is checked through `--print-python`, which installs nothing; the
install itself (pip, mypyc) is what tests/test_compiled.py builds the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install-compiled.sh"


def _chosen(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """What the script would install into, with only `env` (and a PATH of `tmp_path/bin`)."""
    clean = {"HOME": str(tmp_path), "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", **env}
    return subprocess.run(
        ["bash", str(SCRIPT), "--print-python"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _fake_python(directory: Path) -> Path:
    directory.mkdir(parents=True)
    python = directory / "python3"
    python.write_text("#!/bin/sh\n", encoding="utf-8")
    python.chmod(0o755)
    return python


def test_the_active_virtual_environment_is_used(tmp_path: Path) -> None:
    """With $VIRTUAL_ENV set, its python is the target, not the checkout's .venv."""
    _fake_python(tmp_path / "bin")
    result = _chosen(tmp_path, VIRTUAL_ENV="/opt/my env")
    assert (result.returncode, result.stdout) == (0, "/opt/my env/bin/python\n")


def test_python_overrides_the_virtual_environment(tmp_path: Path) -> None:
    """$PYTHON wins over $VIRTUAL_ENV."""
    result = _chosen(tmp_path, VIRTUAL_ENV="/opt/env", PYTHON="/usr/local/bin/python3.12")
    assert result.stdout == "/usr/local/bin/python3.12\n"


def test_without_a_virtual_environment_the_python_on_path_is_used(tmp_path: Path) -> None:
    """No $VIRTUAL_ENV and no $PYTHON: the first python3 on PATH."""
    python = _fake_python(tmp_path / "bin")
    result = _chosen(tmp_path)
    assert (result.returncode, result.stdout) == (0, f"{python}\n")


def test_no_python_at_all_is_an_environment_error(tmp_path: Path) -> None:
    """Nothing to install into: exit 4 with a To fix: line."""
    result = subprocess.run(
        ["/bin/bash", str(SCRIPT), "--print-python"],
        env={"HOME": str(tmp_path), "PATH": str(tmp_path / "empty")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 4
    assert "no python3 on PATH" in result.stderr and "To fix:" in result.stderr
