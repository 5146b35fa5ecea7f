"""One state delta from the writes of the calls of one model turn that ran on workers.

In process, the calls of one turn share the session's state: a tool that adds to a dict or
a list read from state sees what the calls before it added, and every change stays. On
workers each job changes its own copy of the state as it was at dispatch, so two calls that
change one container each return it with their own change only; taking the later one's
value would drop the earlier one's change. Each call's write is therefore merged against
what its job saw (``ToolResult.state_before``), in call order, as a three-way merge:

- a key, or a nested dict key, that a later call left as it saw it keeps the earlier calls'
  value; one it changed (or removed, inside a dict) takes the later call's;
- a dict both changed is merged key by key, the same way;
- a list both extended (each kept what it saw as its start) gets the earlier calls' items,
  then the later call's;
- anything else both changed: the later call's value (as before this merge).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_ABSENT: Any = object()
"""A key the state (or a dict in it) did not have."""


def merge_state_writes(writes: Iterable[tuple[dict[str, Any], dict[str, Any] | None]]) -> dict[str, Any]:
    """One delta from ``(state_delta, state_before)`` pairs, in call order.

    ``state_before``: what the call saw of each key it wrote (a key left out: none); None
    when not known, and then its values win over the earlier calls', as they are.
    """
    merged: dict[str, Any] = {}
    for delta, before in writes:
        for key, value in delta.items():
            if key in merged and before is not None:
                merged[key] = _three_way(before.get(key, _ABSENT), merged[key], value)
            else:
                merged[key] = value
    return merged


def _three_way(base: Any, ours: Any, theirs: Any) -> Any:
    """``theirs`` (a later call's value) merged into ``ours``; both started from ``base``."""
    if theirs == base:
        return ours
    if ours == base:
        return theirs
    if isinstance(ours, dict) and isinstance(theirs, dict) and (base is _ABSENT or isinstance(base, dict)):
        return _merge_dicts({} if base is _ABSENT else base, ours, theirs)
    if isinstance(ours, list) and isinstance(theirs, list) and (base is _ABSENT or isinstance(base, list)):
        start = [] if base is _ABSENT else base
        if ours[:len(start)] == start and theirs[:len(start)] == start:
            return ours + theirs[len(start):]
    return theirs


def _merge_dicts(base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    merged = dict(ours)
    for key in [*base, *(k for k in theirs if k not in base)]:
        was, now = base.get(key, _ABSENT), theirs.get(key, _ABSENT)
        if now == was:
            continue  # the later call left it as it saw it
        value = _three_way(was, ours.get(key, _ABSENT), now)
        if value is _ABSENT:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged
