"""AgentTool against google-adk 2.13: each scenario runs on both and must give the same result.

What the child agent is sent, what its answer becomes in the caller's function response, how
the child's runner ends, and what the caller's model sees after the call. The scenarios are
written once against a namespace of either framework's classes (``tests.test_adk_differences``).
"""

import importlib
import json
import re
from typing import Any

import pydantic
import pytest
from google.genai import types

from tests.golden import scenarios as s
from tests.test_adk_differences import assert_same, events_of

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore:.*EXPERIMENTAL.*:UserWarning"
)


def framework_name(adk: Any, google_module: str, our_module: str, name: str) -> Any:
    """``name`` from google-adk's or orchestrator's module, whichever framework ``adk`` is."""
    ours = adk.LlmAgent.__module__.startswith("orchestrator")
    return getattr(importlib.import_module(our_module if ours else google_module), name)


async def call_child(
    h: s.Harness, child: Any, call: types.Part, **tool_args: Any
) -> dict[str, Any]:
    """One turn of a root agent that calls ``child`` through an AgentTool, then answers "done".

    Returns the turn's events, the error type the turn raised, and what the child's models
    (made by ``h``, every model not called "r") were sent.
    """
    adk = h.adk
    root = adk.LlmAgent(name="root", model=h.model("r", call, "done"),
                        tools=[adk.AgentTool(child, **tool_args)])
    await h.start(root)
    await h.turn(s.user_text("go"))
    record = await h.finish()
    return {
        "events": events_of(record),
        "raised": record["turns"][0]["raised"],
        "child_requests": [r["contents"] for r in record["requests"] if r["model"] != "r"],
    }


class TripInput(pydantic.BaseModel):
    city: str
    days: int = 1


class Answer(pydantic.BaseModel):
    answer: str
    note: str | None = None


# --------------------------------------------------------------------------------------------
# What the child is sent


async def composite_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    first = adk.LlmAgent(name="first", model=h.model("c1", "step one"), input_schema=TripInput)
    last = adk.LlmAgent(name="last", model=h.model("c2", '{"answer": "x"}'), output_schema=Answer)
    pipeline = adk.SequentialAgent(name="pipeline", description="Plans trips.",
                                   sub_agents=[adk.SequentialAgent(name="inner",
                                                                   sub_agents=[first]), last])
    declared: list[Any] = []

    def capture(callback_context: Any, llm_request: Any) -> None:
        declared.append([d.model_dump(exclude_none=True)
                         for t in llm_request.config.tools or []
                         for d in t.function_declarations or []])

    root = adk.LlmAgent(name="root", model=h.model("r", s.fc("pipeline", city="Rome", days=2),
                                                   "done"),
                        tools=[adk.AgentTool(pipeline)], before_model_callback=capture)
    await h.start(root)
    await h.turn(s.user_text("plan"))
    record = await h.finish()
    # Each child model's first content: the message the AgentTool sent (what follows is
    # the other agents' turns, quoted in words of either framework's own).
    return {"declared": declared[0], "events": events_of(record),
            "child_messages": [r["contents"][0] for r in record["requests"] if r["model"] != "r"]}


def test_a_composite_agent_takes_its_first_leafs_input_and_last_leafs_output_schema() -> None:
    result = assert_same(composite_scenario)
    assert result["declared"][0]["parameters_json_schema"]["title"] == "TripInput"
    assert result["child_messages"][0]["parts"] == [["text", '{"city":"Rome","days":2}']]
    assert result["events"][0][1][1][0][2] == {"answer": "x"}  # parsed, not JSON text


async def other_arguments_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    child = adk.LlmAgent(name="helper", description="Helps.", model=h.model("c", "ok"))
    return await call_child(h, child, s.fc("helper", question="où?", n=1))


def test_arguments_without_request_are_sent_to_the_child_as_json() -> None:
    result = assert_same(other_arguments_scenario)
    assert result["child_requests"] == [
        [{"role": "user", "parts": [["text", '{"n": 1, "question": "où?"}']]}]
    ]


@pytest.mark.parametrize("request_value", [5, None, {"a": 1}])
def test_a_request_that_is_not_a_string_is_taken_as_google_adk_takes_it(
    request_value: Any,
) -> None:
    async def scenario(adk: Any) -> dict[str, Any]:
        h = s.Harness(adk)
        child = adk.LlmAgent(name="helper", description="Helps.", model=h.model("c", "ok"))
        return await call_child(h, child, s.fc("helper", request=request_value))

    result = assert_same(scenario)
    # Not a string: the call fails (the turn with it); None: the child gets an empty part.
    assert result["raised"] == (None if request_value is None else "ValidationError")


