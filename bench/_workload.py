"""The runner-overhead workload, written once and run by both frameworks.

This module imports neither google-adk nor ``orchestrator``: ``_adk_side.py`` (run by the ADK
venv's python) and ``_ours_side.py`` (run by ours) import their framework's classes, put them
in a :class:`Framework` and call :func:`main`. Both sides therefore build the same agent, the
same tool, the same scripted model and run the same timing loop; only the classes differ.

One invocation: create a fresh session, send one user message, drain ``run_async``. The model
answers with ``FunctionCall(get_weather)`` when the last content holds no function response and
with a final text otherwise, so each invocation yields 3 events (call, response, text) and makes
2 model calls. The tool writes ``tool_context.state``. The session is deleted afterwards so
memory stays flat over any number of invocations.

Output (standalone mode): one JSON line on stdout with the event shape of one invocation and,
per repeat, the throughput and every per-invocation latency. ``--serve`` mode prints the same
pieces as several JSON lines, one repeat per request (see :func:`_serve`).
"""

# No ``from __future__ import annotations``: the model class is built inside a function from
# the framework's BaseLlm, and pydantic must resolve its annotations from real objects.

import argparse
import asyncio
import gc
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.genai import types

APP_NAME = "runner_overhead"
USER_ID = "bench-user"
PROMPT = "What is the weather in Paris?"
FINAL_TEXT = "It is sunny in Paris, 21 C."
EVENTS_PER_INVOCATION = 3

# Filled only while the event-shape check runs, so the timed loop keeps no requests alive.
_MODEL_SAW: list[list[str]] | None = None


@dataclass
class Framework:
    """The classes one side runs the workload with."""

    name: str
    version: str
    LlmAgent: type
    InMemoryRunner: type
    FunctionTool: type
    BaseLlm: type
    LlmResponse: type
    capabilities: Callable[[], Any] | None = None
    """ADK 2.13 wants BaseLlm subclasses to override ``capabilities``; None where unused."""


def get_weather(city: str, tool_context) -> dict:  # both frameworks find tool_context by name
    """Return the current weather for a city.

    Args:
        city: The city to look up.
    """
    tool_context.state["last_city"] = city
    return {"city": city, "forecast": "sunny", "temp_c": 21}


def _part_kind(part: types.Part) -> str:
    if part.function_call:
        return f"call({part.function_call.name},{dict(part.function_call.args or {})})"
    if part.function_response:
        fr = part.function_response
        return f"resp({fr.name},{dict(fr.response or {})})"
    if part.text is not None:
        return f"text({part.text!r})"
    return "other"


def _answer(contents: list[types.Content]) -> types.Content:
    """The script: call get_weather unless the last content answers a call; then final text."""
    last = contents[-1] if contents else None
    if last is not None and any(p.function_response for p in last.parts or []):
        return types.Content(role="model", parts=[types.Part(text=FINAL_TEXT)])
    call = types.FunctionCall(name="get_weather", args={"city": "Paris"})
    return types.Content(role="model", parts=[types.Part(function_call=call)])


def make_model(fw: Framework) -> Any:
    """A BaseLlm subclass of ``fw`` that plays the script; no network, no shared state."""
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=0, candidates_token_count=0, total_token_count=0
    )

    class BenchScriptedLlm(fw.BaseLlm):  # type: ignore[name-defined, misc]
        model: str = "bench-scripted"

        if fw.capabilities is not None:

            @property
            def capabilities(self) -> Any:
                return fw.capabilities()

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            contents = list(llm_request.contents or [])
            if _MODEL_SAW is not None:
                _MODEL_SAW.append(
                    [f"{c.role}:{'+'.join(_part_kind(p) for p in c.parts or [])}" for c in contents]
                )
            yield fw.LlmResponse(content=_answer(contents), usage_metadata=usage)

    return BenchScriptedLlm()


def make_runner(fw: Framework) -> Any:
    """The same agent on both sides: one FunctionTool, the scripted model."""
    agent = fw.LlmAgent(
        name="weather_agent",
        model=make_model(fw),
        instruction="Answer weather questions with the get_weather tool.",
        tools=[fw.FunctionTool(get_weather)],
    )
    return fw.InMemoryRunner(agent=agent, app_name=APP_NAME)


def _message() -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=PROMPT)])


async def _invoke(runner: Any) -> tuple[float, int, str]:
    """One timed invocation: create_session + drain run_async. Returns (seconds, events, id)."""
    message = _message()
    start = time.perf_counter()
    session = await runner.session_service.create_session(app_name=APP_NAME, user_id=USER_ID)
    count = 0
    async for _event in runner.run_async(
        user_id=USER_ID, session_id=session.id, new_message=message
    ):
        count += 1
    return time.perf_counter() - start, count, session.id


async def _delete(runner: Any, session_id: str) -> None:
    await runner.session_service.delete_session(
        app_name=APP_NAME, user_id=USER_ID, session_id=session_id
    )


