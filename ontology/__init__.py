"""The memory ontology (Turtle) and SHACL shapes: data the code reads, shipped with it."""
