"""Jobs lost by the broker or by a dying worker are noticed and dispatched again (the watchdog).

Celery over Redis loses a job in ways nothing in Celery notices: a worker killed mid-tool
leaves its message unacknowledged for the visibility timeout (an hour by default), and a
worker killed between kombu popping the message and recording it as unacknowledged loses it
for good. The orchestrators' watchdog (workers/watchdog.py) finds such calls in the job
journal and dispatches them again with the same call id, or answers them with an error
after the last attempt. Bookkeeping that fails on Redis is retried, never turned into a
second run of the tool.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.jobs import dispatched_job, job_digest, watch_member
from orchestrator.distributed.executor import deliver_result, execute_agent_job
from orchestrator.distributed.models import AgentJob, InvocationStatus, ToolResult
from orchestrator.flows.contents import RUN_BRANCH
from tests.apps import APP_SPECS, PARKED_QUEUE
from tests.apps_extra import APP_SPECS as EXTRA_SPECS
from tests.apps_extra import EXPORT_FAN_SPEC, gate_key, runs_key
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, stack_env, start_celery_process

SPECS = f"{APP_SPECS},{EXTRA_SPECS},{EXPORT_FAN_SPEC}"
FAST_WATCH = {"job_heartbeat_seconds": "0.3", "job_lost_after_seconds": "1",
              "watchdog_interval_seconds": "0.2", "lease_retry_seconds": "0.2"}


def _db(redis_url: str, db: int) -> tuple[str, redis.Redis]:
    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    check = redis.Redis.from_url(url, decode_responses=True, socket_timeout=60)  # long BLPOPs
    check.flushdb()
    return url, check


def _client(url: str):
    from workers.client import Client

    return Client(Settings(redis_url=url, apps=SPECS, lease_retry_seconds=0.2))


def _wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    """Poll Redis state (there is no event to wait on for a message sitting in a list)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _responses(client, app: str, inv: str):
    return [r for e in client.events(app, inv) for r in e.get_function_responses()]


@dataclass
class Stack:
    url: str
    env: dict[str, str]
    check: redis.Redis
    orchestrator: ManagedProcess
    worker: ManagedProcess | None
    client: Any
    stack: ExitStack

    def start_worker(self, name: str, *args: str) -> ManagedProcess:
        worker = start_celery_process("worker", name, self.env, *args)
        self.stack.callback(worker.stop)
        return worker


def _skewed(env: dict[str, str], where: Path, seconds: float) -> dict[str, str]:
    """``env`` for a process whose clock (``time.time``) is ``seconds`` off (< 0: behind).

    A ``sitecustomize`` module in ``where``, first on the process's path, shifts the clock.
    """
    where.mkdir(exist_ok=True)
    (where / "sitecustomize.py").write_text(
        f"import time\n_real = time.time\ntime.time = lambda: _real() + {seconds!r}\n")
    return {**env, "PYTHONPATH": f"{where}{os.pathsep}{env['PYTHONPATH']}"}


@contextlib.contextmanager
def _stack(redis_url: str, db: int, *, worker: bool = True,
           orchestrator_env: Callable[[dict[str, str]], dict[str, str]] | None = None,
           **settings: str) -> Iterator[Stack]:
    """Redis db ``db`` flushed, an orchestrator, a worker (unless not wanted) and a client.

    ``orchestrator_env``: what the orchestrator's environment is made of the others'.
    """
    url, check = _db(redis_url, db)
    env = stack_env(url, SPECS, **{**FAST_WATCH, **settings})
    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator = start_celery_process(
            "orchestrator", f"orch-{db}", orchestrator_env(env) if orchestrator_env else env)
        stack.callback(orchestrator.stop)
        running = start_celery_process("worker", f"worker-{db}", env) if worker else None
        if running is not None:
            stack.callback(running.stop)
        client = _client(url)
        stack.callback(client.close)
        yield Stack(url, env, check, orchestrator, running, client, stack)


def test_a_worker_killed_mid_tool_is_noticed_without_waiting_for_the_visibility_timeout(redis_url):
    with _stack(redis_url, 10, worker=False) as s:  # visibility timeout: the default hour
        check, client = s.check, s.client
        first = s.start_worker("doomed-worker")

        inv = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(inv)], timeout=15)
        assert started is not None, first.output()
        pid, call_id = started[1].split()
        assert int(pid) == first.pid
        assert client.wait("fragile", inv, timeout=10).status is InvocationStatus.PAUSED
        [call] = client.calls("fragile", inv)
        assert (call.name, call.where, call.attempt) == ("fragile_step", "running", 1)
        assert call.worker.endswith(f":{first.pid}") and call.last_seen > time.time() - 5
        first.kill()
        second = s.start_worker("heir-worker")

        again = check.blpop([runs_key(inv)], timeout=20)  # the heartbeats stopped: attempt 2
        assert again is not None, s.orchestrator.output()
        assert again[1] == f"{second.pid} {call_id}"
        [call] = client.calls("fragile", inv)
        assert call.attempt == 2 and call.worker.endswith(f":{second.pid}")
        check.lpush(gate_key(inv), "test")
        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert [r.id for r in _responses(client, "fragile", inv)] == [call_id]
        assert check.hget(keys.invocation_jobs("fragile", inv), f"a:{call_id}") == "2"
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["1", "2"]  # tools see it


