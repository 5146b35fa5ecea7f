"""The suite runs in several processes at once (pytest-xdist, tests/run.sh): what one test
process starts must never be taken for what another one started."""

from __future__ import annotations

import pytest

from tests.support import redis_server as redis_support
from tests.support.redis_server import RedisServer, RedisServerError, find_redis_server
from tests.support.redis_server import free_port as _free_port

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="redis-server not installed")


def test_a_redis_server_whose_port_another_one_holds_is_refused_not_taken_for_started():
    """Two test processes can be handed the same free port; the one that cannot bind it must
    not go on with the other's server (it would flush and read another test's data)."""
    first = RedisServer()
    second = None
    try:
        first.start()
        second = RedisServer(port=first.port)
        with pytest.raises(RedisServerError, match="exited"):
            second.start()
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_redis_server_handed_a_taken_port_starts_on_another(monkeypatch):
    first = RedisServer()
    second = RedisServer()
    try:
        first.start()
        handed = iter([first.port])  # the first choice is taken, as by a parallel test
        monkeypatch.setattr(redis_support, "free_port",
                            lambda: next(handed, None) or _free_port())
        url = second.start()
        assert second.port != first.port and url.endswith(f":{second.port}/0")
        assert second.process is not None and second.process.poll() is None
    finally:
        first.close()
        second.close()
