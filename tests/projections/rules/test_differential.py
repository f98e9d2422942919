"""The compiled engine against the reference one (tests/projections/rules/reference/, the SPARQL engine
as it was) on the same random streams: after every batch both have inferred the same facts, from
scratch too, and explain every one of them alike (the same rules, bindings and inputs, down to
the inputs' own explanations)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engram.projections.knowledge import Knowledge
from engram.projections.rules.engine import RuleEngine
from engram.projections.rules.joins import compilable
from engram.projections.tenant_graph import Step, TenantGraph
from engram.projections.terms import GRAPHS
from engram.schemas.events import Position
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.projections.rules.reference.engine import RuleEngine as ReferenceEngine
from tests.projections.rules.test_incremental import OPS, built, knowledge_with_cap, remember
from tests.tenant import from_scratch


def explained(derivations: Any) -> list[Any]:
    """Derivations of either engine as plain values, in a stable order."""
    out = []
    for derivation in derivations:
        bindings = sorted((var, str(value)) for var, value in derivation.bindings.items())
        inputs = [(str(i.fact), i.asserted, explained(i.because)) for i in derivation.inputs]
        out.append((derivation.rule.source, bindings, inputs))
    return sorted(out, key=repr)


def batches(
    setup: list[tuple[str, dict]], ops: list[tuple[str, dict]], sizes: list[int]
) -> Iterator[list[Step]]:
    """The generated events as one partition's records, cut in batches of the ``sizes`` in turn."""
    steps = [
        Step(Position(0, offset, 1_764_547_200_000 + offset * 1000), ev)
        for offset, (etype, payload) in enumerate(setup + ops)
        if (ev := built(etype, payload)) is not None
    ]
    cuts = iter(sizes * len(steps))
    start = 0
    while start < len(steps):
        batch = steps[start : start + next(cuts)]
        yield batch
        start += len(batch)


def engines(tmp: Path) -> tuple[Knowledge, Knowledge]:
    knowledge = knowledge_with_cap(tmp, cap=2)
    assert isinstance(knowledge, Knowledge)
    program = knowledge.engine.program
    return (
        dataclasses.replace(knowledge, engine=RuleEngine(program)),
        dataclasses.replace(knowledge, engine=ReferenceEngine(program)),  # type: ignore[arg-type]
    )


def test_most_rules_are_compiled_and_the_rest_keep_sparql() -> None:
    """Not a vacuous comparison: the compiled path carries most rules, and a rule with an
    expression the joins do not evaluate (a BIND, a numeric FILTER, a RANK) stays SPARQL."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        compiled, _ = engines(Path(tmp))
    rules = compiled.engine.program.rules
    joined = {rule.source for rule in rules if compilable(rule)}
    assert len(joined) > len(rules) / 2
    assert "conflicts.dlog:24" in joined or any("conflicts" in source for source in joined)
    assert "live_context.dlog:8" not in joined  # FILTER(?now >= ?e): a comparison of values


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(remember(), min_size=2, max_size=6, unique_by=lambda op: op[1]["memory_id"]),
    st.lists(OPS, min_size=1, max_size=24),
    st.lists(st.integers(1, 6), min_size=1, max_size=24),
)
def test_compiled_engine_equals_reference_engine_after_every_batch(
    setup: list[tuple[str, dict]], ops: list[tuple[str, dict]], sizes: list[int]
) -> None:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        compiled_knowledge, reference_knowledge = engines(Path(tmp))
        compiled = TenantGraph(Path(tmp) / "compiled", compiled_knowledge)
        reference = TenantGraph(Path(tmp) / "reference", reference_knowledge)
        for batch in batches(setup, ops, sizes):
            compiled.commit_planned(compiled.plan(batch))
            reference.commit_planned(reference.plan(batch))
            where = f"after the batch ending at {batch[-1]}"
            inferred = compiled.inferred()
            assert inferred == reference.inferred(), where
            assert inferred == from_scratch(compiled) == from_scratch(reference), where
            for fact in sorted(inferred, key=str):
                assert explained(
                    compiled_knowledge.engine.explain(compiled.store, GRAPHS, fact)
                ) == explained(
                    reference_knowledge.engine.explain(reference.store, GRAPHS, fact)  # type: ignore[arg-type]
                ), f"{where}: {fact}"
        del compiled, reference
