"""What the HTTP hop costs: ``POST /run`` of ``adk-celery api`` beside ``Client`` in one run.

    .venv/bin/python bench/http_api.py [--invocations 200] [--burst 200] [--bursts 5]
        [--load raw|httpx] [--latency-load httpx|raw]

Starts a fresh ``redis-server``, one orchestrator and one worker (``adk-celery`` CLI
defaults) and one ``adk-celery api`` on loopback, its output to a file
(:class:`tests.support.processes.FileLoggedProcess` says why). The app is ``_latency_apps.py``'s: one
remote long-running tool that a worker answers at once, then a final text.

- latency: sequential invocations, each on a session made beforehand. ``client``:
  ``Client.enqueue`` then ``Client.wait`` until completed; ``http``: one ``POST /run`` that
  returns when the run is over (httpx, one kept-alive connection). p50 of each, the two
  alternating one invocation at a time (a machine whose load drifts during the run weighs
  on both alike). Target: http p50 - client p50 <= 1.5 ms. httpx's own work (about 0.3 ms
  of CPU per request here) is part of that hop; ``--latency-load raw`` sends the requests
  with ``_raw_http.py``'s minimal blocking client instead, to see the server's part. The
  CPU time the api process spent per ``/run`` is printed beside (on a machine this busy,
  a process woken for each request spends about twice what it does in a burst).
- throughput: ``--burst`` invocations at once. ``client``: enqueue all, then wait for each;
  ``http``: that many concurrent ``POST /run``, one per connection, the connections opened
  before the clock starts (as the ``Client``'s Redis connection is). Target: http >= 80% of
  the client's invocations/s. Medians over ``--bursts`` bursts of each, alternating. The
  load generator is ``_raw_http.py``'s minimal client: httpx's AsyncClient costs more CPU
  per request than the server does, and shares the machine with it (``--load httpx``
  measures through it anyway). The CPU time the api process spent per invocation of the
  bursts is printed beside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench._raw_http import RawConnection, RawSyncConnection  # noqa: E402
from config import Settings  # noqa: E402
from orchestrator.distributed.models import InvocationStatus  # noqa: E402
from tests.support.processes import (  # noqa: E402
    FileLoggedProcess,
    stack_env,
    start_celery_process,
)
from tests.support.redis_server import free_port, redis_server  # noqa: E402
from workers.client import Client  # noqa: E402

APP_SPECS = "bench._latency_apps:remote_tool_app"
APP = "remote_tool"
USER = "bench"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def start_api(env: dict[str, str], log: Path) -> tuple[FileLoggedProcess, str]:
    port = free_port()
    api = FileLoggedProcess("api", [sys.executable, "-m", "workers.cli", "api", "--port",
                                    str(port)], env, log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return api, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or api.proc.poll() is not None:
            raise SystemExit(f"the api did not start:\n{api.output()}")
        time.sleep(0.05)


def run_body(session_id: str) -> dict[str, object]:
    return {"appName": APP, "userId": USER, "sessionId": session_id,
            "newMessage": {"role": "user", "parts": [{"text": "go"}]}}


def client_once(client: Client, session_id: str) -> float:
    start = time.perf_counter()
    invocation_id = client.enqueue(APP, USER, "go", session_id=session_id)
    record = client.wait(APP, invocation_id, timeout=30, until=InvocationStatus.FINISHED)
    elapsed = time.perf_counter() - start
    assert record.status is InvocationStatus.COMPLETED, record.error
    return elapsed


def ended_with_text(events: list[dict[str, object]]) -> bool:
    """True if the last event of a /run reply is the final text (the run went to its end)."""
    content = events[-1].get("content") if events else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return bool(parts) and isinstance(parts[0], dict) and "text" in parts[0]


def http_once(http: httpx.Client | RawSyncConnection, base: str, session_id: str) -> float:
    if isinstance(http, RawSyncConnection):
        start = time.perf_counter()
        status, body = http.request("POST", "/run", run_body(session_id))
        elapsed = time.perf_counter() - start
        assert status == 200 and ended_with_text(json.loads(body)), body
        return elapsed
    start = time.perf_counter()
    reply = http.post(f"{base}/run", json=run_body(session_id), timeout=30)
    elapsed = time.perf_counter() - start
    assert reply.status_code == 200 and ended_with_text(reply.json()), reply.text
    return elapsed


def client_burst(client: Client, sessions: list[str]) -> float:
    start = time.perf_counter()
    ids = [client.enqueue(APP, USER, "go", session_id=s) for s in sessions]
    for invocation_id in ids:
        assert client.wait(APP, invocation_id, timeout=120, until=InvocationStatus.FINISHED).status is (
            InvocationStatus.COMPLETED)
    return len(sessions) / (time.perf_counter() - start)


async def http_burst(base: str, sessions: list[str]) -> float:
    limits = httpx.Limits(max_connections=len(sessions), max_keepalive_connections=len(sessions))
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as http:
        start = time.perf_counter()
        replies = await asyncio.gather(*(http.post("/run", json=run_body(s)) for s in sessions))
        elapsed = time.perf_counter() - start
    failed = [r for r in replies if r.status_code != 200]
    assert not failed, (f"{len(failed)} of {len(replies)} failed: "
                        f"{failed[0].status_code} {failed[0].text[:300]}")
    return len(sessions) / elapsed


async def raw_burst(base: str, sessions: list[str]) -> float:
    host, port = base.removeprefix("http://").split(":")
    connections = [await RawConnection.open(host, int(port)) for _ in sessions]
    try:
        start = time.perf_counter()
        replies = await asyncio.gather(*(c.request("POST", "/run", run_body(s))
                                         for c, s in zip(connections, sessions, strict=True)))
        elapsed = time.perf_counter() - start
    finally:
        for connection in connections:
            await connection.close()
    failed = [(status, body) for status, body in replies if status != 200]
    assert not failed, f"{len(failed)} of {len(replies)} failed: {failed[0][0]} {failed[0][1][:300]!r}"
    return len(sessions) / elapsed


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) of a process so far; None where /proc is not there."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_latency(client: Client, api: FileLoggedProcess, base: str, invocations: int,
                    load: str) -> None:
    """Sequential invocations, client and http alternating one by one."""
    times: dict[str, list[float]] = {"client": [], "http": []}
    host, port = base.removeprefix("http://").split(":")
    http = httpx.Client() if load == "httpx" else RawSyncConnection(host, int(port))
    try:
        for _ in range(20):  # warm-up both paths
            client_once(client, client.create_session(APP, USER).id)
            http_once(http, base, client.create_session(APP, USER).id)
        pairs = [(client.create_session(APP, USER).id, client.create_session(APP, USER).id)
                 for _ in range(invocations)]
        before = cpu_seconds(api.pid)
        for for_client, for_http in pairs:
            times["client"].append(client_once(client, for_client))
            times["http"].append(http_once(http, base, for_http))
        after = cpu_seconds(api.pid)
    finally:
        http.close()
    client_p50, http_p50 = (statistics.median(times[k]) for k in ("client", "http"))
    halves = [statistics.median(times[k][h * invocations // 2:(h + 1) * invocations // 2])
              for h in (0, 1) for k in ("http", "client")]
    print(f"\n== latency: one invocation with one remote tool, {invocations} each, alternating "
          f"({load} client) ==")
    print(f"  client p50 {ms(client_p50)}, http /run p50 {ms(http_p50)}: the HTTP hop adds "
          f"{ms(http_p50 - client_p50)} (target <= 1.50 ms) "
          f"{'OK' if http_p50 - client_p50 <= 0.0015 else 'MISSED'}")
    print(f"  (first half adds {ms(halves[0] - halves[1])}, second half {ms(halves[2] - halves[3])})")
    if before is not None and after is not None:
        print(f"  the api process spent {ms((after - before) / invocations)} of CPU per /run")


def measure_throughput(client: Client, api: FileLoggedProcess, base: str, burst_size: int,
                       bursts: int, load: str) -> None:
    """``bursts`` bursts of each kind, alternating."""
    rates: dict[str, list[float]] = {"client": [], "http": []}
    burst = raw_burst if load == "raw" else http_burst
    api_cpu: list[float] = []
    for _ in range(bursts):
        rates["client"].append(client_burst(client, [client.create_session(APP, USER).id
                                                     for _ in range(burst_size)]))
        ready = [client.create_session(APP, USER).id for _ in range(burst_size)]
        before = cpu_seconds(api.pid)
        try:
            rates["http"].append(asyncio.run(burst(base, ready)))
        except AssertionError:
            print("\n".join(line for line in api.output().splitlines() if "Error" in line)[-3000:])
            raise
        after = cpu_seconds(api.pid)
        if before is not None and after is not None:  # not where /proc is missing
            api_cpu.append(after - before)
    client_rate, http_rate = (statistics.median(rates[k]) for k in ("client", "http"))
    print(f"\n== throughput: {burst_size} invocations at once ({load} load), medians of {bursts} ==")
    print(f"  client {client_rate:.1f}/s (runs {', '.join(f'{r:.0f}' for r in rates['client'])}), "
          f"http {http_rate:.1f}/s (runs {', '.join(f'{r:.0f}' for r in rates['http'])}): "
          f"{http_rate / client_rate:.0%} of the client's (target >= 80%) "
          f"{'OK' if http_rate >= 0.8 * client_rate else 'MISSED'}")
    if api_cpu:
        print(f"  the api process spent {ms(statistics.median(api_cpu) / burst_size)} of CPU per "
              f"/run of the bursts (median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--invocations", type=int, default=200)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--load", choices=("raw", "httpx"), default="raw",
                        help="the bursts' HTTP client (default: the minimal one)")
    parser.add_argument("--latency-load", choices=("httpx", "raw"), default="httpx",
                        help="the sequential requests' HTTP client (default: httpx)")
    args = parser.parse_args()
    with redis_server() as url, tempfile.TemporaryDirectory() as logs:
        env = stack_env(url, APP_SPECS)
        orchestrator = start_celery_process("orchestrator", "http-orch", env)
        worker = start_celery_process("worker", "http-work", env)
        api, base = start_api(env, Path(logs) / "api.log")
        client = Client(Settings(redis_url=url, apps=APP_SPECS))
        try:
            measure_latency(client, api, base, args.invocations, args.latency_load)
            measure_throughput(client, api, base, args.burst, args.bursts, args.load)
        finally:
            client.close()
            api.stop()
            worker.stop()
            orchestrator.stop()


if __name__ == "__main__":
    main()
