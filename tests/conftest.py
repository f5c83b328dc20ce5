"""Shared fixtures, and the CI rule that a skipped test fails the run unless it is allowed.

With CI=true, every skipped test must be named in tests/skips_allowed.txt with a reason
(`<test node id or prefix>  # reason`); CI installs what the others need instead of skipping.
With CI=true, Hypothesis also draws the same examples on every run (its `ci` profile,
derandomized): a verdict on a submission must not depend on a random draw. Local runs keep
exploring new examples; what they find is pinned with `@example`.

scripts/test.sh runs the suite on two pytest-xdist workers (`-n 2 --dist loadfile`): on 2
cores, one worker's multi-process run leaves a core idle for much of its length (rank
start-up, rendezvous, heartbeat and Slurm waits). Each test file stays on one worker (its
module-scoped builds and reference runs happen once, its runs stay serial), the files that
share the local Slurm cluster stay together, and files with slow tests are handed out first.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
_skipped: list[str] = []


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


settings.register_profile("ci", derandomize=True)
if _in_ci():
    settings.load_profile("ci")


SHARED_RESOURCE_GROUPS = {
    "test_slurm_launch.py": "slurm-cluster",
    "test_elastic_slurm.py": "slurm-cluster",
}
"""Files whose tests share one machine-wide resource (scripts/slurm-local.sh's cluster, where
one test sets a node down): one work unit, so two workers never use it at once."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, with the files of SHARED_RESOURCE_GROUPS as one unit and the units
    handed out in collection order (see `pytest_collection_modifyitems`), not by test count."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return SHARED_RESOURCE_GROUPS.get(Path(file).name, file)

    config.option.loadscopereorder = False
    return FileGroupScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker started from a background job inherits SIGINT ignored, and so would
    every process a test starts (bash cannot trap a signal ignored at its start): the
    Ctrl-C tests need the default handling a foreground pytest has."""
    if hasattr(config, "workerinput"):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the files with slow tests first (the controller schedules in this
    order): the long units start early and the short ones fill the end."""
    if hasattr(config, "workerinput"):
        slow_files = {item.path for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: item.path not in slow_files)


def _allowed_skips() -> list[str]:
    listed = (Path(__file__).parent / "skips_allowed.txt").read_text(encoding="utf-8")
    allowed = []
    for line in listed.splitlines():
        entry, _, reason = line.partition("#")
        if entry.strip():
            if not reason.strip():
                raise pytest.UsageError(f"skips_allowed.txt: {entry.strip()} has no reason")
            allowed.append(entry.strip())
    return allowed


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _in_ci():
        return
    allowed = _allowed_skips()
    forbidden = [n for n in _skipped if not any(n.startswith(a) for a in allowed)]
    if forbidden:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                "CI=true: these tests were skipped but are not in tests/skips_allowed.txt:",
                red=True,
            )
            for nodeid in forbidden:
                reporter.write_line(f"  {nodeid}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def example_paths() -> list[Path]:
    return EXAMPLES
