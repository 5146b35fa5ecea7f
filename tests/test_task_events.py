"""Task events sent for Flower by code of ours (a tool's progress, a dead attempt's end).

A Redis of its own, restarted mid-test, and a real Celery event receiver: an event that
cannot reach the broker is logged (not kept back in memory where nothing would send it, as
Celery's default dispatcher does), and the events after the broker is back arrive.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from config import Settings
from tests.support.redis_server import RedisServer, find_redis_server, free_port
from workers.celery_app import create_celery_app
from workers.task_events import TaskEvents

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")


class _Flower:
    """Receives ``task-progress`` events as Flower does (a Celery event receiver)."""

    def __init__(self, app: Any) -> None:
        self.seen: list[int] = []
        self._arrived = threading.Condition()
        self._app, self._stop = app, threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._listening = threading.Event()
        self._thread.start()
        assert self._listening.wait(10), "the receiver did not start"

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                with self._app.connection_for_read() as connection:
                    receiver = self._app.events.Receiver(
                        connection, handlers={"task-progress": self._on_event})
                    for _ in receiver.consume(limit=None, timeout=0.2, wakeup=False):
                        self._listening.set()
                        if self._stop.is_set():
                            return
            except Exception:  # the broker away: listen again once it is back
                self._stop.wait(0.1)

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._arrived:
            self.seen.append(int(event["n"]))
            self._arrived.notify_all()

    def wait_for(self, n: int) -> list[int]:
        with self._arrived:
            assert self._arrived.wait_for(lambda: n in self.seen, timeout=10), self.seen
            return list(self.seen)

    def wait_for_any(self, n: int, timeout: float) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: n in self.seen, timeout=timeout)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def restartable() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_an_event_sent_while_the_broker_is_down_is_logged_and_later_ones_arrive(
    restartable: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_celery_app(Settings(redis_url=restartable.url))
    flower = _Flower(app)
    events = TaskEvents(app, "worker@test")
    try:
        assert events.send("task-progress", uuid="t-1", n=1)
        flower.wait_for(1)  # before: the receiver sees the first

        restartable.stop()
        with caplog.at_level("WARNING", logger="workers.task_events"):
            assert not events.send("task-progress", uuid="t-1", n=2)  # returns; nothing raised
        [record] = [r for r in caplog.records if r.name == "workers.task_events"]
        assert "The task-progress event of task t-1 was not sent" in record.getMessage()

        restartable.start()  # same port: the sender reconnects by itself
        # Events go by Redis PUBLISH: one sent before the receiver subscribed again is
        # missed, so send until one arrives.
        for n in range(3, 100):
            assert events.send("task-progress", uuid="t-1", n=n)
            if flower.wait_for_any(n, 0.5):
                break
        assert 2 not in flower.seen and len(flower.seen) >= 2
    finally:
        events.close()
        flower.close()
        app.close()


def test_a_broker_out_of_reach_never_raises_to_the_sender(caplog: pytest.LogCaptureFixture) -> None:
    app = create_celery_app(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    events = TaskEvents(app, "worker@test")
    try:
        with caplog.at_level("WARNING", logger="workers.task_events"):
            assert events.send("task-progress", uuid="t-9", progress={}) is False
    finally:
        events.close()
        app.close()
    assert any("task-progress event of task t-9 was not sent" in r.getMessage()
               for r in caplog.records)
