"""Shared fixtures, and the CI rule that a skipped test fails the run unless it is allowed.

With CI=true, every skipped test must be named in tests/skips_allowed.txt with a reason
(`<test node id or prefix>  # reason`); CI installs what the others need instead of skipping.
With CI=true, Hypothesis also draws the same examples on every run (its `ci` profile,
derandomized): a verdict on a submission must not depend on a random draw. Local runs keep
exploring new examples; what they find is pinned with `@example`.
"""

from __future__ import annotations

import os
from pathlib import Path

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
