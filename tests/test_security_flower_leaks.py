"""``adk-celery flower``'s login, over real processes.

- The login (``ADK_CELERY_FLOWER_BASIC_AUTH``) is one ``user:password``: a value Flower would
  split into several logins, or take whole as a bare password, is refused at start (one
  line, naming the variable, never the value).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.apps import APP_SPECS
from tests.apps_extra import APP_SPECS as EXTRA_SPECS
from tests.support.processes import ManagedProcess, stack_env
from tests.support.redis_server import free_port
from tests.test_security_flower import start_flower

SPECS = f"{APP_SPECS},{EXTRA_SPECS}"
LOGIN = ("admin", "s3cret-pass")


def eventually(what: str, check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def basic(credentials: str) -> dict[str, str]:
    """An Authorization header sending ``credentials`` as they are (no ``user:`` added)."""
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


# ---- the login -------------------------------------------------------------------------------


def _refused_at_start(env: dict[str, str]) -> str:
    """Start ``adk-celery flower``; it must exit non-zero without serving: its output."""
    port = free_port()
    flower = start_flower(env, port)
    try:
        code = flower.proc.wait(30)
    finally:
        flower.stop(5)
    output = flower.output()
    assert code != 0, output
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    return output


@pytest.mark.parametrize(("value", "rule"), [
    ("adm1n:pa55,w0rd", "without a comma"),
    ("s3cr3tpassw0rd", "no colon"),
    (":s3cr3tpassw0rd", "user name"),
    ("adm1n:", "password"),
])
def test_a_malformed_login_is_refused_at_start_without_showing_it(redis_url, value, rule):
    env = stack_env(redis_url, SPECS, flower_basic_auth=value)
    output = _refused_at_start(env)
    [line] = output.strip().splitlines()
    assert line.startswith("adk-celery: error: ADK_CELERY_FLOWER_BASIC_AUTH: ") and rule in line
    for part in {value, *value.replace(":", ",").split(",")} - {""}:
        assert part not in line.removeprefix("adk-celery: error: ADK_CELERY_FLOWER_BASIC_AUTH: "), (
            part, line)


def test_a_login_given_to_flower_itself_is_checked_too(redis_url):
    env = {**stack_env(redis_url, SPECS), "FLOWER_BASIC_AUTH": "adm1n:pa55,s3cr3tpassw0rd"}
    output = _refused_at_start(env)
    assert "FLOWER_BASIC_AUTH: login 2 of 2 is not user:password" in output
    assert "s3cr3tpassw0rd" not in output and "pa55" not in output


def test_the_login_is_one_user_and_password_colons_included(redis_url):
    password = "pa:ss-word"  # a colon after the first one is the password's
    env = stack_env(redis_url, SPECS, flower_basic_auth=f"admin:{password}")
    port = free_port()
    flower = start_flower(env, port)
    try:
        base = f"http://127.0.0.1:{port}"
        eventually("flower", lambda: _answers(flower, base, ("admin", password)), timeout=20)
        assert httpx.get(f"{base}/api/workers", auth=("admin", password), timeout=5).status_code == 200
        for sent in (password, "admin", "ss-word", "admin:pa", f"admin:{password}x"):
            assert httpx.get(f"{base}/api/workers", headers=basic(sent), timeout=5).status_code == 401
    finally:
        flower.stop(5)


def _answers(flower: ManagedProcess, base: str, auth: tuple[str, str]) -> bool:
    assert flower.proc.poll() is None, flower.output()
    try:
        return httpx.get(f"{base}/healthcheck", auth=auth, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
