"""engram: the CLI and the process-wide settings."""
