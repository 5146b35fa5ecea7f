"""Randomized fault run (issue 12): many invocations while processes and Redis are killed.

    .venv/bin/python bench/chaos.py [--redis-mode shutdown|kill9|none] [--runs N] [--seed S]
    .venv/bin/python bench/chaos.py --no-faults --invocations 60 --sessions 12   # baseline

One run: a fresh ``redis-server`` the script starts itself on a free loopback port, with AOF
(``--appendonly yes --appendfsync always``) in a temp dir, so a restart keeps the data; a
stack of real ``adk-celery orchestrator`` and ``adk-celery worker`` processes; the apps of
``bench/_chaos_apps.py`` (one long-running remote tool; two remote calls in one model turn;
a resumable ``SequentialAgent[ParallelAgent[3 branches on workers], after]``). Sessions are
split between the three apps; each session gets its share of the invocations, enqueued in
bursts of 1 to ``--burst-max`` messages sent back to back (no wait between them), bursts of
all sessions interleaved at random over ``--enqueue-seconds``.

Faults (unless ``--no-faults``), from the first enqueue until every invocation is enqueued
and ``--fault-seconds`` have passed: every ``--kill-min``..``--kill-max`` s (random) a random
orchestrator or worker is killed with SIGKILL and a replacement (new hostname) is started;
once, at ``--redis-at`` of the fault window, Redis is restarted on the same port and data dir:
``SHUTDOWN`` (graceful: AOF flushed) or SIGKILL (``--redis-mode``), down ``--redis-down`` s.
A process that exits by itself is reported and replaced (during the settle phase too).
Then the script waits up to ``--settle`` s for every recorded invocation to be terminal,
``--grace`` s more for late writes, and classifies every invocation through the public
``workers.client.Client`` (status, events), the session's event log
(``RedisSessionService.get_session``) and the tools' own run log in Redis (the hash ``chaos:runs``).

Printed per run (the target: completed = enqueued, every other count 0, recovery in time):

- completed: status ``completed``, every function call of the invocation answered by
  exactly one FunctionResponse, and the last text event is the app's expected final answer
  for that message (only content-less events after it).
- falsely completed: status ``completed`` but one of those checks fails (reason shown).
- failed: status ``failed`` or ``cancelled`` (errors grouped, ids masked).
- stuck: recorded but not terminal at the end (statuses shown).
- never recorded: ``Client.enqueue`` returned the id, but no record exists.
- duplicate FunctionResponses: call ids answered more than once (all sessions).
- tool re-runs not explained by a killed worker: a run of a call (``chaos_tool``: same call
  id; a branch tool: same invocation and branch, since a branch run again makes a new model
  call) whose previous run was on a worker that is still alive (not killed by the script,
  not exited by itself).
- interleaved sessions: sessions whose log breaks this rule: walking the session's events in
  order, when the log goes from invocation A to another one, A must either never appear
  again or be paused at that point (a long-running call of A committed and not yet
  answered in the log). A duplicate answer after A finished breaks it too.
- out-of-order starts: sessions whose invocations first appear in the log in another order
  than they were enqueued (README: messages to one session are processed in order).
- processes that exited by themselves: orchestrators/workers that died without being killed.
- recovery: seconds from the last fault (the last kill, or Redis answering again) to the
  last ``completed`` invocation's ``updated_at``, also in lease TTLs; negative when all
  invocations had finished before the last fault. Only meaningful when nothing is stuck.
  The target wants it at most ``--recovery-ttls`` (5) lease TTLs.

The poison-job limit: a call whose job died with its worker ``ADK_CELERY_TOOL_MAX_ATTEMPTS``
times (3 by default) is answered with an error, so that a tool that kills every worker
running it cannot loop for ever. Nothing tells such a tool from a worker killed from outside,
and this run kills one of three workers every 2-4 s: at the default, about one run in ten
had a branch whose three attempts all landed on workers killed under them, and its
invocation failed as the limit intends. The runs raise the limit (``--max-attempts``) so
that they measure recovery, and print the most deaths one call saw, to show the margin.

Informational (not in the target): re-runs explained by a killed worker, runs of calls that
never reached the log on a live worker, enqueue retries (Redis down while enqueueing),
replacement processes that never got ready, sessions where the allowed interleaving
happened (an invocation resumed after another one ran during its pause: shows the rule was
exercised), the last invocation to complete, and whether kombu's restore lock
(``unacked_mutex``, 300 s expiry) was still held at the end (then no worker puts unacked
jobs of dead workers back). An enqueue that still fails after a minute of retries (same
invocation id) is reported and misses the target.

Options: ``--invocations`` (300) ``--sessions`` (60) ``--orchestrators`` (2) ``--workers``
(3) ``--worker-concurrency`` (8) ``--redis-mode`` (shutdown) ``--runs`` (1, fresh Redis
each run) ``--seed`` (1; run k uses seed S+k-1) ``--kill-min`` / ``--kill-max`` (2 / 4 s)
``--lease-ttl`` (5 s: ``ADK_CELERY_LEASE_TTL_SECONDS``) ``--lease-retry`` (0.2 s)
``--visibility-timeout`` (10 s; kombu's unacked sweep every ``--restore-interval`` s, 1)
``--heartbeat`` (1 s) ``--lost-after`` (4 s: the watchdog's timing, scaled like the lease)
``--max-attempts`` (10: ``ADK_CELERY_TOOL_MAX_ATTEMPTS``, see above) ``--enqueue-seconds``
(40) ``--fault-seconds`` (40) ``--redis-at`` (0.5) ``--redis-down`` (1 s) ``--settle``
(120 s) ``--grace`` (3 s) ``--burst-max`` (3) ``--recovery-ttls`` (5)
``--no-faults`` ``--setting KEY=VALUE`` (any other ``ADK_CELERY_KEY`` for the processes, repeatable)
``--logs DIR`` (write every process's output and Redis's log there) ``--quiet`` (no fault
lines). Always exits 0: this is a benchmark, its verdict is the "TARGET MET/MISSED" line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench._chaos_apps import (  # noqa: E402
    APP_NAMES,
    APP_SPECS,
    MESSAGE_PREFIX,
    RUNS_KEY,
    expected_final_text,
)
from config import Settings  # noqa: E402
from orchestrator import Event, RedisSessionService  # noqa: E402
from orchestrator.backends.redis import keys  # noqa: E402
from orchestrator.distributed.models import InvocationRecord, InvocationStatus  # noqa: E402
from tests.support.processes import FAST_WORKER_FLAGS, ManagedProcess, stack_env  # noqa: E402
from tests.support.redis_server import (  # noqa: E402
    HOST,
    find_redis_server,
    free_port,
    send_command,
)
from workers.client import Client  # noqa: E402

T = TypeVar("T")
READY_TIMEOUT = 60.0
"""Seconds a started orchestrator/worker has to print Celery's "ready." line."""
RETRY_SECONDS = 60.0
"""How long a client call is retried while Redis is unreachable."""
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def log(message: str) -> None:
    print(message, flush=True)


