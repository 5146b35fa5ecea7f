"""The library internals our latency tricks lean on are still there, as they were written against.

Each trick (README: "Tricks on library internals") lives in one module and has a setting that
switches it off; the contract suite runs with all of them off too (the ``celery-plain``
backend). These tests fail loudly on a kombu, Celery, redis-py or uvicorn whose internals
changed: then check the trick against the new release, or switch it off for good.
"""

from __future__ import annotations

import inspect

import kombu
import pytest
from celery.concurrency import thread as celery_threads
from kombu.transport import redis as kombu_redis

from workers import publish_commands
from workers.api import header_limit
from workers.broker import PlainClientTransport, Transport, transport_path
from workers.celery_app import create_celery_app


def _versions() -> str:
    import celery
    import redis

    return f"kombu {kombu.__version__}, celery {celery.__version__}, redis-py {redis.__version__}"


@pytest.mark.parametrize("dotted", sorted(publish_commands.KOMBU_INTERNALS))
def test_the_kombu_internals_of_fast_publish_are_there(dotted):
    owner, params = publish_commands.KOMBU_INTERNALS[dotted]
    function = getattr(owner, dotted.rsplit(".", 1)[1], None)
    assert function is not None, f"{dotted} is gone in {_versions()}: see workers/publish_commands.py"
    missing = set(params) - set(inspect.signature(function).parameters)
    assert not missing, f"{dotted} lost parameters {sorted(missing)} in {_versions()}"


def test_kombus_redis_channel_still_takes_publish_batches():
    assert publish_commands.internals_present(), (
        f"kombu's Redis channel no longer collects publishes (_publish_batch) in {_versions()}: "
        "fast_publish falls back to Celery's send_task; check workers/publish_commands.py"
    )


def test_fast_publish_is_used_only_on_our_broker_channel():
    app = create_celery_app(_settings())
    assert publish_commands.collects_publishes(app)
    app.conf.broker_transport = "redis"  # kombu's own: its publishes cannot be collected
    assert not publish_commands.collects_publishes(app)


def test_the_channel_hooks_client_reuse_overrides_are_kombus():
    # workers/broker.py overrides these private methods of kombu's Redis channel.
    for name in ("_create_client", "_connparams"):
        method = getattr(kombu_redis.Channel, name, None)
        assert method is not None, f"kombu's Redis Channel.{name} is gone in {_versions()}"
        assert "asynchronous" in inspect.signature(method).parameters, (name, _versions())


def test_client_reuse_is_a_setting():
    assert transport_path(True).endswith(":Transport") and Transport.Channel.reuse_client
    assert transport_path(False).endswith(":PlainClientTransport")
    assert not PlainClientTransport.Channel.reuse_client
    assert create_celery_app(_settings(broker_client_reuse=False)).conf.broker_transport == (
        transport_path(False))


def test_celerys_thread_pool_hands_back_a_result_to_wait_on():
    # workers/thread_pool.py waits on what TaskPool.on_apply returns (the head start).
    on_apply = celery_threads.TaskPool.on_apply
    assert "target" in inspect.signature(on_apply).parameters, _versions()
    assert callable(getattr(celery_threads.ApplyResult, "wait", None)), _versions()


def test_uvicorns_httptools_protocol_is_what_the_header_limit_subclasses():
    import uvicorn

    assert header_limit.internals_present(), (
        f"uvicorn {uvicorn.__version__}'s HttpToolsProtocol changed ({header_limit.UVICORN_INTERNALS}, "
        "data_received feeding the parser): adk-celery api serves without its header limit; "
        "check workers/api/header_limit.py")


def test_without_those_internals_the_api_serves_with_uvicorns_protocol(monkeypatch, caplog):
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    capped = header_limit.protocol_class(4096)
    assert issubclass(capped, HttpToolsProtocol) and capped.max_header_bytes == 4096
    assert header_limit.protocol_class(0) == "auto"  # switched off: uvicorn's own choice
    monkeypatch.setattr(header_limit, "internals_present", lambda: False)
    assert header_limit.protocol_class(4096) == "auto"
    assert "not limited (ADK_CELERY_API_MAX_HEADER_BYTES)" in caplog.text


def _settings(**overrides):
    from config import Settings

    return Settings(redis_url="redis://127.0.0.1:1/0", **overrides)
