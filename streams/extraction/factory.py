"""The extractor a process runs, chosen by settings at the composition root (``ENGRAM_EXTRACTOR``)."""

from __future__ import annotations

from engram.projections.knowledge import Knowledge
from engram.streams.extraction.extractor import Extractor
from engram.streams.extraction.llm import LLMExtractor
from engram.streams.extraction.patterns import PatternExtractor

from engram.settings import Settings

EXTRACTORS = ("patterns", "llm", "none")


def load_extractor(settings: Settings, knowledge: Knowledge) -> Extractor | None:
    """``patterns`` (the default, no model), ``llm`` (needs a base URL and a model) or ``none`` (None:
    turns are kept but nothing is extracted). Raises ValueError naming what is missing."""
    name = settings.extractor.strip().lower()
    if name == "patterns":
        return PatternExtractor(knowledge)
    if name == "none":
        return None
    if name == "llm":
        missing = [
            f"ENGRAM_EXTRACTION_LLM_{field.upper()}"
            for field in ("base_url", "model")
            if not getattr(settings, f"extraction_llm_{field}")
        ]
        if missing:
            raise ValueError(f"ENGRAM_EXTRACTOR=llm needs {' and '.join(missing)}")
        assert settings.extraction_llm_base_url and settings.extraction_llm_model
        return LLMExtractor(
            knowledge,
            base_url=settings.extraction_llm_base_url,
            model=settings.extraction_llm_model,
            api_key=settings.extraction_llm_api_key or None,
            timeout_s=settings.extraction_llm_timeout_s,
        )
    raise ValueError(f"unknown extractor {settings.extractor!r}; choose one of: {', '.join(EXTRACTORS)}")