# --------------------------------------------------------------------------------------------
# What the child's answer becomes


async def fenced_answer_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    child = adk.LlmAgent(name="helper", description="Helps.", output_schema=Answer,
                         model=h.model("c", '```json\n{"answer": "x", "note": null}\n```'))
    return await call_child(h, child, s.fc("helper", request="x"))


def test_a_fenced_structured_answer_is_read_inside_its_fence() -> None:
    result = assert_same(fenced_answer_scenario)
    assert result["events"][0][1][1][0][2] == {"answer": "x"}


@pytest.mark.parametrize(("schema", "text"), [
    (Answer, ' {"answer": "x", "note": null} '),
    (list[Answer], '```json\n[{"answer": "x"}, {"answer": "y", "note": "n"}]\n```'),
    (list[str], '["a", "b"]'),
    (dict[str, int], '```\n{"a": 1}\n```'),
    (list[Answer], '[{"answer": 1}]'),
    (list[str], "not json"),
    (Answer, ""),
])
def test_structured_output_reads_a_schema_as_google_adk_validates_it(
    schema: Any, text: str
) -> None:
    # LlmAgent takes only a model class as output_schema here; AgentTool's reading of the
    # answer is compared with google-adk's for the other schemas it would meet all the same.
    from google.adk.utils._schema_utils import validate_schema

    from orchestrator.flows.output_schema import structured_output

    def outcome(read: Any) -> Any:
        try:
            return read(schema, text)
        except Exception as error:  # compared: the error the caller's turn would end with
            return type(error).__name__, re.sub(r"https://errors\S+", "", str(error))

    assert outcome(structured_output) == outcome(validate_schema)


async def error_response_scenario(adk: Any) -> dict[str, Any]:
    class Refusing(adk.BaseLlm):
        model: str = "refusing"

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            yield adk.LlmResponse(error_code="SAFETY", error_message="blocked for safety")

    child = adk.LlmAgent(name="helper", description="Helps.", model=Refusing())
    return await call_child(s.Harness(adk), child, s.fc("helper", request="x"))


def test_a_child_model_error_without_content_is_the_result() -> None:
    result = assert_same(error_response_scenario)
    assert result["events"][0][1][1][0][2] == {"result": "blocked for safety"}


async def code_execution_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    parts = [
        types.Part(executable_code=types.ExecutableCode(code="print(6*7)", language="PYTHON")),
        types.Part(code_execution_result=types.CodeExecutionResult(outcome="OUTCOME_OK",
                                                                   output="42\n")),
        types.Part(text="The answer is 42."),
    ]
    child = adk.LlmAgent(name="calc", description="Calculates.", model=h.model("c", parts))
    return await call_child(h, child, s.fc("calc", request="6*7"))


def test_code_the_child_ran_and_its_output_are_in_the_result() -> None:
    result = assert_same(code_execution_scenario)
    assert result["events"][0][1][1][0][2] == {"result": "print(6*7)\n42\nThe answer is 42."}


async def pending_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)

    def ask(q: str) -> None:
        """Ask a human."""
        return None

    child = adk.LlmAgent(name="helper", description="Helps.",
                         model=h.model("c", s.fc("ask", q="?"), "never"),
                         tools=[adk.LongRunningFunctionTool(ask)])
    root = adk.LlmAgent(name="root", model=h.model("r", s.fc("helper", request="x"), "done"),
                        tools=[adk.AgentTool(child, skip_summarization=True)])
    await h.start(root)
    await h.turn(s.user_text("go"))
    record = await h.finish()
    events = [[(e["author"], e["payload"], e["final"], e["skip_summarization"])
               for e in turn["events"]] for turn in record["turns"]]
    # The pending call's id is the child's own, random: only its shape is compared.
    return {"events": json.loads(re.sub(r"adk-[0-9a-f-]{36}", "<adk-id>", json.dumps(events))),
            "model_calls": record["model_calls"]}


