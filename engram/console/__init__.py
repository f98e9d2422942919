"""The ``engram`` commands, one module per group; ``engram.cli`` parses and dispatches to them."""