def retrying(call: Callable[[], T], what: str, counter: list[int] | None = None) -> T:
    """``call()``, retried on Redis connection errors for up to RETRY_SECONDS."""
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        try:
            return call()
        except REDIS_ERRORS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: Redis unreachable for {RETRY_SECONDS:.0f} s") from None
            if counter is not None:
                counter[0] += 1
            time.sleep(0.2)


# -- Redis with AOF, restartable on the same port and directory ------------------------------

class AofRedis:
    """A ``redis-server`` with ``appendfsync always`` whose data survives restarts."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="adk-chaos-redis-")
        self.log_path = Path(self._dir.name) / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> str:
        command = [
            self.binary, "--port", str(self.port), "--bind", HOST, "--dir", self._dir.name,
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--maxmemory-policy", "noeviction", "--daemonize", "no", "--logfile", "",
        ]
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with suppress(OSError):
                if send_command(self.port, "PING", timeout=0.5).startswith(b"+PONG"):
                    return self.url  # answers PING only once the AOF is loaded
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not come up on port {self.port}:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def shutdown(self) -> None:
        """``SHUTDOWN`` (AOF fsynced, clients disconnected); SIGKILL if it lingers."""
        with suppress(OSError):
            send_command(self.port, "SHUTDOWN", timeout=5)
        self._reap(10)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        self._reap(10)

    def _reap(self, timeout: float) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def close(self) -> None:
        try:
            self.kill()
        finally:
            self._dir.cleanup()


# -- orchestrator and worker processes -------------------------------------------------------

@dataclass
class Proc:
    kind: str  # "orchestrator" | "worker"
    name: str
    process: ManagedProcess


@dataclass
class Exit:
    kind: str
    name: str
    pid: int
    code: int | None
    tail: list[str]


class Processes:
    """The live orchestrators and workers; killed or exited ones are replaced by new names."""

    def __init__(self, env: dict[str, str], args: argparse.Namespace) -> None:
        self.env = env
        self.wanted = {"orchestrator": args.orchestrators, "worker": args.workers}
        self.worker_concurrency = args.worker_concurrency
        self.live: list[Proc] = []
        self.every: list[Proc] = []
        self.killed: dict[str, set[int]] = {"orchestrator": set(), "worker": set()}
        self.exits: list[Exit] = []
        self.failed_starts = 0
        self._serial = 0
        self._lock = threading.Lock()

    def _launch(self, kind: str) -> Proc:
        self._serial += 1
        name = f"chaos-{'orch' if kind == 'orchestrator' else 'work'}{self._serial}"
        concurrency = self.worker_concurrency if kind == "worker" else 1
        argv = [sys.executable, "-m", "workers.cli", kind, "--hostname", f"{name}@%h",
                "--concurrency", str(concurrency), "--loglevel", "INFO", *FAST_WORKER_FLAGS]
        proc = Proc(kind, name, ManagedProcess(name, argv, self.env))
        self.every.append(proc)
        return proc

    def _await_ready(self, proc: Proc) -> bool:
        try:
            proc.process.wait_for_line(lambda line: "ready." in line, timeout=READY_TIMEOUT)
            return True
        except (TimeoutError, RuntimeError):
            self.failed_starts += 1
            with self._lock:
                self.killed[proc.kind].add(proc.process.pid)
            proc.process.kill()
            return False

    def top_up(self) -> list[Proc]:
        """Start processes until each kind has its wanted number (started at once, then awaited)."""
        with self._lock:
            missing = [kind for kind, n in self.wanted.items()
                       for _ in range(n - sum(p.kind == kind for p in self.live))]
            started = [self._launch(kind) for kind in missing]
        ready = [p for p in started if self._await_ready(p)]
        with self._lock:
            self.live.extend(ready)
        return ready

    def reap_exits(self) -> list[Exit]:
        """Processes that exited without being killed: recorded and dropped from ``live``."""
        found = []
        with self._lock:
            for proc in list(self.live):
                code = proc.process.proc.poll()
                if code is not None:
                    self.live.remove(proc)
                    found.append(Exit(proc.kind, proc.name, proc.process.pid, code,
                                      proc.process.lines[-8:]))
            self.exits.extend(found)
        return found

    def kill_random(self, rng: random.Random) -> Proc | None:
        with self._lock:
            if not self.live:
                return None
            proc = rng.choice(self.live)
            self.live.remove(proc)
            self.killed[proc.kind].add(proc.process.pid)
        proc.process.kill()
        return proc

    def dead_worker_pids(self) -> set[int]:
        return self.killed["worker"] | {e.pid for e in self.exits if e.kind == "worker"}

    def close(self) -> None:
        for proc in self.every:
            proc.process.kill()

    def write_logs(self, directory: Path, prefix: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for proc in self.every:
            (directory / f"{prefix}-{proc.name}-{proc.process.pid}.log").write_text(
                "\n".join(proc.process.lines) + "\n")


# -- the fault thread --------------------------------------------------------------------------

@dataclass
class Fault:
    at: float  # seconds since the start of the run's traffic
    wall: float  # time.time() when the fault ended (the process killed, Redis back)
    what: str


class Chaos(threading.Thread):
    """Kills and replaces processes, restarts Redis once; replaces processes that exit."""

    def __init__(self, procs: Processes, server: AofRedis, args: argparse.Namespace,
                 rng: random.Random, t0: float) -> None:
        super().__init__(name="chaos", daemon=True)
        self.procs, self.server, self.args, self.rng, self.t0 = procs, server, args, rng, t0
        self.faulting = threading.Event()
        self.stop = threading.Event()
        self.faults: list[Fault] = []
        self.redis_fault: str | None = None
        self.error: BaseException | None = None
        if not args.no_faults:
            self.faulting.set()
        self._redis_done = args.no_faults or args.redis_mode == "none"

    def _note(self, what: str) -> None:
        fault = Fault(time.monotonic() - self.t0, time.time(), what)
        self.faults.append(fault)
        if not self.args.quiet:
            log(f"    [{fault.at:6.1f} s] {what}")

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # reported by the main thread
            self.error = error

    def _loop(self) -> None:
        next_kill = time.monotonic() + self.rng.uniform(self.args.kill_min, self.args.kill_max)
        redis_at = self.t0 + self.args.redis_at * self.args.fault_seconds
        while not self.stop.wait(0.1):
            for gone in self.procs.reap_exits():
                log(f"    [{time.monotonic() - self.t0:6.1f} s] {gone.kind} {gone.name} (pid "
                    f"{gone.pid}) EXITED BY ITSELF, code {gone.code}: {' | '.join(gone.tail[-3:])}")
            now = time.monotonic()
            if self.faulting.is_set() and not self._redis_done and now >= redis_at:
                self._restart_redis()
            elif self.faulting.is_set() and now >= next_kill:
                proc = self.procs.kill_random(self.rng)
                if proc is not None:
                    self._note(f"kill -9 {proc.kind} {proc.name} (pid {proc.process.pid})")
                next_kill = time.monotonic() + self.rng.uniform(self.args.kill_min, self.args.kill_max)
            started = self.procs.top_up()
            if started and not self.args.quiet:
                log(f"    [{time.monotonic() - self.t0:6.1f} s] started "
                    + ", ".join(f"{p.name} (pid {p.process.pid})" for p in started))

    def _restart_redis(self) -> None:
        self._redis_done = True
        start = time.monotonic()
        if self.args.redis_mode == "shutdown":
            self.server.shutdown()
        else:
            self.server.kill()
        time.sleep(self.args.redis_down)
        self.server.start()
        self.redis_fault = (f"Redis {self.args.redis_mode} at {start - self.t0:.1f} s, "
                            f"back after {time.monotonic() - start:.1f} s")
        self._note(f"Redis restarted ({self.args.redis_mode}), down {time.monotonic() - start:.1f} s")

    def halt(self) -> None:
        self.faulting.clear()
        self.stop.set()
        self.join(READY_TIMEOUT + 30)


# -- the workload ----------------------------------------------------------------------------

@dataclass
class Planned:
    index: int  # enqueue order within its session
    app: str
    session: int
    user_id: str
    session_id: str
    tag: str
    invocation_id: str
    enqueued: bool = False


@dataclass
class Plan:
    sessions: list[tuple[str, str, str]]  # (app, user_id, session_id) per session
    bursts: list[list[Planned]]  # in enqueue order; one burst is sent back to back


def make_plan(args: argparse.Namespace, rng: random.Random) -> Plan:
    sessions = []
    per_session: list[list[list[Planned]]] = []
    for s in range(args.sessions):
        app = APP_NAMES[s % len(APP_NAMES)]
        user_id, session_id = f"chaos-user-{s}", f"chaos-session-{s}-{rng.getrandbits(32):08x}"
        sessions.append((app, user_id, session_id))
        count = args.invocations // args.sessions + (s < args.invocations % args.sessions)
        items = [Planned(k, app, s, user_id, session_id, f"s{s}.{k}",
                         f"e-chaos-{s}-{k}-{rng.getrandbits(48):012x}") for k in range(count)]
        bursts: list[list[Planned]] = []
        while items:
            size = rng.randint(1, args.burst_max)
            bursts.append(items[:size])
            items = items[size:]
        per_session.append(bursts)
    order: list[list[Planned]] = []
    while any(per_session):
        weights = [len(b) for b in per_session]
        chosen = rng.choices(range(len(per_session)), weights=weights)[0]
        order.append(per_session[chosen].pop(0))
    return Plan(sessions, order)


def enqueue_all(client: Client, plan: Plan, seconds: float, rng: random.Random,
                retries: list[int]) -> None:
    """Send the bursts, paced over ``seconds``; each burst's messages back to back."""
    start = time.monotonic()
    for i, burst in enumerate(plan.bursts):
        due = start + seconds * i / max(1, len(plan.bursts)) + rng.uniform(0, 0.2)
        time.sleep(max(0.0, due - time.monotonic()))
        for item in burst:
            def send(item: Planned = item) -> str:
                return client.enqueue(item.app, item.user_id, MESSAGE_PREFIX + item.tag,
                                      session_id=item.session_id, invocation_id=item.invocation_id)
            try:
                retrying(send, f"enqueue {item.invocation_id}", retries)
            except RuntimeError as error:  # Redis away for a minute: count it, go on
                log(f"    enqueue gave up: {error}")
                continue
            item.enqueued = True


