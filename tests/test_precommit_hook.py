"""The `hetc-validate` hook of .pre-commit-hooks.yaml, run for real by pre-commit.

The hook repository is a committed snapshot of the working tree (tracked files plus untracked,
not-ignored ones): `pre-commit try-repo /work/main` alone would carry only modifications of
tracked files and miss new modules. pre-commit builds its own env for the hook and pip-installs
that snapshot into it, as it would for a consumer repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
HOOK = "hetc-validate"
GOOD_SPEC = (
    (ROOT / "examples" / "opt350m-a100.yaml")
    .read_text(encoding="utf-8")
    .replace("preset: OPT-350M", "preset: GPT-3-1.3B")  # a model the runtime trains: no warning
)
BAD_SPEC = GOOD_SPEC.replace("quota: 128,", "quota: -4,")
CI_WORKFLOW = """\
name: ci
on: [push, pull_request]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: bash .ci/run
"""
GIT_TIMEOUT = 60
# Set by git for a hook it runs (pytest under a git hook): they would redirect every git call.
GIT_PLACE = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")
HOOK_TIMEOUT = 600


def _env(pre_commit_home: Path | None = None) -> dict[str, str]:
    """The environment minus the dev venv, any enclosing git hook's GIT_* and user git config."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GIT_", "PRE_COMMIT")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    if pre_commit_home is not None:
        env["PRE_COMMIT_HOME"] = str(pre_commit_home)
    return env


def _git(repo: Path, *args: str) -> str:
    """Run git in a throwaway repository, or read-only in the checkout (keeping user config)."""
    env = _env() if repo != ROOT else {k: v for k, v in os.environ.items() if k not in GIT_PLACE}
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=GIT_TIMEOUT,
    ).stdout


def _init_repo(repo: Path) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.name", "hetc tests")
    _git(repo, "config", "user.email", "hetc-tests@example.invalid")
    _git(repo, "config", "commit.gpgsign", "false")


def _spec_repo(repo: Path, files: dict[str, str]) -> Path:
    """A git repository with `files` written and staged (not committed)."""
    _init_repo(repo)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    _git(repo, "add", "--", *files)
    return repo


def _pre_commit(args: list[str], repo: Path, home: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(PRE_COMMIT), *args, "--color", "never"],
        cwd=repo,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=HOOK_TIMEOUT,
    )
    result.stdout += result.stderr  # one transcript for the assertions and their messages
    return result


def _lines(output: str, prefix: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(prefix)]


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A committed snapshot of the working tree; returns its path and commit."""
    repo = tmp_path_factory.mktemp("hook-repo")
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree is left out
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    _init_repo(repo)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "snapshot of the hetc working tree")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PRE_COMMIT_HOME of this module's own, so the hook env is built once and isolated."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def consumer_config(tmp_path_factory: pytest.TempPathFactory, hook_repo: tuple[Path, str]) -> Path:
    """A consumer's .pre-commit-config.yaml pinning the snapshot, as the manifest shows."""
    repo, rev = hook_repo
    config = tmp_path_factory.mktemp("consumer") / ".pre-commit-config.yaml"
    config.write_text(
        f"repos:\n  - repo: {repo}\n    rev: {rev}\n    hooks:\n      - id: {HOOK}\n",
        encoding="utf-8",
    )
    return config


def test_premises() -> None:
    """The bad spec is the good one with a negative quota; the good one trains a model the
    runtime takes; pre-commit is in the dev venv."""
    assert BAD_SPEC.count("quota: -4,") == 1
    assert "preset: GPT-3-1.3B" in GOOD_SPEC
    assert PRE_COMMIT.is_file(), f"pre-commit not installed next to {sys.executable}"


def test_try_repo_fails_on_bad_spec_with_position(
    tmp_path: Path, hook_repo: tuple[Path, str], pre_commit_home: Path
) -> None:
    """try-repo fails, prints FILE:LINE:COL for specs/bad.yaml and nothing for the good spec."""
    repo = _spec_repo(
        tmp_path / "consumer",
        {
            "specs/good.yaml": GOOD_SPEC,
            "specs/bad.yaml": BAD_SPEC,
            ".github/workflows/ci.yaml": CI_WORKFLOW,
        },
    )
    result = _pre_commit(
        ["try-repo", str(hook_repo[0]), HOOK, "--all-files"], repo, pre_commit_home
    )
    out = result.stdout
    assert result.returncode != 0, out
    assert re.search(r"^specs/bad\.yaml:\d+:\d+: zones\[0\]\.pools\[0\]\.quota", out, re.M), out
    assert not _lines(out, "specs/good.yaml"), out
    assert not _lines(out, ".github/"), out


def test_good_spec_passes(tmp_path: Path, consumer_config: Path, pre_commit_home: Path) -> None:
    """A repository whose only spec is valid passes the hook (checked, not skipped)."""
    repo = _spec_repo(tmp_path / "consumer", {"specs/good.yaml": GOOD_SPEC})
    result = _pre_commit(
        ["run", "--all-files", "--config", str(consumer_config)], repo, pre_commit_home
    )
    assert result.returncode == 0, result.stdout
    assert re.search(r"^hetc validate\.+Passed$", result.stdout, re.M), result.stdout


def test_default_files_pattern_skips_unrelated_yaml(
    tmp_path: Path, consumer_config: Path, pre_commit_home: Path
) -> None:
    """The hook's default `files` leaves non-spec YAML such as a CI workflow alone."""
    workflow = tmp_path / "ci.yaml"
    workflow.write_text(CI_WORKFLOW, encoding="utf-8")
    direct = subprocess.run(
        [sys.executable, "-m", "hetc", "validate", str(workflow)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
    )
    assert direct.returncode == 1, "premise: hetc itself rejects the workflow file"
    repo = _spec_repo(
        tmp_path / "consumer",
        {"specs/good.yaml": GOOD_SPEC, ".github/workflows/ci.yaml": CI_WORKFLOW},
    )
    result = _pre_commit(
        ["run", "--all-files", "--config", str(consumer_config)], repo, pre_commit_home
    )
    assert result.returncode == 0, result.stdout
    assert re.search(r"^hetc validate\.+Passed$", result.stdout, re.M), result.stdout
    assert not _lines(result.stdout, ".github/"), result.stdout
