"""The access log of ``adk-celery api`` (workers/api/access_log.py): uvicorn's lines, a burst per write."""

from __future__ import annotations

import asyncio
import logging

from workers.api.access_log import LoopBatchedStreamHandler, log_config


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
