"""``/run`` and ``/run_sse`` with a message of function responses, as google-adk takes them
(and its dev UI sends them): answers to the session's paused calls, through the one checked
answer path, the run following the invocation from its pause."""

from __future__ import annotations

import threading

import httpx
import pytest
import redis

from tests.apps_slow_resume import APP_SPECS as SLOW_RESUME_SPECS
from tests.apps_slow_resume import GATE
from tests.support.backends import running_stack
from tests.support.polling import eventually
from tests.support.processes import stack_env
from tests.test_api import frames, start_api


@pytest.fixture(scope="module")
def api(celery_stack):
    api, base = start_api(stack_env(celery_stack["url"], "tests.apps:approval_app,tests.apps:chat_app,tests.apps:two_approvals_app,"
                                                         "tests.apps_confirm:guarded_app,tests.apps_confirm:guarded_pair_app"))
    yield base
    api.stop()


def _paused(api: str, user: str) -> tuple[str, dict]:
    """A session of the approval app paused on its long-running call; (session id, call)."""
    session = httpx.post(f"{api}/apps/approval/users/{user}/sessions").json()["id"]
    events = httpx.post(f"{api}/run", timeout=30, json={
        "appName": "approval", "userId": user, "sessionId": session,
        "newMessage": {"role": "user", "parts": [{"text": "pay 100"}]}}).json()
    return session, {**events[-1]["content"]["parts"][0]["functionCall"],
                     "invocationId": events[-1]["invocationId"]}


def _answer(call: dict, response: dict) -> dict:
    return {"role": "user", "parts": [{"functionResponse": {
        "id": call["id"], "name": call["name"], "response": response}}]}


def test_a_function_response_message_resumes_the_paused_invocation(api):
    session, call = _paused(api, "ann")
    request = {"appName": "approval", "userId": "ann", "sessionId": session,
               "newMessage": _answer(call, {"approved": True}), "functionCallEventId": "ignored"}
    events = httpx.post(f"{api}/run", timeout=30, json=request).json()
    # The events after the pause, the user's answer left out as ADK's runner does.
    assert [(e["author"], e["invocationId"]) for e in events] == [("agent", call["invocationId"])]
    assert events[0]["content"]["parts"][0]["text"] == "approval: {'approved': True}"
    stored = httpx.get(f"{api}/apps/approval/users/ann/sessions/{session}").json()["events"]
    answer = stored[2]["content"]["parts"][0]["functionResponse"]
    assert (stored[2]["author"], answer["id"], answer["response"]) == ("user", call["id"], {"approved": True})
    # Sent again (its reply lost, say): the same answer was taken once, and the reply is
    # the first one's; the session holds one answer.
    again = httpx.post(f"{api}/run", timeout=30, json=request)
    assert again.status_code == 200 and again.json() == events
    stored = httpx.get(f"{api}/apps/approval/users/ann/sessions/{session}").json()["events"]
    assert [e["author"] for e in stored] == ["user", "agent", "user", "agent"]
    # Another answer to the answered call is a second answer: refused.
    other = httpx.post(f"{api}/run", timeout=30,
                       json={**request, "newMessage": _answer(call, {"approved": False})})
    assert other.status_code == 409 and "completed" in other.text


def test_run_sse_streams_what_follows_the_answer(api):
    session, call = _paused(api, "ben")
    streamed = frames(httpx.post(f"{api}/run_sse", timeout=30, json={
        "appName": "approval", "userId": "ben", "sessionId": session,
        "invocationId": call["invocationId"], "newMessage": _answer(call, {"approved": False})}))
    assert [f["data"]["content"]["parts"][0]["text"] for f in streamed] == [
        "approval: {'approved': False}"]


def test_answers_that_answer_nothing_here_are_refused(api):
    session, call = _paused(api, "cat")
    base = {"appName": "approval", "userId": "cat", "sessionId": session}
    unknown = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": _answer({**call, "id": "adk-other"}, {"ok": 1})})
    assert unknown.status_code == 422
    assert unknown.json()["detail"] == ("new_message.parts[0].function_response: 'adk-other' "
                                        "answers no call of this session")
    wrong = httpx.post(f"{api}/run", timeout=30, json={
        **base, "invocationId": "e-other", "newMessage": _answer(call, {"ok": 1})})
    assert wrong.status_code == 422 and "one invocation" in wrong.text
    not_object = httpx.post(f"{api}/run", timeout=30, json={**base, "newMessage": {
        "role": "user", "parts": [{"functionResponse": {"id": call["id"], "response": "yes"}}]}})
    assert not_object.status_code == 422 and "JSON object" in not_object.text
    mixed = httpx.post(f"{api}/run", timeout=30, json={**base, "newMessage": {
        "role": "user", "parts": [{"text": "and"}, *_answer(call, {"ok": 1})["parts"]]}})
    assert mixed.status_code == 422 and "function_response" in mixed.text
    other_session = httpx.post(f"{api}/apps/approval/users/cat/sessions").json()["id"]
    elsewhere = httpx.post(f"{api}/run", timeout=30, json={
        **base, "sessionId": other_session, "newMessage": _answer(call, {"ok": 1})})
    assert elsewhere.status_code == 422
    # Nothing was answered: the call still waits, and a right answer still goes through.
    assert httpx.get(f"{api}/apps/approval/invocations/{call['invocationId']}").json()["status"] == "paused"
    done = httpx.post(f"{api}/run", timeout=30, json={**base, "newMessage": _answer(call, {"ok": 1})})
    assert done.json()[-1]["content"]["parts"][0]["text"] == "approval: {'ok': 1}"


