"""Calling user callbacks: sync or async, one or a list, arguments bound by name first."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import lru_cache
from typing import Any


def as_list(callbacks: Any) -> list[Callable[..., Any]]:
    """Normalise a callback field (None, a callable, or a list) to a list."""
    if callbacks is None:
        return []
    if isinstance(callbacks, list):
        return callbacks
    return [callbacks]


@lru_cache(maxsize=1024)
def _parameter_names(fn: Callable[..., Any]) -> tuple[tuple[str, ...], bool, bool]:
    signature = inspect.signature(fn)
    names = []
    var_positional = var_keyword = False
    for p in signature.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            var_positional = True
        elif p.kind is p.VAR_KEYWORD:
            var_keyword = True
        else:
            names.append(p.name)
    return tuple(names), var_positional, var_keyword


def _bind(fn: Callable[..., Any], args: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Bind canonical arguments: by parameter name where it matches, else in canonical order."""
    try:
        names, _, var_keyword = _parameter_names(fn)
    except (TypeError, ValueError):  # builtins without a signature
        return list(args.values()), {}
    if var_keyword:
        return [], dict(args)
    by_name = {n: args[n] for n in names if n in args}
    leftovers = [v for k, v in args.items() if k not in by_name]
    unnamed = [n for n in names if n not in by_name]
    kwargs = dict(by_name)
    for name, value in zip(unnamed, leftovers, strict=False):
        kwargs[name] = value
    return [], kwargs


async def call(fn: Callable[..., Any], args: dict[str, Any]) -> Any:
    """Call one callback with canonical ``args``; await the result if needed."""
    positional, kwargs = _bind(fn, args)
    result = fn(*positional, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run_until(callbacks: Any, args: dict[str, Any], *, stop: Callable[[Any], bool]) -> Any:
    """Call callbacks in order; return the first result for which ``stop`` is true, else None."""
    for fn in as_list(callbacks):
        result = await call(fn, args)
        if stop(result):
            return result
    return None


def is_truthy(result: Any) -> bool:
    """Stop rule for agent/model callbacks: a truthy result short-circuits."""
    return bool(result)


def is_not_none(result: Any) -> bool:
    """Stop rule for tool and error callbacks: any non-None result short-circuits."""
    return result is not None