async def event_shape(runner: Any) -> dict[str, Any]:
    """One invocation described field by field, to check both sides do the same work."""
    global _MODEL_SAW
    _MODEL_SAW = []
    try:
        session = await runner.session_service.create_session(app_name=APP_NAME, user_id=USER_ID)
        events = []
        async for event in runner.run_async(
            user_id=USER_ID, session_id=session.id, new_message=_message()
        ):
            content = event.content
            events.append(
                {
                    "author": event.author,
                    "role": content.role if content else None,
                    "parts": [_part_kind(p) for p in (content.parts or [])] if content else [],
                    "is_final_response": bool(event.is_final_response()),
                    "partial": bool(event.partial),
                    "state_delta": dict(event.actions.state_delta or {}),
                }
            )
        stored = await runner.session_service.get_session(
            app_name=APP_NAME, user_id=USER_ID, session_id=session.id
        )
        await _delete(runner, session.id)
        return {
            "events": events,
            "stored_events": len(stored.events),
            "session_state": dict(stored.state),
            "model_saw": _MODEL_SAW,
        }
    finally:
        _MODEL_SAW = None


def _rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def run_repeat(runner: Any, invocations: int) -> dict[str, Any]:
    """N sequential invocations, each in a fresh session that is deleted after it."""
    latencies = []
    gc.collect()
    wall_start = time.perf_counter()
    for _ in range(invocations):
        seconds, count, session_id = await _invoke(runner)
        await _delete(runner, session_id)
        if count != EVENTS_PER_INVOCATION:
            raise RuntimeError(f"expected {EVENTS_PER_INVOCATION} events, got {count}")
        latencies.append(seconds)
    wall = time.perf_counter() - wall_start
    return {
        "throughput": invocations / wall,
        "wall_s": wall,
        "latencies_ms": [round(s * 1000, 4) for s in latencies],
    }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


async def _warm_up(fw: Framework, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Build the runner, run the warm-up and the event-shape check; return (runner, header)."""
    runner = make_runner(fw)
    first_start = time.perf_counter()
    _seconds, _count, session_id = await _invoke(runner)
    await _delete(runner, session_id)
    first_ms = (time.perf_counter() - first_start) * 1000
    for _ in range(max(args.warmup - 1, 0)):
        _seconds, _count, session_id = await _invoke(runner)
        await _delete(runner, session_id)
    header = {
        "framework": fw.name,
        "version": fw.version,
        "python": sys.version.split()[0],
        "invocations": args.invocations,
        "warmup": args.warmup,
        "first_invocation_ms": round(first_ms, 2),
        "shape": await event_shape(runner),
        "max_rss_mb_after_warmup": _rss_mb(),
    }
    return runner, header


async def _timed_repeat(runner: Any, args: argparse.Namespace, profiler: Any = None) -> dict:
    if profiler is not None:
        profiler.enable()
    result = await run_repeat(runner, args.invocations)
    if profiler is not None:
        profiler.disable()
    result["p50_ms"] = statistics.median(result["latencies_ms"])
    result["p99_ms"] = percentile(result["latencies_ms"], 99)
    return result


async def _run_all(fw: Framework, args: argparse.Namespace) -> dict[str, Any]:
    """Standalone mode: warm-up, then every repeat back to back; one JSON result."""
    runner, header = await _warm_up(fw, args)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    repeats = [await _timed_repeat(runner, args, profiler) for _ in range(args.repeats)]
    if profiler is not None:
        profiler.dump_stats(args.profile)
    return {**header, "repeats": repeats, "max_rss_mb_end": _rss_mb()}


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def _serve(fw: Framework, args: argparse.Namespace) -> None:
    """Serve mode: warm up, print a ``ready`` line, then one repeat per ``repeat`` line on stdin.

    The parent alternates the two sides repeat by repeat, so a drift in the machine's load
    hits both sides alike; the idle side waits on stdin and uses no CPU.
    """
    runner, header = await _warm_up(fw, args)
    _emit({"kind": "ready", **header})
    while (command := sys.stdin.readline().strip()) == "repeat":
        _emit({"kind": "repeat", **await _timed_repeat(runner, args)})
    _emit({"kind": "done", "command": command, "max_rss_mb_end": _rss_mb()})


def main(fw: Framework, argv: list[str] | None = None) -> None:
    """Parse the side's options and run the workload (standalone or serve mode)."""
    parser = argparse.ArgumentParser(description=f"runner_overhead workload on {fw.name}")
    parser.add_argument("--invocations", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3, help="standalone mode only")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--profile", metavar="PSTATS", help="cProfile the timed loop into PSTATS")
    parser.add_argument(
        "--serve", action="store_true", help="run one repeat per 'repeat' line on stdin"
    )
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(fw, args))
    else:
        _emit(asyncio.run(_run_all(fw, args)))