def test_a_part_with_text_beside_its_function_response_is_refused_not_cut(api):
    """A part holding both a functionResponse and text used to answer the call and drop the
    text without a word. google-adk refuses a message with both (responses resume, text
    starts a new turn); here it is a 422 naming the part, and nothing is answered."""
    session, call = _paused(api, "cal")
    base = {"appName": "approval", "userId": "cal", "sessionId": session}
    answer = _answer(call, {"approved": True})["parts"][0]
    for path, parts, index in [
        ("/run", [{**answer, "text": "and pay 50 more"}], 0),
        ("/run_sse", [{**answer, "text": "and pay 50 more"}], 0),
        ("/run", [answer, {"function_response": {"id": "adk-x", "response": {}},
                           "text": "note"}], 1),
    ]:
        refused = httpx.post(f"{api}{path}", timeout=30, json={
            **base, "newMessage": {"role": "user", "parts": parts}})
        assert refused.status_code == 422, (path, refused.text)
        detail = refused.json()["detail"]
        assert detail.startswith(f"new_message.parts[{index}]: a part with a function response "
                                 "holds nothing else, and this one also has 'text'"), detail
    invocation = httpx.get(f"{api}/apps/approval/invocations/{call['invocationId']}").json()
    assert invocation["status"] == "paused" and invocation["pendingCalls"] == [call["id"]]
    # An empty text is nothing dropped (google-adk lets it through too).
    done = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": {"role": "user", "parts": [{**answer, "text": ""}]}})
    assert done.json()[-1]["content"]["parts"][0]["text"] == "approval: {'approved': True}"


def test_a_confirmation_answer_that_is_no_confirmation_is_refused_and_nothing_is_answered(api):
    session = httpx.post(f"{api}/apps/guarded/users/dan/sessions").json()["id"]
    base = {"appName": "guarded", "userId": "dan", "sessionId": session}
    events = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": {"role": "user", "parts": [{"text": "pay"}]}}).json()
    [request] = [p["functionCall"] for e in events for p in e["content"]["parts"]
                 if p.get("functionCall", {}).get("name") == "adk_request_confirmation"]
    bad = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": _answer(request, {"confirmed": True, "note": "ok by me"})})
    assert bad.status_code == 422
    assert bad.json()["detail"].startswith(
        "new_message.parts[0].function_response: response.note: Extra inputs are not permitted")
    invocation = httpx.get(f"{api}/apps/guarded/invocations/{events[0]['invocationId']}").json()
    assert invocation["status"] == "paused" and invocation["pendingCalls"] == [request["id"]]
    done = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": _answer(request, {"confirmed": False})}).json()
    assert done[-1]["content"]["parts"][0]["text"] == "payout: {'error': 'This tool call is rejected.'}"



def test_a_message_with_one_refused_answer_stores_none_of_them(api):
    """Two confirmations asked in one turn: a message answering both, one of them wrongly,
    or answering a call that is not pending beside a right answer, answers neither."""
    session = httpx.post(f"{api}/apps/guarded_pair/users/eve/sessions").json()["id"]
    base = {"appName": "guarded_pair", "userId": "eve", "sessionId": session}
    events = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": {"role": "user", "parts": [{"text": "pay"}]}}).json()
    calls = [p["functionCall"] for e in events for p in e["content"]["parts"] if "functionCall" in p]
    pay, requests = calls[0], [c for c in calls if c["name"] == "adk_request_confirmation"]
    deep: dict = {}
    for _ in range(40):
        deep = {"a": deep}
    for second, status in (((requests[1], {"confirmed": "maybe"}), 422),
                           ((requests[1], {"confirmed": True, "payload": deep}), 422),
                           ((requests[0], {"confirmed": False}), 422),  # the same call twice
                           ((pay, {"paid": 1}), 409)):  # waits for its confirmation
        message = {"role": "user", "parts": [*_answer(requests[0], {"confirmed": True})["parts"],
                                             *_answer(*second)["parts"]]}
        refused = httpx.post(f"{api}/run", timeout=30, json={**base, "newMessage": message})
        assert refused.status_code == status, refused.text
    # Nothing of them was stored: both confirmations are still to be answered, once.
    message = {"role": "user", "parts": [*_answer(requests[0], {"confirmed": False})["parts"],
                                         *_answer(requests[1], {"confirmed": False})["parts"]]}
    done = httpx.post(f"{api}/run", timeout=30, json={**base, "newMessage": message})
    assert done.status_code == 200, done.text
    rejected = {"error": "This tool call is rejected."}
    assert done.json()[-1]["content"]["parts"][0]["text"] == f"payouts: {rejected}, {rejected}"


