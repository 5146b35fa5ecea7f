"""Lua scripts with named operands: each script whole, with a typed Python wrapper.

A script's operands are a keyword-only frozen dataclass (a subclass of :class:`Operands`).
Its fields are the script's keys (declared with :func:`key_field`), its arguments (plain
fields) and its variable-length groups of arguments (:func:`many_field`,
:func:`pairs_field`). The script's text starts with a prologue binding every field to a Lua
local of the same name, so the body reads ``redis.call('HGET', results, call_id)``, never
``KEYS[1]`` or ``ARGV[1]``; and the wrapper builds KEYS and ARGV from the same declaration,
so the two cannot disagree::

    @dataclass(frozen=True, kw_only=True)
    class Renew(Operands):
        lease: str = key_field()
        token: str
        ttl_ms: int

    RENEW = LuaScript(Renew, '''
    if redis.call('GET', lease) == token then return redis.call('PEXPIRE', lease, ttl_ms) end
    return 0
    ''')

    renew = RENEW.register(client)
    await renew(Renew(lease=..., token=..., ttl_ms=...))

KEYS are the keys in declaration order. ARGV: the arguments in declaration order, then the
size of each group (items for :func:`many_field`, pairs for :func:`pairs_field`), then the
groups' items. For a group ``g`` the prologue defines ``g_first`` (the ARGV index of its
first item) and ``g_count`` (its size), so a script reads it with ``unpack(ARGV, g_first,
...)``. ARGV values are strings in Lua, as ever: ``tonumber`` them where a number is
compared.

A script may start with Lua functions shared with other scripts (``functions``, see
:mod:`.lua_functions`); they run nothing when included, and take what they touch as
parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

_KIND = "lua"
_KEY, _OPTIONAL_KEY, _MANY, _PAIRS = "key", "optional key", "many", "pairs"

_RESERVED = frozenset(
    "and break do else elseif end false for function goto if in local nil not or repeat "
    "return then true until while KEYS ARGV redis cjson cmsgpack bit struct math string table "
    "type tonumber tostring unpack pairs ipairs pcall error next select".split()
)
"""Lua words and globals the scripts use: no operand may shadow them."""


def key_field() -> Any:
    """Declare an operand as one of the script's keys (KEYS)."""
    return field(metadata={_KIND: _KEY})


def optional_key_field() -> Any:
    """Declare a key the script uses only when another operand says so (default None).

    Left out, it is sent as the script's first key: Redis Cluster wants every key of a
    script declared and in one slot, and the script never touches it then.
    """
    return field(default=None, metadata={_KIND: _OPTIONAL_KEY})


def many_field() -> Any:
    """Declare a variable-length group of arguments (a sequence; its size is its length)."""
    return field(default=(), metadata={_KIND: _MANY})


def pairs_field() -> Any:
    """Declare a variable-length group of field/value pairs (a mapping; its size: its pairs)."""
    return field(default_factory=dict, metadata={_KIND: _PAIRS})


@dataclass(frozen=True)
class _Layout:
    keys: tuple[str, ...]
    optional: frozenset[str]
    args: tuple[str, ...]
    groups: tuple[tuple[str, str], ...]
    """(name, kind) of each group, in declaration order."""

    def prologue(self) -> str:
        lines = [f"local {name} = KEYS[{i}]" for i, name in enumerate(self.keys, start=1)]
        lines += [f"local {name} = ARGV[{i}]" for i, name in enumerate(self.args, start=1)]
        first = f"{len(self.args) + len(self.groups) + 1}"
        for position, (name, kind) in enumerate(self.groups, start=len(self.args) + 1):
            lines.append(f"local {name}_count = tonumber(ARGV[{position}])")
            lines.append(f"local {name}_first = {first}")
            first = f"{name}_first + {'2 * ' if kind == _PAIRS else ''}{name}_count"
        return "\n".join(lines) + "\n"