def settle(client: Client, items: list[Planned], deadline: float, t0: float) -> None:
    """Poll statuses until every recorded invocation is terminal or the deadline passes."""
    pending = list(items)
    last_report = 0.0
    while pending and time.monotonic() < deadline:
        still = []
        for item in pending:
            record = retrying(lambda i=item: client.status(i.app, i.invocation_id), "status")
            if record is not None and not record.status.is_finished:
                still.append(item)
        pending = still
        if pending and time.monotonic() - last_report > 10:
            last_report = time.monotonic()
            log(f"    [{time.monotonic() - t0:6.1f} s] settling: {len(pending)} not terminal")
        time.sleep(0.5)


# -- classification -----------------------------------------------------------------------------

@dataclass
class RunResult:
    planned: int = 0
    enqueued: int = 0
    completed: int = 0
    falsely_completed: int = 0
    failed: int = 0
    stuck: int = 0
    never_recorded: int = 0
    duplicate_responses: int = 0
    unexplained_reruns: int = 0
    interleaved_sessions: int = 0
    out_of_order_sessions: int = 0
    exited_processes: int = 0
    recovery_seconds: float | None = None
    explained_reruns: int = 0
    most_deaths: int = 0
    orphan_runs: int = 0
    enqueue_retries: int = 0
    paused_interleavings: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    redis_fault: str | None = None
    errors: Counter[str] = field(default_factory=Counter)
    false_reasons: Counter[str] = field(default_factory=Counter)
    stuck_statuses: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    seconds: float = 0.0

    TARGET_ZERO = ("falsely_completed", "failed", "stuck", "never_recorded", "duplicate_responses",
                   "unexplained_reruns", "interleaved_sessions", "out_of_order_sessions",
                   "exited_processes")

    recovery_limit: float | None = None
    """Longest recovery (seconds) the target allows; None: not checked (no faults)."""
    failed_starts: int = 0
    last_completed: str = ""
    restore_lock_ttl: int = -2
    last_fault_at: float | None = None

    @property
    def recovered_in_time(self) -> bool:
        return (self.recovery_limit is None or self.recovery_seconds is None
                or self.recovery_seconds <= self.recovery_limit)

    @property
    def target_met(self) -> bool:
        return (self.completed == self.enqueued == self.planned and self.recovered_in_time
                and all(getattr(self, k) == 0 for k in self.TARGET_ZERO))

    def example(self, category: str, text: str) -> None:
        if len(self.examples[category]) < 5:
            self.examples[category].append(text)


