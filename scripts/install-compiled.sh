#!/usr/bin/env bash
# Install hetc into .venv with the planner compiled to C by mypyc (setup.py, HETC_COMPILE=1):
# the same source, 2-3x faster searches (docs/planner.md, Speed). Needs a C compiler and
# Python's headers; takes about two minutes. `bash scripts/test.sh` puts the editable source
# install back (the tests patch the search's methods, which a compiled class does not allow).
# Usage: bash scripts/install-compiled.sh [extras, e.g. runtime]
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
extras=${1:+[$1]}
if [ -n "${1:-}" ] && [[ ",$1," == *,runtime,* ]]; then
    # torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
    .venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
fi
# hetc's dependencies (and the extras'), then mypyc, which comes with mypy, pinned to the
# version the compiled build is tested with, then hetc itself, compiled, in place of the first.
.venv/bin/pip install -q --disable-pip-version-check ".$extras"
.venv/bin/pip install -q --disable-pip-version-check "mypy==2.4.1" "setuptools>=68" wheel
# setuptools builds in the checkout's build/: a stale extension left there by an earlier
# build would be packed into this one, so it starts empty.
rm -rf build
HETC_COMPILE=1 .venv/bin/pip install -q --disable-pip-version-check --no-build-isolation \
    --force-reinstall --no-deps .
venv=$PWD/.venv
(cd / && "$venv/bin/python" -c "import hetc.solver.search.driver as s; print('hetc planner:', s.__file__)")
