"""``adk-celery api --dev-ui`` over real processes: google-adk's own web UI, served from the
installed google-adk (the ``devui`` extra), the routes it calls, and a real headless Chromium
chatting with a distributed agent (a worker's tool call, a call answered in the page, also
while its job still waits for a worker).

The browser tests need Playwright and Debian's chromium (tests/run.sh installs both); like
redis-server, they are skipped where missing and fail in CI.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
import redis

from tests.apps import APP_SPECS, PARKED_QUEUE
from tests.support.processes import stack_env, start_celery_process
from tests.test_api import start_api
from workers.api import dev_ui

APPS = "tests.apps:lookup_app,tests.apps:approval_app,tests.apps:parked_app"


def _require(thing: object, what: str) -> None:
    if thing is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {what} is missing (tests/run.sh installs it)", pytrace=False)
        pytest.skip(f"{what} is not installed (tests/run.sh installs it)")


@pytest.fixture(scope="module")
def ui_files() -> Path:
    files = dev_ui.find_files()
    _require(files, "google-adk's web UI (pip install -e '.[devui]')")
    assert files is not None
    return files


@pytest.fixture(scope="module")
def ui(celery_stack, ui_files):
    api, base = start_api(stack_env(celery_stack["url"], APPS), "--dev-ui")
    yield base
    api.stop()


def test_the_ui_is_served_from_the_installed_google_adk(ui, ui_files):
    root = httpx.get(f"{ui}/", follow_redirects=False)
    assert (root.status_code, root.headers["location"]) == (307, "/dev-ui/")
    page = httpx.get(f"{ui}/dev-ui/")
    assert page.status_code == 200 and page.text == (ui_files / "index.html").read_text()
    assert "<app-root>" in page.text
    assert httpx.get(f"{ui}/dev-ui/assets/config/runtime-config.json").json() == {
        "backendUrl": "", "telemetry": False}
    assert httpx.get(f"{ui}/dev-ui/config").json() == {"logo_text": None, "logo_image_url": None}
    assert httpx.get(f"{ui}/config/telemetry").json() == {"telemetry": False}
    assert httpx.post(f"{ui}/config/telemetry", json={"telemetry": True}).status_code == 501
    spec = httpx.get(f"{ui}/openapi.json").json()  # ADK's old and new eval paths side by side
    ids = [operation["operationId"] for path in spec["paths"].values() for operation in path.values()]
    assert len(ids) == len(set(ids)) and "/dev/apps/{app_name}/eval-sets" in spec["paths"]


def test_graph_and_trace_routes(ui):
    graph = httpx.get(f"{ui}/dev/apps/lookup/build_graph").json()
    assert graph["name"] == "lookup"
    assert graph["root_agent"]["name"] == "agent"
    assert graph["root_agent"]["tools"] == [{"name": "slow_lookup", "type": "tool"}]
    image = httpx.get(f"{ui}/dev/apps/lookup/build_graph_image", params={"dark_mode": "true"}).json()
    assert list(image) == [""] and '"agent" -> "slow_lookup"' in image[""]["dotSrc"]
    assert httpx.get(f"{ui}/dev/apps/lookup/build_graph_image", params={"node": "nope"}).status_code == 404
    assert httpx.get(f"{ui}/dev/apps/nope/build_graph").status_code == 404
    assert httpx.get(f"{ui}/dev/apps/lookup/debug/trace/session/s1").json() == []
    assert httpx.get(f"{ui}/dev/apps/lookup/debug/trace/e1").status_code == 404

    session = httpx.post(f"{ui}/apps/lookup/users/u/sessions").json()
    events = httpx.post(f"{ui}/run", timeout=30, json={
        "appName": "lookup", "userId": "u", "sessionId": session["id"],
        "newMessage": {"role": "user", "parts": [{"text": "look up Oslo"}]}}).json()
    url = f"{ui}/dev/apps/lookup/users/u/sessions/{session['id']}/events/{events[0]['id']}/graph"
    assert "penwidth=2" in httpx.get(url).json()["dotSrc"]  # the call agent -> slow_lookup
    assert httpx.get(url.replace(events[0]["id"], "unknown")).json() == {}


def test_unsupported_panels_read_empty_and_refuse_changes(ui):
    dev = f"{ui}/dev/apps/lookup"
    assert httpx.get(f"{dev}/eval_sets").json() == []
    assert httpx.get(f"{dev}/eval-sets").json() == {"evalSetIds": []}
    assert httpx.get(f"{dev}/eval_results").json() == []
    assert httpx.get(f"{dev}/metrics-info").json() == {"metricsInfo": []}
    assert httpx.get(f"{dev}/tests").json() == []
    builder = httpx.get(f"{dev}/builder", params={"ts": "1"})
    assert (builder.status_code, builder.text) == (200, "")
    created = httpx.post(f"{dev}/eval-sets", json={"eval_set": {"eval_set_id": "x"}})
    assert created.status_code == 501 and "adk eval" in created.json()["detail"]
    assert httpx.get(f"{dev}/eval_sets/x/evals").status_code == 404
    assert httpx.post(f"{dev}/tests/run").status_code == 501
    assert httpx.post(f"{dev}/builder/save").status_code == 501
    assert httpx.get(f"{dev}/deploy/defaults").status_code == 501


def test_other_sites_pages_are_refused_without_tokens(ui):
    assert httpx.get(f"{ui}/list-apps", headers={"Origin": "https://evil.example"}).status_code == 403
    port = ui.rsplit(":", 1)[1]
    rebound = httpx.get(f"{ui}/list-apps", headers={"Host": f"evil.example:{port}"})
    assert rebound.status_code == 403 and "loopback" in rebound.text
    same = httpx.get(f"{ui}/list-apps", headers={"Origin": ui})
    assert same.status_code == 200 and "lookup" in same.json()


def test_without_google_adk_the_dev_ui_is_refused(monkeypatch):
    from importlib import metadata

    def missing(name: str):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(dev_ui.metadata, "distribution", missing)
    assert dev_ui.find_files() is None
    assert "pip install -e '.[devui]'" in dev_ui.MISSING  # a checkout's install, not an index's


# ---- a real browser ------------------------------------------------------------------------

def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    binary = _chromium()
    _require(binary, "chromium (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require(None, "playwright (pip install playwright)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        yield launched
        launched.close()


_FOCUS_MOVES = """
// ADK's UI moves the focus to its message box in a timer (focusInput: setTimeout, 50 ms) once
// the page has loaded and after each run ends: keystrokes meant for an answer box when it
// fires land in the message box. Counted here: the runs whose /run_sse body was read to its
// end, the focusInput timers still to fire, and the most runs ended when one that fired was set.
(() => {
  Error.stackTraceLimit = 50;  // focusInput is below zone.js's frames when a timer is set
  const ui = window.adkCeleryTest = {runsEnded: 0, pending: 0, movedAfter: -1};
  const setTimeout0 = window.setTimeout;
  window.setTimeout = function (callback, ...rest) {
    if (!/focusInput/.test(new Error().stack)) return setTimeout0.call(this, callback, ...rest);
    const runs = ui.runsEnded;
    ui.pending++;
    return setTimeout0.call(this, function (...args) {
      try { return callback.apply(this, args); } finally {
        ui.pending--;
        ui.movedAfter = Math.max(ui.movedAfter, runs);
      }
    }, ...rest);
  };
  const fetch0 = window.fetch;
  window.fetch = async function (input, init) {
    const response = await fetch0.call(this, input, init);
    if (!String(input).endsWith('/run_sse') || !response.body) return response;
    const reader = response.body.getReader();
    return new Response(new ReadableStream({
      async pull(controller) {
        const {done, value} = await reader.read();
        if (done) { ui.runsEnded++; controller.close(); } else controller.enqueue(value);
      },
      cancel(reason) { return reader.cancel(reason); },
    }), {status: response.status, statusText: response.statusText, headers: response.headers});
  };
})();
"""


@pytest.fixture
def page(browser, ui, tmp_path):
    """A page of the UI; its calls to the API are recorded, with their statuses."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.add_init_script(_FOCUS_MOVES)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(ui)
               else route.abort())  # no network here: Google Fonts stay out
    page.api_calls = []
    page.on("response", lambda response: page.api_calls.append(
        (response.status, response.request.method, response.url[len(ui):]))
        if response.url.startswith(ui) and "/dev-ui/" not in response.url else None)
    yield page
    page.screenshot(path=str(tmp_path / "dev-ui.png"))
    context.close()


