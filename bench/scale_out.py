"""Scale-out benchmarks with real Redis, orchestrator and worker processes.

    .venv/bin/python bench/scale_out.py [--only fanout,scale,paused] [--paused 10000]

- fanout: a ParallelAgent of 8 branches whose tools each wait 0.5 s, through 1 and through 4
  worker processes (solo pool: one job at a time each): wall time and speed-up (target >= 3.5x).
- scale: 200 invocations with one remote I/O-bound tool (0.2 s) through 1 and 4 worker
  processes: throughput and speed-up (target >= 3.5x).
- orchestrators: 200 invocations whose model costs 20 ms of CPU (model-bound work), through
  1 and 2 orchestrator processes: throughput and speed-up.
- paused: N invocations left paused on a remote call (target N = 10,000): orchestrator
  resident memory growth (target < 20 MB) and resume latency at N paused versus 10 paused
  (target within 1.2x). Medians are quoted: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench._scale_apps import APP_SPECS  # noqa: E402
from config import Settings  # noqa: E402
from orchestrator.distributed.models import InvocationStatus  # noqa: E402
from tests.support.processes import stack_env, start_celery_process  # noqa: E402
from tests.support.redis_server import find_redis_server, redis_server  # noqa: E402
from workers.client import Client  # noqa: E402


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class Stack:
    """One orchestrator and N solo workers on a fresh Redis database."""

    def __init__(
        self, url: str, workers: int, *, orchestrators: int = 1, orchestrator_concurrency: int = 8
    ) -> None:
        redis.Redis.from_url(url).flushdb()
        env = stack_env(url, APP_SPECS)
        self._exit = ExitStack()
        self.orchestrators = []
        for i in range(orchestrators):
            process = start_celery_process(
                "orchestrator", f"bench-orch{i}", env, concurrency=orchestrator_concurrency)
            self._exit.callback(process.stop)
            self.orchestrators.append(process)
        self.orchestrator = self.orchestrators[0]
        self.workers = []
        for i in range(workers):
            worker = start_celery_process("worker", f"bench-work{i}", env, "--pool", "solo",
                                          concurrency=1)
            self._exit.callback(worker.stop)
            self.workers.append(worker)
        self.client = Client(Settings(redis_url=url, apps=APP_SPECS))
        self._exit.callback(self.client.close)

    def run_one(self, app: str, message: str = "go", timeout: float = 120) -> float:
        start = time.perf_counter()
        inv = self.client.enqueue(app, "bench", message)
        record = self.client.wait(app, inv, timeout=timeout, until=InvocationStatus.FINISHED)
        if record.status is not InvocationStatus.COMPLETED:
            raise RuntimeError(f"{app} invocation ended {record.status}: {record.error}")
        return time.perf_counter() - start

    def close(self) -> None:
        self._exit.close()


def run_burst(stack: Stack, app: str, count: int) -> float:
    """Enqueue ``count`` invocations at once; seconds until every one completed."""
    start = time.perf_counter()
    ids = [stack.client.enqueue(app, "bench", f"go {i}") for i in range(count)]
    for inv in ids:
        record = stack.client.wait(app, inv, timeout=600, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
    return time.perf_counter() - start


def bench_fanout(url: str, repeats: int) -> None:
    print("\n== fan-out: ParallelAgent of 8 branches, each tool waits 0.5 s ==")
    walls = {}
    for workers in (1, 4):
        stack = Stack(url, workers)
        try:
            stack.run_one("fanout")  # warm-up
            walls[workers] = [stack.run_one("fanout") for _ in range(repeats)]
        finally:
            stack.close()
        print(f"  {workers} worker process(es): wall median {statistics.median(walls[workers]):.2f} s "
              f"(runs {', '.join(f'{w:.2f}' for w in walls[workers])})")
    speedup = statistics.median(walls[1]) / statistics.median(walls[4])
    print(f"  speed-up 4 vs 1 workers: {speedup:.2f}x (target >= 3.5x; ideal 4x = 4.0 s / 1.0 s)")


def bench_scale(url: str, invocations: int) -> None:
    print(f"\n== scale: {invocations} invocations, one remote I/O-bound tool of 0.2 s each ==")
    rates = {}
    for workers in (1, 4):
        stack = Stack(url, workers)
        try:
            stack.run_one("scale")  # warm-up
            elapsed = run_burst(stack, "scale", invocations)
        finally:
            stack.close()
        rates[workers] = invocations / elapsed
        print(f"  {workers} worker process(es): {elapsed:.1f} s, {rates[workers]:.1f} invocations/s")
    print(f"  throughput 4 vs 1 workers: {rates[4] / rates[1]:.2f}x (target >= 3.5x)")


def bench_orchestrators(url: str, invocations: int) -> None:
    print(f"\n== orchestrators: {invocations} invocations whose model costs 20 ms of CPU ==")
    rates = {}
    for orchestrators in (1, 2):
        stack = Stack(url, workers=0, orchestrators=orchestrators)
        try:
            stack.run_one("model_bound")  # warm-up
            elapsed = run_burst(stack, "model_bound", invocations)
        finally:
            stack.close()
        rates[orchestrators] = invocations / elapsed
        print(f"  {orchestrators} orchestrator process(es): {elapsed:.1f} s, "
              f"{rates[orchestrators]:.1f} invocations/s")
    print(f"  throughput 2 vs 1 orchestrators: {rates[2] / rates[1]:.2f}x "
          "(2 cores, shared with Redis and the client: ideal below 2x)")


def _pause_many(stack: Stack, count: int) -> list[tuple[str, str]]:
    ids = [stack.client.enqueue("paused", "bench", f"ask {i}") for i in range(count)]
    paused = []
    for inv in ids:
        record = stack.client.wait("paused", inv, timeout=600)
        assert record.status is InvocationStatus.PAUSED, (record.status, record.error)
        paused.append((inv, record.pending_calls[0]))
    return paused


def _resume_latencies(stack: Stack, paused: list[tuple[str, str]], samples: int) -> list[float]:
    latencies = []
    for inv, call_id in paused[:samples]:
        start = time.perf_counter()
        stack.client.answer("paused", inv, call_id, {"ok": True})
        record = stack.client.wait("paused", inv, timeout=60, until=InvocationStatus.FINISHED)
        latencies.append(time.perf_counter() - start)
        assert record.status is InvocationStatus.COMPLETED, record.error
    return latencies


def bench_paused(url: str, count: int, samples: int) -> None:
    print(f"\n== paused: {count} invocations paused on a remote call (no worker answers them) ==")
    stack = Stack(url, workers=0)
    try:
        few = _pause_many(stack, 10 + samples)
        small = _resume_latencies(stack, few, samples)
        before = rss_mb(stack.orchestrator.pid)
        start = time.perf_counter()
        many = _pause_many(stack, count)
        took = time.perf_counter() - start
        after = rss_mb(stack.orchestrator.pid)
        large = _resume_latencies(stack, many, samples)
    finally:
        stack.close()
    print(f"  pausing {count} took {took:.1f} s ({count / took:.0f} invocations/s)")
    print(f"  orchestrator RSS: {before:.1f} MB with ~10 paused -> {after:.1f} MB with {count} "
          f"paused: growth {after - before:+.1f} MB (target < 20 MB)")
    ratio = statistics.median(large) / statistics.median(small)
    print(f"  resume latency median: {statistics.median(small) * 1000:.1f} ms at ~10 paused, "
          f"{statistics.median(large) * 1000:.1f} ms at {count} paused: ratio {ratio:.2f} "
          "(target <= 1.2)")


def main() -> None:
    """Run the selected benchmarks against a fresh redis-server."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="fanout,scale,orchestrators,paused")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--invocations", type=int, default=200)
    parser.add_argument("--paused", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    binary = find_redis_server()
    if binary is None:
        sys.exit("redis-server not found: apt-get install redis-server")
    with redis_server(binary) as base_url:
        url = base_url.rsplit("/", 1)[0] + "/1"
        chosen = set(args.only.split(","))
        if "fanout" in chosen:
            bench_fanout(url, args.repeats)
        if "scale" in chosen:
            bench_scale(url, args.invocations)
        if "orchestrators" in chosen:
            bench_orchestrators(url, args.invocations)
        if "paused" in chosen:
            bench_paused(url, args.paused, args.samples)


if __name__ == "__main__":
    main()
