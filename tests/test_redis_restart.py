"""Orchestrators and workers ride out a Redis restart: nobody exits, work goes on after it.

Each test runs a redis-server of its own (the session's shared server must stay up), one
orchestrator and one worker. An invocation with a remote long-running tool runs to
completion, so every connection is in use; a second one is left with its tool running (its
job unacknowledged) on the worker. Redis then goes away while both processes are connected:
a clean ``SHUTDOWN`` or a crash (``SIGKILL``). The data is saved first (``SAVE``: what
persistence keeps across a restart), so the restarted server has the invocations, sessions
and the wake stream's consumer group. The test waits until both processes have noticed the
outage (their Celery consumers log it) and starts Redis again on the same port, with the same
data directory. Then both processes must still be running, the invocation that was under way
must finish, and a new one, sent as a Celery task (so the orchestrator's own Celery consumer
must be back too), must complete through them, in bounded time.

The worker is ``adk-celery worker`` (its threads pool) or a plain
``celery -A workers worker --pool threads`` (Celery's own pool): both used to exit, on
kombu's ``AttributeError`` while closing the channel that held the unacknowledged job.

Faster tests check the parts alone. The project's own Redis client (``connect``): after a
restart, the first command on a pooled connection the server closed used to fail with
``ConnectionError: Connection closed by server``; a script, a transaction and a plain command
must all go through. The broker channel (``workers.broker``): closed once its transport is
detached from its connection, as Celery's consumer leaves it after losing the broker, it
must put its unacknowledged message back in the queue instead of raising AttributeError.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime

import pytest
import redis
from kombu import Connection, Exchange, Producer, Queue

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.connection import connect
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from tests.apps_extra import APP_SPECS, gate_key, runs_key
from tests.support.processes import FAST_WORKER_FLAGS, ManagedProcess, stack_env, start_celery_process
from tests.support.redis_server import RedisServer, find_redis_server, send_command
from workers.client import Client

WAIT_SECONDS = 30.0
"""Bound on one invocation and on noticing the outage (both take a few seconds at most)."""

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="redis-server is not installed")


def _lost_broker(line: str) -> bool:
    # Celery's consumer logs one of these when its broker connection fails.
    return "Connection to broker lost" in line or "Cannot connect to" in line


def _reconnected(line: str) -> bool:
    return "Connected to" in line


def _logged_at(line: str) -> float:
    """The time a Celery log line was written (``[2025-01-31 12:00:00,123: INFO/...``)."""
    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _shutdown(server: RedisServer) -> None:
    server.stop()  # SHUTDOWN NOSAVE: the data was saved just before


def _kill(server: RedisServer) -> None:
    server.kill()  # SIGKILL: every connection drops at once


def _adk_worker(env: dict[str, str]) -> ManagedProcess:
    return start_celery_process("worker", "restart-work", env)


def _plain_celery_worker(env: dict[str, str]) -> ManagedProcess:
    argv = [
        sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", "adk.tools",
        "--pool", "threads", "--concurrency", "4", "--hostname", "restart-plain@%h",
        "--loglevel", "INFO", "-E", *FAST_WORKER_FLAGS,
    ]
    process = ManagedProcess("restart-plain", argv, env)
    process.wait_for_line(lambda line: "ready." in line)
    return process


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, on a free port (restarted on the same one)."""
    handle = RedisServer()
    handle.start()
    try:
        yield handle
    finally:
        handle.close()


def _wait(client: Client, app: str, inv: str, *processes: ManagedProcess) -> InvocationRecord:
    """The invocation's finished record; on a timeout, fail with the processes' output."""
    try:
        return client.wait(app, inv, timeout=WAIT_SECONDS, until=InvocationStatus.FINISHED)
    except TimeoutError as error:
        outputs = "\n\n".join(f"--- {p.name} (exit code {p.proc.poll()}):\n{p.output()}" for p in processes)
        raise AssertionError(f"{error}\n{outputs}") from error


def _run_gated(client: Client, check: redis.Redis, label: str, *processes: ManagedProcess) -> None:
    """One invocation of the gated app (a remote long-running tool), released at once."""
    inv = client.enqueue("gated", "u", f"go {label}")
    check.lpush(gate_key(inv), "test")  # the tool pops it when it runs: it does not wait
    record = _wait(client, "gated", inv, *processes)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert client.events("gated", inv)[-1].content.parts[0].text == f"gated {label} released=True by test"


@pytest.mark.parametrize("outage", [_shutdown, _kill], ids=["shutdown", "kill-9"])
@pytest.mark.parametrize("start_worker", [_adk_worker, _plain_celery_worker], ids=["adk-worker", "celery-threads"])
def test_orchestrator_and_worker_ride_out_a_redis_restart(
    server: RedisServer,
    outage: Callable[[RedisServer], None],
    start_worker: Callable[[dict[str, str]], ManagedProcess],
) -> None:
    url = server.url
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2")
    settings = Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2)

    with ExitStack() as stack:
        # SIGKILL at the end: what is checked happened before, a warm shutdown only adds time.
        orchestrator = start_celery_process("orchestrator", "restart-orch", env)
        stack.callback(orchestrator.kill)
        worker = start_worker(env)
        stack.callback(worker.kill)
        processes = (orchestrator, worker)
        client = Client(settings)
        stack.callback(client.close)
        via_celery = Client(settings, enqueue_via_celery=True)
        stack.callback(via_celery.close)
        # Longer BLPOPs than redis-py's 5 s socket timeout; a synchronous pool replaces a
        # connection the server closed when it hands it out, so this one works after the restart.
        check = redis.Redis.from_url(url, decode_responses=True, socket_timeout=WAIT_SECONDS + 5)
        stack.callback(check.close)

        _run_gated(client, check, "before", *processes)
        under_way = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(under_way)], timeout=WAIT_SECONDS)
        assert started is not None, worker.output()  # its tool is running: the job is unacked

        assert server.port is not None
        send_command(server.port, "SAVE", timeout=10)
        outage(server)
        for process in processes:
            process.wait_for_line(_lost_broker, timeout=WAIT_SECONDS)
        server.start()  # the same port and data directory
        restarted, restarted_at = time.monotonic(), time.time()

        # The tool under way lost its own Redis connection: it ends, released or not; its
        # answer is stored and the invocation resumes and finishes, answered once.
        check.lpush(gate_key(under_way), "test")
        record = _wait(client, "fragile", under_way, *processes)
        assert record.status is InvocationStatus.COMPLETED, record.error
        responses = [r for e in client.events("fragile", under_way) for r in e.get_function_responses()]
        assert [r.id for r in responses] == [started[1].split()[1]]

        _run_gated(via_celery, check, "after", *processes)  # through the orchestrator's Celery consumer
        done = time.monotonic() - restarted
        back = [_logged_at(p.wait_for_line(_reconnected, timeout=1)) - restarted_at for p in processes]
        print(f"\nafter Redis restarted: Celery consumers back in {back[0]:.2f} s (orchestrator), "
              f"{back[1]:.2f} s (worker); both invocations done in {done:.2f} s")

        for process in processes:
            assert process.proc.poll() is None, process.output()
            assert not [line for line in process.lines if "Unrecoverable error" in line], process.output()