def test_on_a_prefork_worker_the_child_running_the_job_is_its_worker(redis_url):
    # The worker id was computed at import, in the main process before it forked its pool:
    # status, task results and the watchdog named the healthy parent, never the child that
    # ran the tool (and died).
    with _stack(redis_url, 9, worker=False) as s:
        check, client = s.check, s.client
        parent = s.start_worker("prefork-worker", "--pool", "prefork")
        inv = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(inv)], timeout=15)
        assert started is not None, parent.output()
        child, call_id = int(started[1].split()[0]), started[1].split()[1]
        assert child != parent.pid
        assert client.wait("fragile", inv, timeout=10).status is InvocationStatus.PAUSED
        [call] = client.calls("fragile", inv)
        assert call.where == "running" and call.worker.endswith(f":{child}"), call
        # The beats (every 0.3 s here) write the name again: the child's too.
        _wait_for(lambda: client.calls("fragile", inv)[0].last_seen != call.last_seen,
                  what="a heartbeat")
        assert client.calls("fragile", inv)[0].worker.endswith(f":{child}")

        os.kill(child, 9)  # the child dies; its parent lives on and forks another
        again = check.blpop([runs_key(inv)], timeout=20)
        assert again is not None, s.orchestrator.output()
        heir = int(again[1].split()[0])
        assert heir not in (child, parent.pid) and again[1].split()[1] == call_id
        lost = [line for line in s.orchestrator.lines if "dispatching attempt 2" in line]
        assert len(lost) == 1 and f":{child} stopped" in lost[0], lost
        [call] = client.calls("fragile", inv)
        assert call.attempt == 2 and call.worker.endswith(f":{heir}"), call
        check.lpush(gate_key(inv), "test")
        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert [r.response["pid"] for r in _responses(client, "fragile", inv)] == [heir]


def test_a_live_job_on_a_worker_whose_clock_is_behind_is_not_taken_for_lost(redis_url, tmp_path):
    # Beats were stamped with the worker's clock and judged by the watchdog's: a worker a
    # minute behind looked silent for a minute from its first beat, its job was sent again
    # (the tool ran twice) and its attempt counted as a death. Both read Redis's clock now.
    with _stack(redis_url, 10, worker=False) as s:
        check, client = s.check, s.client
        behind = start_celery_process("worker", "behind-worker",
                                      _skewed(s.env, tmp_path / "skewed", -60.0))
        s.stack.callback(behind.stop)
        inv = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(inv)], timeout=15)
        assert started is not None, behind.output()

        # Three silence limits (0.9 s each here) with the tool running and beating: waiting
        # that long is the behaviour under test (a job taken for lost is sent again at once).
        time.sleep(3.0)
        check.lpush(gate_key(inv), "test")
        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)

        assert record.status is InvocationStatus.COMPLETED, record.error
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["1"], s.orchestrator.output()
        assert check.llen(runs_key(inv)) == 0  # no second start (the first was taken above)
        assert not check.hget(keys.invocation_jobs("fragile", inv), f"k:{started[1].split()[1]}")


def test_a_live_job_is_not_taken_for_lost_while_redis_holds_writes_back(redis_url):
    # CLIENT PAUSE ... WRITE (as a failover does) holds the workers' beats, which are
    # scripts, while reads go on: the watchdog read Redis's clock at once, judged a silence
    # only the pause made, sent the live job again (the tool ran twice) and counted a death
    # (at the tool's limit, the model read "its worker died"). Its clock read waits now.
    with _stack(redis_url, 10) as s:
        check, client = s.check, s.client
        inv = client.enqueue("fragile", "u", "go")
        started = check.blpop([runs_key(inv)], timeout=15)
        assert started is not None, s.orchestrator.output()
        call_id = started[1].split()[1]

        # Over three silence limits (0.9 s each here) of held writes, the tool running on:
        # the pause's length is the scenario, not a wait for something to happen.
        check.execute_command("CLIENT", "PAUSE", "3000", "WRITE")
        time.sleep(3.5)
        check.lpush(gate_key(inv), "test")
        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)

        assert record.status is InvocationStatus.COMPLETED, record.error
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["1"], s.orchestrator.output()
        assert not check.hget(keys.invocation_jobs("fragile", inv), f"k:{call_id}")
        [answer] = _responses(client, "fragile", inv)
        assert "error" not in (answer.response or {}), answer.response


def _lose_the_parked_job(check: redis.Redis) -> None:
    """Take the job's message out of its queue, as a worker killed right after popping it."""
    _wait_for(lambda: check.llen(PARKED_QUEUE), what="the job in its queue")
    assert check.lpop(PARKED_QUEUE) is not None