def _texts(event: Event) -> list[str]:
    if event.content is None:
        return []
    return [p.text for p in event.content.parts or [] if p.text]


def _has_payload(event: Event) -> bool:
    return bool(_texts(event) or event.get_function_calls() or event.get_function_responses())


def completion_problems(item: Planned, events: list[Event]) -> tuple[list[str], str]:
    """Why a ``completed`` invocation is not really complete (empty list: it is), and a detail."""
    problems = []
    detail = ""
    calls = Counter(c.id for e in events for c in e.get_function_calls())
    answers = Counter(r.id for e in events for r in e.get_function_responses())
    if missing := [c for c in calls if answers[c] == 0]:
        problems.append(f"{len(missing)} call(s) without an answer")
    if [c for c, n in answers.items() if n > 1]:
        problems.append("a call answered twice")
    if [c for c, n in calls.items() if n > 1]:
        problems.append("a call id committed twice")
    if [r for r in answers if r not in calls]:
        problems.append("an answer to an unknown call")
    texts = [(i, e) for i, e in enumerate(events) if not e.partial and _texts(e)]
    expected = expected_final_text(item.app, item.tag)
    if not texts or texts[-1][1].author == "user":
        problems.append("no final model text")
    else:
        index, last = texts[-1]
        if (got := " ".join(_texts(last))) != expected:
            problems.append("wrong final text")
            detail = f"got {got!r} from {last.author}, expected {expected!r}"
        if any(_has_payload(e) for e in events[index + 1:]):
            problems.append("events after the final text")
    return problems, detail


