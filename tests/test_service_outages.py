"""Redis away under a service a tool calls (artifacts) is not the tool's failure.

A tool that saves an artifact while Redis is away gets a ``ServiceUnavailableError``. If it
lets it through, the call is not answered with that error (the model would read an outage as
the tool's verdict): the tool runs again once Redis answers, on a worker as on the
orchestrator, and its own answer is the one committed. The ``artifacts.call`` failpoint fails
the first artifact call of the process as a dropped connection would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from orchestrator.errors import ServiceUnavailableError, raised_by_service
from tests.apps_artifacts import starts_key
from tests.support.processes import stack_env, start_celery_process

SPECS = "tests.apps_artifacts:reports_app,tests.apps_artifacts:local_reports_app"


@contextmanager
def _stack(redis_url: str, db: int, **failpoints: str) -> Iterator[tuple[redis.Redis, object]]:
    """An orchestrator and a worker on db ``db`` (flushed), each with its failpoints."""
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    with ExitStack() as stack:
        stack.callback(check.close)
        for role in ("orchestrator", "worker"):
            env = stack_env(url, SPECS, lease_retry_seconds="0.2",
                            failpoints=failpoints.get(role, ""))
            process = start_celery_process(role, f"{role}-{db}", env)
            stack.callback(process.stop)
        client = Client(Settings(redis_url=url, apps=SPECS))
        stack.callback(client.close)
        yield check, client


def _answers(client, app: str, invocation_id: str) -> list[dict]:
    return [r.response for e in client.events(app, invocation_id)
            for r in e.get_function_responses()]


@pytest.mark.parametrize(("app", "role", "db"), [("reports", "worker", 4),
                                                ("local_reports", "orchestrator", 5)])
def test_a_tool_whose_artifact_save_meets_redis_away_runs_again_and_answers_itself(
        redis_url, app, role, db):
    with _stack(redis_url, db, **{role: "artifacts.call=error*1"}) as (check, client):
        inv = client.enqueue(app, "u", "q3")
        record = client.wait(app, inv, timeout=30, until=InvocationStatus.FINISHED)

        assert record.status is InvocationStatus.COMPLETED, record.error
        assert _answers(client, app, inv) == [{"version": 0}]  # one answer, the tool's own
        assert check.get(starts_key(inv)) == "2"  # the first run met the outage
        final = client.events(app, inv)[-1]
        assert final.content.parts[0].text == "saved version 0"


def test_an_outage_stays_visible_through_a_tool_that_wraps_it():
    try:
        try:
            raise ServiceUnavailableError("Redis away")
        except ServiceUnavailableError:
            raise RuntimeError("my tool failed")  # noqa: B904  (wrapped by __context__ only)
    except RuntimeError as error:
        assert raised_by_service(error)
    assert not raised_by_service(ConnectionError("the tool's own Redis"))


def test_an_answer_that_meets_redis_away_is_stored_with_its_resume_or_not_at_all(celery_stack):
    """An answer stored without its resume left the invocation paused for ever: every later
    answer was refused as a second one. The answer and its resume are one write now."""
    from orchestrator import failpoints
    from orchestrator.errors import AnswerRejectedError

    client = celery_stack["client"]
    inv = client.enqueue("approval", "outage", "pay 100")
    record = client.wait("approval", inv, timeout=15)
    assert record.status is InvocationStatus.PAUSED
    call = record.pending_calls[0]

    failpoints.arm("queue.push=error*1")  # this (client) process only
    try:
        with pytest.raises(ConnectionError):
            client.answer("approval", inv, call, {"approved": True})
    finally:
        failpoints.disarm()
    try:
        client.answer("approval", inv, call, {"approved": True})  # the caller tries again
    except AnswerRejectedError as error:
        pytest.fail(f"the retried answer was refused: {error}")

    record = client.wait("approval", inv, timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert _answers(client, "approval", inv) == [{"approved": True}]
