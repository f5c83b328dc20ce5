"""The built wheel works on its own: installed into a fresh venv, away from the checkout.

One module-scoped fixture builds the wheel from a snapshot of the working tree (tracked and
untracked-but-not-ignored files, so stale `build/` output in the checkout cannot mask a missing
package-data entry) and installs it into a new venv without the dev venv's site-packages.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
GOOD_SPEC = ROOT / "examples" / "gptneo-a100-v100.yaml"
SHIPPED_DATA = [
    "catalog/devices.json",
    "catalog/models.json",
    "schema/spec.schema.json",
    "plan/plan.schema.json",
    "plan/rank.schema.json",
    "plan/cluster.schema.json",
    "templates/README.md",
    "templates/node.sh.j2",
    "templates/site.sbatch.j2",
    "templates/slurm-step.sh.j2",
    "templates/report.md.j2",
    "templates/timeline.svg.j2",
]
BUILD_TIMEOUT = 300
INSTALL_TIMEOUT = 600
RUN_TIMEOUT = 60
# Set by git for a hook it runs (pytest under a git hook): they would redirect `git ls-files`.
GIT_PLACE = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")


def _clean_env() -> dict[str, str]:
    """The environment minus anything that would leak the dev venv or the checkout in."""
    env = dict(os.environ)
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"):
        env.pop(name, None)
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(cmd: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout
    )


def _checked(cmd: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    result = _run(cmd, cwd=cwd, timeout=timeout)
    assert result.returncode == 0, (
        f"{cmd} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n"
        f"{result.stderr}"
    )
    return result


def _snapshot_tree(dest: Path) -> Path:
    """Copy the working tree's tracked and untracked-but-not-ignored files to `dest`."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        env={k: v for k, v in os.environ.items() if k not in GIT_PLACE},
        capture_output=True,
        text=True,
        check=True,
        timeout=RUN_TIMEOUT,
    ).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def _bin(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / name


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from the working tree installed; returns the venv."""
    base = tmp_path_factory.mktemp("packaging")
    source = _snapshot_tree(base / "src")
    wheels = base / "wheels"
    _checked(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(source)],
        cwd=base,
        timeout=BUILD_TIMEOUT,
    )
    built = sorted(wheels.glob("hetc-*.whl"))
    assert len(built) == 1, f"expected one hetc wheel, got {built}"
    venv = base / "venv"
    _checked([sys.executable, "-m", "venv", str(venv)], cwd=base, timeout=BUILD_TIMEOUT)
    _checked(
        [str(_bin(venv, "python")), "-m", "pip", "install", str(built[0])],
        cwd=base,
        timeout=INSTALL_TIMEOUT,
    )
    return venv


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working directory outside the repository."""
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return tmp_path


def test_installed_package_is_outside_the_repo_and_ships_its_data(installed: Path) -> None:
    """The wheel installs hetc in the venv, not the checkout, with catalogs, schema, templates."""
    where = _checked(
        [
            str(_bin(installed, "python")),
            "-c",
            "import hetc, os; print(os.path.dirname(hetc.__file__))",
        ],
        cwd=installed.parent,
        timeout=RUN_TIMEOUT,
    ).stdout.strip()
    package = Path(where).resolve()
    assert not package.is_relative_to(ROOT), f"hetc imported from the checkout: {package}"
    assert package.is_relative_to(installed.resolve()), f"hetc not from the fresh venv: {package}"
    missing = [name for name in SHIPPED_DATA if not (package / name).is_file()]
    assert not missing, f"not in the installed package {package}: {missing}"


def test_installed_validate_accepts_an_example(installed: Path, outside: Path) -> None:
    """The installed `hetc validate` accepts a shipped example when run away from the checkout."""
    result = _run(
        [str(_bin(installed, "hetc")), "validate", str(GOOD_SPEC)], cwd=outside, timeout=RUN_TIMEOUT
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def test_installed_schema_prints_draft07_json(installed: Path, outside: Path) -> None:
    """The installed `hetc schema` prints the spec's JSON Schema, declared as draft-07."""
    result = _checked([str(_bin(installed, "hetc")), "schema"], cwd=outside, timeout=RUN_TIMEOUT)
    schema = json.loads(result.stdout)
    assert "draft-07" in schema["$schema"]


def test_installed_validate_reports_unknown_device_with_position(
    installed: Path, outside: Path
) -> None:
    """The installed `hetc validate` exits 1 and prints FILE:LINE:COL for an unknown device."""
    text = GOOD_SPEC.read_text(encoding="utf-8")
    assert "device: A100-40GB," in text
    bad = outside / "bad.yaml"
    bad.write_text(text.replace("device: A100-40GB,", "device: A100-40G,"), encoding="utf-8")
    result = _run(
        [str(_bin(installed, "hetc")), "validate", str(bad)], cwd=outside, timeout=RUN_TIMEOUT
    )
    assert result.returncode == 1, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert re.search(
        r"^.+:\d+:\d+: zones\[0\]\.pools\[0\]\.device: unknown device", result.stdout, re.M
    ), result.stdout


def test_installed_compile_writes_the_whole_output(installed: Path, outside: Path) -> None:
    """The installed `hetc compile` (templates from the wheel) writes every file the manifest
    lists, away from the checkout."""
    spec = ROOT / "examples" / "slurm-local-cpu.yaml"
    result = _run(
        [str(_bin(installed, "hetc")), "compile", str(spec), "-o", "out"],
        cwd=outside,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    manifest = json.loads((outside / "out" / "manifest.json").read_text(encoding="utf-8"))
    paths = {entry["path"] for entry in manifest["files"]}
    assert {"plan.json", "report.md", "timeline.svg", "launch/ci.sbatch"} <= paths
    assert all((outside / "out" / p).is_file() for p in paths)