def most_worker_deaths(check: redis.Redis, items: list[Planned]) -> int:
    """The most attempts of one call that died with their worker (the watchdog's count)."""
    most = 0
    for item in items:
        jobs = retrying(lambda i=item: check.hgetall(keys.invocation_jobs(i.app, i.invocation_id)),
                        "deaths")
        most = max([most, *(int(v) for k, v in jobs.items() if k.startswith("k:"))])
    return most


def classify_invocations(client: Client, items: list[Planned], result: RunResult
                         ) -> dict[str, InvocationRecord]:
    records: dict[str, InvocationRecord] = {}
    for item in items:
        record = retrying(lambda i=item: client.status(i.app, i.invocation_id), "status")
        if record is None:
            result.never_recorded += 1
            result.example("never recorded", f"{item.invocation_id} ({item.app})")
            continue
        records[item.invocation_id] = record
        status = record.status
        if status is InvocationStatus.COMPLETED:
            events = retrying(lambda i=item: client.events(i.app, i.invocation_id), "events")
            problems, detail = completion_problems(item, events)
            if problems:
                result.falsely_completed += 1
                result.false_reasons.update(problems)
                result.example("falsely completed", f"{item.invocation_id} ({item.app}): "
                               + "; ".join(problems) + (f" ({detail})" if detail else ""))
            else:
                result.completed += 1
        elif status.is_finished:
            result.failed += 1
            error = record.error if status is InvocationStatus.FAILED else "cancelled"
            result.errors[UUID.sub("<id>", str(error))[:240]] += 1
            result.example("failed", f"{item.invocation_id} ({item.app})")
        else:
            result.stuck += 1
            pending = f", {len(record.pending_calls)} pending call(s)" if record.pending_calls else ""
            result.stuck_statuses[status.value] += 1
            result.example("stuck", f"{item.invocation_id} ({item.app}): {status.value}{pending}")
    return records


async def _read_sessions(url: str, sessions: list[tuple[str, str, str]]) -> list[list[Event]]:
    service = RedisSessionService(redis_url=url)
    try:
        logs = []
        for app, user_id, session_id in sessions:
            session = await service.get_session(app_name=app, user_id=user_id, session_id=session_id)
            logs.append(list(session.events) if session is not None else [])
        return logs
    finally:
        await service.aclose()


def interleaving_ok(events: list[Event]) -> tuple[bool, bool]:
    """The rule of the module docstring: leave an invocation only while it is paused.

    Returns (rule kept, some invocation came back after another one ran during its pause).
    """
    open_calls: dict[str, set[str]] = defaultdict(set)
    left_unpaused: set[str] = set()
    left_paused: set[str] = set()
    came_back = False
    previous: str | None = None
    for event in events:
        inv = event.invocation_id
        if previous is not None and inv != previous:
            (left_paused if open_calls[previous] else left_unpaused).add(previous)
            if inv in left_unpaused:
                return False, came_back
            came_back = came_back or inv in left_paused
        for response in event.get_function_responses():
            open_calls[inv].discard(response.id or "")
        long_running = event.long_running_tool_ids or set()
        open_calls[inv] |= {c.id for c in event.get_function_calls() if c.id in long_running}
        previous = inv
    return True, came_back


def starts_in_order(events: list[Event], order: dict[str, int]) -> bool:
    firsts: list[int] = []
    for event in events:
        position = order.get(event.invocation_id)
        if position is not None and position not in firsts:
            firsts.append(position)
    return firsts == sorted(firsts)