@pytest.mark.parametrize("outage", [_shutdown, _kill], ids=["shutdown", "kill-9"])
async def test_the_project_redis_client_reconnects_after_a_restart(
    server: RedisServer, outage: Callable[[RedisServer], None]
) -> None:
    client = connect(server.url)
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    try:
        assert await script(keys=["n"]) == 1
        for round_ in range(2):  # every connection the pool holds was closed by the server
            assert server.port is not None
            send_command(server.port, "SAVE", timeout=10)
            outage(server)
            await asyncio.to_thread(server.start)
            assert await script(keys=["n"]) == 2 + round_ * 3  # Redis forgot the script: reloaded
            async with client.pipeline(transaction=True) as pipe:
                pipe.incr("n").incr("n")
                assert await pipe.execute() == [3 + round_ * 3, 4 + round_ * 3]
            assert await client.get("n") == str(4 + round_ * 3)
    finally:
        await client.aclose()


def test_a_broker_channel_closed_after_losing_its_connection_requeues_its_unacked_message(
    server: RedisServer,
) -> None:
    check = redis.Redis.from_url(server.url, decode_responses=True)
    connection = Connection(server.url, transport="workers.broker:Transport")
    try:
        channel = connection.channel()
        queue = Queue("adk-test-jobs", Exchange("adk-test-jobs", type="direct"), "adk-test-jobs")
        Producer(channel).publish({"job": 1}, exchange=queue.exchange, routing_key=queue.routing_key,
                                  declare=[queue])
        message = queue(channel).get(no_ack=False)  # delivered, not acknowledged: a running job
        assert message is not None and check.llen("adk-test-jobs") == 0
        # What Celery's consumer leaves after losing the broker: kombu's Connection.collect()
        # detached the transport (its channels could not be closed while Redis was down).
        connection.transport.client = None
        channel.close()  # puts the unacknowledged message back (it raised AttributeError)
        assert check.llen("adk-test-jobs") == 1
        assert check.hlen("unacked") == 0
        message.ack()  # the job ends after the reconnect and acks on its old channel
    finally:
        connection.release()
        check.close()


def test_a_job_running_through_an_outage_longer_than_its_silence_limit_is_not_run_again(
    server: RedisServer,
) -> None:
    """No worker can beat while Redis is away: the silence of an outage is not taken for a
    dead worker (the watchdog gives jobs their time to beat again once Redis is back)."""
    url = server.url
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2", job_heartbeat_seconds="1",
                    watchdog_interval_seconds="0.1")  # taken for dead after 3 s of silence
    with ExitStack() as stack:
        orchestrator = start_celery_process("orchestrator", "outage-orch", env)
        stack.callback(orchestrator.kill)
        worker = _adk_worker(env)
        stack.callback(worker.kill)
        client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2))
        stack.callback(client.close)
        check = redis.Redis.from_url(url, decode_responses=True, socket_timeout=WAIT_SECONDS + 5)
        stack.callback(check.close)

        inv = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(inv)], timeout=WAIT_SECONDS)
        assert started is not None, worker.output()
        assert server.port is not None
        send_command(server.port, "SAVE", timeout=10)
        _kill(server)
        for process in (orchestrator, worker):
            process.wait_for_line(_lost_broker, timeout=WAIT_SECONDS)
        time.sleep(4.0)  # the outage: longer than the silence limit
        server.start()

        record = _wait(client, "fragile", inv, orchestrator, worker)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert check.llen(runs_key(inv)) == 0  # started once (popped above)
        call_id = started[1].split()[1]
        assert check.hget(keys.invocation_jobs("fragile", inv), f"a:{call_id}") == "1"
        assert not [line for line in orchestrator.lines if "dispatching attempt" in line]
