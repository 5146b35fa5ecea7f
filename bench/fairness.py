"""Fair sharing: does a flood of messages on one session delay the other sessions?

    .venv/bin/python bench/fairness.py [--flood 3000] [--samples 100] [--runs 3]

Starts a fresh ``redis-server`` and one orchestrator (``adk-celery orchestrator``, its
default 64 slots unless ``--concurrency``); the app is ``_fairness_apps.py:fair_app`` (a chat
model with no tools, answering at once). Each run:

- idle: ``--samples`` invocations, one after the other, each on a new session: enqueue ->
  completed, as the client sees it. Their p50 is the baseline.
- flooded: the orchestrator is stopped, ``--flood`` messages are queued on one session (so
  that many are really waiting, with a wake-up each), the orchestrator is started again and
  the same invocations are timed, one after the other, for as long as the flooded session
  is being drained. Only samples that completed while it still had messages queued count.

It prints both p50s and their ratio per run, then the medians over the runs. Target: the
flooded p50 within 2x of the idle one. ``--think-ms`` makes the flooded session's model
wait that long per message (like a real model's call) instead of answering at once.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench._fairness_apps import APP, APP_SPECS  # noqa: E402
from config import Settings  # noqa: E402
from orchestrator.backends.redis import keys  # noqa: E402
from orchestrator.distributed.models import InvocationStatus  # noqa: E402
from tests.support.processes import ManagedProcess, stack_env, start_celery_process  # noqa: E402
from tests.support.redis_server import find_redis_server, redis_server  # noqa: E402
from workers.client import Client  # noqa: E402

TARGET_RATIO = 2.0
USER = "bench"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


class Run:
    """One run on a flushed database: its client, and the orchestrator when started."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url, self.args = url, args
        self.redis = redis.Redis.from_url(url)
        self.redis.flushdb()
        self.env = stack_env(url, APP_SPECS, orchestrator_concurrency=str(args.concurrency))
        self.client = Client(Settings(redis_url=url, apps=APP_SPECS))
        self.flooded = self.client.create_session(APP, USER).id
        self.orchestrator: ManagedProcess | None = None

    def start(self) -> None:
        self.orchestrator = start_celery_process("orchestrator", "bench-fair", self.env)

    def stop(self) -> None:
        if self.orchestrator is not None:
            self.orchestrator.stop()
            self.orchestrator = None

    def close(self) -> None:
        self.stop()
        self.client.close()
        self.redis.close()

    def one(self, n: int) -> float:
        """Seconds from enqueue to completed of one invocation on another session.

        A random pause first (``--gap-ms`` on average) spreads the enqueues over time, so they
        land anywhere in the flooded session's work rather than right after a step of it.
        """
        time.sleep(random.uniform(0, 2 * self.args.gap_ms / 1000))  # pacing, not a wait
        start = time.perf_counter()
        inv = self.client.enqueue(APP, USER, f"hello {n}")  # each on a session of its own
        record = self.client.wait(APP, inv, timeout=self.args.sample_timeout, until=InvocationStatus.FINISHED)
        if record is None or record.status is not InvocationStatus.COMPLETED:
            raise RuntimeError(f"invocation {inv} did not complete: {record}")
        return time.perf_counter() - start

    def backlog(self) -> int:
        """Messages of the flooded session not yet taken up."""
        return int(self.redis.llen(keys.session_queue(APP, USER, self.flooded)))

    def flood(self) -> list[str]:
        """Queue ``--flood`` messages on one session (no orchestrator runs meanwhile)."""
        think = f"think {self.args.think_ms:g} " if self.args.think_ms else ""
        return [self.client.enqueue(APP, USER, f"{think}flood {i}", session_id=self.flooded)
                for i in range(self.args.flood)]


def one_run(url: str, args: argparse.Namespace, number: int) -> tuple[float, float, int]:
    """(idle p50, flooded p50, samples during the flood) of one run."""
    run = Run(url, args)
    try:
        run.start()
        for n in range(args.warmup):
            run.one(n)
        idle = [run.one(n) for n in range(args.samples)]
        run.stop()
        flood_ids = run.flood()
        queued = run.backlog()
        run.start()
        started = time.perf_counter()
        during: list[float] = []
        after: list[float] = []
        while not after:
            elapsed = run.one(len(during))
            (during if run.backlog() > 0 else after).append(elapsed)
        last = run.client.wait(APP, flood_ids[-1], timeout=600, until=InvocationStatus.FINISHED)
        drained = time.perf_counter() - started
        assert last is not None and last.status is InvocationStatus.COMPLETED, last
    finally:
        run.close()
    idle_p50 = statistics.median(idle)
    flooded = during or after
    flooded_p50 = statistics.median(flooded)
    print(f"  run {number}: {queued} messages queued on one session, drained in {drained:.1f} s; "
          f"idle p50 {ms(idle_p50)}, flooded p50 {ms(flooded_p50)} (p90 "
          f"{ms(pct(flooded, 0.9))}) over {len(during)} samples during the flood" + ("" if during else
                                 f" (none: {len(after)} after it, first {ms(after[0])})")
          + f": {flooded_p50 / idle_p50:.2f}x", flush=True)
    return idle_p50, flooded_p50, len(during)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=3000, help="messages queued on one session")
    parser.add_argument("--samples", type=int, default=100,
                        help="invocations on other sessions timed when idle")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64,
                        help="orchestrator slots (ADK_CELERY_ORCHESTRATOR_CONCURRENCY)")
    parser.add_argument("--think-ms", type=float, default=0.0,
                        help="model wait per flooded message (default: answers at once)")
    parser.add_argument("--gap-ms", type=float, default=10.0,
                        help="mean random pause before each timed invocation")
    parser.add_argument("--sample-timeout", type=float, default=300.0)
    args = parser.parse_args()
    binary = find_redis_server()
    if binary is None:
        sys.exit("redis-server not found: apt-get install redis-server")
    print(f"{args.flood} messages on one session vs invocations on other sessions; "
          f"1 orchestrator, {args.concurrency} slots")
    results = []
    with redis_server(binary) as base:
        url = base.rsplit("/", 1)[0] + "/1"
        for number in range(1, args.runs + 1):
            results.append(one_run(url, args, number))
    idle = statistics.median(r[0] for r in results)
    flooded = statistics.median(r[1] for r in results)
    ratio = statistics.median(r[1] / r[0] for r in results)
    print(f"\nmedians over {len(results)} runs: idle p50 {ms(idle)}, flooded p50 {ms(flooded)}; "
          f"ratio {ratio:.2f}x (target <= {TARGET_RATIO:g}x) "
          f"{'OK' if ratio <= TARGET_RATIO and all(r[2] for r in results) else 'MISSED'}")


if __name__ == "__main__":
    main()
