"""The built-in tools real agents import, compared live with google-adk 2.13.

Gemini's model-side tools only add a ``types.Tool`` to the request; load_artifacts,
load_memory, preload_memory and get_user_choice run here. Each scenario runs on both
frameworks (``tests/support/adk_live``); what is compared is what the model is sent and what
the session gets, with the wording of instructions left out (ours is our own).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from google.genai import types

from orchestrator import App, LlmAgent
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.models.fake import ScriptedLlm
from tests.golden import scenarios
from tests.support.adk_live import RequestHarness, comparable, frameworks, rewrite
from tests.support.events import call

GEMINI_2 = "gemini-2.5-flash"
GEMINI_3 = "gemini-3.5-flash"


def run(coro_fn, *args: Any) -> tuple[Any, Any]:
    """``coro_fn(fw, *args)`` on google-adk, then on orchestrator."""
    adk, mine = frameworks()
    return asyncio.run(coro_fn(adk, *args)), asyncio.run(coro_fn(mine, *args))


# --- Gemini's model-side tools ------------------------------------------------------------


def _builtin(fw, name: str) -> Any:
    if name == "vertex_ai_search":
        return fw.VertexAiSearchTool(
            data_store_id="projects/p/locations/global/collections/c/dataStores/d", max_results=3)
    return getattr(fw, name)


async def _one_builtin_scenario(fw, name: str, model: str) -> dict[str, Any]:
    h = RequestHarness(fw)
    agent = fw.LlmAgent(name="agent", model=h.model(model, "grounded answer"), tools=[_builtin(fw, name)])
    await h.start(agent)
    await h.turn(scenarios.user_text("what is new?"))
    return comparable(await h.finish())


BUILTINS = {
    "google_search": {"google_search": {}},
    "url_context": {"url_context": {}},
    "google_maps_grounding": {"google_maps": {}},
    "enterprise_web_search": {"enterprise_web_search": {}},
    "vertex_ai_search": {"retrieval": {"vertex_ai_search": {
        "datastore": "projects/p/locations/global/collections/c/dataStores/d", "max_results": 3}}},
}


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_a_gemini_builtin_tool_is_sent_in_the_request_config_as_google_adk_sends_it(name):
    adk, mine = run(_one_builtin_scenario, name, GEMINI_2)
    assert mine == adk
    request = mine["requests"][0]
    assert request["builtin_tools"] == [BUILTINS[name]]
    assert request["tools"] == []  # no function declaration: nothing runs here
    assert [e["payload"] for e in mine["turns"][0]["events"]] == [[["text", "grounded answer"]]]


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_a_gemini_builtin_tool_is_refused_for_another_model_as_google_adk_refuses_it(name):
    adk, mine = run(_one_builtin_scenario, name, "claude-sonnet")
    assert adk["turns"][0]["raised"] == mine["turns"][0]["raised"] == "ValueError"
    assert adk["model_calls"] == mine["model_calls"] == 0


def test_the_model_id_check_can_be_turned_off(monkeypatch):
    # google-adk's variable, read as google-adk reads it (a script using the core alone).
    monkeypatch.setenv("ADK_DISABLE_GEMINI_MODEL_ID_CHECK", "true")
    adk, mine = run(_one_builtin_scenario, "google_search", "my-proxy-model")
    assert mine == adk
    assert mine["requests"][0]["builtin_tools"] == [{"google_search": {}}]


def test_a_process_turns_the_model_id_check_off_from_its_settings():
    from config import Settings
    from orchestrator.models.model_names import gemini_builtin_tools_allowed
    from orchestrator.process_setup import configure_core, core_defaults

    before = core_defaults()
    assert not gemini_builtin_tools_allowed("my-proxy-model")
    configure_core(Settings(disable_gemini_model_id_check=True))
    try:
        assert gemini_builtin_tools_allowed("my-proxy-model")
    finally:
        configure_core(before)


def test_google_search_with_its_own_model_sends_the_request_to_that_model_name():
    async def scenario(fw):
        h = RequestHarness(fw)
        search = fw.GoogleSearchTool(model="gemini-2.0-flash")
        await h.start(fw.LlmAgent(name="agent", model=h.model("claude-sonnet", "ok"), tools=[search]))
        await h.turn(scenarios.user_text("q"))
        return comparable(await h.finish())

    adk, mine = run(scenario)
    assert mine == adk
    assert mine["requests"][0]["model_name"] == "gemini-2.0-flash"


async def _search_beside_a_function(fw, bypass: bool) -> dict[str, Any]:
    def weather(city: str) -> str:
        """Weather in a city."""
        return "sunny"

    h = RequestHarness(fw)
    model = h.model(GEMINI_2, scenarios.fc("google_search_agent", request="news"), "searched: calm",
                    "the news is calm")
    if not bypass:
        model = h.model(GEMINI_2, "plain answer")
    search = fw.GoogleSearchTool(bypass_multi_tools_limit=bypass)
    await h.start(fw.LlmAgent(name="agent", model=model, tools=[search, weather]))
    await h.turn(scenarios.user_text("news?"))
    return comparable(await h.finish())


@pytest.mark.parametrize("bypass", [False, True])
def test_google_search_beside_other_tools_matches_google_adk(bypass):
    adk, mine = run(_search_beside_a_function, bypass)
    assert mine == adk
    first = mine["requests"][0]
    if bypass:  # the search runs in an agent called as a tool
        assert (first["tools"], first["builtin_tools"]) == (["google_search_agent", "weather"], [])
        assert mine["requests"][1]["builtin_tools"] == [{"google_search": {}}]
    else:  # both in one request, as google-adk sends them (Gemini 3 accepts it)
        assert (first["tools"], first["builtin_tools"]) == (["weather"], [{"google_search": {}}])


async def _search_with_transfer_targets(fw, model: str, search_on: str) -> dict[str, Any]:
    h = RequestHarness(fw)
    child = fw.LlmAgent(name="child", description="helps", model=h.model(model, "child answer"),
                        tools=[fw.google_search] if search_on == "child" else [])
    parent = fw.LlmAgent(name="parent", model=h.model(model, scenarios.fc("transfer_to_agent", agent_name="child")),
                         sub_agents=[child], tools=[fw.google_search] if search_on == "parent" else [])
    await h.start(parent)
    await h.turn(scenarios.user_text("go"))
    return comparable(await h.finish())


@pytest.mark.parametrize("model, search_on", [
    (GEMINI_2, "parent"), (GEMINI_3, "parent"), (GEMINI_2, "child"),
])
def test_built_in_search_and_agent_transfer_follow_google_adk(model, search_on):
    adk, mine = run(_search_with_transfer_targets, model, search_on)
    for record in (adk, mine):  # error messages are each framework's own words
        for event in [e for t in record["turns"] for e in t["events"]] + record["session_events"]:
            event["error_message"] = event["error_message"] and "<message>"
    assert mine == adk
    if (model, search_on) == (GEMINI_2, "parent"):
        # Delegating to a sub-agent beside built-in search is refused before 3.0.
        assert mine["turns"][0]["raised"] == "ValueError" and mine["model_calls"] == 0
    elif search_on == "child":
        # The child can only go back to its parent: it is offered no transfer instead.
        assert mine["requests"][1]["tools"] == [] and mine["requests"][1]["builtin_tools"]
    else:
        assert mine["requests"][0]["tools"] == ["transfer_to_agent"]


# --- load_artifacts -----------------------------------------------------------------------


async def _load_artifacts_scenario(fw) -> dict[str, Any]:
    h = RequestHarness(fw)
    ask = scenarios.fc("load_artifacts", artifact_names=["notes.txt", "profile.json", "ghost.txt"])
    await h.start(fw.LlmAgent(name="agent", model=h.model(GEMINI_2, ask, "read them", "again"),
                              tools=[fw.load_artifacts]))
    service = h.runner.artifact_service
    for filename, part in (
        ("notes.txt", types.Part(inline_data=types.Blob(mime_type="text/plain", data=b"milk, eggs"))),
        ("user:profile.json", types.Part(inline_data=types.Blob(mime_type="application/json",
                                                                data=b'{"name": "Ada"}'))),
        ("logo.png", types.Part(inline_data=types.Blob(mime_type="image/PNG", data=b"\x89PNG"))),
    ):
        await service.save_artifact(app_name=scenarios.APP_NAME, user_id=scenarios.USER_ID,
                                    session_id=h.session_id, filename=filename, artifact=part)
    raw: list[Any] = []
    model_class = type(h.runner.agent.model)
    original = model_class.generate_content_async

    async def spy(self, llm_request, stream=False):
        raw.append(llm_request.model_copy(deep=True))
        async for response in original(self, llm_request, stream):
            yield response

    model_class.generate_content_async = spy
    try:
        await h.turn(scenarios.user_text("what did I save?"))
        await h.turn(scenarios.user_text("and now?"))
    finally:
        model_class.generate_content_async = original
    record = await h.finish()
    answer = record["turns"][0]["events"][1]["payload"][0]
    return {
        "declared": [r["tools"] for r in record["requests"]],
        "declaration": raw[0].config.tools[0].function_declarations[0].parameters_json_schema,
        "answer": (answer[1], answer[2]["artifact_names"], sorted(answer[2])),
        # What follows the function response in the next request (that request only).
        "attached": [
            [(p["kind"], p.get("text")) for p in parts]
            for parts in _after_last_response(raw[1].contents)
        ],
        "listing_in_instruction": [
            json.dumps(["logo.png", "notes.txt", "user:profile.json"]) in (r.config.system_instruction or "")
            for r in raw
        ],
        "later_request_has_no_artifacts": _after_last_response(raw[2].contents) == [],
        # The status line of the answer is each framework's own words.
        "stored": rewrite([e["payload"] for e in record["session_events"]], _status_masked),
    }


def _status_masked(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"artifact_names", "status"}:
        return {**value, "status": "<status>"}
    return value


def _after_last_response(contents: list[types.Content]) -> list[list[dict[str, Any]]]:
    last = max((i for i, c in enumerate(contents) if any(p.function_response for p in c.parts or [])),
               default=None)
    if last is None:
        return []
    attached = []
    for content in contents[last + 1:]:
        if content.role != "user" or not content.parts or not content.parts[0].text:
            continue
        marker, *rest = content.parts
        if "notes.txt" not in marker.text and "profile.json" not in marker.text:
            continue
        attached.append([{"kind": "marker", "text": marker.text.split()[-2:]}] + [
            {"kind": "text" if p.text is not None else "blob", "text": p.text} for p in rest])
    return attached


def test_load_artifacts_matches_google_adk():
    adk, mine = run(_load_artifacts_scenario)
    # The marker line before each artifact is each framework's own words; compare what it names.
    for record in (adk, mine):
        record["attached"] = [[(k, t if k != "marker" else None) for k, t in a] for a in record["attached"]]
    assert mine == adk
    assert mine["declaration"] == {"type": "object", "properties": {
        "artifact_names": {"type": "array", "items": {"type": "string"}}}}
    assert mine["attached"] == [[("marker", None), ("text", "milk, eggs")],
                                [("marker", None), ("text", '{"name": "Ada"}')]]
    assert mine["listing_in_instruction"] == [True, True, True]
    assert mine["later_request_has_no_artifacts"]


@pytest.mark.parametrize("names", [["a.txt", 3], "a.txt"])
def test_load_artifacts_refuses_names_that_are_not_a_list_of_strings(names):
    async def scenario(fw):
        return await fw.load_artifacts.run_async(args={"artifact_names": names}, tool_context=None)

    adk, mine = run(scenario)
    assert mine == adk
    assert mine["error_code"] == "INVALID_ARGUMENTS"


def test_unsafe_artifacts_become_text_the_model_accepts():
    adk_safe = pytest.importorskip("google.adk.tools.load_artifacts_tool").as_safe_part_for_llm
    from orchestrator.tools.load_artifacts_tool import as_safe_part_for_llm

    cases = [
        ("photo.jpg", types.Blob(mime_type="IMAGE/JPEG; q=1", data=b"\xff\xd8")),
        ("data.csv", types.Blob(mime_type="text/csv", data=b"a,b\n1,2")),
        ("icon.svg", types.Blob(mime_type="image/svg+xml", data=b"<svg/>")),
        ("blob.bin", types.Blob(mime_type="application/zip", data=b"\x00" * 2048)),
        ("empty.bin", types.Blob(mime_type="application/octet-stream")),
        ("doc.docx", types.Blob(mime_type="application/octet-stream", data=_docx("Hello", "world"))),
    ]
    for name, blob in cases:
        theirs, ours = adk_safe(types.Part(inline_data=blob), name), as_safe_part_for_llm(types.Part(inline_data=blob), name)
        assert (ours.text is None) == (theirs.text is None), name
        if ours.text is None:
            assert ours.inline_data == theirs.inline_data, name
        elif name in ("data.csv", "icon.svg", "doc.docx"):
            assert ours.text == theirs.text, name
        else:  # a description of the file: our own words, naming it
            assert name in ours.text and blob.mime_type in ours.text, name


def _docx(*paragraphs: str) -> bytes:
    import io
    import zipfile

    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    xml = ('<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
           f"<w:body>{body}</w:body></w:document>")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("word/document.xml", xml)
    return buffer.getvalue()


# --- load_memory and preload_memory -------------------------------------------------------


async def _memory_scenario(fw, tool_name: str) -> dict[str, Any]:
    h = RequestHarness(fw)
    script = ([scenarios.fc("load_memory", query="favourite colour"), "blue it is"]
              if tool_name == "load_memory" else ["blue it is"])
    await h.start(fw.LlmAgent(name="agent", model=h.model(GEMINI_2, "noted", *script),
                              tools=[getattr(fw, tool_name)]))
    await h.turn(scenarios.user_text("my favourite colour is blue"))
    first = await h.get_session()
    await h.runner.memory_service.add_session_to_memory(first)
    session = await h.runner.session_service.create_session(app_name=scenarios.APP_NAME, user_id=scenarios.USER_ID)
    h.session_id = session.id
    await h.turn(scenarios.user_text("what is my favourite colour?"))
    return rewrite(await h.finish(), _memory_gist)


def _memory_gist(value: Any) -> Any:
    """A memory entry as (author, text): its id and time are the run's own."""
    if isinstance(value, dict) and {"content", "id", "timestamp"} <= set(value):
        return [value.get("author"), value["content"]["parts"][0]["text"]]
    return value