def check_sessions(url: str, plan: Plan, items: list[Planned], result: RunResult) -> list[list[Event]]:
    logs = retrying(lambda: asyncio.run(_read_sessions(url, plan.sessions)), "sessions")
    order = {i.invocation_id: i.index for i in items}
    for (app, _, session_id), events in zip(plan.sessions, logs, strict=True):
        ok, came_back = interleaving_ok(events)
        result.paused_interleavings += came_back
        if not ok:
            result.interleaved_sessions += 1
            result.example("interleaved", f"{session_id} ({app})")
        if not starts_in_order(events, order):
            result.out_of_order_sessions += 1
            result.example("out of order", f"{session_id} ({app})")
    answers = Counter(r.id for events in logs for e in events for r in e.get_function_responses())
    result.duplicate_responses = sum(1 for n in answers.values() if n > 1)
    return logs


def check_runs(check: redis.Redis, logs: list[list[Event]], dead_workers: set[int],
               result: RunResult) -> None:
    runs = [json.loads(line) for line in retrying(lambda: check.hvals(RUNS_KEY), "runs")]
    logged_calls = {c.id for events in logs for e in events for c in e.get_function_calls()}
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if run["kind"] == "tool":
            groups[("tool", run["function_call_id"])].append(run)
            if run["function_call_id"] not in logged_calls and run["pid"] not in dead_workers:
                result.orphan_runs += 1
        else:
            groups[("branch", run["invocation_id"], run["agent"])].append(run)
    for key, group in groups.items():
        group.sort(key=lambda r: r["t"])
        for before, again in zip(group, group[1:], strict=False):
            if before["pid"] in dead_workers:
                result.explained_reruns += 1
            else:
                result.unexplained_reruns += 1
                result.example("unexplained re-run", f"{'/'.join(key[1:])}: " + ", then ".join(
                    f"call {r['function_call_id']} pid {r['pid']} at {r['t']:.3f}" for r in (before, again)))


def recovery(records: Iterable[InvocationRecord], faults: list[Fault], result: RunResult) -> None:
    done = [r for r in records if r.status is InvocationStatus.COMPLETED]
    if not done or not faults:
        return
    last = max(done, key=lambda r: r.updated_at)
    result.recovery_seconds = last.updated_at - max(f.wall for f in faults)
    result.last_completed = f"{last.invocation_id} ({last.app_name})"


# -- one run ----------------------------------------------------------------------------------

def process_settings(args: argparse.Namespace) -> dict[str, str]:
    settings = {
        "lease_ttl_seconds": str(args.lease_ttl),
        "lease_retry_seconds": str(args.lease_retry),
        "visibility_timeout_seconds": str(args.visibility_timeout),
        # The watchdog's timing, scaled like the lease TTL: a silent worker is noticed after
        # 3 heartbeats, a vanished message after --lost-after.
        "job_heartbeat_seconds": str(args.heartbeat),
        "job_lost_after_seconds": str(args.lost_after),
        "watchdog_interval_seconds": "0.5",
        "tool_max_attempts": str(args.max_attempts),
        "broker_transport_options": json.dumps({
            "unacked_restore_interval": args.restore_interval, "unacked_restore_throttle": 1}),
    }
    for pair in args.setting:
        key, _, value = pair.partition("=")
        settings[key.strip().lower().removeprefix("adk_celery_")] = value
    return settings


