"""engram: governed, reasoning memory for AI agents. This package holds settings and logging (the
ground) and the CLI and process composition (the top); its stages are ``engram.schemas``,
``engram.streams``, ``engram.projections``, ``engram.commands`` and ``engram.api``, top-level
folders of the checkout that pyproject's package-dir maps into this namespace (the wheel and the
editable install alike)."""