def test_load_memory_matches_google_adk():
    adk, mine = run(_memory_scenario, "load_memory")
    assert comparable(mine) == comparable(adk)
    assert mine["turns"][1]["events"][1]["payload"][0][2] == {
        "result": {"memories": [["user", "my favourite colour is blue"]]}}
    assert mine["requests"][1]["tools"] == ["load_memory"]


def test_preload_memory_matches_google_adk():
    adk, mine = run(_memory_scenario, "preload_memory")
    for record in (adk, mine):  # the memories' tag is google-adk's: an instruction may name it
        [memories] = record["requests"][1]["contents"][0]["parts"]
        assert "\n<PAST_CONVERSATIONS>\nTime: " in memories[1]
        assert memories[1].endswith("\n</PAST_CONVERSATIONS>\n")
    for record in (adk, mine):  # the preamble is each framework's own words; keep the lines
        for request in record["requests"]:
            for content in request["contents"]:
                for part in content["parts"]:
                    if part[0] == "text" and "Time: " in part[1]:
                        lines = part[1].splitlines()
                        part[1] = [line.split(": ", 1)[0] for line in lines if ": " in line
                                   and (line.startswith("Time:") or line.startswith("user:"))]
    assert comparable(mine) == comparable(adk)
    second = mine["requests"][1]
    assert second["tools"] == [] and second["contents"][0]["parts"] == [["text", ["Time", "user"]]]
    assert second["contents"][1]["parts"] == [["text", "what is my favourite colour?"]]
    assert mine["session_events"][-2]["payload"] == [["text", "what is my favourite colour?"]]