def test_a_message_one_of_whose_calls_was_answered_meanwhile_stores_none_of_it(api, celery_stack):
    """Two calls paused in one turn; one is answered elsewhere after the message was checked
    (here: before it was sent, the record still listing it pending). The message is refused
    whole: the other call keeps waiting, and its own answer alone then ends the turn. (Stored
    call by call, the first answer used to go in before the second was refused: a 409 for a
    message half taken, which could not be sent again.)"""
    client = celery_stack["client"]
    session = httpx.post(f"{api}/apps/two_approvals/users/fay/sessions").json()["id"]
    base = {"appName": "two_approvals", "userId": "fay", "sessionId": session}
    events = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": {"role": "user", "parts": [{"text": "pay twice"}]}}).json()
    first, second = [p["functionCall"] for p in events[-1]["content"]["parts"]]
    inv = events[-1]["invocationId"]
    client.answer("two_approvals", inv, second["id"], {"approved": "elsewhere"})

    message = {"role": "user", "parts": [*_answer(first, {"approved": True})["parts"],
                                         *_answer(second, {"approved": True})["parts"]]}
    refused = httpx.post(f"{api}/run", timeout=30, json={**base, "newMessage": message})
    assert refused.status_code == 409 and second["id"] in refused.text, refused.text
    where = {c.function_call_id: c.where for c in client.calls("two_approvals", inv)}
    assert where[first["id"]] != "answered"  # nothing of the refused message was stored

    done = httpx.post(f"{api}/run", timeout=30, json={
        **base, "newMessage": _answer(first, {"approved": False})})
    assert done.status_code == 200, done.text
    assert done.json()[-1]["content"]["parts"][0]["text"] == (
        "approvals: [\"{'approved': 'elsewhere'}\", \"{'approved': False}\"]")



def test_an_answer_sent_again_while_its_resume_runs_gets_the_first_replys_events(redis_url):
    """The resend comes while the run its first try resumed is under way (the record still
    says paused, the first agent's answer committed): it follows the run from the pause
    the answer ended, as the first try does, not from where the run has got to."""
    with running_stack(redis_url, 12, apps=SLOW_RESUME_SPECS) as stack:
        api, base = start_api(stack_env(stack["url"], SLOW_RESUME_SPECS))
        gate = redis.Redis.from_url(stack["url"])
        try:
            session = httpx.post(f"{base}/apps/slow_resume/users/u/sessions").json()["id"]
            paused = httpx.post(f"{base}/run", timeout=30, json={
                "appName": "slow_resume", "userId": "u", "sessionId": session,
                "newMessage": {"role": "user", "parts": [{"text": "go"}]}}).json()
            request = {"appName": "slow_resume", "userId": "u", "sessionId": session,
                       "newMessage": _answer(paused[-1]["content"]["parts"][0]["functionCall"],
                                             {"approved": True})}
            first: dict[str, httpx.Response] = {}
            sender = threading.Thread(target=lambda: first.update(
                reply=httpx.post(f"{base}/run_sse", timeout=60, json=request)))
            sender.start()

            def a_answered() -> bool:  # b's model call now waits on the gate
                stored = httpx.get(f"{base}/apps/slow_resume/users/u/sessions/{session}").json()
                return any(p.get("text") == "a: approved" for e in stored["events"]
                           for p in (e.get("content") or {}).get("parts") or [])

            eventually("a's answer committed", a_answered, timeout=30)
            with httpx.stream("POST", f"{base}/run_sse", timeout=60, json=request) as again:
                assert again.status_code == 200
                gate.rpush(GATE, "go")  # its place is taken: let the run end
                resent = frames(httpx.Response(200, content=b"".join(again.iter_bytes())))
            sender.join(60)
        finally:
            gate.rpush(GATE, "cleanup")
            gate.close()
            api.stop()

    def texts(streamed: list[dict]) -> list[str]:
        return [p["text"] for f in streamed for p in f["data"].get("content", {}).get("parts", [])
                if "text" in p]

    assert texts(frames(first["reply"])) == ["a: approved", "b: done (released=True)"]
    assert texts(resent) == texts(frames(first["reply"]))
