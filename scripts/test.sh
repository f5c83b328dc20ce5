#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run lint, types and the whole suite.
# Usage: bash scripts/test.sh [pytest arguments]     (.ci/run calls exactly this)
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
# Debian packages the tests use: git (the pre-commit hook test drives a real repository), a C
# toolchain (tests/test_compiled.py builds the planner with mypyc) and the package of the
# linter every generated launch script must pass, shellcheck. The local Slurm cluster's
# packages are installed by scripts/slurm-local.sh when the Slurm tests start it.
missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
headers=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$headers/Python.h" ] || missing+=(python3-dev)
if (( ${#missing[@]} )); then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -x .venv/bin/python ] && ! "$python" -m venv .venv; then
    # Debian's system Python keeps venv/ensurepip in a separate package.
    rm -rf .venv
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv
    "$python" -m venv .venv
fi
# torch first and pinned, before deepspeed's `torch>=2` can pick another; the CPU build only
# where pip has a local CPU wheel or the CPU index (README, Installing torch).
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -e ".[runtime,dev]"

# The project's own habits: ruff (lint, format) and mypy, as the pre-commit hooks run them.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    .venv/bin/pre-commit run --all-files --show-diff-on-failure
fi

# pytest's exit code is the verdict (5, "no tests collected", fails the run like any other).
# Two workers, one test file each at a time (tests/conftest.py says why and how they are
# scheduled); `-n 0` among the arguments runs serially.
exec .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