def _send(page, text: str) -> None:
    box = page.get_by_placeholder("Type a message")
    box.fill(text)
    box.press("Enter")


def test_chat_with_a_distributed_agent_in_adks_ui(page, ui):
    page.goto(f"{ui}/dev-ui/?app=lookup")
    _send(page, "look up Rome")
    page.get_by_text("Rome found by pid").wait_for(timeout=30_000)
    # The worker's tool call and its answer are events of their own in the page.
    page.get_by_text('slow_lookup("Rome")').wait_for()
    assert page.get_by_text("State: looked_up").is_visible()
    failed = [call for call in page.api_calls if call[0] >= 400]
    assert failed == [] and any(call[2] == "/run_sse" for call in page.api_calls)


def _settled(page, runs: int) -> None:
    """Wait until the UI is done with the end of its ``runs``-th run (0: with the page's load).

    That is, until its move of the focus to the message box has happened (``_FOCUS_MOVES``):
    a person types into an answer box once the page is still, and so does a test.
    """
    page.wait_for_function("""runs => {
        const ui = window.adkCeleryTest;
        return ui.runsEnded >= runs && ui.movedAfter >= runs && ui.pending === 0;
    }""", arg=runs, timeout=30_000)


def _answer_and_see(page, answer, text: str, reply: str) -> None:
    """Send ``text`` from the answer box, see ``reply``; the UI made two runs, none refused."""
    answer.fill(text)
    answer.press("Enter")
    page.get_by_text(reply).wait_for(timeout=30_000)
    runs = [call for call in page.api_calls if call[2] == "/run_sse"]
    assert [status for status, _, _ in runs] == [200, 200]
    assert [call for call in page.api_calls if call[0] >= 400] == []


