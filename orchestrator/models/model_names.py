"""Reading model names: is it Gemini, and which Gemini generation (for built-in tools)."""

from __future__ import annotations

import re

from orchestrator.process_setup import core_defaults

_PATH_FORMS = (
    re.compile(r"^projects/[^/]+/locations/[^/]+/publishers/[^/]+/models/(.+)$"),
    re.compile(r"^apigee/(?:[^/]+/)?(?:[^/]+/)?(.+)$"),
)
_MAJOR_VERSION = re.compile(r"^gemini-(\d+)(?:\.\d+)*(?:-|$)")


def extract_model_name(model: str) -> str:
    """The bare model name of a resource path or a provider-prefixed name.

    ``projects/p/locations/l/publishers/google/models/gemini-2.5-pro``, ``models/gemini-2.5-pro``
    and ``gemini/gemini-2.5-pro`` all give ``gemini-2.5-pro``; other names are returned as is.
    """
    for form in _PATH_FORMS:
        if match := form.match(model):
            return match.group(1)
    if model.startswith("models/"):
        return model.removeprefix("models/")
    if model.startswith("projects/"):
        return model  # a malformed resource path: not a provider prefix
    if "/" in model:
        last = model.rsplit("/", 1)[1]
        if last.startswith("gemini-"):
            return last
    return model


def is_gemini_model(model: str | None) -> bool:
    """True if ``model`` names a Gemini model."""
    return bool(model) and extract_model_name(model or "").startswith("gemini-")


def gemini_builtin_tools_allowed(model: str | None) -> bool:
    """True if Gemini's built-in tools may be sent to ``model``.

    Gemini models only, unless ``ADK_CELERY_DISABLE_GEMINI_MODEL_ID_CHECK`` (or google-adk's
    ``ADK_DISABLE_GEMINI_MODEL_ID_CHECK``) is set, for deployments whose model ids do not
    follow the public naming.
    """
    return is_gemini_model(model) or core_defaults().model_id_check_disabled()


def combines_builtin_tools_with_functions(model: str | None) -> bool:
    """True if ``model`` accepts built-in search tools in a request that declares functions.

    Gemini 3 and later do; earlier Gemini models answer such a request with an error, and
    other models are not assumed to.
    """
    if not model:
        return False
    match = _MAJOR_VERSION.match(extract_model_name(model))
    return match is not None and int(match.group(1)) >= 3
