"""Ready-made tools apps can use and workers can run. Imports ``orchestrator`` only."""

from tools.artifacts import load_artifact_text
from tools.memory import load_memory

__all__ = ["load_artifact_text", "load_memory"]
