#!/usr/bin/env bash
# Installs what the tests need (a virtualenv with the project and its test extras) and runs
# lint and the test suite. Safe to run on a fresh clone with no services running (missing
# redis-server and chromium are installed with apt-get; the tests start their own services).
set -euo pipefail
cd "$(dirname "$0")/.."
# From Debian: redis-server for the Redis-backed tests (tests/support/redis_server.py; they
# start their own on a free port) and chromium for the dev UI's browser tests
# (tests/test_dev_ui.py, driven by Playwright, which downloads no browser of its own).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        SUDO="unavailable"
    fi
    if [ "$SUDO" = "unavailable" ]; then
        echo "warning: ${missing[*]} missing and neither root nor sudo is available to" \
            "install them; the tests that need them will be skipped (or fail when CI is set)." >&2
    else
        $SUDO apt-get update -qq
        $SUDO env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
fi
python3 -m venv .venv
# devui: google-adk, whose wheel holds the web UI that `adk-celery api --dev-ui` serves.
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,devui]'
.venv/bin/ruff check .
# Two test processes (pytest-xdist) by default: most of a test's time is spent waiting on
# the processes it started, so two share the two cores of the CI machine well.
# ADK_CELERY_TEST_WORKERS=0 runs the suite in this one process.
.venv/bin/python -m pytest -q -n "${ADK_CELERY_TEST_WORKERS:-2}" "$@"
