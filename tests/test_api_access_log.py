"""The access log of ``adk-celery api`` (workers/api/access_log.py): uvicorn's lines, made
after the response is written and written a burst at a time."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

from workers.api.access_log import LoopBatchedStreamHandler, TurnDeferredLogger, log_config

ROOT = Path(__file__).resolve().parents[1]


class _Stream:
    """A stream that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass


def _logger(stream: _Stream) -> logging.Logger:
    logger = logging.getLogger(f"test-access-{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = LoopBatchedStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    return logger


async def test_the_lines_of_one_turn_of_the_loop_are_written_together_in_order():
    stream = _Stream()
    log = _logger(stream)
    for n in range(3):
        log.info("request %d", n)
    assert stream.writes == []  # held until the turn ends
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    log.info("request 3")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert stream.writes == ["request 0\nrequest 1\nrequest 2\n", "request 3\n"]


def test_outside_an_event_loop_each_line_is_written_at_once():
    stream = _Stream()
    log = _logger(stream)
    log.info("one")
    log.info("two")
    assert stream.writes == ["one\n", "two\n"]


async def test_lines_still_held_are_written_when_the_handler_is_flushed():
    stream = _Stream()
    log = _logger(stream)
    log.info("last words")
    log.handlers[0].flush()  # as logging.shutdown does at exit
    assert stream.writes == ["last words\n"]


def test_uvicorns_access_log_goes_through_the_batched_handler_and_nothing_else_changes():
    from uvicorn.config import LOGGING_CONFIG

    config = log_config()
    assert config["handlers"]["access"]["class"] == "workers.api.access_log.LoopBatchedStreamHandler"
    config["handlers"]["access"]["class"] = LOGGING_CONFIG["handlers"]["access"]["class"]
    assert config == LOGGING_CONFIG


class _Made(logging.Handler):
    """Keeps each record as it is made."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _deferred(name: str) -> tuple[logging.Logger, _Made]:
    logger = TurnDeferredLogger(name)
    logger.setLevel(logging.INFO)
    made = _Made()
    logger.addHandler(made)
    return logger, made


async def test_an_access_record_logged_in_the_loop_is_made_at_its_next_turn():
    logger, made = _deferred("test-deferred-in-loop")
    logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "POST", "/run", "1.1", 200)
    assert made.records == []  # the response is written first
    await asyncio.sleep(0)
    assert [r.getMessage() for r in made.records] == ['127.0.0.1:1 - "POST /run HTTP/1.1" 200']
    assert made.records[0].args == ("127.0.0.1:1", "POST", "/run", "1.1", 200)  # uvicorn's formatter reads them


async def test_a_record_with_exception_information_is_made_at_once():
    logger, made = _deferred("test-deferred-exc")
    try:
        raise ValueError("gone")
    except ValueError:
        logger.exception("failed")
    assert made.records and made.records[0].exc_info is not None
    assert made.records[0].exc_info[1].args == ("gone",)


def test_outside_an_event_loop_a_record_is_made_at_once():
    logger, made = _deferred("test-deferred-no-loop")
    logger.info("now")
    assert [r.getMessage() for r in made.records] == ["now"]


def test_the_api_server_logs_access_lines_through_a_deferred_logger():
    # What `adk-celery api` does before uvicorn starts, and uvicorn's own logging set-up after.
    code = (
        "import logging, uvicorn\n"
        "from workers.api import app\n"
        "def run(server, sockets=None):\n"  # after uvicorn.Config set its logging up
        "    print(type(logging.getLogger('uvicorn.access')).__name__)\n"
        "    server.started = True\n"
        "uvicorn.Server.run = run\n"
        "app.serve('127.0.0.1', 1)\n"
    )
    env = {**os.environ, "ADK_CELERY_REDIS_URL": "redis://127.0.0.1:1/0", "ADK_CELERY_APPS": "",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "TurnDeferredLogger", done.stderr
