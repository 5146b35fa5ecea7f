"""A critic that checks an answer with Google Search, and a reviser that corrects it.

The shape of ADK's auditor sample: a ``SequentialAgent`` runs a critic, which is given
``google_search`` (a tool the model runs on Google's side: it is sent to Gemini as a tool
declaration, and nothing runs here), and writes its findings to the state; then a reviser
rewrites the answer from those findings.
"""

from __future__ import annotations

from typing import Any

from examples.samples._offline import last_user_text, model_or_offline
from orchestrator.agents import Agent, SequentialAgent
from orchestrator.apps import App
from orchestrator.models.llm_request import LlmRequest
from orchestrator.tools import google_search

FACTS = {"capital of australia": "Canberra", "boiling point of water": "100 °C at sea level"}


def _searches_google(request: LlmRequest) -> bool:
    tools = request.config.tools if request.config is not None else None
    return any(getattr(tool, "google_search", None) is not None for tool in tools or [])


def _critic_model(request: LlmRequest) -> Any:
    claim = last_user_text(request)
    if not _searches_google(request):
        return "Findings: unverified (no search tool was offered)."
    for topic, fact in FACTS.items():
        if topic in claim.lower():
            if fact.lower() in claim.lower():
                return f"Findings: accurate; search confirms {fact}."
            return f"Findings: inaccurate; search says {fact}."
    return "Findings: nothing to check."


def _reviser_model(request: LlmRequest) -> Any:
    # The critic's findings reach the reviser through its instruction ({findings}).
    instruction = str(request.config.system_instruction or "") if request.config else ""
    findings = instruction.partition("these findings:")[2].partition("\n")[0]
    if "search says" in findings:
        return f"Revised: {findings.split('search says', 1)[1].strip().rstrip('.')}."
    return f"Revised: {last_user_text(request)}"


critic_agent = Agent(
    name="critic_agent",
    model=model_or_offline(_critic_model),
    description="Checks the claims of an answer against Google Search.",
    instruction="Check each claim of the user's text with google_search; list your findings.",
    tools=[google_search],
    output_key="findings",
)

reviser_agent = Agent(
    name="reviser_agent",
    model=model_or_offline(_reviser_model),
    description="Rewrites an answer from the critic's findings.",
    instruction="Rewrite the user's text so that it agrees with these findings: {findings}",
)

root_agent = SequentialAgent(
    name="answer_auditor",
    description="Checks an answer, then corrects it.",
    sub_agents=[critic_agent, reviser_agent],
)

app = App(name="answer_auditor", root_agent=root_agent)
