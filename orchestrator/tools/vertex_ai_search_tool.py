"""VertexAiSearchTool: Gemini grounds on a Vertex AI Search data store, on the model's side."""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from orchestrator.tools._gemini_builtin import GeminiBuiltInTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ReadonlyContext, ToolContext


class VertexAiSearchTool(GeminiBuiltInTool):
    """Lets a Gemini model search one Vertex AI Search data store or engine.

    Give exactly one of ``data_store_id`` and ``search_engine_id`` (full resource names);
    ``data_store_specs`` only with an engine. Override ``_build_vertex_ai_search_config`` to
    choose the search per request (a filter from session state, say).
    """

    def __init__(
        self,
        *,
        data_store_id: str | None = None,
        data_store_specs: list[types.VertexAISearchDataStoreSpec] | None = None,
        search_engine_id: str | None = None,
        filter: str | None = None,  # noqa: A002  (google-adk's parameter name)
        max_results: int | None = None,
        bypass_multi_tools_limit: bool = False,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__(
            name=name or "vertex_ai_search", description=description or "vertex_ai_search"
        )
        if (data_store_id is None) == (search_engine_id is None):
            raise ValueError(
                "VertexAiSearchTool: give exactly one of data_store_id and search_engine_id."
            )
        if data_store_specs is not None and search_engine_id is None:
            raise ValueError(
                "VertexAiSearchTool: data_store_specs needs a search_engine_id."
            )
        self.data_store_id = data_store_id
        """The data store's resource name (``projects/.../dataStores/...``)."""
        self.data_store_specs = data_store_specs
        """Which data stores of the engine to search."""
        self.search_engine_id = search_engine_id
        """The engine's resource name (``projects/.../engines/...``)."""
        self.filter = filter
        """A filter applied to the search results."""
        self.max_results = max_results
        """How many results the search returns at most."""
        self.bypass_multi_tools_limit = bypass_multi_tools_limit
        """google-adk then swaps in a Discovery Engine client run locally; adk-celery does
        not ship it, and an agent with other tools refuses this tool with a ValueError."""

    def _build_vertex_ai_search_config(
        self, readonly_context: ReadonlyContext
    ) -> types.VertexAISearch:
        """The search sent with this request (override to decide it per request)."""
        return types.VertexAISearch(
            datastore=self.data_store_id,
            data_store_specs=self.data_store_specs,
            engine=self.search_engine_id,
            filter=self.filter,
            max_results=self.max_results,
        )

    def _builtin_tool(self, tool_context: ToolContext) -> types.Tool:
        search = self._build_vertex_ai_search_config(tool_context)
        return types.Tool(retrieval=types.Retrieval(vertex_ai_search=search))
