"""Checks of ``LlmAgent``'s constructor arguments, as google-adk 2.13 makes them.

The error texts a user sees are google-adk's, so a ported agent fails the same way.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

# Generation settings that are an LlmAgent argument of their own: passing them where a
# GenerateContentConfig field would go names that argument instead.
_OWNED_BY_AGENT: dict[str, str] = {
    "system_instruction": "instruction",
    "response_schema": "output_schema",
    "base_url": "model",
}

# GenerateContentConfig's fields, by their snake_case names and by their camelCase aliases.
_CONFIG_FIELDS: dict[str, str] = {
    name: name for name in types.GenerateContentConfig.model_fields
} | {
    field.alias: name
    for name, field in types.GenerateContentConfig.model_fields.items()
    if field.alias is not None
}


def _has_base_url(http_options: Any) -> bool:
    if isinstance(http_options, dict):
        return bool(http_options.get("base_url") or http_options.get("baseUrl"))
    return bool(getattr(http_options, "base_url", None))


def check_misplaced_arguments(data: Any, agent_fields: set[str]) -> Any:
    """Refuse generation settings passed to ``LlmAgent(...)`` itself, naming where they go.

    ``LlmAgent(temperature=0.2)`` is a common slip: pydantic alone would only say
    "extra inputs are not permitted". Unknown keys that are no generation setting are left
    to pydantic, unless they come with such a setting (then one error names them all).
    """
    if not isinstance(data, dict):
        return data
    transport: list[str] = []
    redirected: list[tuple[str, str]] = []
    misplaced: dict[str, None] = {}  # ordered, without repeats (a name and its alias)
    extras: list[str] = []
    for key, value in data.items():
        if key in agent_fields:
            continue
        if key in ("http_options", "httpOptions") and _has_base_url(value):
            transport.append(
                "Base URL is a transport setting and must be set via LlmAgent.model, "
                f"not via LlmAgent({key}=...)."
            )
            continue
        config_field = _CONFIG_FIELDS.get(key)
        owner = _OWNED_BY_AGENT.get(key) or _OWNED_BY_AGENT.get(config_field or "")
        if owner is not None:
            redirected.append((key, owner))
        elif config_field is not None:
            misplaced[config_field] = None
        else:
            extras.append(key)
    if not (transport or redirected or misplaced):
        return data
    parts: list[str] = []
    if not data.get("name"):
        parts.append("Field 'name' is required.")
    parts += transport
    if redirected:
        parts.append(". ".join(
            f"`{key}` must be set via LlmAgent.{owner}, not via LlmAgent({key}=...)"
            for key, owner in redirected
        ) + ".")
    if misplaced:
        names = list(misplaced)
        plural = len(names) > 1
        parts.append(
            f"{', '.join(names)} {'are' if plural else 'is a'} GenerateContentConfig "
            f"field{'s' if plural else ''}. Pass generate_content_config="
            f"types.GenerateContentConfig({', '.join(f'{n}=...' for n in names)}) instead."
        )
    if extras:
        parts.append("Extra inputs are not permitted: " + ", ".join(extras) + ".")
    raise ValueError(" ".join(parts))


def check_generate_content_config(
    config: types.GenerateContentConfig | None,
) -> types.GenerateContentConfig:
    """The agent's generation settings: those an LlmAgent sets otherwise are refused.

    None becomes an empty config, as in google-adk.
    """
    if not config:
        return types.GenerateContentConfig()
    if config.tools:
        raise ValueError(
            "All tools must be set via LlmAgent.tools, not via generate_content_config.tools. "
            "Move your tools to the LlmAgent(tools=[...]) parameter."
        )
    if config.system_instruction:
        raise ValueError(
            "System instruction must be set via LlmAgent.instruction, not via "
            "generate_content_config.system_instruction. Move your instruction to "
            'LlmAgent(instruction="...").'
        )
    if config.response_schema:
        raise ValueError(
            "Response schema must be set via LlmAgent.output_schema, not via "
            "generate_content_config.response_schema. Move your schema to "
            "LlmAgent(output_schema=...)."
        )
    if config.http_options and config.http_options.base_url:
        # Where requests go belongs to the model (its client), not to one agent's settings.
        raise ValueError(
            "Base URL is a transport setting and must be set on the model or its client, "
            "not via LlmAgent.generate_content_config.http_options.base_url."
        )
    return config


def check_tools(tools: Any) -> Any:
    """Refuse an agent given as a tool: it runs as a sub-agent, or wrapped in AgentTool."""
    from orchestrator.agents.base_agent import BaseAgent

    for tool in tools if isinstance(tools, list | tuple) else ():
        if isinstance(tool, BaseAgent):
            raise ValueError(
                f"Agent '{tool.name}' cannot be used directly as a tool. Agents should be "
                "invoked as sub-agents."
            )
    return tools


def check_default_model(model: Any) -> None:
    """Refuse a default model that is neither a model name nor a model."""
    from orchestrator.models.base_llm import BaseLlm

    if not isinstance(model, str | BaseLlm):
        raise TypeError(
            "Default model must be a model name (str) or BaseLlm instance, "
            f"got {type(model).__name__}."
        )
    if isinstance(model, str) and not model:
        raise ValueError("Default model must be a non-empty string.")