def test_a_job_lost_between_the_broker_and_a_worker_is_dispatched_again(redis_url):
    with _stack(redis_url, 11, worker=False) as s:
        check, client = s.check, s.client

        inv = client.enqueue("parked", "u", "lost-once")
        assert client.wait("parked", inv, timeout=10).status is InvocationStatus.PAUSED
        [call] = client.calls("parked", inv)
        assert (call.name, call.where, call.attempt) == ("parked_tool", "queued", 1)
        _lose_the_parked_job(check)
        _wait_for(lambda: client.calls("parked", inv)[0].where == "retrying", what="attempt 2")
        s.start_worker("parked-worker", "-Q", PARKED_QUEUE)

        record = client.wait("parked", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, s.orchestrator.output())
        [answer] = _responses(client, "parked", inv)
        assert answer.response == {"tag": "lost-once"}
        assert check.hget(keys.invocation_jobs("parked", inv), f"a:{answer.id}") == "2"


def test_a_call_whose_message_is_lost_again_and_again_is_answered_with_an_error(redis_url):
    # A job whose message never gets acknowledged (its worker wedged) comes back as lost
    # copy after copy: bounded like deaths, by tool_max_attempts, never sent for ever.
    with _stack(redis_url, 11, worker=False, tool_max_attempts="2") as s:
        check, client = s.check, s.client
        inv = client.enqueue("parked", "u", "lost-twice")
        assert client.wait("parked", inv, timeout=10).status is InvocationStatus.PAUSED
        _lose_the_parked_job(check)
        _wait_for(lambda: client.calls("parked", inv)[0].attempt == 2, what="attempt 2")
        _lose_the_parked_job(check)

        record = client.wait("parked", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, s.orchestrator.output())
        [answer] = _responses(client, "parked", inv)
        assert "'parked_tool' did not finish" in answer.response["error"]
        assert "its job was lost in 2 of 2 attempt(s)" in answer.response["error"]
        assert check.llen(PARKED_QUEUE) == 0  # no third copy sent
        assert check.get("test:parked:lost-twice") is None  # never ran


def test_an_answered_call_keeps_no_copy_of_its_message_and_a_late_copy_is_skipped(redis_url):
    with _stack(redis_url, 11, worker=False) as s:
        check, client = s.check, s.client
        inv = client.enqueue("parked", "u", "answered-once")
        assert client.wait("parked", inv, timeout=10).status is InvocationStatus.PAUSED
        message = _wait_for(lambda: check.lindex(PARKED_QUEUE, 0), what="the job in its queue")
        worker = s.start_worker("parked-worker", "-Q", PARKED_QUEUE)
        record = client.wait("parked", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, s.orchestrator.output())
        [answer] = _responses(client, "parked", inv)

        # The journal kept the whole broker message to find or resend the job: not needed
        # once the call is answered (it was most of the invocation's keys in Redis).
        jobs = keys.invocation_jobs("parked", inv)
        assert check.hget(jobs, f"c:{answer.id}") is None
        assert check.memory_usage(jobs) < 1024
        check.lpush(PARKED_QUEUE, message)  # a copy delivered again, late
        worker.wait_for_line(lambda line: "already answered" in line)
        assert [r.id for r in _responses(client, "parked", inv)] == [answer.id]


def test_a_call_whose_worker_died_running_it_too_often_is_answered_with_an_error(redis_url):
    with _stack(redis_url, 12, worker=False, tool_max_attempts="1") as s:
        check, client = s.check, s.client
        doomed = s.start_worker("doomed-worker")

        inv = client.enqueue("fragile", "u", "go")
        assert check.blpop([runs_key(inv)], timeout=15) is not None  # running on doomed
        doomed.kill()  # a tool that kills its worker must not be run forever

        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        [answer] = _responses(client, "fragile", inv)
        assert "'fragile_step' did not finish" in answer.response["error"]
        assert "died in 1 of 1 attempt" in answer.response["error"]


