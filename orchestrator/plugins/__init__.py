"""Plugins: app-wide callbacks around runs, agents, model calls and tool calls.

``BasePlugin`` and ``PluginManager`` are the mechanism; the rest are ready-made plugins,
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from orchestrator.plugins.base_plugin import BasePlugin
from orchestrator.plugins.plugin_manager import PluginManager

if TYPE_CHECKING:
    from orchestrator.plugins.context_filter_plugin import ContextFilterPlugin
    from orchestrator.plugins.global_instruction_plugin import GlobalInstructionPlugin
    from orchestrator.plugins.logging_plugin import LoggingPlugin
    from orchestrator.plugins.reflect_retry_tool_plugin import (
        ReflectAndRetryToolPlugin,
        TrackingScope,
    )
    from orchestrator.plugins.save_files_as_artifacts_plugin import SaveFilesAsArtifactsPlugin

__all__ = [
    "BasePlugin",
    "ContextFilterPlugin",
    "GlobalInstructionPlugin",
    "LoggingPlugin",
    "PluginManager",
    "ReflectAndRetryToolPlugin",
    "SaveFilesAsArtifactsPlugin",
    "TrackingScope",
]

# The plugins import parts of the core (flows, contexts) that import this package's
# manager: loading them lazily keeps that from being a cycle.
_LAZY = {
    "ContextFilterPlugin": "context_filter_plugin",
    "GlobalInstructionPlugin": "global_instruction_plugin",
    "LoggingPlugin": "logging_plugin",
    "ReflectAndRetryToolPlugin": "reflect_retry_tool_plugin",
    "SaveFilesAsArtifactsPlugin": "save_files_as_artifacts_plugin",
    "TrackingScope": "reflect_retry_tool_plugin",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
