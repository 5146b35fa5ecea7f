"""docker-compose.yml is checked without Docker: structure, Redis durability, and commands
that the project really provides (each is run with --help)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ("orchestrator", "worker", "flower", "api")


def adk_celery_argv(service: str) -> list[str]:
    """The ``adk-celery ...`` part of a service's command (after the install step)."""
    command = SERVICES[service]["command"]
    script = command[-1] if command[:2] == ["sh", "-c"] else " ".join(command)
    tail = script.split("&&")[-1].strip()
    argv = shlex.split(tail)
    if argv[0] == "exec":
        argv = argv[1:]
    assert argv[0] == "adk-celery", f"{service} does not run adk-celery: {script}"
    return argv[1:]


def test_the_five_services_exist():
    assert set(SERVICES) == {"redis", "orchestrator", "worker", "flower", "api"}


def test_redis_keeps_data_with_aof_and_never_evicts():
    command = SERVICES["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "always"  # survives a host crash
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert "redis-data:/data" in SERVICES["redis"]["volumes"]


def test_app_services_can_be_scaled_and_never_write_into_the_checkout():
    for service in ("orchestrator", "worker"):
        assert "container_name" not in SERVICES[service] and "ports" not in SERVICES[service]
    for service in APP_SERVICES:
        assert SERVICES[service]["volumes"] == [".:/src:ro"]


def test_every_app_service_shares_the_redis_url_and_apps():
    for service in APP_SERVICES:
        env = SERVICES[service]["environment"]
        assert env["ADK_CELERY_REDIS_URL"] == "redis://redis:6379/0"
        assert env["ADK_CELERY_APPS"].startswith("${ADK_CELERY_APPS")


def test_secrets_come_from_the_environment_and_redis_alone_needs_none():
    # Not ${VAR:?}: Compose checks every interpolation of the file for any command, and
    # `docker compose up -d redis` (the README's Redis for processes on the host) failed.
    # Unset, flower and api refuse to start on 0.0.0.0 themselves.
    assert SERVICES["flower"]["environment"]["ADK_CELERY_FLOWER_BASIC_AUTH"] == "${FLOWER_BASIC_AUTH:-}"
    assert SERVICES["api"]["environment"]["ADK_CELERY_API_TOKENS"] == "${API_TOKENS:-}"
    assert "127.0.0.1:6379:6379" in SERVICES["redis"]["ports"]


def test_redis_refuses_values_too_large_to_decode_safely():
    command = SERVICES["redis"]["command"]
    assert command[command.index("--proto-max-bulk-len") + 1] == "64mb"


@pytest.mark.parametrize("service", APP_SERVICES)
def test_each_command_is_one_the_project_provides(service):
    argv = adk_celery_argv(service)
    result = subprocess.run(
        [sys.executable, "-m", "workers.cli", argv[0], "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for option in (a for a in argv[1:] if a.startswith("--")):
        assert option in result.stdout, f"{option} is not an option of adk-celery {argv[0]}"


def test_environment_names_are_real_settings():
    fields = {f"ADK_CELERY_{name.upper()}" for name in Settings.model_fields}
    for service in APP_SERVICES:
        for name in SERVICES[service]["environment"]:
            if name.startswith("ADK_CELERY_"):
                assert name in fields, f"{service}: {name} is not a setting"
