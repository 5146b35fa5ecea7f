"""State: session state as seen through a context, recording every write into a delta."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any


class State(MutableMapping[str, Any]):
    """Current state plus pending changes: writes go to both the live value and the delta."""

    APP_PREFIX = "app:"
    USER_PREFIX = "user:"
    TEMP_PREFIX = "temp:"

    def __init__(self, value: dict[str, Any], delta: dict[str, Any]) -> None:
        self._value = value
        self._delta = delta

    def __getitem__(self, key: str) -> Any:
        if key in self._delta:
            return self._delta[key]
        return self._value[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._value[key] = value
        self._delta[key] = value

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

    def has_delta(self) -> bool:
        """Return True if anything was written through this object."""
        return bool(self._delta)

    def to_dict(self) -> dict[str, Any]:
        """Return the current value with the pending delta applied."""
        return {**self._value, **self._delta}

    def __repr__(self) -> str:
        return f"State({self.to_dict()!r})"


def without_temp(delta: dict[str, Any] | None) -> dict[str, Any] | None:
    """``delta`` without its ``temp:`` keys (the same object when it has none)."""
    if not delta or not any(key.startswith(State.TEMP_PREFIX) for key in delta):
        return delta
    return {key: value for key, value in delta.items() if not key.startswith(State.TEMP_PREFIX)}
