from orchestrator.apps.app import App, ResumabilityConfig

__all__ = ["App", "ResumabilityConfig"]
