"""``set_model_response``: how a model that cannot pair a response schema with tools answers.

The flow offers this tool to an agent with an ``output_schema`` and tools (see
:mod:`orchestrator.flows.output_schema`). Its parameters are the schema's fields; a valid call
is the agent's structured answer, recorded in ``actions.set_model_response``, from which the
flow makes the agent's final JSON text. An invalid one is answered with the validation
errors, for the model to call it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import pydantic
from google.genai import types

from orchestrator.tools.base_tool import BaseTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext

_DESCRIPTION = (
    "Give your final answer in the required output schema: call this with the answer's "
    "fields instead of writing the answer as text."
)
"""What the model reads about the tool."""


class SetModelResponseTool(BaseTool):
    """Takes the agent's final answer as arguments matching its ``output_schema``.

    Answered in the orchestrator, never on a worker: the flow turns its result into the
    agent's final event (see :func:`orchestrator.distributed.transport.tool_queue`).
    """

    NAME: Final[str] = "set_model_response"

    def __init__(self, output_schema: type[pydantic.BaseModel]) -> None:
        super().__init__(name=self.NAME, description=_DESCRIPTION)
        self.output_schema = output_schema
        """The agent's output schema, which the arguments must satisfy."""
        self._declaration: types.FunctionDeclaration | None = None

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """One parameter per schema field: its type, its default (then optional), its description."""
        if self._declaration is None:
            self._declaration = types.FunctionDeclaration(
                name=self.name,
                description=self.description,
                parameters_json_schema=_parameters_schema(self.name, self.output_schema),
            )
        return self._declaration

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """The validated answer (set as ``actions.set_model_response``), or the errors."""
        try:
            result = self.output_schema.model_validate(args).model_dump(exclude_none=True)
        except pydantic.ValidationError as error:
            return {"error": (
                f"The arguments do not match the answer's schema:\n{error}\nCall "
                "set_model_response again with every required field, each of the right type."
            )}
        tool_context.actions.set_model_response = result
        return result


def _parameters_schema(name: str, schema: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The JSON schema of the tool's parameters, built as for a function with those parameters.

    Each field keeps only its type and default there (as a function parameter would); the
    descriptions are copied over from the schema's own JSON schema, nested ones included.
    """
    fields: dict[str, Any] = {
        field_name: (info.annotation, ... if info.is_required()
                     else info.get_default(call_default_factory=True))
        for field_name, info in schema.model_fields.items()
    }
    params = pydantic.create_model(f"{name}Params", **fields)
    built = params.model_json_schema()
    _copy_descriptions(built, schema.model_json_schema())
    return built


def _copy_descriptions(target: dict[str, Any], source: dict[str, Any]) -> None:
    """Set each property's (and list item's) description in ``target`` from ``source``."""
    for key in ("properties", "items"):
        theirs, ours = source.get(key), target.get(key)
        if not isinstance(theirs, dict) or not isinstance(ours, dict):
            continue
        pairs = [(ours, theirs)] if key == "items" else [
            (ours[name], sub) for name, sub in theirs.items()
            if isinstance(ours.get(name), dict) and isinstance(sub, dict)
        ]
        for into, source_sub in pairs:
            description = source_sub.get("description")
            if isinstance(description, str) and description:
                into["description"] = description
            _copy_descriptions(into, source_sub)
