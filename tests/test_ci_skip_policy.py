"""The CI rule of tests/conftest.py: with CI=true an unlisted skip fails the run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text(encoding="utf-8")
INNER = """
import pytest

def test_runs():
    pass

def test_skipped():
    pytest.skip("needs a GPU")
"""


def _run(pytester: pytest.Pytester, allowed: str, ci: str | None, *extra: str) -> pytest.RunResult:
    monkeypatch = pytest.MonkeyPatch()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=INNER)
    (pytester.path / "skips_allowed.txt").write_text(allowed, encoding="utf-8")
    with monkeypatch.context() as patched:
        if ci is None:
            patched.delenv("CI", raising=False)
        else:
            patched.setenv("CI", ci)
        return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *extra)


def test_unlisted_skip_fails_under_ci(pytester: pytest.Pytester) -> None:
    """CI=true and a skip that skips_allowed.txt does not name: the run fails and names it."""
    result = _run(pytester, "# nothing allowed\n", "true")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*test_inner.py::test_skipped*"])


def test_listed_skip_passes_under_ci(pytester: pytest.Pytester) -> None:
    """A skip named with a reason in skips_allowed.txt is accepted under CI."""
    result = _run(pytester, "test_inner.py::test_skipped  # needs a GPU\n", "true")
    assert result.ret == pytest.ExitCode.OK


def test_skips_are_fine_outside_ci(pytester: pytest.Pytester) -> None:
    """Without CI=true a skip is an ordinary skip."""
    assert _run(pytester, "", None).ret == pytest.ExitCode.OK


def test_listed_skip_without_reason_is_refused(pytester: pytest.Pytester) -> None:
    """Every allowed skip must say why."""
    result = _run(pytester, "test_inner.py::test_skipped\n", "true")
    assert result.ret != pytest.ExitCode.OK


XDIST = ("-n", "2", "--dist", "loadfile")
"""How scripts/test.sh runs the suite: the skips happen on workers, the verdict is the
controller's."""


def _xdist_installed() -> None:
    assert importlib.util.find_spec("xdist") is not None, (
        "pytest-xdist is not installed. To fix: pip install -e '.[dev]' (scripts/test.sh does)"
    )


def test_unlisted_skip_on_an_xdist_worker_fails_under_ci(pytester: pytest.Pytester) -> None:
    """A skip on an xdist worker that skips_allowed.txt does not name fails the whole run
    (mutation check: the controller ignoring worker reports, `hasattr(report, "node")`, makes
    this run pass)."""
    _xdist_installed()
    result = _run(pytester, "# nothing allowed\n", "true", *XDIST)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*test_inner.py::test_skipped*"])


def test_listed_skip_on_an_xdist_worker_passes_under_ci(pytester: pytest.Pytester) -> None:
    """A skip on an xdist worker that skips_allowed.txt names is accepted, as in a serial run."""
    _xdist_installed()
    result = _run(pytester, "test_inner.py::test_skipped  # needs a GPU\n", "true", *XDIST)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*1 passed, 1 skipped*"])
