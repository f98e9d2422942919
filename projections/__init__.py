"""Per-tenant state: the graph store, its checkpoint, read models and replay."""
