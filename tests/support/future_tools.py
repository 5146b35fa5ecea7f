"""A tool defined in a module with postponed annotations (``from __future__ import
annotations``), for the tests of tools given as ``functools.partial``."""

from __future__ import annotations

from typing import Any

import pydantic


class Item(pydantic.BaseModel):
    """What an order is of."""

    name: str


def order(shop: str, item: Item, count: int, tool_context: Any) -> str:
    """Order an item from a shop."""
    return f"{count} x {type(item).__name__}:{item.name} from {shop}, context {tool_context is not None}"
