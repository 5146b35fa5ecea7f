"""Which pending calls take an answer from outside (a client, the HTTP API, a human).

A call left to the outside is a long-running tool's (google-adk's protocol: the client sends
its FunctionResponse) or a confirmation or credential request. Every other pending call is
answered by what runs it: a parallel branch's call by its branch, a plain tool routed to a
worker by the tool. An answer sent for one of those would decide in the agent's place (a
branch "completed" that never ran), so it is refused.

Only an orchestrator has the apps to tell: as it pauses, it lists the calls answered inside
in the record (:attr:`InvocationRecord.inside_calls`), and whoever takes an answer (the
service, the HTTP API, a client without the apps) checks the record.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.distributed.ledger import CallEntry
from orchestrator.distributed.models import InvocationRecord
from orchestrator.distributed.registry import AppRegistry
from orchestrator.errors import AnswerRejectedError
from orchestrator.flows.contents import REQUEST_CONFIRMATION, REQUEST_CREDENTIAL, RUN_BRANCH
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.base_toolset import BaseToolset

_REQUESTS = frozenset({REQUEST_CONFIRMATION, REQUEST_CREDENTIAL})


def answered_inside(registry: AppRegistry, app_name: str, calls: Iterable[CallEntry]) -> list[str]:
    """The ids among ``calls`` that only what runs them may answer (sorted)."""
    return sorted(entry.id for entry in calls if _inside(registry, app_name, entry))


def check_outside_answer(record: InvocationRecord, function_call_id: str) -> None:
    """AnswerRejectedError if ``function_call_id`` of ``record`` is answered inside only."""
    if function_call_id not in record.inside_calls:
        return
    name = record.pending_tools.get(function_call_id, "")
    if name == RUN_BRANCH:
        raise AnswerRejectedError(
            f"Call {function_call_id!r} runs a parallel branch: it is answered by its branch, "
            "not from outside.")
    raise AnswerRejectedError(
        f"Call {function_call_id!r} of tool {name!r} is answered by the tool itself (it is not "
        "a long-running tool), not from outside.")


def _inside(registry: AppRegistry, app_name: str, entry: CallEntry) -> bool:
    if entry.name in _REQUESTS:
        return False
    if entry.name == RUN_BRANCH:
        return True
    return _long_running(registry, app_name, entry.event.author, entry.name) is False


def _long_running(registry: AppRegistry, app_name: str, author: str, name: str) -> bool | None:
    """Whether the tool ``name`` of agent ``author`` is long-running (None: cannot tell).

    Only tools the agent declares itself are looked at: a toolset's tools are listed per
    invocation, so a call of one is left to the outside, as before.
    """
    try:
        agent = registry.get(app_name).root_agent.find_agent(author)
    except LookupError:
        return None
    if not isinstance(agent, LlmAgent):
        return None
    for entry in agent.tools:
        if isinstance(entry, BaseToolset):
            continue
        if isinstance(entry, BaseTool):
            if entry.name == name:
                return entry.is_long_running
        elif getattr(entry, "__name__", None) == name:
            return False  # a plain function: a FunctionTool, never long-running
    return None
