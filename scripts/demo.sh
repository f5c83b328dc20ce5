#!/usr/bin/env bash
# Install hetc on a fresh machine, compile a bundled example spec into demo-out/ (plan,
# topology, DeepSpeed configs, launch scripts, report; with what a mistake in a spec looks like),
# then train the bundled CPU example for a few steps on this machine (hetc launch).
# Usage: bash scripts/demo.sh [example spec]   (default: examples/gptneo-a100-v100.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e .
spec=${1:-examples/gptneo-a100-v100.yaml}
echo "+ hetc validate $spec"
.venv/bin/hetc validate "$spec"

# What a mistake looks like: the same spec with a misspelt device and bf16 on V100s.
broken=$(mktemp --suffix=.yaml)
trap 'rm -f "$broken"' EXIT
sed -e 's/A100-40GB/A100-40G/' -e 's/precision: fp16/precision: bf16/' "$spec" > "$broken"
echo
echo "+ hetc validate <the same spec with two mistakes>"
.venv/bin/hetc validate "$broken" || echo "(exit code $?: the spec is invalid)"
echo
echo "+ hetc plan $spec --top 2"
.venv/bin/hetc plan "$spec" --top 2
echo
echo "+ hetc compile $spec -o demo-out"
.venv/bin/hetc compile "$spec" -o demo-out
echo
echo "+ the compiled files (demo-out/manifest.json lists them with their sha256):"
find -L demo-out -type f | sort | sed -n '1,12p'
echo "  ... $(find -L demo-out -type f | wc -l) files; the report begins:"
sed -n '1,40p' demo-out/report.md

# Training needs the runtime extra; torch first and pinned (README, Installing torch: where
# pip has no local CPU wheel this is the CUDA build unless pip is pointed at the CPU index).
echo
echo "+ hetc compile examples/local-cpu.yaml -o demo-train && hetc launch demo-train --from-scratch"
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -e ".[runtime]"
.venv/bin/hetc compile examples/local-cpu.yaml -o demo-train
# --from-scratch: a second demo trains again rather than resuming the first one's last checkpoint
# The launch shows a progress line per node and ends with its summary (final loss, throughput
# and peak memory against the plan, checkpoint, metrics); `hetc calibrate demo-train-run` then
# fits the cost model to the run.
echo
.venv/bin/hetc launch demo-train --run-dir demo-train-run --from-scratch
