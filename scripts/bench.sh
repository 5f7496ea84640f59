#!/usr/bin/env bash
# The benchmark command: bootstrap .venv, install the benchmark-only peers (the `bench` extra),
# run bench/run.py with the given arguments (e.g. --quick, --only burst, --sizes 100 1000).
# Results: bench/results/<date>-<full|quick>.md (+ latest.md for a full run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
.venv/bin/python -m pip install --quiet -e '.[bench]'
exec .venv/bin/python bench/run.py "$@"
