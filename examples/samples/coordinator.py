"""A coordinator that delegates to specialist agents through ``AgentTool``.

The shape of ADK's concierge-style samples: the root agent does no work itself; it asks a
flight specialist and a hotel specialist (each an agent with its own tool, called as a
tool), then writes one answer from their replies.
"""

from __future__ import annotations

import re
from typing import Any

from examples.samples._offline import answers, call, last_user_text, model_or_offline
from orchestrator.agents import Agent
from orchestrator.apps import App
from orchestrator.models.llm_request import LlmRequest
from orchestrator.tools.agent_tool import AgentTool

FARES = {"lisbon": 89, "oslo": 140, "paris": 65}
RATES = {"lisbon": 110, "oslo": 180, "paris": 150}


def search_flights(destination: str) -> dict[str, Any]:
    """Return the cheapest return fare to a destination, in euros."""
    return {"destination": destination, "fare_eur": FARES.get(destination.lower())}


def search_hotels(city: str, nights: int) -> dict[str, Any]:
    """Return the price of a mid-range hotel for some nights in a city, in euros."""
    rate = RATES.get(city.lower())
    return {"city": city, "nights": nights, "total_eur": rate * nights if rate else None}


def _city(text: str) -> str:
    match = re.search(r"\b(Lisbon|Oslo|Paris)\b", text)
    return match.group(1) if match else "Lisbon"


def _nights(text: str) -> int:
    match = re.search(r"(\d+) nights?", text)
    return int(match.group(1)) if match else 2


def _flight_model(request: LlmRequest) -> Any:
    done = answers(request)
    if "search_flights" not in done:
        return call("search_flights", destination=_city(last_user_text(request)))
    return f"Cheapest fare: {done['search_flights'].get('fare_eur')} EUR."


def _hotel_model(request: LlmRequest) -> Any:
    done = answers(request)
    if "search_hotels" not in done:
        text = last_user_text(request)
        return call("search_hotels", city=_city(text), nights=_nights(text))
    return f"Hotel total: {done['search_hotels'].get('total_eur')} EUR."


def _coordinator_model(request: LlmRequest) -> Any:
    text, done = last_user_text(request), answers(request)
    if "flight_agent" not in done:
        return call("flight_agent", request=f"Fares to {_city(text)}")
    if "hotel_agent" not in done:
        return call("hotel_agent", request=f"{_nights(text)} nights in {_city(text)}")
    return (f"{_city(text)}: {done['flight_agent'].get('result')} "
            f"{done['hotel_agent'].get('result')}")


flight_agent = Agent(
    name="flight_agent",
    model=model_or_offline(_flight_model),
    description="Finds flight fares.",
    instruction="Find the cheapest fare with search_flights and state it in one sentence.",
    tools=[search_flights],
)

hotel_agent = Agent(
    name="hotel_agent",
    model=model_or_offline(_hotel_model),
    description="Finds hotel prices.",
    instruction="Price the stay with search_hotels and state the total in one sentence.",
    tools=[search_hotels],
)

root_agent = Agent(
    name="travel_coordinator",
    model=model_or_offline(_coordinator_model),
    description="Plans trips by asking specialists.",
    instruction=(
        "You coordinate trip planning. Ask flight_agent for fares and hotel_agent for the "
        "stay, then answer with both figures."
    ),
    tools=[AgentTool(agent=flight_agent), AgentTool(agent=hotel_agent)],
)

app = App(name="travel_coordinator", root_agent=root_agent)
