#!/usr/bin/env bash
# ruff, ruff format and mypy over the whole tree: the first step of `make test` (scripts/test.sh) and of `make check`.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== ruff"; .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
