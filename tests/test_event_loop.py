"""The loop a process runs its coroutines on: uvloop's by default, asyncio's on request."""

from __future__ import annotations

import asyncio

import pytest

from config import Settings
from workers.loop import LoopThread
from workers.runtime import Runtime

uvloop = pytest.importorskip("uvloop")


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


@pytest.mark.parametrize("wanted", [True, False])
def test_the_runtime_loop_follows_the_setting(wanted):
    runtime = Runtime(Settings(redis_url="redis://127.0.0.1:1/0", uvloop=wanted), load_apps=False)
    try:
        assert isinstance(runtime.run(_running_loop()), uvloop.Loop) is wanted
    finally:
        runtime.close()


def test_a_loop_thread_runs_coroutines_on_either_loop():
    for use_uvloop in (True, False):
        thread = LoopThread(use_uvloop=use_uvloop)
        try:
            assert thread.run(asyncio.sleep(0.001, result=use_uvloop)) is use_uvloop
            assert isinstance(thread.loop, uvloop.Loop) is use_uvloop
        finally:
            thread.stop()
