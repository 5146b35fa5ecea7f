"""Fan-out: 8 tool calls that each wait 0.5 s, against google-adk's InMemoryRunner.

    .venv/bin/python bench/fan_out.py [--repeats 5] [--adk-python PATH] [--no-workers]

Rows (wall time of one invocation, median of the repeats; ideal 0.5 s):
- google-adk 2.13, InMemoryRunner, async tools: the 8 calls of one turn, and 8 ParallelAgent
  branches of one call each (the baseline, measured in the same run);
- ours in process, sync tools (``time.sleep``): the same two shapes;
- ours in process, sync tools on a pool the size of Python's default executor (cores + 4):
  how it was before sync tools got a pool of their own;
- ours on workers: the 8 branches as jobs (a resumable app), and the 8 calls of one turn as
  remote tool jobs, with one worker process (threads pool, default concurrency 8) and one
  orchestrator on a fresh redis-server.
google-adk runs in this process when importable, else under ``--adk-python``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._fan_out_workload import CALLS, WAIT, Framework, measure  # noqa: E402

TARGET = 0.6
SHAPES = ("turn", "branches")


def adk_framework() -> Framework:
    """google-adk's classes (raises ImportError without google-adk)."""
    import logging
    import warnings

    from google.adk.agents import LlmAgent, ParallelAgent
    from google.adk.models import BaseLlm, LlmCapabilities, LlmResponse
    from google.adk.runners import InMemoryRunner

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    return Framework(name="google-adk", LlmAgent=LlmAgent, ParallelAgent=ParallelAgent,
                     InMemoryRunner=InMemoryRunner, BaseLlm=BaseLlm, LlmResponse=LlmResponse,
                     capabilities=LlmCapabilities)


def our_framework(threads: int | None = None) -> Framework:
    """Ours; ``threads`` gives the runs a tool pool of that size (RunConfig)."""
    from orchestrator import InMemoryRunner, LlmAgent, LlmResponse, ParallelAgent, RunConfig
    from orchestrator.agents.run_config import ToolThreadPoolConfig
    from orchestrator.models import BaseLlm

    run_config = None if threads is None else RunConfig(
        tool_thread_pool_config=ToolThreadPoolConfig(max_workers=threads))
    return Framework(name="ours", LlmAgent=LlmAgent, ParallelAgent=ParallelAgent,
                     InMemoryRunner=InMemoryRunner, BaseLlm=BaseLlm, LlmResponse=LlmResponse,
                     run_config=run_config)


def adk_side(repeats: int) -> dict[str, list[float]]:
    """google-adk's rows: async tools, both shapes."""
    fw = adk_framework()
    return {shape: [measure(fw, shape, sync=False) for _ in range(repeats)] for shape in SHAPES}


def adk_rows(repeats: int, adk_python: str | None) -> dict[str, list[float]] | None:
    if adk_python is None:
        try:
            return adk_side(repeats)
        except ImportError:
            print("google-adk is not importable here: pass --adk-python (a python with "
                  "google-adk==2.13.0) for the baseline")
            return None
    out = subprocess.run([adk_python, __file__, "--side", "adk", "--repeats", str(repeats)],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.splitlines()[-1])


def worker_rows(repeats: int) -> dict[str, list[float]]:
    """Ours on a worker: one orchestrator, one worker, a fresh redis-server."""
    import redis

    from bench._fan_out_apps import APP_SPECS
    from config import Settings
    from orchestrator.distributed.models import InvocationStatus
    from tests.support.processes import stack_env, start_celery_process
    from tests.support.redis_server import find_redis_server, redis_server
    from workers.client import Client

    binary = find_redis_server()
    if binary is None:
        print("redis-server not found: no worker rows (apt-get install redis-server)")
        return {}
    rows: dict[str, list[float]] = {}
    with redis_server(binary) as base_url:
        url = base_url.rsplit("/", 1)[0] + "/1"
        redis.Redis.from_url(url).flushdb()
        env = stack_env(url, APP_SPECS, tool_queues='{"wait_sync": "adk.tools"}')
        orchestrator = start_celery_process("orchestrator", "fan-orch", env, concurrency=8)
        worker = start_celery_process("worker", "fan-work", env, concurrency=8)
        client = Client(Settings(redis_url=url, apps=APP_SPECS))
        try:
            for shape, app in (("branches", "fan_branches"), ("turn", "fan_turn")):
                def once(app: str = app) -> float:
                    start = time.perf_counter()
                    invocation = client.enqueue(app, "bench", "go")
                    record = client.wait(app, invocation, timeout=120, until=InvocationStatus.FINISHED)
                    if record.status is not InvocationStatus.COMPLETED:
                        raise RuntimeError(f"{app}: {record.status} {record.error}")
                    return time.perf_counter() - start
                once()  # warm-up
                rows[shape] = [once() for _ in range(repeats)]
        finally:
            client.close()
            orchestrator.stop()
            worker.stop()
    return rows


def show(label: str, runs: list[float], baseline: list[float] | None) -> None:
    median = statistics.median(runs)
    ratio = f"   {median / statistics.median(baseline):.2f}x google-adk" if baseline else ""
    verdict = "ok" if median <= TARGET else "over"
    print(f"  {label:<72} {median:5.2f} s  ({verdict} <= {TARGET} s){ratio}"
          f"   runs {', '.join(f'{r:.2f}' for r in runs)}")


def main() -> None:
    """Measure every row and print medians and ratios."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--adk-python", default=None)
    parser.add_argument("--no-workers", action="store_true")
    parser.add_argument("--side", choices=["adk"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "adk":
        print(json.dumps(adk_side(args.repeats)))
        return

    default_threads = min(32, (os.cpu_count() or 1) + 4)
    print(f"{CALLS} calls x {WAIT} s each; {os.cpu_count()} cores; medians of {args.repeats} runs")
    adk = adk_rows(args.repeats, args.adk_python)
    ours = our_framework()
    before = our_framework(threads=default_threads)
    rows: list[tuple[str, Callable[[], float], str]] = []
    for shape in SHAPES:
        what = "one turn's calls" if shape == "turn" else "ParallelAgent branches"
        rows.append((f"ours in process, sync tools, {what}", lambda s=shape: measure(ours, s, True), shape))
        rows.append((f"ours, a pool of cores + 4 ({default_threads}) threads, {what}",
                     lambda s=shape: measure(before, s, True), shape))
    results: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    for _ in range(args.repeats):
        for label, run, _ in rows:
            results[label].append(run())
    if adk:
        for shape in SHAPES:
            what = "one turn's calls" if shape == "turn" else "ParallelAgent branches"
            show(f"google-adk InMemoryRunner, async tools, {what}", adk[shape], None)
    for label, _, shape in rows:
        show(label, results[label], adk[shape] if adk else None)
    if not args.no_workers:
        for shape, runs in worker_rows(args.repeats).items():
            what = "one turn's calls as tool jobs" if shape == "turn" else "branches as agent jobs"
            show(f"ours on a worker (1 process, 8 threads), {what}", runs, adk[shape] if adk else None)


if __name__ == "__main__":
    main()
