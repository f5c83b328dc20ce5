#!/usr/bin/env bash
# Install hetc with the planner compiled to C by mypyc (setup.py, HETC_COMPILE=1): the same
# source, 2-3x faster searches (docs/planner.md, Speed). Needs a C compiler and Python's
# headers; takes about two minutes. `bash scripts/test.sh` puts the editable source install
# back into its .venv (the tests patch the search's methods, which a compiled class does not
# allow).
# It installs into the environment you are in: $PYTHON if set, else the active virtual
# environment ($VIRTUAL_ENV), else the `python3` on PATH. --print-python prints that
# interpreter and installs nothing.
# Usage: bash scripts/install-compiled.sh [--print-python] [extras, e.g. runtime]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${PYTHON:-}" ]; then
    python=$PYTHON
elif [ -n "${VIRTUAL_ENV:-}" ]; then
    python=$VIRTUAL_ENV/bin/python
else
    python=$(command -v python3) || {
        echo "install-compiled.sh: no python3 on PATH" >&2
        echo "To fix: activate the virtual environment to install into, or set PYTHON" >&2
        exit 4
    }
fi
if [ "${1:-}" = --print-python ]; then
    echo "$python"
    exit 0
fi
extras=${1:+[$1]}
if [ -n "${1:-}" ] && [[ ",$1," == *,runtime,* ]]; then
    # torch first and pinned (README, "Installing torch": the CPU build or a CUDA one).
    "$python" -m pip install -q --disable-pip-version-check torch==2.13.0
fi
# hetc's dependencies (and the extras'), then mypyc, which comes with mypy, pinned to the
# version the compiled build is tested with, then hetc itself, compiled, in place of the first.
"$python" -m pip install -q --disable-pip-version-check ".$extras"
"$python" -m pip install -q --disable-pip-version-check "mypy==2.4.1" "setuptools>=68" wheel
# setuptools builds in the checkout's build/: a stale extension left there by an earlier
# build would be packed into this one, so it starts empty.
rm -rf build
HETC_COMPILE=1 "$python" -m pip install -q --disable-pip-version-check --no-build-isolation \
    --force-reinstall --no-deps .
(cd / && "$python" -c "import hetc.solver.search.driver as s; print('hetc planner:', s.__file__)")
