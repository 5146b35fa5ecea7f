"""The Redis back-end's Lua scripts: named operands, sent in the order the script reads them."""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

import pytest

import orchestrator.backends.redis as redis_backend
from orchestrator.backends.redis.lua import (
    LuaScript,
    Operands,
    key_field,
    many_field,
    optional_key_field,
    pairs_field,
)


@dataclass(frozen=True, kw_only=True)
class Echo(Operands):
    first: str = key_field()
    maybe: str | None = optional_key_field()
    last: str = key_field()
    word: str
    number: int
    names: list[str] = many_field()
    fields: dict[str, str] = pairs_field()
    more: list[str] = many_field()


ECHO = LuaScript(Echo, """
return {first, maybe, last, word, tonumber(number) + 1,
  {unpack(ARGV, names_first, names_first + names_count - 1)},
  {unpack(ARGV, fields_first, fields_first + 2 * fields_count - 1)},
  {unpack(ARGV, more_first, more_first + more_count - 1)}}
""")


async def test_a_script_reads_each_operand_by_its_name(redis_client):
    echo = ECHO.register(redis_client)
    reply = await echo(Echo(first="k:1", maybe="k:2", last="k:3", word="hello", number=41,
                            names=["a", "b"], fields={"f": "1", "g": "2"}, more=["z"]))
    assert reply == ["k:1", "k:2", "k:3", "hello", 42, ["a", "b"], ["f", "1", "g", "2"], ["z"]]


async def test_empty_groups_and_a_left_out_key(redis_client):
    echo = ECHO.register(redis_client)
    reply = await echo(Echo(first="k:1", last="k:3", word="", number=0, more=["only"]))
    # A key left out is sent as the first key (one slot); empty groups are empty.
    assert reply == ["k:1", "k:1", "k:3", "", 1, [], [], ["only"]]


async def test_operands_queue_on_a_pipeline_by_sha(redis_client):
    echo = ECHO.register(redis_client)
    await redis_client.script_load(ECHO.source)
    async with redis_client.pipeline(transaction=False) as pipe:
        echo.queue(pipe, Echo(first="a", last="b", word="w", number=1))
        (reply,) = await pipe.execute()
    assert reply[:5] == ["a", "a", "b", "w", 2]


@pytest.mark.parametrize("name", ["end", "KEYS", "redis", "names_count", "keys"])
def test_an_operand_may_not_shadow_lua_or_the_wrapper(name):
    bad = dataclass(frozen=True, kw_only=True)(type("Bad", (Operands,), {"__annotations__": {name: str}}))
    with pytest.raises(TypeError, match=f"Bad.{name}"):
        bad.layout()


def shipped_scripts() -> dict[str, LuaScript]:
    found = {}
    for info in pkgutil.iter_modules(redis_backend.__path__, redis_backend.__name__ + "."):
        module = importlib.import_module(info.name)
        for attribute, value in vars(module).items():
            if isinstance(value, LuaScript):
                found[f"{info.name}.{attribute}"] = value
    return found


def test_every_shipped_script_reads_its_operands_by_name():
    scripts = shipped_scripts()
    assert len(scripts) >= 15
    # No positional KEYS/ARGV in a script's own text (a group is read from its _first).
    positional = {name: re.findall(r"KEYS\[|ARGV\[\d", script.body) for name, script in scripts.items()}
    assert {name: found for name, found in positional.items() if found} == {}


async def test_every_shipped_script_compiles(redis_client):
    for name, script in shipped_scripts().items():
        sha = await redis_client.script_load(script.source)
        assert (await redis_client.script_exists(sha)) == [True], name
