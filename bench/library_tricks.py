"""What each latency trick on a library's internals earns: each one switched off in turn.

    .venv/bin/python bench/library_tricks.py [--rounds 3] [--invocations 150] [--burst 200]

The tricks (each in one module, each switched off by a setting; see the README's
"Tricks on library internals"):

- ``fast_publish`` (workers/publish_commands.py, kombu's private producer and channel steps):
  a tool job's message sent inside the script that journals it, from the event loop;
- ``broker_client_reuse`` (workers/broker.py, kombu's private ``_create_client``): one
  redis-py client per broker channel instead of one per operation;
- ``worker_head_start_ms`` (workers/thread_pool.py): the consumer waits for a job it handed
  over before taking the next.

Starts a fresh ``redis-server``; for each configuration (all on, each one off, all off) in
turn, a fresh orchestrator and worker (``adk-celery`` CLI defaults) run the
``remote_tool_latency`` app: ``--invocations`` sequential invocations (p50 latency) and a
burst of ``--burst`` enqueued at once (invocations/s). The configurations alternate in
``--rounds`` rounds so a change of load on the (shared) machine hits all of them; medians
over the rounds are printed with each one's cost against all on. The README's rule: a trick
whose gain is under ~5% on both figures is removed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench._latency_apps import APP_SPECS  # noqa: E402
from config import Settings  # noqa: E402
from orchestrator.distributed.models import InvocationStatus  # noqa: E402
from tests.support.processes import stack_env, start_celery_process  # noqa: E402
from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402
from workers.client import Client  # noqa: E402

APP = "remote_tool"
TRICKS: dict[str, dict[str, str]] = {
    "fast_publish": {"fast_publish": "false"},
    "broker_client_reuse": {"broker_client_reuse": "false"},
    "worker_head_start_ms": {"worker_head_start_ms": "0"},
}
"""Each trick and the settings that switch it off."""


def configurations() -> dict[str, dict[str, str]]:
    """All on, each trick off, all off."""
    every = {k: v for settings in TRICKS.values() for k, v in settings.items()}
    return {"all on": {}, **{f"{name} off": s for name, s in TRICKS.items()}, "all off": every}


def measure(url: str, overrides: dict[str, str], invocations: int, burst: int
            ) -> tuple[float, float]:
    """(p50 seconds of sequential invocations, invocations/s of a burst) on a fresh stack."""
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, **overrides)
    orchestrator = start_celery_process("orchestrator", "tricks-orch", env, concurrency=8)
    worker = start_celery_process("worker", "tricks-work", env, concurrency=8)
    client = Client(Settings(redis_url=url, apps=APP_SPECS))
    try:
        for _ in range(30):  # warm-up: imports, scripts loaded, queues declared
            _one(client)
        samples = [_one(client) for _ in range(invocations)]
        start = time.perf_counter()
        ids = [client.enqueue(APP, "bench", f"go {i}") for i in range(burst)]
        for inv in ids:
            _check(client.wait(APP, inv, timeout=300, until=InvocationStatus.FINISHED))
        rate = burst / (time.perf_counter() - start)
        return statistics.median(samples), rate
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()


def _one(client: Client) -> float:
    start = time.perf_counter()
    inv = client.enqueue(APP, "bench", "go")
    _check(client.wait(APP, inv, timeout=30, until=InvocationStatus.FINISHED))
    return time.perf_counter() - start


def _check(record: object) -> None:
    status = getattr(record, "status", None)
    if status is not InvocationStatus.COMPLETED:
        raise RuntimeError(f"invocation ended {status}: {getattr(record, 'error', None)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--invocations", type=int, default=150)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--only", nargs="*", default=None, metavar="CONFIG",
                        help="configurations to run (names as printed), besides 'all on'")
    args = parser.parse_args()
    binary = find_redis_server()
    if binary is None:
        sys.exit("redis-server not found: apt-get install redis-server")
    configs = configurations()
    if args.only:
        configs = {k: v for k, v in configs.items() if k == "all on" or k in args.only}
    server = RedisServer(binary)
    url = server.start().rsplit("/", 1)[0] + "/1"
    p50s: dict[str, list[float]] = {name: [] for name in configs}
    rates: dict[str, list[float]] = {name: [] for name in configs}
    try:
        for r in range(args.rounds):
            for name, overrides in configs.items():
                p50, rate = measure(url, overrides, args.invocations, args.burst)
                p50s[name].append(p50)
                rates[name].append(rate)
                print(f"  round {r + 1} {name:28} p50 {p50 * 1000:.2f} ms  {rate:.0f}/s",
                      flush=True)
    finally:
        server.close()
    base_p50 = statistics.median(p50s["all on"])
    base_rate = statistics.median(rates["all on"])
    print(f"\n== medians of {args.rounds} rounds; cost of switching each trick off ==")
    for name in configs:
        p50, rate = statistics.median(p50s[name]), statistics.median(rates[name])
        print(f"  {name:28} p50 {p50 * 1000:.2f} ms ({(p50 / base_p50 - 1) * 100:+.1f}%)   "
              f"{rate:.0f} invocations/s ({(rate / base_rate - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
