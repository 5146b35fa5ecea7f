"""The tests' fork server (tests/support/forked.py): its processes start as a fresh
interpreter would, and a careless caller cannot take it down or hang a test."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.support import forked
from tests.support.processes import ROOT, stack_env

CLI = [sys.executable, "-m", "workers.cli"]


def test_a_process_whose_start_needs_its_own_interpreter_is_not_forked(tmp_path):
    """A PYTHONPATH of its own (a sitecustomize that shifts the clock, as a test does) or
    another interpreter setting starts afresh; the tests' usual environment forks."""
    env = stack_env("redis://127.0.0.1:1/0", "")
    assert forked.forkable([*CLI, "status"], env)
    assert not forked.forkable([*CLI, "status"], {**env, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert not forked.forkable([*CLI, "status"], {**env, "PYTHONHASHSEED": "7"})
    (tmp_path / "sitecustomize.py").write_text("print('sitecustomize ran')\n")
    done = forked.run([*CLI, "--help"], env={**env, "PYTHONPATH": f"{tmp_path}:{ROOT}"},
                      timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("sitecustomize ran\n")


def test_input_a_command_does_not_read_neither_blocks_past_the_timeout_nor_fails():
    env = stack_env("redis://127.0.0.1:1/0", "")
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):  # a worker never ready: no Redis there
        forked.run([*CLI, "worker", "--concurrency", "1"], env=env, input="x" * 200_000,
                   timeout=3)
    assert time.monotonic() - started < 15
    done = forked.run([*CLI, "--help"], env=env, input="x" * 200_000, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: adk-celery")


def test_a_caller_gone_before_its_answer_does_not_take_the_server_down():
    env = stack_env("redis://127.0.0.1:1/0", "")
    forked.run([*CLI, "--help"], env=env, timeout=60)  # the server is up
    server = forked._the_server()
    read_end, write_end = os.pipe()
    for _ in range(5):
        gone = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        gone.connect(server.path)
        request = {"args": ["--help"], "env": env, "cwd": str(ROOT)}
        socket.send_fds(gone, [json.dumps(request).encode()], [read_end, write_end, write_end])
        gone.close()
    os.close(read_end)
    os.close(write_end)
    done = forked.run([*CLI, "--help"], env=env, timeout=60)
    assert done.returncode == 0 and server.proc.poll() is None
