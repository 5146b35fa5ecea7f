"""Long sessions: what one invocation costs when its session already holds many events.

    .venv/bin/python bench/long_session.py [--large 3200] [--samples 30] [--no-adk]

The invocation is runner_overhead's (``_workload.py``): a user message, one call to a
function tool, its answer, a final text (4 events, 2 model calls). The session is filled
beforehand with events of that same shape, written straight through the session service.

- in process: ``InMemoryRunner``; p50 of invocations on a session holding ``--small``
  events (a fresh session per sample) and on one holding ``--large`` events. The same with
  google-adk 2.13's ``InMemoryRunner`` when google-adk is importable (the ``devui`` extra
  installs it), measured in the same run as the baseline.
- distributed: a fresh ``redis-server``, one ``adk-celery orchestrator`` and one worker
  (the tool runs on the orchestrator, as a function tool does); ``Client.enqueue`` then
  ``Client.wait`` until completed, at both sizes. The first invocation on the large session
  is printed apart: that orchestrator has not read the session before (a cold read).

Target (issue "One Redis back-end, explicit wiring, and long sessions that stay fast"): the
p50 at ``--large`` events is at most 5x the p50 at ``--small``, in process and distributed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _workload  # noqa: E402
from google.genai import types  # noqa: E402

TARGET_RATIO = 5.0
APP, USER = _workload.APP_NAME, _workload.USER_ID


def round_events(event_cls: type, i: int) -> list[Any]:
    """The four events of one earlier invocation, as the workload's would be."""
    inv = f"e-fill-{i}"
    call_id = f"adk-fill-{i}"

    def event(author: str, role: str, part: types.Part) -> Any:
        return event_cls(invocation_id=inv, author=author,
                         content=types.Content(role=role, parts=[part]))

    agent = "weather_agent"
    return [
        event("user", "user", types.Part(text=_workload.PROMPT)),
        event(agent, "model", types.Part(function_call=types.FunctionCall(
            id=call_id, name="get_weather", args={"city": "Paris"}))),
        event(agent, "user", types.Part(function_response=types.FunctionResponse(
            id=call_id, name="get_weather", response={"city": "Paris", "forecast": "sunny"}))),
        event(agent, "model", types.Part(text=_workload.FINAL_TEXT)),
    ]


