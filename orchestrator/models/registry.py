"""LLMRegistry: resolves a model name string to a BaseLlm class."""

from __future__ import annotations

import importlib
import re
from functools import lru_cache

from orchestrator.models.base_llm import BaseLlm

_registry: dict[str, type[BaseLlm]] = {}


class LLMRegistry:
    """Maps model-name regexes to BaseLlm classes."""

    @staticmethod
    def register(llm_cls: type[BaseLlm]) -> None:
        """Register every pattern of ``llm_cls.supported_models()``."""
        _register_gemini()
        for pattern in llm_cls.supported_models():
            _registry[pattern] = llm_cls
        _resolve.cache_clear()

    @staticmethod
    def resolve(model: str) -> type[BaseLlm]:
        """Return the class serving ``model``, or raise ValueError naming the model."""
        return _resolve(model)

    @staticmethod
    def new_llm(model: str) -> BaseLlm:
        """Instantiate the model named ``model``."""
        return LLMRegistry.resolve(model)(model=model)


@lru_cache(maxsize=64)
def _resolve(model: str) -> type[BaseLlm]:
    _register_gemini()
    for pattern, llm_cls in _registry.items():
        if re.fullmatch(pattern, model):
            return llm_cls
    raise ValueError(f"Model {model!r} not found: no registered BaseLlm serves that name.")


def _register_gemini() -> None:
    """Load the built-in Gemini, which registers itself first (before any other model).

    Imported here, on first use, not with ``import orchestrator``: it brings google-genai's client.
    """
    importlib.import_module("orchestrator.models.gemini")
