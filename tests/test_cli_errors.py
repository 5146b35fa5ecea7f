"""What ``adk-celery`` says about malformed settings and options: one line naming the setting
or option and what is wrong, exit status 2, no traceback, and never a secret it was given."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import forked
from tests.support.processes import stack_env
from tests.support.redis_server import free_port

SECRET = "S3cretPw"


def run(env: dict[str, str], *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return forked.run(list(argv), env=env, timeout=timeout)


def cli(env: dict[str, str], *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run(env, sys.executable, "-m", "workers.cli", *argv, timeout=timeout)


@pytest.fixture(scope="module")
def env(redis_url):
    return stack_env(redis_url, "tests.apps:chat_app")


MALFORMED = [
    ("REDIS_URL", f"redis://:{SECRET}@127.0.0.1:notaport/0",
     "ADK_CELERY_REDIS_URL: the port is not a number from 0 to 65535"),
    ("REDIS_URL", f"{SECRET}@127.0.0.1:6379",
     "ADK_CELERY_REDIS_URL: not a Redis URL: it must start with redis://, rediss:// or unix:// "
     "(e.g. redis://localhost:6379/0)"),
    ("METRICS_PORT", "abc", "ADK_CELERY_METRICS_PORT: Input should be a valid integer, unable to "
                            "parse string as an integer"),
    ("BROKER_TRANSPORT_OPTIONS", "{bad", "ADK_CELERY_BROKER_TRANSPORT_OPTIONS: not JSON (Expecting "
                                         "property name enclosed in double quotes at character 1)"),
    ("METRICS_PORT", "70000", "ADK_CELERY_METRICS_PORT: Input should be less than or equal to 65535"),
    ("IDENTIFIER_PATTERN", "[", "ADK_CELERY_IDENTIFIER_PATTERN: not a regular expression "
                                "(unterminated character set at position 0)"),
]


@pytest.mark.parametrize(("name", "value", "said"), MALFORMED, ids=[m[0] + "=" + m[1] for m in MALFORMED])
@pytest.mark.parametrize("command", [("status", "chat", "e-x"), ("orchestrator",)], ids=["status", "orchestrator"])
def test_a_malformed_setting_is_one_line_naming_it(env, name, value, said, command):
    done = cli({**env, f"ADK_CELERY_{name}": value}, *command)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"adk-celery: error: {said}\n")


SETUP_ERRORS = [
    (("api", "--port", "0"), {"ADK_CELERY_API_TOKENS": "{" + SECRET}, "ADK_CELERY_API_TOKENS: not a JSON object"),
    (("orchestrator",), {"ADK_CELERY_APPS": "examples.missing:app"},
     "ADK_CELERY_APPS / --app: App spec 'examples.missing:app': cannot import module "
     "'examples.missing': No module named 'examples.missing'"),
    (("orchestrator",), {"ADK_CELERY_APPS": "tests.apps:remote_step_app"},
     "ADK_CELERY_APPS / --app: App 'remote_step': tool 'tally' of agent 'counting' runs on "
     "workers (queue 'adk.tools') inside SequentialAgent 'steps', and the app is not "
     "resumable: after the tool's answer only that agent would go on, the steps after it "
     "would not run. Make the app resumable (App(resumability_config=ResumabilityConfig("
     "is_resumable=True))), or run the tool in the orchestrator (take it out of "
     "ADK_CELERY_TOOL_QUEUES and its adk_celery_queue metadata)."),
    (("worker",), {"ADK_CELERY_REDIS_URL": ""},
     "ADK_CELERY_REDIS_URL is not set (e.g. redis://localhost:6379/0)."),
    (("api", "--host", "0.0.0.0", "--port", "0"), {},
     "no ADK_CELERY_API_TOKENS set; refusing to listen on '0.0.0.0', which is not loopback."),
    # Empty is unset (docker-compose.yml passes it so without API_TOKENS), not "not JSON".
    (("api", "--host", "0.0.0.0", "--port", "0"), {"ADK_CELERY_API_TOKENS": ""},
     "no ADK_CELERY_API_TOKENS set; refusing to listen on '0.0.0.0', which is not loopback."),
]


@pytest.mark.parametrize(("argv", "settings", "said"), SETUP_ERRORS, ids=[a[0] for a, _, _ in SETUP_ERRORS])
def test_a_process_command_refuses_its_settings_in_the_same_words(env, argv, settings, said):
    done = cli({**env, **settings}, *argv, timeout=30)
    assert (done.returncode, done.stderr) == (2, f"adk-celery: error: {said}\n")


WITHOUT_GOOGLE_ADK = """
from importlib import metadata
found = metadata.distribution
def without_google_adk(name):
    if name == "google-adk":
        raise metadata.PackageNotFoundError(name)
    return found(name)
