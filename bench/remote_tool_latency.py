"""Remote-tool round trip and throughput, against raw Celery on the same Redis in the same run.

    .venv/bin/python bench/remote_tool_latency.py [--invocations 200] [--burst 200]

Starts a fresh ``redis-server``, one orchestrator and one worker (``adk-celery``, fast worker
flags) on db 1, and a bare Celery worker with one no-op task on db 2 (``_raw_noop_celery.py``).

- raw: sequential ``noop.apply_async().get()`` round trips (the baseline, §3b of
  baseline.md (shared folder beside the checkout)) and a burst of no-op tasks fired at once (tasks/s).
- latency: one invocation with one remote long-running tool, end to end: ``Client.enqueue`` ->
  call committed, invocation paused -> worker runs the tool -> resumed -> final event;
  ``Client.wait`` until completed. p50 / p99 over ``--invocations``, with a breakdown from
  the committed events' timestamps. Target: ours p50 / raw p50 <= 4.
- throughput: ``--burst`` invocations enqueued at once, invocations/s until all completed.
  Target >= 250/s (the crash-proof invocations issue).

``--setting KEY=VALUE`` gives our processes an ``ADK_CELERY_`` setting (``--setting
uvloop=false`` measures them on asyncio's own loop), to see what a setting earns.

Raw and ours alternate in ``--rounds`` blocks so a change of load on the (shared) machine
hits both. ``--profile DIR`` samples the orchestrator and the worker with py-spy during an
extra throughput run (never during the measured ones) and prints their hotspots.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench import _raw_noop_celery as noop_celery  # noqa: E402
from bench._latency_apps import APP_SPECS  # noqa: E402
from config import Settings  # noqa: E402
from orchestrator.distributed.models import InvocationStatus  # noqa: E402
from tests.support.processes import (  # noqa: E402
    FAST_WORKER_FLAGS,
    celery_argv,
    stack_env,
    start_file_logged,
)
from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402
from workers.client import Client  # noqa: E402

APP = "remote_tool"
TARGET_RATIO = 4.0
TARGET_RATE = 250.0


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cost:
    """Redis commands (INFO commandstats, Lua-inner commands included) and CPU per unit."""

    def __init__(self, client: redis.Redis, pids: dict[str, int]) -> None:
        self._redis, self._pids = client, pids

    def __enter__(self) -> Cost:
        self._redis.config_resetstat()
        self._cpu = {name: cpu_seconds(pid) for name, pid in self._pids.items()}
        self._own = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = {name: cpu_seconds(pid) - self._cpu[name] for name, pid in self._pids.items()}
        self.cpu["this client"] = time.process_time() - self._own
        stats = self._redis.info("commandstats")
        self.commands = Counter({k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()
                                 if "resetstat" not in k})

    def report(self, units: int, unit: str) -> None:
        total = sum(self.commands.values())
        top = ", ".join(f"{k} {v / units:.1f}" for k, v in self.commands.most_common(8))
        print(f"  Redis commands per {unit}: {total / units:.1f} ({top}, ...)")
        print(f"  CPU per {unit}: " + ", ".join(
            f"{name} {seconds / units * 1000:.2f} ms" for name, seconds in self.cpu.items()))


class Bench:
    """Redis, our orchestrator + worker, and the no-op Celery worker; all stopped on close."""

    def __init__(self, args: argparse.Namespace) -> None:
        binary = find_redis_server()
        if binary is None:
            sys.exit("redis-server not found: apt-get install redis-server")
        self._exit = ExitStack()
        try:
            self._start(binary, args)
        except BaseException:
            self._exit.close()
            raise

    def _start(self, binary: str, args: argparse.Namespace) -> None:
        server = RedisServer(binary)
        base = server.start().rsplit("/", 1)[0]
        self._exit.callback(server.close)
        self.url, self.noop_url = f"{base}/1", f"{base}/2"
        for url in (self.url, self.noop_url):
            redis.Redis.from_url(url).flushdb()
        env = stack_env(self.url, APP_SPECS, **dict(
            (key.strip().lower().removeprefix("adk_celery_"), value)
            for key, _, value in (pair.partition("=") for pair in args.setting)))
        pool = ["--pool", args.pool] if args.pool else []  # None: the CLI's defaults
        # Every process logs to a file: read from pipes by threads of this process, each
        # task's two log lines would wake them while the round trip they log is timed.
        logs = Path(self._exit.enter_context(tempfile.TemporaryDirectory()))
        self.orchestrator = start_file_logged(
            "orchestrator", celery_argv("orchestrator", "bench-orch", *pool,
                                        concurrency=args.concurrency), env, logs / "orch.log")
        self._exit.callback(self.orchestrator.stop)
        self.worker = start_file_logged(
            "worker", celery_argv("worker", "bench-work", *pool, concurrency=args.concurrency),
            env, logs / "worker.log")
        self._exit.callback(self.worker.stop)
        noop = start_file_logged("noop-worker", [
            sys.executable, "-m", "celery", "-A", "bench._raw_noop_celery", "-b", self.noop_url,
            "--result-backend", self.noop_url, "worker", "-Q", noop_celery.QUEUE,
            "--hostname", "bench-noop@%h", "--loglevel", "INFO", "--pool", args.raw_pool,
            "--concurrency", str(args.concurrency), *FAST_WORKER_FLAGS,
        ], env, logs / "noop.log")
        self._exit.callback(noop.stop)
        self.noop_worker = noop
        self.redis = redis.Redis.from_url(self.url)
        self._exit.callback(self.redis.close)
        self.redis_pid = int(self.redis.info("server")["process_id"])
        self.noop_app = noop_celery.make_app(self.noop_url)
        self._exit.callback(self.noop_app.close)
        self.noop = self.noop_app.tasks[noop_celery.TASK]
        self.client = Client(Settings(redis_url=self.url, apps=APP_SPECS))
        self._exit.callback(self.client.close)

    def close(self) -> None:
        self._exit.close()

    # -- raw Celery ---------------------------------------------------------------------

    def raw_round_trips(self, count: int) -> list[float]:
        samples = []
        for i in range(count):
            start = time.perf_counter()
            assert self.noop.apply_async((i,)).get(timeout=10) == i
            samples.append(time.perf_counter() - start)
        return samples

    def raw_burst(self, count: int) -> float:
        start = time.perf_counter()
        results = [self.noop.apply_async((i,)) for i in range(count)]
        for i, result in enumerate(results):
            assert result.get(timeout=60) == i
        return count / (time.perf_counter() - start)

    # -- ours ---------------------------------------------------------------------------

    def one_invocation(self) -> tuple[float, dict[str, float]]:
        """End-to-end seconds of one invocation, and its phases from event timestamps."""
        t0 = time.time()
        start = time.perf_counter()
        inv = self.client.enqueue(APP, "bench", "go")
        record = self.client.wait(APP, inv, timeout=30, until=InvocationStatus.FINISHED)
        elapsed = time.perf_counter() - start
        t1 = time.time()
        if record.status is not InvocationStatus.COMPLETED:
            raise RuntimeError(f"invocation {inv} ended {record.status}: {record.error}")
        return elapsed, self._phases(inv, t0, t1)

    def _phases(self, inv: str, t0: float, t1: float) -> dict[str, float]:
        events = self.client.events(APP, inv)
        user, call, response, final = events[0], events[1], events[2], events[-1]
        assert call.long_running_tool_ids and response.get_function_responses(), events
        return {
            "enqueue -> user event committed": user.timestamp - t0,
            "user event -> call committed": call.timestamp - user.timestamp,
            "call committed -> response committed (worker round trip)":
                response.timestamp - call.timestamp,
            "response -> final event committed": final.timestamp - response.timestamp,
            "final event -> client sees completed": t1 - final.timestamp,
        }

    def burst(self, count: int) -> tuple[float, float]:
        """Enqueue ``count`` invocations at once; return (invocations/s, enqueue seconds)."""
        start = time.perf_counter()
        ids = [self.client.enqueue(APP, "bench", f"go {i}") for i in range(count)]
        enqueued = time.perf_counter() - start
        for inv in ids:
            record = self.client.wait(APP, inv, timeout=300, until=InvocationStatus.FINISHED)
            if record.status is not InvocationStatus.COMPLETED:
                raise RuntimeError(f"invocation {inv} ended {record.status}: {record.error}")
        return count / (time.perf_counter() - start), enqueued


def profile(bench: Bench, out: Path, count: int) -> None:
    """Sample orchestrator and worker with py-spy during one more burst; print hotspots.

    ``--gil`` keeps only samples of the thread holding the GIL: Python CPU, not waiting.
    """
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("  py-spy not found (.venv/bin/python -m pip install py-spy): no profile")
        return
    out.mkdir(parents=True, exist_ok=True)
    targets = {"orchestrator": bench.orchestrator.pid, "worker": bench.worker.pid}
    spies = {}
    for name, pid in targets.items():
        path = out / f"{name}.folded"
        spies[name] = (path, subprocess.Popen(
            [py_spy, "record", "--pid", str(pid), "--format", "raw", "--output", str(path),
             "--rate", "1000", "--gil", "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    try:
        time.sleep(1.0)  # not synchronisation: gives py-spy time to attach before the load
        rate, _ = bench.burst(count)
    finally:
        for _, spy in spies.values():
            spy.send_signal(subprocess.signal.SIGINT)
        for name, (_, spy) in spies.items():
            try:
                _, err = spy.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                _, err = spy.communicate()
            if spy.returncode not in (0, -2, 130):
                print(f"  py-spy on {name} exited {spy.returncode}: {err.strip()[-300:]}")
    print(f"\n== profile (py-spy, {count} invocations at {rate:.0f}/s, files in {out}) ==")
    for name, (path, _) in spies.items():
        if path.exists():
            print_hotspots(name, path)


def _package(frame: str) -> str:
    """The top-level package of a frame ``func (path/file.py:line)``."""
    path = frame.rpartition(" (")[2].rstrip(")")
    head = path.split("/")[0]
    return head.removesuffix(".py").split(":")[0] if head else "?"


def print_hotspots(name: str, path: Path, top: int = 15) -> None:
    """Self samples per frame and package, inclusive samples per frame of our code."""
    own, packages, inclusive, total = Counter(), Counter(), Counter(), 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith("process ")]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        packages[_package(frames[-1])] += n
        for frame in dict.fromkeys(f for f in frames if _ours(f)):
            inclusive[frame] += n
    print(f"\n-- {name}: {total} samples holding the GIL --")
    print("  self time by package: " + ", ".join(
        f"{pkg} {n / max(total, 1):.0%}" for pkg, n in packages.most_common(10)))
    print("  top self (any code):")
    for frame, n in own.most_common(top):
        print(f"    {n / max(total, 1):6.1%}  {frame}")
    print("  top inclusive (our code):")
    for frame, n in inclusive.most_common(top):
        print(f"    {n / max(total, 1):6.1%}  {frame}")


def _ours(frame: str) -> bool:
    return any(f"({p}/" in frame for p in ("orchestrator", "workers", "config"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--invocations", type=int, default=200,
                        help="sequential invocations for p50/p99 (>= 200 recommended)")
    parser.add_argument("--raw", type=int, default=500, help="sequential raw round trips")
    parser.add_argument("--burst", type=int, default=200, help="invocations enqueued at once")
    parser.add_argument("--rounds", type=int, default=2, help="alternating raw/ours blocks")
    parser.add_argument("--repeats", type=int, default=3, help="throughput repeats")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--pool", default=None, choices=["threads", "prefork", "solo"],
                        help="pool of our orchestrator and worker (default: the CLI's, "
                             "solo and threads)")
    parser.add_argument("--raw-pool", default="solo", choices=["threads", "prefork", "solo"],
                        help="pool of the raw Celery worker (default solo: the fastest raw "
                             "round trip in baseline.md 3b, so the strictest baseline)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                        help="an ADK_CELERY_ setting of our orchestrator and worker, e.g. "
                             "uvloop=false (repeatable)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="also sample orchestrator and worker with py-spy (extra run)")
    args = parser.parse_args()

    bench = Bench(args)
    try:
        run(bench, args)
    finally:
        bench.close()


def run(bench: Bench, args: argparse.Namespace) -> None:
    print(f"ours: pool={args.pool or 'CLI defaults (orchestrator solo, worker threads)'} "
          f"concurrency={args.concurrency} settings={args.setting or 'defaults'}; "
          f"raw Celery worker: pool={args.raw_pool}; "
          f"redis {bench.url.rsplit('/', 1)[0]}")
    bench.raw_round_trips(50)
    for _ in range(args.warmup):
        bench.one_invocation()
    bench.burst(min(args.burst, 50))

    raw: list[float] = []
    ours: list[float] = []
    phases: dict[str, list[float]] = {}
    for r in range(args.rounds):
        raw += bench.raw_round_trips(args.raw // args.rounds)
        for _ in range(args.invocations // args.rounds):
            elapsed, parts = bench.one_invocation()
            ours.append(elapsed)
            for key, value in parts.items():
                phases.setdefault(key, []).append(value)
        print(f"  round {r + 1}: raw p50 {ms(statistics.median(raw))}, "
              f"ours p50 {ms(statistics.median(ours))}", flush=True)

    raw_rates, rates, enqueue_times = [], [], []
    for _ in range(args.repeats):
        raw_rates.append(bench.raw_burst(args.burst))
        rate, enqueued = bench.burst(args.burst)
        rates.append(rate)
        enqueue_times.append(enqueued)

    # Cost accounting, in separate (untimed) runs: commands and CPU per round trip.
    samples = max(args.invocations // 2, 20)
    with Cost(bench.redis, {"no-op worker": bench.noop_worker.pid,
                            "redis-server": bench.redis_pid}) as raw_cost:
        bench.raw_round_trips(samples)
    with Cost(bench.redis, {"orchestrator": bench.orchestrator.pid, "worker": bench.worker.pid,
                            "redis-server": bench.redis_pid}) as ours_cost:
        for _ in range(samples):
            bench.one_invocation()

    raw_p50, ours_p50 = statistics.median(raw), statistics.median(ours)
    print(f"\n== (a) raw Celery no-op apply_async().get(), {len(raw)} sequential ==")
    print(f"  p50 {ms(raw_p50)}  p99 {ms(pct(raw, 0.99))}  (baseline §3b: 2.2-2.6 ms p50)")
    print(f"  burst of {args.burst} no-ops: {statistics.median(raw_rates):.0f} tasks/s "
          f"(runs {', '.join(f'{x:.0f}' for x in raw_rates)})")
    raw_cost.report(samples, "round trip")
    print(f"\n== (b) one invocation, one remote long-running tool, {len(ours)} sequential ==")
    print(f"  p50 {ms(ours_p50)}  p99 {ms(pct(ours, 0.99))}  max {ms(max(ours))}")
    print("  breakdown (medians, from committed event timestamps):")
    for key, values in phases.items():
        print(f"    {ms(statistics.median(values)):>10}  {key}")
    ratio = ours_p50 / raw_p50
    print(f"  ratio ours p50 / raw Celery p50: {ratio:.2f}x (target <= {TARGET_RATIO:.0f}x) "
          f"{'OK' if ratio <= TARGET_RATIO else 'MISSED'}")
    ours_cost.report(samples, "invocation")
    rate = statistics.median(rates)
    print(f"\n== (c) throughput: {args.burst} invocations enqueued at once, 1 orchestrator + "
          "1 worker ==")
    print(f"  {rate:.1f} invocations/s median (runs {', '.join(f'{x:.1f}' for x in rates)}; "
          f"enqueueing took {statistics.median(enqueue_times) * 1000:.0f} ms) "
          f"(target >= {TARGET_RATE:.0f}/s) {'OK' if rate >= TARGET_RATE else 'MISSED'}")
    if args.profile is not None:
        profile(bench, args.profile, args.burst)


if __name__ == "__main__":
    main()
