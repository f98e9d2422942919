"""LangChain (``langchain-core``): a retriever over recall, and the verbs as structured tools.

Install with ``pip install 'engram-client[langchain]'``. This module imports langchain-core; the
rest of the client never does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool, StructuredTool
except ImportError as exc:  # say which extra brings it
    raise ImportError(
        "the LangChain adapter needs langchain-core: pip install 'engram-client[langchain]'"
    ) from exc

from engram_client.client import AsyncEngram, Engram
from engram_client.models import Recall
from engram_client.tools import ToolSpec, specs

__all__ = ["EngramRetriever", "engram_tools"]


class EngramRetriever(BaseRetriever):
    """Documents from engram's recall, best first: ``page_content`` is the memory's label and
    content, ``metadata`` its id, kind, class, score and statuses. Works with a sync client
    (``invoke``; ``ainvoke`` runs it in a thread) or an async one (``ainvoke`` only)."""

    client: Engram | AsyncEngram
    k: int = 5
    kind: list[str] | None = None
    memory_class: list[str] | None = None
    min_importance: int | None = None
    budget_tokens: int | None = None

    def _recall(self, recall: Any, query: str) -> Any:
        return recall(
            query,
            limit=self.k,
            kind=self.kind,
            memory_class=self.memory_class,
            min_importance=self.min_importance,
            budget_tokens=self.budget_tokens,
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if isinstance(self.client, AsyncEngram):
            raise TypeError("EngramRetriever over an AsyncEngram: use ainvoke (or give it an Engram)")
        return documents(self._recall(self.client.recall, query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if isinstance(self.client, AsyncEngram):
            return documents(await self._recall(self.client.recall, query))
        return await super()._aget_relevant_documents(query, run_manager=run_manager)


def documents(answer: Recall) -> list[Document]:
    """Recall hits as LangChain documents (``id`` is the memory id)."""
    return [
        Document(
            id=hit.id,
            page_content=f"{hit.label}: {hit.content}",
            metadata={
                "id": hit.id,
                "label": hit.label,
                "kind": hit.kind,
                "memory_class": hit.memory_class,
                "importance": hit.importance,
                "confidence": hit.confidence,
                "score": hit.score,
                "statuses": hit.statuses,
            },
        )
        for hit in answer.data
    ]


def _tool(spec: ToolSpec, client: Engram | AsyncEngram) -> BaseTool:
    if isinstance(client, AsyncEngram):
        aclient = client

        async def arun(**arguments: Any) -> Any:
            return await spec.arun(aclient, arguments)

        return StructuredTool(
            name=spec.name, description=spec.description, args_schema=spec.args, coroutine=arun
        )
    sclient = client

    def run(**arguments: Any) -> Any:
        return spec.run(sclient, arguments)

    return StructuredTool(name=spec.name, description=spec.description, args_schema=spec.args, func=run)


def engram_tools(client: Engram | AsyncEngram, names: Sequence[str] | None = None) -> list[BaseTool]:
    """The verbs as LangChain tools (``engram_client.tools.DEFAULT_TOOLS`` unless ``names`` says
    otherwise). A refused call returns ``{"error", "status", "reason"}`` to the model."""
    return [_tool(spec, client) for spec in specs(names)]