def test_a_child_left_waiting_is_an_error_the_callers_model_reads() -> None:
    result = assert_same(pending_scenario)
    assert result["events"][0][1][1][0][2] == {"result": (
        "Error: agent 'helper' stopped waiting on unresolved long-running tool call(s) "
        "(pending call ids: ['<adk-id>']), which AgentTool cannot resume.")}
    assert result["events"][0][2] == ["root", [["text", "done"]], True, None]


# --------------------------------------------------------------------------------------------
# The child's runner


async def toolset_close_scenario(adk: Any) -> dict[str, Any]:
    base_toolset = framework_name(adk, "google.adk.tools.base_toolset",
                                  "orchestrator.tools.base_toolset", "BaseToolset")
    h = s.Harness(adk)
    closed: list[str] = []

    def ping() -> str:
        """Ping."""
        return "pong"

    class Pinging(base_toolset):  # type: ignore[misc, valid-type]
        async def get_tools(self, readonly_context: Any = None) -> list[Any]:
            return [adk.FunctionTool(ping)]

        async def close(self) -> None:
            closed.append("closed")

    child = adk.LlmAgent(name="helper", description="Helps.", model=h.model("c", "a", "b"),
                         tools=[Pinging()])
    root = adk.LlmAgent(name="root", model=h.model("r", s.fc("helper", request="x"),
                                                   s.fc("helper", request="y"), "done"),
                        tools=[adk.AgentTool(child)])
    await h.start(root)
    await h.turn(s.user_text("go"))
    during = list(closed)
    await h.runner.close()
    return {"closed_during_the_turn": during, "closed_in_all": closed}


def test_the_childs_toolsets_are_closed_after_every_call() -> None:
    result = assert_same(toolset_close_scenario)
    assert result["closed_in_all"] == ["closed", "closed"]


async def app_name_scenario(adk: Any) -> list[Any]:
    h = s.Harness(adk)
    seen: list[Any] = []

    def where(tool_context: adk.ToolContext) -> str:
        """Where."""
        ctx = tool_context._invocation_context
        seen.append((ctx.app_name, ctx.session.app_name, tool_context.state.get("k")))
        return "here"

    child = adk.LlmAgent(name="helper", description="Helps.",
                         model=h.model("c", s.fc("where"), "ok"), tools=[where])
    await call_child(h, child, s.fc("helper", request="x"))
    return seen


def test_the_child_runs_under_the_callers_app_name() -> None:
    assert assert_same(app_name_scenario) == [(s.APP_NAME, s.APP_NAME, None)]


# --------------------------------------------------------------------------------------------
# Grounding


@pytest.mark.parametrize("propagate", [True, False])
def test_the_childs_grounding_goes_on_the_callers_next_answer_when_asked(propagate: bool) -> None:
    async def scenario(adk: Any) -> list[Any]:
        h = s.Harness(adk)
        grounding = types.GroundingMetadata(web_search_queries=["rome weather"])

        class Grounded(adk.BaseLlm):
            model: str = "grounded"

            async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
                yield adk.LlmResponse(content=types.Content(role="model",
                                                            parts=[types.Part(text="sunny")]),
                                      grounding_metadata=grounding)

        child = adk.LlmAgent(name="helper", description="Helps.", model=Grounded())
        tool = adk.AgentTool(child, propagate_grounding_metadata=propagate)
        root = adk.LlmAgent(name="root", model=h.model("r", s.fc("helper", request="x"), "done",
                                                       "again"),
                            tools=[tool])
        await h.start(root)
        turns = [await h.turn(s.user_text("go")), await h.turn(s.user_text("and now?"))]
        await h.finish()
        return [tool.propagate_grounding_metadata, [[
            (e.author, e.grounding_metadata.model_dump(exclude_none=True)
             if e.grounding_metadata else None) for e in events] for events in turns]]

    flag, turns = assert_same(scenario)
    assert flag is propagate
    # Only on the answer after the call: the temp: state it travels in lasts one invocation.
    assert turns[0][-1][1] == ({"web_search_queries": ["rome weather"]} if propagate else None)
    assert turns[1] == [("root", None)]


def test_the_google_search_agent_tool_propagates_grounding() -> None:
    def scenario(adk: Any) -> bool:
        tool_class = framework_name(adk, "google.adk.tools.google_search_agent_tool",
                                    "orchestrator.tools.google_search_agent_tool",
                                    "GoogleSearchAgentTool")
        return tool_class(adk.LlmAgent(name="search")).propagate_grounding_metadata

    assert assert_same(scenario) is True