class Operands:
    """Base of a script's operands: a ``@dataclass(frozen=True, kw_only=True)`` subclass.

    Fields declared with :func:`key_field` or :func:`optional_key_field` are keys, with
    :func:`many_field` or :func:`pairs_field` variable-length groups; the others are
    arguments (str, int, float or bytes, as redis-py sends them).
    """

    _layouts: ClassVar[dict[type, _Layout]] = {}

    @classmethod
    def layout(cls) -> _Layout:
        """Where each field goes (computed once per class)."""
        found = Operands._layouts.get(cls)
        if found is None:
            found = Operands._layouts[cls] = _layout_of(cls)
        return found

    def keys(self) -> list[Any]:
        """KEYS, in declaration order (an optional key left out: the first key)."""
        layout = self.layout()
        values = [getattr(self, name) for name in layout.keys]
        if layout.optional:
            values = [values[0] if value is None else value for value in values]
        return values

    def field_values(self) -> dict[str, Any]:
        """Every operand by name (to build the operands of a script that includes these)."""
        return {item.name: getattr(self, item.name) for item in dataclasses.fields(self)}  # type: ignore[arg-type]

    def args(self) -> list[Any]:
        """ARGV: the arguments, each group's size, then the groups' items."""
        layout = self.layout()
        argv = [getattr(self, name) for name in layout.args]
        groups = [getattr(self, name) for name, _ in layout.groups]
        argv += [len(group) for group in groups]
        for (_, kind), group in zip(layout.groups, groups, strict=True):
            if kind == _PAIRS:
                argv += [item for pair in group.items() for item in pair]
            else:
                argv += group
        return argv


def _layout_of(cls: type) -> _Layout:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__}: script operands must be a dataclass.")
    keys, optional, args, groups = [], set(), [], []
    for item in dataclasses.fields(cls):
        if (item.name in _RESERVED or item.name.endswith(("_first", "_count"))
                or hasattr(Operands, item.name)):
            raise TypeError(f"{cls.__name__}.{item.name}: the name clashes with a Lua word, a "
                            "global the scripts use, a group's size and position, or a method.")
        kind = item.metadata.get(_KIND)
        if kind in (_KEY, _OPTIONAL_KEY):
            keys.append(item.name)
            if kind == _OPTIONAL_KEY:
                optional.add(item.name)
        elif kind in (_MANY, _PAIRS):
            groups.append((item.name, kind))
        else:
            args.append(item.name)
    if optional and keys[0] in optional:
        raise TypeError(f"{cls.__name__}: the first key stands in for the optional ones; "
                        "it cannot be optional itself.")
    return _Layout(tuple(keys), frozenset(optional), tuple(args), tuple(groups))


OperandsT = TypeVar("OperandsT", bound=Operands)


class LuaScript(Generic[OperandsT]):
    """A Lua script: its operands' prologue, the shared functions it uses, then its body."""

    def __init__(self, operands: type[OperandsT], body: str, *, functions: Sequence[str] = ()) -> None:
        self.operands = operands
        self.body = body.lstrip("\n")
        """The script's own text (what follows the functions and the prologue)."""
        self.source = "".join(functions) + operands.layout().prologue() + self.body
        """The whole text sent to Redis."""

    def register(self, client: Any) -> RegisteredScript[OperandsT]:
        """The script on ``client`` (a ``redis.asyncio`` or synchronous ``redis`` client)."""
        return RegisteredScript(self, client.register_script(self.source))


class RegisteredScript(Generic[OperandsT]):
    """A script registered on a client: call it with its operands."""

    def __init__(self, script: LuaScript[OperandsT], registered: Any) -> None:
        self.script = script
        self._registered = registered

    @property
    def sha(self) -> str:
        """The script's SHA1 (what ``EVALSHA`` names it by)."""
        return str(self._registered.sha)

    def __call__(self, operands: OperandsT, *, client: Any = None) -> Any:
        """Run it (``EVALSHA``, loading it first if Redis does not know it).

        On an asyncio client, an awaitable of the reply; on a synchronous one, the reply.
        ``client``: another client or a pipeline to run it on (redis-py's ``client=``).
        """
        return self._registered(keys=operands.keys(), args=operands.args(), client=client)

    def queue(self, pipe: Any, operands: OperandsT) -> None:
        """Add it to a pipeline by its SHA.

        A pipeline does not load a script Redis does not know: ``SCRIPT LOAD`` the
        :attr:`LuaScript.source` first where Redis may have forgotten it (a restart).
        """
        script_keys = operands.keys()
        pipe.evalsha(self.sha, len(script_keys), *script_keys, *operands.args())
