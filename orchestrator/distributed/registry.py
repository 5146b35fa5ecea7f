"""AppRegistry: the apps an orchestrator or worker serves, loaded from import strings."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from orchestrator.errors import UnknownAppError

if TYPE_CHECKING:  # the agents are imported with the first app (a client's empty registry has none)
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.apps.app import App


def import_app(spec: str) -> App:
    """Import ``module:attribute`` naming an App or a root agent (wrapped in an App)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"App spec {spec!r} must look like 'package.module:attribute'.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"App spec {spec!r}: cannot import module {module_name!r}: {error}") from error
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise ValueError(
            f"App spec {spec!r}: module {module_name!r} has no attribute {attribute!r}."
        ) from None
    return as_app(value, spec)


def as_app(value: object, origin: str = "") -> App:
    """Accept an App, or a root agent (its name becomes the app name)."""
    from orchestrator.agents.base_agent import BaseAgent  # the ADK core's agents: with an app only
    from orchestrator.apps.app import App

    if isinstance(value, App):
        return value
    if isinstance(value, BaseAgent):
        return App(name=value.name, root_agent=value)
    raise TypeError(
        f"{origin or value!r} is a {type(value).__name__}; expected an App or a root agent."
    )


class AppRegistry:
    """Apps by name; orchestrators and workers must load the same list."""

    def __init__(self, apps: Iterable[App | BaseAgent] = ()) -> None:
        self._apps: dict[str, App] = {}
        for value in apps:
            app = as_app(value)
            if app.name in self._apps:
                raise ValueError(f"Two apps are named {app.name!r}.")
            self._apps[app.name] = app

    @classmethod
    def from_specs(cls, specs: Iterable[str]) -> AppRegistry:
        """Load apps from ``module:attribute`` strings (``ADK_CELERY_APPS``)."""
        return cls(import_app(spec) for spec in specs)

    def get(self, name: str) -> App:
        """The app named ``name``; UnknownAppError lists the known ones."""
        app = self._apps.get(name)
        if app is None:
            known = ", ".join(sorted(self._apps)) or "none"
            raise UnknownAppError(f"Unknown app {name!r}; this process serves: {known}.")
        return app

    @property
    def names(self) -> list[str]:
        """Registered app names."""
        return sorted(self._apps)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._apps.values())