def test_answer_a_long_running_call_in_adks_ui(page, ui):
    page.goto(f"{ui}/dev-ui/?app=approval")
    _send(page, "pay 100")
    answer = page.get_by_placeholder("Enter your response")
    answer.wait_for(timeout=30_000)
    # The run ends once the worker has left the call to an outside answer (its placeholder
    # says so on the run's stream). Answered once the UI is done with that end, as a person
    # would: typed earlier, the UI's move of the focus can take the keystrokes elsewhere.
    _settled(page, 1)
    _answer_and_see(page, answer, '{"approved": true}', "approval: {'approved': True}")


def test_an_answer_sent_while_the_call_waits_for_a_worker_is_not_lost(page, ui, celery_stack):
    # The parked app's job waits in a queue no worker of this stack takes: the run still
    # streams when the person answers (the UI sends it: its answer box is not held back
    # while a run streams), and the answer resumes the invocation.
    finished: list[str] = []
    page.on("requestfinished", lambda request: finished.append(request.url)
            if request.url.endswith("/run_sse") else None)
    page.goto(f"{ui}/dev-ui/?app=parked")
    page.get_by_placeholder("Type a message").wait_for()
    _settled(page, 0)  # the focus moves once the page has loaded, then not while a run streams
    _send(page, "typed-early")
    answer = page.get_by_placeholder("Enter your response")
    answer.wait_for(timeout=30_000)
    assert finished == []
    _answer_and_see(page, answer, '{"tag": "answered by hand"}', "ran answered by hand")
    # A worker that takes the job only now does not run the tool: the call is answered.
    url = celery_stack["url"]
    worker = start_celery_process("worker", "parked-ui", stack_env(url, APP_SPECS), "-Q", PARKED_QUEUE)
    try:
        worker.wait_for_line(lambda line: "already answered" in line)
    finally:
        worker.stop()
    assert not redis.Redis.from_url(url).exists("test:parked:typed-early")
