"""The Datalog rule engine: RDFox-style rules, stratified, compiled to SPARQL, maintained
incrementally (semi-naive insertion, DRed deletion) over a tenant's store."""
