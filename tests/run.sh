#!/usr/bin/env bash
# Installs what the tests need (a virtualenv with the project and its test extras) and runs
# lint and the test suite. Safe to run on a fresh clone with no services running.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
