"""State: session state as seen through a context, recording every write into a delta.

A write into a dict or list read from the state (``state["cart"].append(x)``) changes the
stored object without assigning its key; as in google-adk, the container a read hands out
is kept beside a copy (its JSON text), and :meth:`State.record_nested_writes` (run by ``has_delta`` and by
a context's ``actions``) records the ones that changed since into the delta.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

from pydantic_core import to_jsonable_python

logger = logging.getLogger(__name__)


class State(MutableMapping[str, Any]):
    """Current state plus pending changes: writes go to both the live value and the delta."""

    APP_PREFIX = "app:"
    USER_PREFIX = "user:"
    TEMP_PREFIX = "temp:"

    def __init__(self, value: dict[str, Any], delta: dict[str, Any]) -> None:
        self._value = value
        self._delta = delta
        self._handed_out: dict[str, tuple[Any, str]] = {}
        """key -> (the dict or list a read handed out, its JSON text as it was then)."""
        self._recorded: set[str] = set()
        """Keys whose delta entry a nested write made (not an assignment)."""

    def __getitem__(self, key: str) -> Any:
        value = self._delta[key] if key in self._delta else self._value[key]
        if isinstance(value, dict | list) and key not in self._handed_out:
            self._keep_copy(key, value)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self._value[key] = value
        self._delta[key] = value
        self._handed_out.pop(key, None)
        self._recorded.discard(key)

    def __delitem__(self, key: str) -> None:
        # ADK has no delete in a delta; storing None is how a key is cleared.
        self[key] = None

    def __contains__(self, key: object) -> bool:
        return key in self._delta or key in self._value

    def __iter__(self) -> Iterator[str]:
        yield from self._value
        for key in self._delta:
            if key not in self._value:
                yield key

    def __len__(self) -> int:
        return len(set(self._value) | set(self._delta))

    def _keep_copy(self, key: str, value: Any) -> None:
        # The copy is the container's JSON text: written and compared in C, much cheaper
        # than a deep copy of a large container read by a tool that only reads it. A
        # container JSON cannot write is left untracked (its writes could not be stored).
        try:
            kept = _json_text(value)
        except (TypeError, ValueError, RecursionError):
            return
        self._handed_out[key] = (value, kept)

    def changed_since_read(self, key: str) -> bool:
        """True if the container a read of ``key`` handed out has changed since."""
        handed_out, kept = self._handed_out[key]
        try:
            return _json_text(handed_out) != kept
        except (TypeError, ValueError, RecursionError):  # no longer JSON: changed
            return True

    def value_when_read(self, key: str) -> Any:
        """A fresh copy of the container a read of ``key`` handed out, as it was then."""
        return json.loads(self._handed_out[key][1])

    def record_nested_writes(self) -> None:
        """Record in the delta each dict or list a read handed out that has changed since.

        A changed container whose JSON form is not equal to it (a datetime inside, say) is
        not recorded, and leaves the delta if a nested write recorded it before: the delta
        is stored as JSON. A key assigned since the read (here or through another context
        over the same session) keeps the assigned value.
        """
        for key, (handed_out, _) in list(self._handed_out.items()):
            current = self._delta.get(key, self._value.get(key)) if key in self else None
            if current is not handed_out:
                del self._handed_out[key]
                self._recorded.discard(key)
                continue
            if not self.changed_since_read(key):
                continue
            if not _equals_its_json_form(current):
                del self._handed_out[key]
                if key in self._recorded:
                    self._recorded.discard(key)
                    self._delta.pop(key, None)
                logger.debug("A write into state key %r is not recorded: its value has no "
                             "JSON form equal to it.", key)
                continue
            if key not in self._delta:
                self._recorded.add(key)
            self._value[key] = current
            self._delta[key] = current
            self._keep_copy(key, current)

    def has_delta(self) -> bool:
        """Return True if anything was written through this object (nested writes included)."""
        self.record_nested_writes()
        return bool(self._delta)

    def to_dict(self) -> dict[str, Any]:
        """Return the current value with the pending delta applied."""
        return {**self._value, **self._delta}

    def __repr__(self) -> str:
        return f"State({self.to_dict()!r})"


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _equals_its_json_form(value: Any) -> bool:
    try:
        return bool(to_jsonable_python(value, inf_nan_mode="null") == value)
    except Exception:  # noqa: BLE001 - no JSON form at all
        return False


def without_temp(delta: dict[str, Any] | None) -> dict[str, Any] | None:
    """``delta`` without its ``temp:`` keys (the same object when it has none)."""
    if not delta or not any(key.startswith(State.TEMP_PREFIX) for key in delta):
        return delta
    return {key: value for key, value in delta.items() if not key.startswith(State.TEMP_PREFIX)}
