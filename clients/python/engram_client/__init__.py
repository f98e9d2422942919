"""engram's Python client: a tenant's governed memory over HTTP, sync or async.

Importing this package imports httpx and pydantic and nothing else: the framework adapters
(``engram_client.adapters.langchain``, ``engram_client.adapters.pydantic_ai``) import their
framework only when they are imported themselves.
"""

from engram_client.calls import Call, Calls, Retry
from engram_client.client import AsyncEngram, Engram
from engram_client.errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    EngramError,
    Forbidden,
    Invalid,
    NotFound,
    NotInTime,
    PayloadTooLarge,
    RateLimited,
    Unauthorized,
    Unavailable,
)
from engram_client.models import (
    Accepted,
    AgentAccepted,
    Answer,
    Context,
    ContextBlock,
    ContextItem,
    DecisionJustification,
    DecisionPage,
    Finding,
    Justification,
    Memory,
    MemoryPage,
    NarrativeItem,
    PlanCheck,
    Proposal,
    ProposalPage,
    Recall,
    RecallHit,
    Recognition,
    RecognizeMatch,
    Resolution,
    SessionNarrative,
    Summary,
)

__version__ = "0.1.0"

__all__ = [
    "Accepted",
    "AgentAccepted",
    "Answer",
    "AsyncEngram",
    "BadRequest",
    "Call",
    "Calls",
    "Conflict",
    "ConnectionFailed",
    "Context",
    "ContextBlock",
    "ContextItem",
    "DecisionJustification",
    "DecisionPage",
    "Engram",
    "EngramError",
    "Finding",
    "Forbidden",
    "Invalid",
    "Justification",
    "Memory",
    "MemoryPage",
    "NarrativeItem",
    "NotFound",
    "NotInTime",
    "PayloadTooLarge",
    "PlanCheck",
    "Proposal",
    "ProposalPage",
    "RateLimited",
    "Recall",
    "RecallHit",
    "Recognition",
    "RecognizeMatch",
    "Resolution",
    "Retry",
    "SessionNarrative",
    "Summary",
    "Unauthorized",
    "Unavailable",
]