def run_once(args: argparse.Namespace, run: int, binary: str) -> RunResult:
    seed = args.seed + run - 1
    rng = random.Random(f"plan-{seed}")
    result = RunResult()
    began = time.monotonic()
    with ExitStack() as stack:
        server = AofRedis(binary)
        stack.callback(server.close)
        url = server.start()
        procs = Processes(stack_env(url, APP_SPECS, **process_settings(args)), args)
        stack.callback(procs.close)
        procs.top_up()
        client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=args.lease_retry))
        stack.callback(client.close)
        check = redis.Redis.from_url(url, decode_responses=True)
        stack.callback(check.close)
        plan = make_plan(args, rng)
        for app, user_id, session_id in plan.sessions:
            client.create_session(app, user_id, session_id=session_id)
        items = [item for burst in plan.bursts for item in burst]
        log(f"  stack up in {time.monotonic() - began:.1f} s: {len(procs.live)} processes, Redis on "
            f"port {server.port}; {len(items)} invocations on {len(plan.sessions)} sessions in "
            f"{len(plan.bursts)} bursts")

        t0 = time.monotonic()
        chaos = Chaos(procs, server, args, random.Random(f"faults-{seed}"), t0)
        chaos.start()
        stack.callback(chaos.halt)
        retries = [0]
        enqueue_all(client, plan, args.enqueue_seconds, rng, retries)
        result.enqueue_retries = retries[0]
        log(f"    [{time.monotonic() - t0:6.1f} s] all {len(items)} enqueued")
        if not args.no_faults:
            chaos.stop.wait(max(0.0, t0 + args.fault_seconds - time.monotonic()))
        chaos.faulting.clear()
        log(f"    [{time.monotonic() - t0:6.1f} s] faults stopped; settling (up to {args.settle:.0f} s)")
        settle(client, items, time.monotonic() + args.settle, t0)
        time.sleep(args.grace)
        log(f"    [{time.monotonic() - t0:6.1f} s] classifying")

        result.planned = len(items)
        result.enqueued = sum(i.enqueued for i in items)
        records = classify_invocations(client, [i for i in items if i.enqueued], result)
        result.most_deaths = most_worker_deaths(check, [i for i in items if i.enqueued])
        logs = check_sessions(url, plan, items, result)
        chaos.halt()
        if chaos.error is not None:
            log(f"  fault thread error: {chaos.error!r}")
        procs.reap_exits()
        check_runs(check, logs, procs.dead_worker_pids(), result)
        result.exited_processes = len(procs.exits)
        # Diagnostic only: kombu's restore lock; a worker killed while holding it (or cut off
        # from Redis) leaves it for unacked_mutex_expire (300 s): no unacked job is restored.
        result.restore_lock_ttl = retrying(lambda: check.ttl("unacked_mutex"), "ttl")
        result.kills = Counter({k: len(v) for k, v in procs.killed.items()})
        result.redis_fault = chaos.redis_fault
        recovery(records.values(), chaos.faults, result)
        result.last_fault_at = max((f.at for f in chaos.faults), default=None)
        result.failed_starts = procs.failed_starts
        if not args.no_faults:
            result.recovery_limit = args.recovery_ttls * args.lease_ttl
        for gone in procs.exits:
            result.example("exited", f"{gone.kind} {gone.name} pid {gone.pid} code {gone.code}: "
                           + " | ".join(gone.tail[-3:]))
        if args.logs is not None:
            procs.write_logs(args.logs, f"run{run}")
            (args.logs / f"run{run}-redis.log").write_text(server.log())
    result.seconds = time.monotonic() - began
    return result


# -- output ------------------------------------------------------------------------------------

ROWS = [  # (label, RunResult attribute, column heading of the multi-run table)
    ("completed", "completed", "completed"),
    ("falsely completed", "falsely_completed", "false-ok"),
    ("failed", "failed", "failed"),
    ("stuck", "stuck", "stuck"),
    ("never recorded", "never_recorded", "no-record"),
    ("duplicate FunctionResponses", "duplicate_responses", "dup-resp"),
    ("tool re-runs not explained by a killed worker", "unexplained_reruns", "re-runs"),
    ("sessions interleaved outside pauses", "interleaved_sessions", "interleave"),
    ("sessions started out of order", "out_of_order_sessions", "order"),
    ("processes that exited by themselves", "exited_processes", "exited"),
]


def recovery_text(result: RunResult, lease_ttl: float) -> str:
    if result.recovery_seconds is None:
        return "n/a"
    late = "" if result.recovered_in_time else " TOO SLOW"
    return f"{result.recovery_seconds:.1f} s ({result.recovery_seconds / lease_ttl:.1f} lease TTLs){late}"


def print_run(result: RunResult, args: argparse.Namespace, run: int) -> None:
    kills = ", ".join(f"{n} {k}s" for k, n in sorted(result.kills.items())) or "none"
    last = f"; last fault at {result.last_fault_at:.1f} s" if result.last_fault_at is not None else ""
    log(f"\n  -- run {run} summary ({result.seconds:.0f} s; kill -9: {kills}; "
        f"{result.redis_fault or 'no Redis restart'}{last}) --")
    for label, attr, _ in ROWS:
        value = getattr(result, attr)
        suffix = ""
        if attr == "completed":
            suffix = f" / {result.enqueued}" + (
                f" (ENQUEUE FAILED for {result.planned - result.enqueued})"
                if result.enqueued != result.planned else "")
        log(f"  {label:<48}{value:>6}{suffix}")
    limit = f" (target <= {args.recovery_ttls:g} TTLs)" if result.recovery_limit is not None else ""
    log(f"  {'seconds from the last fault to the last completion':<48}  "
        f"{recovery_text(result, args.lease_ttl)}{limit}")
    if result.last_completed:
        log(f"  (last completed: {result.last_completed})")
    if result.restore_lock_ttl > 0:
        log(f"  (kombu's unacked_mutex still held at the end, expires in {result.restore_lock_ttl} s: "
            "no worker restores unacked jobs until then)")
    log(f"  (info: re-runs explained by a killed worker {result.explained_reruns}, most attempts "
        f"of one call that died with their worker {result.most_deaths} (limit "
        f"{args.max_attempts}), runs of calls "
        f"not in the log {result.orphan_runs}, enqueue retries {result.enqueue_retries}, failed "
        f"process starts {result.failed_starts}, sessions "
        f"where an invocation resumed after another one ran in its pause {result.paused_interleavings})")
    for error, n in result.errors.most_common():
        log(f"    failed x{n}: {error}")
    for reason, n in result.false_reasons.most_common():
        log(f"    falsely completed x{n}: {reason}")
    if result.stuck_statuses:
        log("    stuck by status: " + ", ".join(f"{s} {n}" for s, n in result.stuck_statuses.items()))
    for category, examples in result.examples.items():
        for text in examples:
            log(f"    e.g. {category}: {text}")
    log(f"  TARGET {'MET' if result.target_met else 'MISSED'} (run {run})")


