"""The rule engine as it was before its joins were compiled to Python: kept, frozen, as the
reference the compiled engine is tested against (tests/projections/rules/test_differential.py)
and measured against (bench/rules_engine.py). Not used by the projection, so it lives with the tests
and the wheel does not ship it. The SPARQL compiler
(``compile``), the parser and the stratifier are shared with the live engine: the compiled joins
left them unchanged, so the reference differs from it only where the engine does."""
