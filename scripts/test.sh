#!/usr/bin/env bash
# Installs everything, then runs the linters and the whole test suite (real TLS servers,
# real PostgreSQL clusters started by the tests themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
.venv/bin/pytest -q -n 2 "$@"
