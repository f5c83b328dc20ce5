"""The mypyc build of the planner (setup.py with HETC_COMPILE=1) plans as the source does.

One module-scoped fixture builds the wheel from a copy of the package with the compiled
modules and unpacks it; `compiled_worker.py` then plans the same specs twice, each in a
fresh process: once on that build, once on the source. The oracle is the source itself:
every top-3 objective must match to the last bit (repr), on every bench scenario (with the
analytical model and with Sailor's measured profiles), every bundled example, and random
specs searched exactly (every approximation off) and with the defaults.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.oracles.instances import binding_instance, random_instance

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "compiled_worker.py"
BUILD_TIMEOUT = 900
RUN_TIMEOUT = 600
RANDOM_SEEDS = range(40)


def _env(path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HETC_COMPILE")}
    env["PYTHONPATH"] = str(path)
    return env


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the compiled build of hetc, unpacked from its wheel."""
    base = tmp_path_factory.mktemp("compiled")
    source = base / "src"
    shutil.copytree(
        ROOT / "hetc", source / "hetc", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    wheels = base / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q"]
    done = subprocess.run(
        [*build, "-w", str(wheels), str(source)],
        cwd=base,
        env={**_env(source), "HETC_COMPILE": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    (wheel,) = wheels.glob("hetc-*.whl")
    tree = base / "tree"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tree)
    return tree


PLANNED_ELSEWHERE = {"internet-scale.yaml"}
"""Examples too large to plan twice here (about a minute each): tests/test_internet_scale.py."""


def _jobs(base: Path) -> list[dict[str, object]]:
    """Every bench scenario both ways, every example, and the random specs, as worker jobs."""
    jobs: list[dict[str, object]] = []
    for path in sorted((ROOT / "bench" / "scenarios").glob("*.yaml")):
        jobs += [{"path": str(path), "exact": False, "profiles": p} for p in (False, True)]
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        if path.name not in PLANNED_ELSEWHERE:
            jobs.append({"path": str(path), "exact": False, "profiles": False})
    for seed in RANDOM_SEEDS:
        spec = base / f"random-{seed}.yaml"
        spec.write_text(
            binding_instance(seed) if seed % 2 == 0 else random_instance(seed), encoding="utf-8"
        )
        jobs += [{"path": str(spec), "exact": e, "profiles": False} for e in (True, False)]
    return jobs


def _planned(where: Path, jobs: Path, cwd: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(WORKER), str(jobs)],
        cwd=cwd,
        env=_env(where),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_compiled_planner_plans_as_the_source_does(compiled: Path, tmp_path: Path) -> None:
    """Same top-3 objectives and best shape on every job, the compiled run having loaded C
    extensions from the build and the source run .py files from the checkout."""
    jobs = _jobs(tmp_path)
    listed = tmp_path / "jobs.json"
    listed.write_text(json.dumps(jobs), encoding="utf-8")
    fast = _planned(compiled, listed, tmp_path)
    plain = _planned(ROOT, listed, tmp_path)
    for name, path in fast["modules"].items():  # type: ignore[attr-defined]
        assert path.endswith(".so") and Path(path).is_relative_to(compiled), (name, path)
    for name, path in plain["modules"].items():  # type: ignore[attr-defined]
        assert path.endswith(".py") and Path(path).is_relative_to(ROOT), (name, path)
    planned = [v for v in plain["values"] if v["values"]]  # type: ignore[attr-defined]
    assert len(planned) >= len(jobs) * 3 // 4, "too few jobs found a plan to compare"
    for job, mine, theirs in zip(jobs, fast["values"], plain["values"], strict=True):  # type: ignore[call-overload]
        assert mine == theirs, job


def test_a_compiled_build_without_mypyc_says_what_to_install(tmp_path: Path) -> None:
    """HETC_COMPILE=1 where mypyc cannot be imported (a stand-in package that fails to,
    first on the path) stops the build with the commands that provide it, not a
    traceback."""
    (tmp_path / "mypyc").mkdir()
    (tmp_path / "mypyc" / "__init__.py").write_text("raise ImportError('not here')\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "setup.py"), "--name"],
        cwd=tmp_path,
        env={**_env(tmp_path), "HETC_COMPILE": "1"},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 1
    assert "pip install mypy==2.4.1 setuptools wheel" in done.stderr
    assert "Traceback" not in done.stderr
    plain = subprocess.run(
        [sys.executable, str(ROOT / "setup.py"), "--name"],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert plain.returncode == 0 and plain.stdout.strip() == "hetc", plain.stderr
