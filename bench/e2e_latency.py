"""End to end: one invocation with one remote long-running tool, against raw Celery.

    .venv/bin/python bench/e2e_latency.py [--invocations 200] [--burst 200]

Starts a redis-server, one orchestrator and one worker (threads, as `adk-celery` runs them),
and a bare Celery worker for a no-op task on the same Redis. Prints, from the same run:

- raw Celery: ``noop.apply_async().get()`` round trip, p50/p99 over the same count;
- ours: ``Client.enqueue`` -> paused -> worker runs the tool -> resumed -> final event,
  measured until ``Client.wait`` sees ``completed``; p50/p99, and the ratio to raw Celery;
- throughput: a burst of invocations enqueued at once, invocations/s until all completed.

Targets (issue 4): p50 within 4x raw Celery; >= 100 invocations/s with one orchestrator and
one worker on this 2-core machine. Medians quoted: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from config import Settings  # noqa: E402
from orchestrator.distributed.models import InvocationStatus  # noqa: E402
from tests.apps import APP_SPECS  # noqa: E402
from tests.support.processes import (  # noqa: E402
    FAST_WORKER_FLAGS,
    ManagedProcess,
    stack_env,
    start_celery_process,
)
from tests.support.redis_server import find_redis_server, redis_server  # noqa: E402
from workers.client import Client  # noqa: E402

FINISHED = frozenset({InvocationStatus.COMPLETED, InvocationStatus.FAILED})


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def raw_celery(url: str, count: int) -> list[float]:
    """Round trips of a no-op task through a bare Celery worker on the same Redis."""
    import os

    os.environ["NOOP_REDIS_URL"] = url
    worker = ManagedProcess("noop-worker", [
        sys.executable, "-m", "celery", "-A", "bench._noop_celery", "worker", "-Q", "noop",
        "--pool", "threads", "-c", "8", "--loglevel", "INFO", "-n", "noop@%h",
        *FAST_WORKER_FLAGS,
    ], {**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        worker.wait_for_line(lambda line: "ready." in line)
        from bench._noop_celery import noop

        for i in range(20):
            noop.apply_async((i,)).get(timeout=10)
        latencies = []
        for i in range(count):
            start = time.perf_counter()
            noop.apply_async((i,)).get(timeout=10)
            latencies.append(time.perf_counter() - start)
        return latencies
    finally:
        worker.stop()


def ours(url: str, count: int, burst: int) -> tuple[list[float], float]:
    """Latencies of sequential invocations, then the throughput of a burst."""
    env = stack_env(url, APP_SPECS)
    orchestrator = start_celery_process("orchestrator", "bench-orch", env, concurrency=8)
    worker = start_celery_process("worker", "bench-work", env, concurrency=8)
    client = Client(Settings(redis_url=url))
    try:
        def once(i: int) -> float:
            start = time.perf_counter()
            inv = client.enqueue("lookup", "bench", f"look up City{i}")
            record = client.wait("lookup", inv, until=FINISHED, timeout=60)
            assert record.status is InvocationStatus.COMPLETED, record.error
            return time.perf_counter() - start

        for i in range(20):
            once(i)
        latencies = [once(i) for i in range(count)]
        start = time.perf_counter()
        ids = [client.enqueue("lookup", "bench", f"look up Burst{i}") for i in range(burst)]
        for inv in ids:
            record = client.wait("lookup", inv, until=FINISHED, timeout=300)
            assert record.status is InvocationStatus.COMPLETED, record.error
        return latencies, burst / (time.perf_counter() - start)
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()


def main() -> None:
    """Run both sides against one fresh redis-server and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--invocations", type=int, default=200)
    parser.add_argument("--burst", type=int, default=200)
    args = parser.parse_args()
    binary = find_redis_server()
    if binary is None:
        sys.exit("redis-server not found: apt-get install redis-server")
    with redis_server(binary) as base:
        root = base.rsplit("/", 1)[0]
        raw = raw_celery(root + "/3", args.invocations)
        latencies, rate = ours(root + "/4", args.invocations, args.burst)
    raw_p50, ours_p50 = statistics.median(raw), statistics.median(latencies)
    print(f"raw Celery apply_async().get():   p50 {raw_p50 * 1000:6.2f} ms   "
          f"p99 {percentile(raw, 0.99) * 1000:6.2f} ms   ({len(raw)} round trips)")
    print(f"ours, one remote tool end to end:  p50 {ours_p50 * 1000:6.2f} ms   "
          f"p99 {percentile(latencies, 0.99) * 1000:6.2f} ms   ({len(latencies)} invocations)")
    print(f"ratio ours/raw p50: {ours_p50 / raw_p50:.1f}x (target <= 4x; an invocation makes "
          "3 Celery hops: invoke, run_tool, drain)")
    print(f"burst of {args.burst}: {rate:.1f} invocations/s (target >= 100)")


if __name__ == "__main__":
    main()
