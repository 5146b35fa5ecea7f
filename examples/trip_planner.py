"""A trip-planning agent: a quick tool (weather) and a long-running one (booking approval).

With ``GOOGLE_API_KEY`` (or ``ADK_CELERY_GOOGLE_API_KEY``) set it talks to Gemini; without
one it uses a deterministic offline model, so the demo runs anywhere.
"""

from __future__ import annotations

import re
from typing import Any

from config import get_settings
from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import FunctionLlm

FORECASTS = {"lisbon": ("sunny", 24), "oslo": ("snow", -3), "paris": ("cloudy", 12)}


def get_weather(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """Return the forecast for a city."""
    sky, high = FORECASTS.get(city.lower(), ("unknown", None))
    tool_context.state["last_city"] = city
    return {"city": city, "forecast": sky, "high_c": high}


def request_booking_approval(city: str, nights: int) -> None:
    """Ask a travel manager to approve a hotel booking; the answer arrives later."""
    # Returning nothing leaves the call open: the invocation pauses until someone answers.
    return None


def offline_planner(request: LlmRequest) -> Any:
    """A deterministic stand-in for a model: weather first, then approval, then a summary."""
    from google.genai import types

    # This turn only: a session's earlier trips (their messages and answers) are history.
    turn: list[Any] = []
    user_text = ""
    for content in request.contents:
        text = next((p.text for p in content.parts or [] if p.text), "") if content.role == "user" else ""
        if text:
            turn, user_text = [], text
        turn.append(content)
    city_match = re.search(r"in ([A-Z][a-z]+)", user_text)
    nights_match = re.search(r"(\d+) nights?", user_text)
    city = city_match.group(1) if city_match else "Lisbon"
    nights = int(nights_match.group(1)) if nights_match else 2
    answered = {
        p.function_response.name: p.function_response.response
        for c in turn for p in c.parts or [] if p.function_response
    }

    def call(name: str, **args: Any) -> types.Part:
        return types.Part(function_call=types.FunctionCall(name=name, args=args))

    if "get_weather" not in answered:
        return call("get_weather", city=city)
    if "request_booking_approval" not in answered:
        return call("request_booking_approval", city=city, nights=nights)
    weather = answered["get_weather"] or {}
    approval = answered["request_booking_approval"] or {}
    verdict = "approved" if approval.get("approved") else "not approved"
    high = weather.get("high_c")
    return (
        f"{nights} nights in {city}: the forecast is {weather.get('forecast')}"
        + (f" ({high} °C)" if high is not None else "")
        + f" and the booking was {verdict}"
        + (f" (ticket {approval['ticket']})." if approval.get("ticket") else ".")
    )


def build_agent() -> LlmAgent:
    """The trip planner, on Gemini when an API key is configured, else offline."""
    model: Any = "gemini-2.5-flash"
    if not get_settings().google_api_key:
        model = FunctionLlm(fn=offline_planner, record_requests=False)
    return LlmAgent(
        name="trip_planner",
        description="Plans short trips.",
        model=model,
        instruction=(
            "You plan trips. Check the weather with get_weather, then ask for booking approval "
            "with request_booking_approval, and once approved summarise the plan in one sentence."
        ),
        tools=[get_weather, LongRunningFunctionTool(request_booking_approval)],
        output_key="plan",
    )


root_agent = build_agent()
app = App(name="trip_planner", root_agent=root_agent)
