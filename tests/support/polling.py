"""Polling for a condition that has no event to wait on (a watchdog's sweep, a page that shows
a state), with a bounded deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def eventually(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """``check()``'s first truthy result, polled every 50 ms; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
