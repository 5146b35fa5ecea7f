"""Argument types of ``adk-celery``'s options: a bad value is a usage error naming the option."""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """A finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds, 0 or more")
    return value


def port(text: str) -> int:
    """A TCP port number, 0 to 65535."""
    return _whole_number(text, 0, 65535, "a port number (0 to 65535)")


def count(text: str) -> int:
    """A whole number, 1 or more."""
    return _whole_number(text, 1, None, "a whole number, 1 or more")


def _whole_number(text: str, low: int, high: int | None, what: str) -> int:
    """``text`` as a whole number from ``low`` to ``high`` (None: no upper bound)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value
