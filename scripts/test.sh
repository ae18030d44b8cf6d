#!/usr/bin/env bash
# Installs everything, then runs the linters and the whole test suite (real TLS servers,
# real PostgreSQL clusters started by the tests themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
.venv/bin/pytest -q -n 2 "$@"
if [ $# -eq 0 ]; then
  # The benchmark smoke run (strongroom bench --quick, ~3 min): alone, so it and the tests above
  # do not compete for the two cores.
  .venv/bin/pytest -q -m smoke tests/bench/test_smoke.py
fi
