"""Agents in the shapes of google's published ADK samples, written for adk-celery.

Each module is ADK code with ``google.adk`` imports changed to ``orchestrator`` ones, and an
``app`` for ``ADK_CELERY_APPS``. With a Gemini API key they talk to Gemini; without one each
agent uses a deterministic offline model (a function of the request), so they run anywhere,
in process and on orchestrators and workers alike.
"""
