"""Apps for bench/fairness.py and tests/test_fair_sharing.py: a chat whose model may think.

The model answers ``reply to <message>``. A message that starts with ``think <ms>`` makes the
model wait that many milliseconds first, without using the CPU, like a call to a real model
does; any other message is answered at once. The model is a function of the request, so any
orchestrator process answers the same way.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator import App, LlmAgent, LlmRequest
from orchestrator.models.fake import FunctionLlm


def _last_user_text(request: LlmRequest) -> str:
    """The text of the user's latest message ('' if none).

    Read from the end: a model that answers at once costs the same on a long session.
    """
    for content in reversed(request.contents):
        if content.role == "user":
            for part in reversed(content.parts or []):
                if part.text:
                    return part.text
    return ""


async def _model(request: LlmRequest) -> Any:
    text = _last_user_text(request)
    words = text.split()
    if len(words) >= 2 and words[0] == "think":
        await asyncio.sleep(float(words[1]) / 1000)
    return f"reply to {text}"


fair_app = App(name="fair", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(fn=_model, record_requests=False)))

APP = "fair"
APP_SPECS = "bench._fairness_apps:fair_app"
