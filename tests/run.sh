#!/usr/bin/env bash
# Installs what the tests need (a virtualenv with the project and its test extras) and runs
# lint and the test suite. Safe to run on a fresh clone with no services running (a missing
# redis-server is installed with apt-get; the tests start their own on a free port).
set -euo pipefail
cd "$(dirname "$0")/.."
# The Redis-backed tests start a real redis-server (tests/support/redis_server.py).
if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        SUDO="unavailable"
    fi
    if [ "$SUDO" = "unavailable" ]; then
        echo "warning: redis-server is missing and neither root nor sudo is available to" \
            "install it; the Redis-backed tests will be skipped (or fail when CI is set)." >&2
    else
        $SUDO apt-get update -qq
        $SUDO env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends redis-server
    fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
