"""The rule engine as it was before its joins were compiled to Python: kept, frozen, as the
reference the compiled engine is tested against (tests/projections/rules/test_differential.py)
and measured against (bench/rules_engine.py). Not used by the projection."""