metadata.distribution = without_google_adk
from workers.cli import main
main(["api", "--dev-ui", "--port", "0"])
"""


def test_the_dev_ui_without_google_adk_is_refused_in_the_same_words(env):
    from workers.api.dev_ui import MISSING

    done = run(env, sys.executable, "-c", WITHOUT_GOOGLE_ADK, timeout=30)
    assert (done.returncode, done.stderr) == (2, f"adk-celery: error: {MISSING}\n")


def test_a_plain_celery_worker_stops_on_a_malformed_setting_without_showing_it(env):
    done = run({**env, "ADK_CELERY_REDIS_URL": f"redis://:{SECRET}@127.0.0.1:notaport/0"},
               sys.executable, "-m", "celery", "-A", "workers", "worker", "--loglevel", "WARNING")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "adk-celery: error: ADK_CELERY_REDIS_URL: the port is not a number from 0 to 65535")
    assert "Traceback" not in done.stderr and SECRET not in done.stdout + done.stderr


USAGE_ERRORS = [
    # numbers out of range
    (("orchestrator", "--metrics-port", "70000"),
     "argument --metrics-port: '70000' is not a port number (0 to 65535)"),
    (("worker", "--metrics-port", "-1"), "argument --metrics-port: '-1' is not a port number (0 to 65535)"),
    (("worker", "--concurrency", "-3"), "argument --concurrency: '-3' is not a whole number, 1 or more"),
    (("api", "--port", "99999"), "argument --port: '99999' is not a port number (0 to 65535)"),
    # options passed on to Celery or Flower, which refuse them
    (("orchestrator", "--bogus"), "celery worker: No such option '--bogus'."),
    (("worker", "--bogus"), "celery worker: No such option '--bogus'."),
    (("worker", "-c", "abc"), "celery worker: Invalid value for '-c' / '--concurrency': must be a "
                              "non-negative integer or 'auto', got 'abc'"),
    (("flower", "--bogus", "--no-such-flag=1"), "unrecognized Flower options: --bogus --no-such-flag"),
    (("flower", "--basic-auth"), "Option 'basic-auth' requires a value"),
    (("flower", "--basic-auth", f"admin:{SECRET}"),
     "Flower's options are written --name=value: an argument without a leading - (a value after a "
     "space?) is not one"),
    (("flower", "--max-tasks=x"), "--max-tasks: invalid literal for int() with base 10: 'x'"),
]


@pytest.mark.parametrize(("argv", "said"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_a_refused_option_is_a_usage_error(env, argv, said):
    if argv[0] == "flower":  # were it to start, on a port of its own
        argv = (*argv, "--port", str(free_port()))
    done = cli(env, *argv, timeout=30)
    assert done.returncode == 2 and done.stderr.startswith(f"usage: adk-celery {argv[0]}")
    assert done.stderr.splitlines()[-1] == f"adk-celery {argv[0]}: error: {said}"


def test_a_malformed_setting_read_by_a_library_user_never_shows_its_value(env):
    # Client() and the API's app factory read the settings themselves: their error is
    # pydantic's, which quoted each value it refused (a Redis URL with its password).
    code = "from workers.client import Client\nClient()"
    result = run({**env, "ADK_CELERY_REDIS_URL": f"redis://:{SECRET}@127.0.0.1:99999/0"},
                 sys.executable, "-c", code)
    assert result.returncode != 0
    assert "ADK_CELERY_REDIS_URL" in result.stderr or "redis_url" in result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_the_api_on_a_port_in_use_says_so_in_one_line(env):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli(env, "api", "--port", str(port), timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"adk-celery api: error: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert "Traceback" not in done.stderr and "Uvicorn" not in done.stderr
