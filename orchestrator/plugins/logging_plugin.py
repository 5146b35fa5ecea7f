"""LoggingPlugin: prints what happens in a run (messages, agents, model and tool calls)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.plugins.base_plugin import BasePlugin
from orchestrator.plugins.reflect_retry_tool_plugin import REFLECT_AND_RETRY_RESPONSE_TYPE

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.context import CallbackContext, ToolContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.events.event import Event
    from orchestrator.models.llm_request import LlmRequest
    from orchestrator.models.llm_response import LlmResponse
    from orchestrator.tools.base_tool import BaseTool

_GREY, _RESET = "\033[90m", "\033[0m"


class LoggingPlugin(BasePlugin):
    """Prints a block of grey lines to stdout for each step of a run, for terminal debugging.

    It logs the user's message, the run's start and end, each agent's start and end, each
    model request and response (a final response with its finish reason and token usage),
    each tool call with its arguments and result, each event, and model and tool errors.
    A tool result that reports a failure without raising (a ReflectAndRetryToolPlugin
    answer, or a dict whose ``isError``/``is_error`` is True) is logged as a tool error; a
    raised error is logged once, even if another plugin's answer to it reaches the
    after-tool callback. It never changes anything. Each line starts with ``[<name>]``.

    In adk-celery each line is printed by the process where the step runs: run, agent and
    model lines by the orchestrator, tool lines of remote tools by the worker.
    """

    def __init__(self, name: str = "logging_plugin") -> None:
        super().__init__(name)

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        """Log the user's message and where it goes."""
        ctx = invocation_context
        self._block("USER MESSAGE RECEIVED",
                    ("Invocation ID", ctx.invocation_id), ("Session ID", ctx.session.id),
                    ("User ID", ctx.user_id), ("App Name", ctx.app_name),
                    ("Root Agent", ctx.agent.name), ("User Content", _content(user_message)),
                    ("Branch", ctx.branch))
        return None

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        """Log the run's start."""
        self._block("INVOCATION STARTING", ("Invocation ID", invocation_context.invocation_id),
                    ("Starting Agent", invocation_context.agent.name))
        return None

    async def on_event_callback(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        """Log an event: author, content, and the calls and answers it carries."""
        calls = [c.name for c in event.get_function_calls()]
        answers = [r.name for r in event.get_function_responses()]
        self._block("EVENT YIELDED", ("Event ID", event.id), ("Author", event.author),
                    ("Content", _content(event.content)),
                    ("Final Response", event.is_final_response()),
                    ("Function Calls", calls or None), ("Function Responses", answers or None),
                    ("Long Running Tools", sorted(event.long_running_tool_ids or []) or None))
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Log the run's end."""
        self._block("INVOCATION COMPLETED", ("Invocation ID", invocation_context.invocation_id),
                    ("Final Agent", invocation_context.agent.name))

    async def before_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        """Log an agent's start."""
        self._block("AGENT STARTING", ("Agent Name", callback_context.agent_name),
                    ("Invocation ID", callback_context.invocation_id),
                    ("Branch", callback_context.branch))
        return None

    async def after_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        """Log an agent's end."""
        self._block("AGENT COMPLETED", ("Agent Name", callback_context.agent_name),
                    ("Invocation ID", callback_context.invocation_id))
        return None

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Log a model request: model, agent, system instruction (cut short) and tools."""
        instruction = llm_request.config.system_instruction
        self._block("LLM REQUEST", ("Model", llm_request.model or "default"),
                    ("Agent", callback_context.agent_name),
                    ("System Instruction", _cut(_text_of(instruction), 200) if instruction else None),
                    ("Available Tools", list(llm_request.tools_dict) or None))
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Log a model response; a final one with its error or finish reason, and token usage."""
        final = llm_response.partial is not True
        lines: list[tuple[str, Any]] = [("Agent", callback_context.agent_name)]
        if final and llm_response.error_code:
            lines += [("ERROR - Code", llm_response.error_code),
                      ("Error Message", llm_response.error_message)]
        else:
            lines += [("Content", _content(llm_response.content)),
                      ("Partial", llm_response.partial or None),
                      ("Turn Complete", llm_response.turn_complete)]
        if final and llm_response.finish_reason:
            reason = llm_response.finish_reason
            lines.append(("Finish Reason", getattr(reason, "value", reason)))
        usage = llm_response.usage_metadata
        if usage:
            lines.append(("Token Usage", f"Input: {usage.prompt_token_count}, "
                                         f"Output: {usage.candidates_token_count}"))
        self._block("LLM RESPONSE", *lines)
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """Log a failed model call."""
        self._block("LLM ERROR", ("Agent", callback_context.agent_name), ("Error", error))
        return None

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Log a tool call about to run."""
        self._block("TOOL STARTING", *_tool_lines(tool, tool_context),
                    ("Arguments", _cut(str(tool_args or {}), 300)))
        return None

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """Log a tool's result (as an error if it reports one)."""
        marks = _error_marks(tool_context)
        if self.name in marks:
            marks.discard(self.name)  # logged as the exception; this is an answer to it
            return None
        failure = _reported_failure(result)
        if failure is not None:
            self._block("TOOL ERROR", *_tool_lines(tool, tool_context),
                        ("Arguments", _cut(str(tool_args or {}), 300)),
                        ("Result", _cut(str(result), 300)), ("Error", failure))
        else:
            self._block("TOOL COMPLETED", *_tool_lines(tool, tool_context),
                        ("Result", _cut(str(result or {}), 300)))
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """Log a tool's exception (once per call)."""
        self._block("TOOL ERROR", *_tool_lines(tool, tool_context),
                    ("Arguments", _cut(str(tool_args or {}), 300)), ("Error", error))
        _error_marks(tool_context).add(self.name)
        return None

    def _block(self, title: str, *lines: tuple[str, Any]) -> None:
        self._print(title)
        for label, value in lines:
            if value is not None:
                self._print(f"   {label}: {value}")

    def _print(self, message: str) -> None:
        print(f"{_GREY}[{self.name}] {message}{_RESET}")


def _error_marks(tool_context: ToolContext) -> set[str]:
    """Names of the logging plugins that logged this call's exception (kept on the call)."""
    marks: set[str] = tool_context.__dict__.setdefault("_logged_tool_error", set())
    return marks


def _tool_lines(tool: BaseTool, tool_context: ToolContext) -> list[tuple[str, Any]]:
    return [("Tool Name", tool.name), ("Agent", tool_context.agent_name),
            ("Function Call ID", tool_context.function_call_id)]


def _reported_failure(result: Any) -> str | None:
    """The failure a result reports without its tool raising, or None."""
    if not isinstance(result, dict):
        return None
    if result.get("response_type") == REFLECT_AND_RETRY_RESPONSE_TYPE:
        return f"{result.get('error_type', 'ToolError')}: {result.get('error_details', '')}"
    if result.get("isError") is True or result.get("is_error") is True:
        return "the tool result reports an error"
    return None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _content(content: types.Content | None) -> str:
    """One line per content: its parts, text cut at 200 characters."""
    if content is None or not content.parts:
        return "None"
    shown = []
    for part in content.parts:
        if part.text:
            shown.append(f"text: '{_cut(part.text.strip(), 200)}'")
        elif part.function_call is not None:
            shown.append(f"function_call: {part.function_call.name}")
        elif part.function_response is not None:
            shown.append(f"function_response: {part.function_response.name}")
        elif part.code_execution_result is not None:
            shown.append("code_execution_result")
        else:
            shown.append("other_part")
    return " | ".join(shown)


def _text_of(instruction: Any) -> str:
    """A system instruction (text, Content, Part or a list of them) as one line of text."""
    if isinstance(instruction, str):
        return instruction
    if isinstance(instruction, types.Content):
        return _content(instruction)
    if isinstance(instruction, types.Part):
        return _content(types.Content(parts=[instruction]))
    if isinstance(instruction, list):
        return " | ".join(_text_of(entry) for entry in instruction)
    return str(instruction)
