"""``Runner(...)``'s arguments: the App a Runner runs, from an ``app`` or an ``agent``.

As google-adk's ``Runner._validate_runner_params``: pass an ``app`` (its name may be
overridden), or an ``agent`` with an ``app_name`` (a bare App is made around it); the
``plugins`` argument is deprecated in favour of the App's.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from orchestrator.apps.app import App

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.plugins.base_plugin import BasePlugin


def validate_runner_params(
    app: App | None,
    app_name: str | None,
    agent: BaseAgent | None,
    plugins: list[BasePlugin] | None,
) -> tuple[App, str]:
    """The App the Runner runs and its app name; ValueError for arguments that do not fit.

    Called from ``Runner.__init__`` only: the deprecation warning names its caller's line.
    """
    # The texts are google-adk 2.13's (which also takes a workflow ``node``; not here).
    if app is not None and agent is not None:
        raise ValueError(
            "Only one of app, agent, or node may be provided, but got: "
            f"app={type(app).__name__}, agent={type(agent).__name__}. "
            "Pass exactly one to Runner()."
        )
    if app is None and agent is None:
        raise ValueError(
            "One of app, agent, or node must be provided. Got none. Pass exactly one to Runner()."
        )
    if plugins is not None:
        if app is not None:
            raise ValueError(
                "When app is provided, plugins should not be provided and should be "
                "provided in the app instead."
            )
        warnings.warn(
            "The `plugins` argument is deprecated. Please use the `app` argument to "
            "provide plugins instead.",
            DeprecationWarning,
            stacklevel=3,  # the line that made the Runner, as when Runner.__init__ warned
        )
    if app is not None:
        return app, app_name or app.name
    assert agent is not None  # one of the two, checked above
    if not app_name:
        raise ValueError("app_name is required when agent is provided without app.")
    return App.model_construct(
        name=app_name, root_agent=agent, plugins=list(plugins or []),
        events_compaction_config=None, context_cache_config=None,
        resumability_config=None,
    ), app_name
