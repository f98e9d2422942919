"""engram: governed, reasoning memory for AI agents. This package holds settings and logging (the
ground) and the CLI and process composition (the top); its stages are ``engram.schemas``,
``engram.streams``, ``engram.projections``, ``engram.commands`` and ``engram.api``."""

from pathlib import Path

# In a source checkout the stages are the folders beside this one (api/, schemas/, …): the wheel
# and the editable install map them into this namespace (pyproject's package-dir), and this does the
# same for whichever checkout is imported first on sys.path (a git worktree, a copy under test), so
# its own stages are the ones imported, never another checkout's.
_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "api" / "__init__.py").is_file():
    __path__.append(str(_checkout))