async def fill(service: Any, event_cls: type, session_id: str, count: int) -> None:
    """Append ``count`` events (whole rounds) to the session through ``service``."""
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    for i in range(count // 4):
        for event in round_events(event_cls, i):
            await service.append_event(session, event)


# -- in process -----------------------------------------------------------------------------

async def in_process(fw: _workload.Framework, event_cls: type, small: int, large: int,
                     samples: int) -> tuple[float, float]:
    """p50 seconds of one invocation at ``small`` and at ``large`` events."""
    runner = _workload.make_runner(fw)
    service = runner.session_service

    async def invoke(session_id: str) -> float:
        start = time.perf_counter()
        async for _ in runner.run_async(user_id=USER, session_id=session_id,
                                        new_message=_workload._message()):
            pass
        return time.perf_counter() - start

    async def new_session(events: int) -> str:
        session = await service.create_session(app_name=APP, user_id=USER)
        await fill(service, event_cls, session.id, events)
        return session.id

    for _ in range(5):  # warm-up
        await invoke(await new_session(small))
    small_runs = [await invoke(await new_session(small)) for _ in range(samples)]
    big = await new_session(large)
    await invoke(big)
    large_runs = [await invoke(big) for _ in range(samples)]
    return statistics.median(small_runs), statistics.median(large_runs)


def ours_framework() -> tuple[_workload.Framework, type]:
    from bench._long_session_apps import OURS
    from orchestrator import Event

    return OURS, Event


def adk_framework() -> tuple[_workload.Framework, type] | None:
    try:
        import google.adk
        from google.adk.agents import LlmAgent
        from google.adk.events import Event
        from google.adk.models import BaseLlm, LlmCapabilities, LlmResponse
        from google.adk.runners import InMemoryRunner
        from google.adk.tools import FunctionTool
    except ImportError:
        return None
    warnings.filterwarnings("ignore", module="google.adk")
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    return _workload.Framework(
        name="google-adk", version=google.adk.__version__, LlmAgent=LlmAgent,
        InMemoryRunner=InMemoryRunner, FunctionTool=FunctionTool, BaseLlm=BaseLlm,
        LlmResponse=LlmResponse, capabilities=LlmCapabilities,
    ), Event


# -- distributed ----------------------------------------------------------------------------

def distributed(small: int, large: int, samples: int) -> tuple[float, float, float]:
    """p50 seconds at ``small`` and ``large`` events, and the large session's cold first."""
    import redis

    from bench._long_session_apps import APP_SPECS
    from config import Settings
    from orchestrator import Event
    from orchestrator.backends.redis.session_service import RedisSessionService
    from orchestrator.distributed.models import InvocationStatus
    from tests.support.processes import stack_env, start_celery_process
    from tests.support.redis_server import RedisServer, find_redis_server
    from workers.client import Client

    binary = find_redis_server()
    if binary is None:
        sys.exit("redis-server not found: apt-get install redis-server")
    server = RedisServer(binary)
    url = server.start()
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS)
    orchestrator = start_celery_process("orchestrator", "long-orch", env)
    worker = start_celery_process("worker", "long-work", env)
    client = Client(Settings(redis_url=url, apps=APP_SPECS))
    try:
        def session_with(events: int) -> str:
            session_id = client.create_session(APP, USER).id

            async def write() -> None:
                service = RedisSessionService(redis_url=url)
                try:
                    await fill(service, Event, session_id, events)
                finally:
                    await service.aclose()

            asyncio.run(write())
            return session_id

        def invoke(session_id: str) -> float:
            start = time.perf_counter()
            inv = client.enqueue(APP, USER, _workload.PROMPT, session_id=session_id)
            record = client.wait(APP, inv, timeout=120, until={InvocationStatus.COMPLETED,
                                                              InvocationStatus.FAILED})
            if record.status is not InvocationStatus.COMPLETED:
                raise RuntimeError(f"invocation ended {record.status}: {record.error}")
            return time.perf_counter() - start

        for _ in range(5):
            invoke(session_with(small))
        small_runs = [invoke(session_with(small)) for _ in range(samples)]
        big = session_with(large)
        cold = invoke(big)
        large_runs = [invoke(big) for _ in range(samples)]
        return statistics.median(small_runs), statistics.median(large_runs), cold
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()
        server.close()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def verdict(ratio: float) -> str:
    return "OK" if ratio <= TARGET_RATIO else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=8, help="events before each small run")
    parser.add_argument("--large", type=int, default=3200, help="events of the long session")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--adk-samples", type=int, default=5,
                        help="google-adk's runs at --large (each takes about a second)")
    parser.add_argument("--no-adk", action="store_true", help="skip google-adk's figures")
    parser.add_argument("--no-distributed", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    print(f"== in process: one invocation (4 events, 2 model calls, 1 tool) on a session "
          f"holding {args.small} vs {args.large} events, p50 of {args.samples} ==")
    fw, event_cls = ours_framework()
    small, large = asyncio.run(in_process(fw, event_cls, args.small, args.large, args.samples))
    ratio = large / small
    print(f"  ours:       {ms(small)} -> {ms(large)}  ratio {ratio:.1f}x "
          f"(target <= {TARGET_RATIO:.0f}x) {verdict(ratio)}")
    adk = None if args.no_adk else adk_framework()
    if adk is not None:
        adk_fw, adk_event = adk
        a_small, a_large = asyncio.run(in_process(adk_fw, adk_event, args.small, args.large,
                                                  args.adk_samples))
        print(f"  google-adk {adk_fw.version}: {ms(a_small)} -> {ms(a_large)}  ratio "
              f"{a_large / a_small:.1f}x (p50 of {args.adk_samples}; the baseline)")
        print(f"  at {args.large} events ours takes {large / a_large:.3f}x google-adk's time")
    elif not args.no_adk:
        print("  google-adk: not importable here (pip install -e '.[devui]'): no baseline")

    if args.no_distributed:
        return
    print(f"\n== distributed: 1 orchestrator + 1 worker, Client.enqueue -> completed, "
          f"p50 of {args.samples} ==")
    d_small, d_large, cold = distributed(args.small, args.large, args.samples)
    d_ratio = d_large / d_small
    print(f"  ours:       {ms(d_small)} -> {ms(d_large)}  ratio {d_ratio:.1f}x "
          f"(target <= {TARGET_RATIO:.0f}x) {verdict(d_ratio)}")
    print(f"  first invocation on the long session (the orchestrator reads it whole): "
          f"{ms(cold)}")


if __name__ == "__main__":
    main()