def test_a_result_that_cannot_be_stored_yet_is_kept_not_computed_again(redis_url):
    # Storing the finished tool's result fails three times, as with Redis restarting.
    with _stack(redis_url, 13, failpoints="worker.before_store=error*3") as s:
        check, client = s.check, s.client

        inv = client.enqueue("fragile", "u", "go")
        check.lpush(gate_key(inv), "test")
        record = client.wait("fragile", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert len(_responses(client, "fragile", inv)) == 1
        assert check.llen(runs_key(inv)) == 1  # the tool ran once
        assert sum("Storing a job's result failed" in line for line in s.worker.lines) == 3


def test_a_call_past_its_deadline_is_answered_with_a_timeout_error(redis_url):
    with _stack(redis_url, 14, tool_timeout_seconds="1") as s:
        check, client = s.check, s.client

        inv = client.enqueue("gated", "u", "never released")  # the tool waits up to 15 s
        record = client.wait("gated", inv, timeout=10, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        [answer] = _responses(client, "gated", inv)
        assert answer.response == {"error": "Tool 'gated_step' timed out: no answer within 1 s."}
        # (a sync tool cannot be stopped: it runs on, and its late answer is dropped)
        # Its worker is alive: the watchdog, which settles the state of an attempt that dies
        # about its deadline, watches the attempt until its task ends (stopped by the answer)
        # and has removed its PROGRESS state itself, and writes no FAILURE on a live worker.
        task_id = f"{inv}:{answer.id}"
        watch = keys.job_watch(Settings(redis_url=s.url).invocations_queue)
        eventually("the watch on the attempt ended",
                   lambda: check.zscore(watch, watch_member("gated", inv, answer.id)) is None)
        assert check.get(f"celery-task-meta-{task_id}") is None
        assert not check.hexists(keys.invocation_jobs("gated", inv), f"t:{answer.id}")
        # The tool's own late answer never replaces the timeout (first answer wins).
        check.lpush(gate_key(inv), "late")
        s.worker.wait_for_line(lambda line: "gated_step" in line and "succeeded" in line)
        assert [r.response for r in _responses(client, "gated", inv)] == [answer.response]


@pytest.mark.parametrize("skew", [pytest.param(60.0, id="ahead"), pytest.param(-60.0, id="behind")])
def test_a_calls_deadline_does_not_move_with_the_orchestrators_clock(redis_url, tmp_path, skew):
    # The deadline was the dispatching orchestrator's time.time() + the timeout, judged by the
    # watchdog against Redis's clock: a minute ahead, the call waited a minute more; a
    # minute behind, it was answered before its worker could start. Redis's clock sets it now.
    with _stack(redis_url, 14, tool_timeout_seconds="2",
                orchestrator_env=lambda env: _skewed(env, tmp_path / "skewed", skew)) as s:
        check, client = s.check, s.client

        inv = client.enqueue("fragile", "u", "go")  # the tool waits at its gate up to 15 s
        started = check.blpop([runs_key(inv)], timeout=15)  # it started: not answered before
        assert started is not None, s.orchestrator.output()
        record = client.wait("fragile", inv, timeout=10, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error, s.orchestrator.output())
        [answer] = _responses(client, "fragile", inv)
        assert answer.response == {"error": "Tool 'fragile_step' timed out: no answer within 2 s."}
        # Its deadline, by Redis's clock, passed within the last few seconds: not a minute off.
        deadline = float(check.hget(keys.invocation_jobs("fragile", inv), f"d:{answer.id}"))
        seconds, micros = check.time()
        assert seconds + micros / 1e6 - 10 < deadline <= seconds + micros / 1e6


def test_status_says_a_call_waits_for_an_answer_from_outside(redis_url):
    with _stack(redis_url, 15) as s:
        client = s.client

        inv = client.enqueue("approval", "u", "pay")
        assert client.wait("approval", inv, timeout=10).status is InvocationStatus.PAUSED
        # The tool ran on the worker and returned nothing: the answer comes from outside.
        call = _wait_for(lambda: next((c for c in client.calls("approval", inv)
                                       if c.where == "waiting for an answer"), None),
                         what="the call waiting for an answer")
        assert call.name == "request_approval" and call.worker is None
        client.answer("approval", inv, call.function_call_id, {"approved": True})
        assert client.wait("approval", inv, timeout=10, until=InvocationStatus.FINISHED).status is InvocationStatus.COMPLETED
        assert client.calls("approval", inv) == []


def test_cancelling_an_invocation_stops_its_running_async_tool(redis_url):
    with _stack(redis_url, 1) as s:
        check, client = s.check, s.client

        inv = client.enqueue("slow", "u", "wait")
        assert check.blpop([runs_key(inv)], timeout=15) is not None  # the tool is running
        started = time.monotonic()
        client.cancel("slow", inv)
        assert client.wait("slow", inv, timeout=10, until=InvocationStatus.FINISHED).status is InvocationStatus.CANCELLED
        # The next heartbeat sees the cancellation and stops the tool (it would wait 30 s).
        s.worker.wait_for_line(lambda line: "stopped: invocation cancelled" in line, timeout=10)
        assert check.llen(runs_key(inv)) == 0  # and it never ran again
        assert time.monotonic() - started < 10
        # No answer of the tool's: only the cancel's error answer that closes its call.
        assert [r.response for r in _responses(client, "slow", inv)] == [
            {"error": "Invocation was cancelled."}]


def test_an_async_tool_past_its_deadline_is_stopped(redis_url):
    with _stack(redis_url, 6, tool_timeout_seconds="1") as s:
        client = s.client

        inv = client.enqueue("slow", "u", "wait")  # the async tool would wait 30 s
        record = client.wait("slow", inv, timeout=10, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        [answer] = _responses(client, "slow", inv)
        assert "timed out" in answer.response["error"]
        s.worker.wait_for_line(lambda line: "stopped: invocation cancelled or call answered" in line,
                             timeout=10)


def _silenced(check: redis.Redis, app: str, inv: str, call_id: str) -> None:
    """The call's running attempt as a worker whose beats stopped a minute ago leaves it
    (paused, cut off from Redis: taken for dead, yet it may still be running)."""
    jobs = keys.invocation_jobs(app, inv)
    run = json.loads(check.hget(jobs, f"r:{call_id}"))
    check.hset(jobs, f"r:{call_id}", json.dumps({**run, "beat": run["beat"] - 60}))


def test_a_copy_of_a_running_job_runs_only_once_its_worker_is_taken_for_dead(redis_url):
    """A copy of a job's message while its attempt runs (a replay, or kombu restoring the
    message of a tool that outlived the visibility timeout) runs nothing while the running
    worker beats; once its beats stopped for ``lost_after`` it is taken for dead, and a copy
    runs (at least once)."""
    with _stack(redis_url, 5, worker=False) as s:
        inv = s.client.enqueue("parked", "u", "go")
        record = s.client.wait("parked", inv, timeout=20)
        [call_id] = record.pending_calls
        sent = dispatched_job(json.loads(s.check.hget(keys.invocation_jobs("parked", inv),
                                                      f"c:{call_id}")))
        from workers.runtime import Runtime

        runtime = Runtime(Settings(redis_url=s.url, apps=SPECS))
        s.stack.callback(runtime.close)

        async def claim(worker: str) -> str:
            services = await runtime.services()
            return await services.store.claim_job("parked", inv, call_id, attempt=1,
                                                  worker=worker, branch=False, lost_after=15.0,
                                                  digest=job_digest(sent))

        assert runtime.run(claim("w-a:1")) == "run"
        assert runtime.run(claim("w-b:2")) == "running"  # w-a beats: one run at a time
        _silenced(s.check, "parked", inv, call_id)
        assert runtime.run(claim("w-b:2")) == "run"


def test_a_replayed_job_message_does_not_run_the_tool_again_while_it_runs(redis_url):
    """Anyone who can read the broker can send a dispatched job's message again: the copy is
    skipped while the tool runs, which runs once; the invocation completes once."""
    from workers.celery_app import TASK_RUN_TOOL, create_celery_app

    with _stack(redis_url, 4) as s:
        inv = s.client.enqueue("fragile", "u", "go")
        started = s.check.blpop([runs_key(inv)], timeout=15)
        assert started is not None, s.worker.output()
        call_id = started[1].split()[1]
        sent = dispatched_job(json.loads(s.check.hget(keys.invocation_jobs("fragile", inv),
                                                      f"c:{call_id}")))
        sender = create_celery_app(Settings(redis_url=s.url))
        s.stack.callback(sender.close)
        sender.send_task(TASK_RUN_TOOL, kwargs=sent, queue="adk.tools")
        line = s.worker.wait_for_line(lambda text: "Skipped call" in text)
        assert "this attempt is running already" in line

        s.check.lpush(gate_key(inv), "go on")
        record = s.client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert s.check.lrange(runs_key(inv), 0, -1) == []  # the one start was popped above
        assert len(_responses(s.client, "fragile", inv)) == 1


def test_two_runs_of_one_branch_job_commit_one_turn(redis_url):
    """A copy of a branch's job delivered again while the first run goes on, its worker
    taken for dead (its beats stopped), runs too (at least once): the branch's turn committed
    is the first stored, never a second one beside it."""
    from workers.runtime import Runtime

    with _stack(redis_url, 7, worker=False) as s:  # the test runs the branch job itself, twice
        inv = s.client.enqueue("branch_pause", "u", "go")
        record = s.client.wait("branch_pause", inv, timeout=20)
        jobs = keys.invocation_jobs("branch_pause", inv)
        sent = {cid: dispatched_job(json.loads(s.check.hget(jobs, f"c:{cid}")))
                for cid in record.pending_calls}
        [(x_id, x_sent)] = [(cid, job) for cid, job in sent.items() if job["agent_name"] == "x"]
        job = AgentJob.model_validate(x_sent)
        runtime = Runtime(Settings(redis_url=s.url, apps=SPECS))
        s.stack.callback(runtime.close)

        async def run_twice() -> list[Any]:
            services = await runtime.services()
            claims = []
            for worker in ("w-a:1", "w-b:2"):
                claims.append(await services.store.claim_job(
                    "branch_pause", inv, x_id, attempt=1, worker=worker, branch=True,
                    lost_after=15.0, digest=job_digest(x_sent)))
                _silenced(s.check, "branch_pause", inv, x_id)
            assert claims == ["run", "run"]
            results = [await execute_agent_job(job, services.registry,
                                               artifact_service=services.artifacts)
                       for _ in claims]
            key = ("branch_pause", "u", job.session_id)
            return [await deliver_result(services.store, services.queue, "branch_pause", inv,
                                         result, key=key) for result in results]

        stored = runtime.run(run_twice())
        assert [key is not None for key in stored] == [True, False]  # the second is refused
        # x's turn is committed before the record that waits on its ask_human call is saved:
        # a wait between the two returns the pause before it.
        record = _wait_for(lambda: (r := s.client.status("branch_pause", inv)) is not None
                           and "ask_human" in r.pending_tools.values() and r,
                           what="the record waiting on x's ask_human call")
        turns = [e for e in s.client.events("branch_pause", inv)
                 if e.author == "x" and e.get_function_calls()]
        assert len(turns) == 1
        assert sorted(record.pending_tools.values()).count("ask_human") == 1


def test_a_second_run_that_ends_a_branch_its_first_run_paused_is_not_committed(redis_url):
    """Two runs of x's branch job are claimed (a copy delivered again while the first ran,
    or sent again by the watchdog while it was slow): the first pauses on its long-running
    tool (the export starts), the second finds the export done and ends the branch. The
    first stored turn is the branch's: users see x's call once, the invocation waits on that
    call (not paused falsely after a final answer), and its answer ends it with one final
    answer, x's branch continued from that turn."""
    from workers.runtime import Runtime

    app = "export_fan"
    with _stack(redis_url, 6, worker=False) as s:  # the test runs the branch jobs itself
        inv = s.client.enqueue(app, "u", "go")
        record = s.client.wait(app, inv, timeout=20)
        jobs = keys.invocation_jobs(app, inv)
        sent = {cid: dispatched_job(json.loads(s.check.hget(jobs, f"c:{cid}")))
                for cid in record.pending_calls}
        [(x_id, x_sent)] = [(cid, job) for cid, job in sent.items() if job["agent_name"] == "x"]
        [(y_id, y_sent)] = [(cid, job) for cid, job in sent.items() if job["agent_name"] == "y"]
        runtime = Runtime(Settings(redis_url=s.url, apps=SPECS))
        s.stack.callback(runtime.close)
        key = (app, "u", record.session_id)

        async def claim_twice() -> list[str]:
            services = await runtime.services()
            claims = []
            for worker in ("w-a:1", "w-b:2"):
                claims.append(await services.store.claim_job(
                    app, inv, x_id, attempt=1, worker=worker, branch=True, lost_after=15.0,
                    digest=job_digest(x_sent)))
                _silenced(s.check, app, inv, x_id)
            return claims

        async def run(raw: dict[str, Any]) -> tuple[Any, Any]:
            services = await runtime.services()
            result = await execute_agent_job(AgentJob.model_validate(raw), services.registry,
                                             artifact_service=services.artifacts)
            return result, await deliver_result(services.store, services.queue, app, inv,
                                                result, key=key)

        def x_turns() -> list[Any]:
            return [e for e in s.client.events(app, inv) if e.author == "x" and e.get_function_calls()]

        assert runtime.run(claim_twice()) == ["run", "run"]
        first, stored = runtime.run(run(x_sent))
        assert first.response is None and stored is not None  # paused: its turn is stored
        _wait_for(x_turns, what="x's turn")  # and committed, before the second run ends
        second, stored = runtime.run(run(x_sent))
        assert second.response == {"status": "completed"} and stored is None  # refused
        runtime.run(run(y_sent))
        _wait_for(lambda: any(e.author == "y" for e in s.client.events(app, inv)), what="y")
        # y's events are committed before the record that no longer waits for its branch is
        # saved: a wait between the two returns the pause before it.
        record = _wait_for(lambda: (r := s.client.status(app, inv)) is not None
                           and y_id not in r.pending_calls and r,
                           what="the record without y's branch call")
        turns = x_turns()
        assert len(turns) == 1, f"x's turn committed {len(turns)} times"
        [export_id] = [c.id for c in turns[0].get_function_calls()]
        assert record.status is InvocationStatus.PAUSED
        assert record.pending_tools == {x_id: "adk_celery_run_branch", export_id: "check_export"}
        assert not any(e.author == "after" for e in s.client.events(app, inv))

        s.client.answer(app, inv, export_id, {"export": "report", "done": True})
        record = s.client.wait(app, inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        assert record.pending_calls == []
        events = s.client.events(app, inv)
        assert len(x_turns()) == 1
        heard = [p.text for e in events if e.author == "x" and e.content
                 for p in e.content.parts or [] if p.text]
        assert heard == ["x heard {'export': 'report', 'done': True}"]
        finals = [e for e in events if e.author == "after" and e.content and e.content.parts]
        assert len(finals) == 1
        branch_answers = [r.id for e in events for r in e.get_function_responses()
                          if r.name == "adk_celery_run_branch"]
        assert sorted(branch_answers) == sorted(sent)  # each branch answered once


async def test_a_paused_branch_turn_is_the_only_result_its_call_keeps(store):
    """Both stores: once a branch's paused turn is in, no other result of its call is stored
    (another run's turn, its end, an error); a tool's pending placeholder still gives way to
    its answer."""
    def turn(text: str, response: dict[str, Any] | None = None) -> ToolResult:
        return ToolResult(function_call_id="b1", tool_name=RUN_BRANCH, response=response,
                          events=[{"id": text, "author": "x", "invocation_id": "e-1"}])

    assert await store.put_result("app", "e-1", turn("first"))
    assert not await store.put_result("app", "e-1", turn("second"))
    assert not await store.put_result("app", "e-1", turn("ended", {"status": "completed"}))
    assert not await store.put_result("app", "e-1", ToolResult(
        function_call_id="b1", tool_name=RUN_BRANCH, response={"error": "lost"}, error="lost"))
    assert (await store.results("app", "e-1"))["b1"].events[0]["id"] == "first"

    assert await store.put_result("app", "e-1", ToolResult(function_call_id="t1", tool_name="tool"))
    assert await store.put_result("app", "e-1", ToolResult(
        function_call_id="t1", tool_name="tool", response={"ok": True}))
    assert (await store.results("app", "e-1"))["t1"].response == {"ok": True}


def test_without_fast_publish_a_job_waiting_in_its_queue_is_not_taken_for_lost(redis_url):
    """Sent by kombu's own publish, a job's place in its queue is unknown: while the queue
    holds messages the job waits there; it is not dispatched again and again."""
    from tests.apps import PARKED_QUEUE

    with _stack(redis_url, 8, worker=False, fast_publish="false") as s:
        inv = s.client.enqueue("parked", "u", "x")
        assert s.client.wait("parked", inv, timeout=15).status is InvocationStatus.PAUSED
        [call] = s.client.calls("parked", inv)
        member = watch_member("parked", inv, call.function_call_id)
        watch = keys.job_watch(Settings(redis_url=s.url).invocations_queue)
        looks = [s.check.zscore(watch, member)]
        while len(looks) < 4:  # the watchdog looked at it three times since it was sent
            looks.append(_wait_for(lambda: (score := s.check.zscore(watch, member)) != looks[-1]
                                   and score, what="the watchdog's next look"))
        assert s.check.hget(keys.invocation_jobs("parked", inv), f"a:{call.function_call_id}") == "1"
        assert s.check.llen(PARKED_QUEUE) == 1


def _task_result(url: str, task_id: str) -> Any:
    """The task's result as Flower's ``/api/task/result`` reads it (Celery's result backend)."""
    from celery.result import AsyncResult

    from workers.celery_app import create_celery_app

    return AsyncResult(task_id, app=create_celery_app(Settings(redis_url=url)))


def _dead_attempt_running(s: Stack) -> tuple[str, str]:
    """A ``fragile`` call that reported progress on a worker now killed: (invocation, its task)."""
    first = s.start_worker("doomed-worker")
    inv = s.client.enqueue("fragile", "u", "go")
    started = s.check.blpop([runs_key(inv)], timeout=15)  # it reported progress, then started
    assert started is not None, first.output()
    task_id = f"{inv}:{started[1].split()[1]}"
    assert _task_result(s.url, task_id).state == "PROGRESS"
    assert '"label": "x"' in s.check.get(f"celery-task-meta-{task_id}")  # the tool's report
    first.kill()
    return inv, task_id


def _assert_lost_as(s: Stack, task_id: str, outcome: str) -> None:
    """The dead attempt's task reads as FAILURE (its worker lost), saying ``outcome``."""
    from celery.exceptions import WorkerLostError

    result = _task_result(s.url, task_id)
    assert result.state == "FAILURE"
    assert isinstance(result.result, WorkerLostError)
    reason = str(result.result)
    assert reason.startswith("Worker lost: its worker ") and "no sign of life" in reason
    assert reason.endswith(outcome), reason
    meta_key = f"celery-task-meta-{task_id}"
    assert '"label": "x"' not in s.check.get(meta_key)  # the tool's report is gone with it
    assert 0 < s.check.ttl(meta_key) <= Settings().task_result_ttl_seconds  # it expires


def test_a_killed_workers_progress_state_says_its_worker_was_lost(redis_url):
    with _stack(redis_url, 2, worker=False) as s:  # visibility timeout: the default hour
        check, client = s.check, s.client
        inv, dead = _dead_attempt_running(s)
        second = s.start_worker("heir-worker")

        again = check.blpop([runs_key(inv)], timeout=20)  # attempt 2, settled before it went out
        assert again is not None, s.orchestrator.output()
        _assert_lost_as(s, dead, f"; sent again as attempt 2 (task {dead}:2).")
        # `adk-celery status` (Client.calls) shows the attempt now out, and its own progress.
        [call] = client.calls("fragile", inv)
        assert (call.attempt, call.progress["pid"]) == (2, second.pid)

        check.lpush(gate_key(inv), "test")
        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        _assert_lost_as(s, dead, f"; sent again as attempt 2 (task {dead}:2).")
        # Attempt 2 ended as usual: its own PROGRESS state is removed.
        eventually("attempt 2's PROGRESS removed",
                   lambda: check.get(f"celery-task-meta-{dead}:2") is None, timeout=15)


def test_a_killed_workers_progress_state_says_its_call_was_answered_with_an_error(redis_url):
    with _stack(redis_url, 3, worker=False, tool_max_attempts="1") as s:
        inv, dead = _dead_attempt_running(s)

        record = s.client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        _assert_lost_as(s, dead, "; not sent again (its worker died in 1 of 1 attempt(s)): "
                                 "the call is answered with an error.")


def test_a_progress_state_left_by_a_worker_dead_at_the_deadline_says_its_call_timed_out(redis_url):
    # The worker dies just before the call's deadline, too recently to be taken for dead
    # then (beats every 2 s here: silent after 6 s). The timeout answered the call and the
    # dead attempt's PROGRESS stayed in Celery's result backend until it expired.
    with _stack(redis_url, 5, worker=False, tool_timeout_seconds="1",
                job_heartbeat_seconds="2") as s:
        inv, dead = _dead_attempt_running(s)

        record = s.client.wait("fragile", inv, timeout=10, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
        [answer] = _responses(s.client, "fragile", inv)
        assert answer.response == {"error": "Tool 'fragile_step' timed out: no answer within 1 s."}
        eventually("the dead attempt settled", lambda: _task_result(s.url, dead).state != "PROGRESS")
        _assert_lost_as(s, dead, "; not sent again: the call was answered with a timeout error "
                                 "at its deadline.")
        assert s.check.hget(keys.invocation_jobs("fragile", inv), f"a:{answer.id}") == "1"
        watch = keys.job_watch(Settings(redis_url=s.url).invocations_queue)
        assert s.check.zscore(watch, watch_member("fragile", inv, answer.id)) is None


@pytest.mark.parametrize("failpoint", [
    "watchdog.settling_lost=error*1",  # Redis away as the watchdog settles the dead attempt
    "watchdog.lost_settled=kill",  # the watchdog dies between settling it and sending again
])
def test_settling_a_dead_attempt_survives_redis_away_and_a_dying_watchdog(redis_url, failpoint):
    with _stack(redis_url, 4, worker=False, failpoints=failpoint) as s:
        check, client = s.check, s.client
        inv, dead = _dead_attempt_running(s)
        s.start_worker("heir-worker")
        if failpoint.endswith("=kill"):
            s.orchestrator.proc.wait(30)
            assert s.orchestrator.proc.returncode == -9, s.orchestrator.output()
            heir = start_celery_process("orchestrator", "heir-orch", {
                k: v for k, v in s.env.items() if k != "ADK_CELERY_FAILPOINTS"})
            s.stack.callback(heir.stop)
        else:
            s.orchestrator.wait_for_line(lambda line: "Job watchdog sweep failed" in line)

        again = check.blpop([runs_key(inv)], timeout=20)  # sent again once, all the same
        assert again is not None, s.orchestrator.output()
        _assert_lost_as(s, dead, f"; sent again as attempt 2 (task {dead}:2).")
        check.lpush(gate_key(inv), "test")
        record = client.wait("fragile", inv, timeout=20, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error  # never its failure
        assert len(_responses(client, "fragile", inv)) == 1
        assert check.lrange(runs_key(inv) + ":attempts", 0, -1) == ["1", "2"]


@pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning")  # Celery's own
async def test_settling_replaces_only_a_progress_state_and_only_once(redis_client, redis_url):
    from celery import states

    from orchestrator.distributed.models import ToolJob
    from workers.celery_app import create_celery_app
    from workers.lost_attempts import LostAttempts

    backend = create_celery_app(Settings(redis_url=redis_url)).backend
    lost = LostAttempts(redis_client, backend)
    job = ToolJob(app_name="a", user_id="u", session_id="s", invocation_id="e-1",
                  function_call_id="c1", tool_name="t", agent_name="agent", queue="tools")
    backend.store_result("e-1:c1", {"step": "secret"}, "PROGRESS")  # attempt 1 reported
    backend.store_result("e-1:c1:2", {"done": True}, states.SUCCESS)  # attempt 2 finished

    assert await lost.settle(job, 1, "gone") is True
    assert await lost.settle(job, 1, "gone again") is False  # settled already: unchanged
    assert await lost.settle(job, 2, "gone") is False  # another state: left as it is
    assert await lost.settle(job, 3, "gone") is False  # never reported: no state written
    assert backend.get_task_meta("e-1:c1")["status"] == states.FAILURE
    assert str(backend.exception_to_python(backend.get_task_meta("e-1:c1")["result"])) == "gone"
    assert backend.get_task_meta("e-1:c1:2")["status"] == states.SUCCESS
    assert not await redis_client.exists("celery-task-meta-e-1:c1:3")