def print_totals(results: list[RunResult], args: argparse.Namespace) -> None:
    if len(results) > 1:
        log(f"\n== {len(results)} runs ==")
        log("  run " + "".join(f"{heading:>11}" for _, _, heading in ROWS) + "   recovery   target")
        for n, r in enumerate(results, 1):
            log(f"  {n:>3} " + "".join(f"{getattr(r, attr):>11}" for _, attr, _ in ROWS)
                + f"   {recovery_text(r, args.lease_ttl)}   {'met' if r.target_met else 'MISSED'}")
    totals = {attr: sum(getattr(r, attr) for r in results) for _, attr, _ in ROWS}
    enqueued = sum(r.enqueued for r in results)
    met = sum(r.target_met for r in results)
    recoveries = [r.recovery_seconds for r in results if r.recovery_seconds is not None]
    worst = f"{max(recoveries):.1f} s" if recoveries else "n/a"
    log(f"\nTOTAL redis-mode={'none' if args.no_faults else args.redis_mode} runs={len(results)} "
        f"target-met={met}/{len(results)} completed={totals['completed']}/{enqueued} "
        + " ".join(f"{attr}={totals[attr]}" for _, attr, _ in ROWS[1:])
        + f" worst-recovery={worst}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--invocations", type=int, default=300)
    p.add_argument("--sessions", type=int, default=60)
    p.add_argument("--orchestrators", type=int, default=2)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--worker-concurrency", type=int, default=8)
    p.add_argument("--redis-mode", choices=["shutdown", "kill9", "none"], default="shutdown")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kill-min", type=float, default=2.0)
    p.add_argument("--kill-max", type=float, default=4.0)
    p.add_argument("--lease-ttl", type=float, default=5.0)
    p.add_argument("--lease-retry", type=float, default=0.2)
    p.add_argument("--visibility-timeout", type=int, default=10)
    p.add_argument("--restore-interval", type=float, default=1.0)
    p.add_argument("--heartbeat", type=float, default=1.0,
                   help="ADK_CELERY_JOB_HEARTBEAT_SECONDS (silent worker: lost after 3 beats)")
    p.add_argument("--lost-after", type=float, default=4.0,
                   help="ADK_CELERY_JOB_LOST_AFTER_SECONDS (a vanished message is sent again)")
    p.add_argument("--max-attempts", type=int, default=10,
                   help="ADK_CELERY_TOOL_MAX_ATTEMPTS: deaths of one call's job before it is "
                        "answered with an error (default 3; see the module doc)")
    p.add_argument("--enqueue-seconds", type=float, default=40.0)
    p.add_argument("--fault-seconds", type=float, default=40.0)
    p.add_argument("--redis-at", type=float, default=0.5)
    p.add_argument("--redis-down", type=float, default=1.0)
    p.add_argument("--settle", type=float, default=120.0)
    p.add_argument("--grace", type=float, default=3.0)
    p.add_argument("--burst-max", type=int, default=3)
    p.add_argument("--recovery-ttls", type=float, default=5.0)
    p.add_argument("--no-faults", action="store_true")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--logs", type=Path, default=None)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    if args.sessions < 1 or args.invocations < 1 or args.burst_max < 1 or args.kill_min > args.kill_max:
        p.error("need --sessions >= 1, --invocations >= 1, --burst-max >= 1, --kill-min <= --kill-max")
    return args


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds the ExitStacks: processes and Redis are stopped


def main() -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = parse_args()
    binary = find_redis_server()
    if binary is None:
        sys.exit("redis-server not found: apt-get install redis-server")
    mode = "no faults" if args.no_faults else f"kill -9 every {args.kill_min:g}-{args.kill_max:g} s, " \
        f"Redis restart: {args.redis_mode}"
    log(f"chaos: {args.invocations} invocations, {args.sessions} sessions, {args.orchestrators} "
        f"orchestrators, {args.workers} workers; {mode}; lease TTL {args.lease_ttl:g} s, "
        f"visibility timeout {args.visibility_timeout} s; seed {args.seed}")
    results = []
    for run in range(1, args.runs + 1):
        log(f"\n== run {run}/{args.runs} (seed {args.seed + run - 1}) ==")
        try:
            result = run_once(args, run, binary)
        except Exception:  # a broken run is reported, the next one still runs
            log(f"  RUN CRASHED:\n{traceback.format_exc()}")
            result = RunResult(planned=args.invocations)
        print_run(result, args, run)
        results.append(result)
    print_totals(results, args)


if __name__ == "__main__":
    main()
