"""Capture: conversation turns become memories off the hot path (DESIGN §7).

``extractor`` is the one interface every extractor meets; the workflow that feeds it turns and
writes its candidates through the command layer lives beside it.
"""
