"""An orchestrator refuses an app whose workflow would silently stop after a remote tool."""

from __future__ import annotations

import functools

import pytest

from orchestrator import App, LlmAgent, LongRunningFunctionTool, SequentialAgent
from orchestrator.distributed.app_checks import check_remote_tools
from orchestrator.distributed.transport import default_route
from orchestrator.errors import AppConfigError
from orchestrator.models.fake import FunctionLlm
from tests.apps import remote_step_app, resumable_remote_step_app, tally

route = functools.partial(default_route, default_queue="adk.tools", tool_queues={})


def test_a_plain_remote_tool_inside_a_sequence_of_a_non_resumable_app_is_refused():
    with pytest.raises(AppConfigError, match="tool 'tally' of agent 'counting' runs on workers"):
        check_remote_tools(remote_step_app, route)


def test_the_same_app_made_resumable_is_served():
    check_remote_tools(resumable_remote_step_app, route)


def test_a_tool_named_in_tool_queues_counts_as_remote():
    steps = SequentialAgent(name="steps", sub_agents=[
        LlmAgent(name="counting", model=FunctionLlm(fn=lambda r: "x"), tools=[tally])])
    check_remote_tools(App(name="named", root_agent=steps), route)  # runs in the orchestrator
    with pytest.raises(AppConfigError, match="queue 'slow'"):
        check_remote_tools(App(name="named", root_agent=steps), functools.partial(
            default_route, default_queue="adk.tools", tool_queues={"tally": "slow"}))


def test_a_long_running_tool_stops_a_non_resumable_sequence_as_in_google_adk():
    steps = SequentialAgent(name="steps", sub_agents=[
        LlmAgent(name="asking", model=FunctionLlm(fn=lambda r: "x"),
                 tools=[LongRunningFunctionTool(tally)])])
    check_remote_tools(App(name="lro", root_agent=steps), route)
