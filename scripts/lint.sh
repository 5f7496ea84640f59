#!/usr/bin/env bash
# The lint steps, in one place: `make lint` and CI (.ci/run) call this; the first that fails stops
# it. Ruff's checks and formatting, mypy, the import contracts (lint-imports) and last the house
# check (scripts/house.py: no module of the app over 450 lines, no class over 300).
# Needs .venv (scripts/bootstrap.sh; `make lint` bootstraps first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
.venv/bin/python scripts/house.py
