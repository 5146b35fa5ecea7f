"""FunctionTool / LongRunningFunctionTool declarations and invocation rules (adk-reference §7)."""

from __future__ import annotations

from typing import Literal

import pydantic

from orchestrator import FunctionTool, LongRunningFunctionTool, ToolContext


class Address(pydantic.BaseModel):
    street: str
    zip: str = "00000"


def book(city: str, nights: int, kind: Literal["hotel", "hostel"] = "hotel",
         address: Address | None = None, tool_context: ToolContext | None = None) -> dict:
    """Book a room.

    Args:
        city: where.
    """
    return {"city": city, "nights": nights, "kind": kind,
            "address": address.street if address else None}


def test_declaration_from_signature_and_whole_docstring():
    decl = FunctionTool(book)._get_declaration()
    assert decl.name == "book"
    assert decl.description == "Book a room.\n\nArgs:\n    city: where."
    schema = decl.parameters_json_schema
    assert schema["title"] == "bookParams"
    assert schema["required"] == ["city", "nights"]
    assert schema["properties"]["kind"]["enum"] == ["hotel", "hostel"]
    assert schema["properties"]["kind"]["default"] == "hotel"
    assert "tool_context" not in schema["properties"]
    assert "Address" in schema["$defs"]


def test_long_running_declaration_gets_the_note():
    decl = LongRunningFunctionTool(book)._get_declaration()
    assert decl.description.endswith(
        "NOTE: This is a long-running operation. Do not call this tool again if it has "
        "already returned some intermediate or pending status.")
    assert LongRunningFunctionTool(book).is_long_running


async def test_missing_mandatory_argument_returns_error_without_calling():
    result = await FunctionTool(book).run_async(args={"city": "Oslo"}, tool_context=None)
    assert result["error"].startswith(
        "Invoking `book()` failed as the following mandatory input parameters are not present:\nnights")


async def test_dict_arguments_become_pydantic_models_and_context_is_injected():
    seen = {}

    def with_context(address: Address, tool_context: ToolContext) -> str:
        """Uses context."""
        seen["ctx"] = tool_context
        return address.street

    marker = object()
    tool = FunctionTool(with_context)
    assert await tool.run_async(args={"address": {"street": "Main"}}, tool_context=marker) == "Main"
    assert seen["ctx"] is marker
    assert await FunctionTool(book).run_async(
        args={"city": "Oslo", "nights": 2, "address": {"street": "Main"}, "bogus": 1},
        tool_context=None,
    ) == {"city": "Oslo", "nights": 2, "kind": "hotel", "address": "Main"}


def test_parameterless_function_declares_no_parameters():
    def ping() -> str:
        """Ping."""
        return "pong"

    assert FunctionTool(ping)._get_declaration().parameters_json_schema is None


def test_which_tools_never_require_a_confirmation() -> None:
    """What decides whether a remote call's job may go out with the call's commit: only a
    tool that no confirmation rule (user code, run after the commit) can hold back."""
    from orchestrator.tools.base_tool import BaseTool

    def pay(amount: int) -> dict:
        """Pay."""
        return {"paid": amount}

    class OwnRule(BaseTool):
        async def check_require_confirmation(self, args, tool_context) -> bool:
            return True

    class OwnRuleFunction(FunctionTool):
        async def check_require_confirmation(self, args, tool_context) -> bool:
            return True

    assert BaseTool(name="plain", description="").never_requires_confirmation()
    assert FunctionTool(pay).never_requires_confirmation()
    assert LongRunningFunctionTool(pay).never_requires_confirmation()
    assert not FunctionTool(pay, require_confirmation=True).never_requires_confirmation()
    assert not LongRunningFunctionTool(pay, require_confirmation=True).never_requires_confirmation()
    assert not FunctionTool(pay, require_confirmation=lambda amount: amount > 5
                            ).never_requires_confirmation()
    assert not OwnRule(name="own", description="").never_requires_confirmation()
    assert not OwnRuleFunction(pay).never_requires_confirmation()


async def test_a_confirmation_rule_is_called_as_the_tool_would_be() -> None:
    # google-adk calls a rule with the function's own arguments, its tool_context included.
    marker = object()

    def transfer(amount: int, tool_context: ToolContext) -> str:
        """Move money."""
        return "moved"

    def rule(amount: int, tool_context: ToolContext) -> bool:
        return amount > 5 and tool_context is marker

    def loose(**kwargs: object) -> bool:
        return set(kwargs) == {"amount", "tool_context"}

    assert await FunctionTool(transfer, require_confirmation=rule).check_require_confirmation(
        {"amount": 10}, marker)
    assert await FunctionTool(transfer, require_confirmation=loose).check_require_confirmation(
        {"amount": 1, "bogus": 2}, marker)
    # Rules of the model's arguments alone keep working.
    assert await FunctionTool(transfer, require_confirmation=lambda amount: amount > 5
                              ).check_require_confirmation({"amount": 10}, marker)
