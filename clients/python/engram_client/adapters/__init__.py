"""Framework adapters. Each module imports its framework when it is imported itself, never before:
``import engram_client`` works where no framework is installed."""
