"""Why a derived fact holds: the rules that derive it now and the facts they read.

Derived facts carry their explanation (DESIGN §5): an inferred input is explained in turn, down to
a depth, so an answer can say which memories and observations a status rests on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engram.projections.rules import compile as sparql
from engram.projections.rules.compile import Value
from engram.projections.rules.program import Rule
from engram.projections.rules.stratify import body_atoms
from pyoxigraph import Store

from tests.projections.rules.reference.strata import (
    Fact,
    Graphs,
    instantiate,
    unify,
)

if TYPE_CHECKING:
    from tests.projections.rules.reference.engine import RuleEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DerivationInput:
    """A fact a derivation read; an inferred one is explained in turn, down to a depth."""

    fact: Fact
    asserted: bool  # a base fact (asserted or ontology), not an inferred one
    because: tuple[Derivation, ...] = ()


@dataclass(frozen=True)
class Derivation:
    """One way a rule derives a fact from the facts as they stand."""

    rule: Rule
    bindings: Mapping[str, Value]
    inputs: tuple[DerivationInput, ...]  # the facts its positive atoms matched

    # -- explanations ---------------------------------------------------------------------


class Explaining:
    """The explaining part of :class:`~projections.rules.engine.RuleEngine`."""

    def explain(
        self: RuleEngine, store: Store, graphs: Graphs, fact: Fact, *, depth: int = 4
    ) -> list[Derivation]:
        """Which rules derive ``fact`` now, from which facts (inferred inputs explained in turn)."""
        derivations = []
        for stratum in self.strata:
            for rule, head in stratum.heads:
                seed = unify(head, fact)
                if seed is None:
                    continue
                query = f"SELECT * WHERE {{\n{sparql.where_clause(rule, [seed])}\n}} LIMIT 1"
                result = self._rows(store, query, graphs.current, None)
                variables = [var.value for var in result.variables]
                for row in result:
                    bindings = {**seed, **{var: row[var] for var in variables if row[var] is not None}}
                    inputs = []
                    for atom, negative in body_atoms(rule):
                        if negative:
                            continue
                        read = instantiate(atom, bindings)
                        if read is None:
                            continue
                        asserted = self._in(store, read, graphs.base)
                        because = (
                            tuple(self.explain(store, graphs, read, depth=depth - 1))
                            if not asserted and depth > 0
                            else ()
                        )
                        inputs.append(DerivationInput(read, asserted, because))
                    derivations.append(Derivation(rule, bindings, tuple(inputs)))
        return derivations
