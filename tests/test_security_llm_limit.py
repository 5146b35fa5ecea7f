"""``max_llm_calls`` is per invocation: pauses, resumes and a crash do not reset it."""

from __future__ import annotations

import pytest
import redis

from config import Settings
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.process_setup import configure_core, core_defaults
from tests.apps_limits import endless_app
from tests.support.processes import stack_env, start_celery_process

LIMIT = 5
SPECS = "tests.apps_limits:endless_app"


def model_calls(events) -> int:
    return sum(1 for e in events if e.author == "agent" and e.get_function_calls())


@pytest.fixture(scope="module")
def limited_stack(redis_url):
    """Redis db 9: an orchestrator and a worker with max_llm_calls = 5."""
    url = redis_url.rsplit("/", 1)[0] + "/9"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, SPECS, lease_retry_seconds="0.2", max_llm_calls=str(LIMIT))
    orchestrator = start_celery_process("orchestrator", "limit-orch", env)
    worker = start_celery_process("worker", "limit-work", env)
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=SPECS))
    try:
        yield {"client": client, "orchestrator": orchestrator}
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()


def test_the_limit_holds_across_remote_tool_resumes(limited_stack):
    client = limited_stack["client"]
    invocation_id = client.enqueue("endless", "u", "read everything")

    record = client.wait("endless", invocation_id, timeout=60, until=InvocationStatus.FINISHED)

    assert record.status is InvocationStatus.FAILED
    assert record.error == (f"LlmCallsLimitExceededError: Max number of llm calls limit of "
                            f"`{LIMIT}` exceeded")
    assert model_calls(client.events("endless", invocation_id)) == LIMIT


async def test_the_limit_holds_across_resumes_in_the_embedded_runtime():
    before = core_defaults()
    configure_core(Settings(max_llm_calls=LIMIT))  # RunConfig's default limit: the process's
    try:
        runtime = EmbeddedRuntime(AppRegistry([endless_app]))
        invocation_id = await runtime.enqueue(app_name="endless", user_id="u", new_message="go")
        record = await runtime.wait("endless", invocation_id, timeout=30, until=InvocationStatus.FINISHED)
    finally:
        configure_core(before)

    assert record.status is InvocationStatus.FAILED
    assert "LlmCallsLimitExceededError" in (record.error or "")
    assert model_calls(await runtime.events("endless", invocation_id)) == LIMIT