# --- get_user_choice ----------------------------------------------------------------------


async def _user_choice_scenario(fw) -> dict[str, Any]:
    h = RequestHarness(fw)
    await h.start(fw.LlmAgent(name="agent", model=h.model(
        GEMINI_2, scenarios.fc("get_user_choice", options=["tea", "coffee"]), "coffee it is"),
        tools=[fw.get_user_choice]))
    events = await h.turn(scenarios.user_text("something to drink?"))
    call_id = scenarios.first_call_id(events)
    await h.turn(scenarios.function_response(call_id, "get_user_choice", {"result": "coffee"}))
    return await h.finish()


def test_get_user_choice_pauses_for_the_user_as_google_adk_does():
    adk, mine = run(_user_choice_scenario)
    assert mine == adk
    first = mine["turns"][0]["events"]
    assert len(first) == 1 and first[0]["long_running"] and first[0]["final"]
    assert mine["turns"][1]["events"][-1]["payload"] == [["text", "coffee it is"]]


async def test_get_user_choice_waits_for_an_answer_through_the_embedded_runtime():
    from orchestrator.tools import get_user_choice

    model = ScriptedLlm(responses=[call("get_user_choice", options=["tea", "coffee"]), "coffee it is"])
    runtime = EmbeddedRuntime(AppRegistry([App(name="drinks", root_agent=LlmAgent(
        name="agent", model=model, tools=[get_user_choice]))]))
    invocation = await runtime.enqueue(app_name="drinks", user_id="u", new_message="drink?")
    record = await runtime.wait("drinks", invocation, timeout=10, until={InvocationStatus.PAUSED})
    assert record.status is InvocationStatus.PAUSED
    await runtime.answer("drinks", invocation, record.pending_calls[0], {"result": "coffee"})
    record = await runtime.wait("drinks", invocation, timeout=10,
                                until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
