"""Job bookkeeping run twice after a lost reply (see tests/test_lost_replies.py): the job
watchdog's count of a call's dead attempts, and a job's publication on the slow path."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.jobs import COUNT_ATTEMPT, PUBLISH, watch_member
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.distributed.models import ToolJob

JOB = ToolJob(app_name="a", user_id="u", session_id="s", invocation_id="e-1",
              function_call_id="c1", tool_name="t", agent_name="agent", queue="tools")


class _Sent:
    """Stands in for the Celery transport (the watchdog) or app (the transport): what went out."""

    def __init__(self) -> None:
        self.jobs: list[Any] = []
        self.app = SimpleNamespace(backend=None)  # the transport's app: no result backend

    async def submit(self, job: Any) -> None:
        self.jobs.append(job)

    def send_task(self, name: str, **options: Any) -> None:
        self.jobs.append((name, options))


@pytest.mark.parametrize(("max_attempts", "again"), [(1, []), (2, [2])])
async def test_a_dead_attempt_counted_by_a_lost_reply_counts_once(
        proxied, redis_client, redis_url, max_attempts, again):
    from workers.watchdog import JobWatchdog

    proxy, client = proxied
    sent = _Sent()
    settings = Settings(redis_url=redis_url, tool_max_attempts=max_attempts)
    services = SimpleNamespace(redis=client, store=RedisInvocationStore(client),
                               queue=RedisSessionQueue(client))
    dog = JobWatchdog(services, sent, settings)  # type: ignore[arg-type]
    jobs = keys.invocation_jobs("a", "e-1")
    await redis_client.hset(jobs, mapping={  # attempt 1 ran on a worker gone silent
        "a:c1": "1", "c:c1": json.dumps({"queue": "tools", "job": JOB.model_dump(mode="json")}),
        "r:c1": json.dumps({"state": "running", "worker": "w", "beat": 1.0, "attempt": 1})})
    await redis_client.zadd(keys.job_watch(settings.invocations_queue),
                            {watch_member("a", "e-1", "c1"): 0})
    await redis_client.script_load(COUNT_ATTEMPT.source)
    proxy.needle = COUNT_ATTEMPT.register(client).sha.encode()
    dog._seeing_since = 0.0

    await dog.sweep(now=time.time())

    assert proxy.lost == 1
    assert await redis_client.hget(jobs, "k:c1") == "1"  # one death, counted once
    assert [job.attempt for job in sent.jobs] == again  # a new attempt while attempts are left
    answered = await redis_client.hexists(keys.invocation_results("a", "e-1"), "c1")
    assert answered == (not again)  # else the call is answered with the error


async def test_a_job_journaled_by_a_lost_reply_is_sent_once(proxied, redis_client, redis_url):
    # Slow path (fast publish off; TLS and Sentinel brokers always): the script journals the
    # job, then the caller sends its message. Run twice, it found attempt 1 out and said "not
    # mine to send": journaled as out, never sent, and while the tools queue held any other
    # message the watchdog took it for queued (the invocation waited for ever).
    from workers.transport import CeleryTransport

    proxy, client = proxied
    sent = _Sent()
    transport = CeleryTransport(sent, Settings(redis_url=redis_url, fast_publish=False),  # type: ignore[arg-type]
                                client)
    await redis_client.script_load(PUBLISH.source)
    proxy.needle = PUBLISH.register(client).sha.encode()

    await transport.submit(JOB)

    assert proxy.lost == 1
    assert await redis_client.hget(keys.invocation_jobs("a", "e-1"), "a:c1") == "1"
    assert [name for name, _ in sent.jobs] == ["adk_celery.run_tool"]


async def test_a_publication_run_again_after_a_progress_report_still_knows_it_published(
        proxied, redis_client):
    # The publication's name and a call's latest progress report shared one journal field
    # (p:<call id>): a report landing between the two runs made the second one say "not
    # published" for a job that went out.
    from orchestrator.backends.redis.jobs import PublishOnce, job_publish
    from orchestrator.backends.redis.progress import REPORT, report_operands

    proxy, client = proxied
    publish = PUBLISH.register(client)
    await redis_client.xadd(keys.invocation_stream("a", "e-1"), {"kind": "status"})
    operands = PublishOnce(jobs=keys.invocation_jobs("a", "e-1"), watch="adk:watch:{t}",
                           job=job_publish(
        call_id="c1", attempt=1, dispatch={"queue": "tools"}, ttl=60,
        member=watch_member("a", "e-1", "c1"), look_after=0, timeout=None, digest="d",
        commands=[("lpush", ("celery:tools", "msg"))]).flat())

    async def worker_reports_meanwhile() -> None:
        await REPORT.register(redis_client)(
            report_operands("a", "e-1", "c1", 1, "t", 1.0, {"pct": 5}))

    await redis_client.script_load(PUBLISH.source)
    proxy.needle = publish.sha.encode()
    proxy.on_lost = worker_reports_meanwhile

    assert await publish(operands) == 1
    assert proxy.lost == 1
    assert await redis_client.lrange("celery:tools", 0, -1) == ["msg"]  # sent once
