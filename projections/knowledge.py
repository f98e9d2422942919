"""What every tenant's store reasons with: the ontology, the shapes and the rules, loaded once."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import engram.ontology
import engram.rules
from engram.projections.ontology import Ontology, load_ontology
from engram.projections.rules.core import CoreEngine, engine_for
from engram.projections.rules.engine import RuleEngine
from engram.projections.rules.syntax import load_rules
from engram.projections.shapes import Shapes, load_shapes
from engram.schemas import vocabulary as v
from pyoxigraph import NamedNode

DEFAULT_ONTOLOGY_DIR = Path(engram.ontology.__file__).parent
DEFAULT_RULES_DIR = Path(engram.rules.__file__).parent
READ_TIME = frozenset({v.ENGRAM + "conflictsWith"})  # the rules' word, read from the conflict sets


@dataclass(frozen=True)
class Knowledge:
    ontology: Ontology
    shapes: Shapes
    engine: RuleEngine | CoreEngine
    digest: str  # changes whenever the ontology or a rule file changes
    derived_classes: frozenset[str] = frozenset()  # classes a rule concludes: never asserted
    derived_predicates: frozenset[str] = frozenset()  # predicates a rule concludes: never a property

    def reserved(self, property_name: str) -> bool:
        """Whether a memory's property may not take this name: the projection or a rule writes it."""
        return property_name in v.MEMORY_PREDICATES or v.ENGRAM + property_name in self.derived_predicates

    @property
    def prefixes(self) -> dict[str, str]:
        return self.engine.prefixes


@cache
def load_knowledge(
    ontology_dir: Path = DEFAULT_ONTOLOGY_DIR, rules_dir: Path = DEFAULT_RULES_DIR, engine: str | None = None
) -> Knowledge:
    """``engine``: what runs the rules (``Settings.rule_engine``, passed by whoever holds the
    settings); None, for a caller without settings (a library use, a test): ``ENGRAM_RULE_ENGINE``
    as the settings would read it, else the core."""
    ontology = load_ontology(ontology_dir)
    shapes = load_shapes(ontology_dir)
    program = load_rules(rules_dir)
    digest = hashlib.sha256(ontology.digest.encode())
    for path in sorted(rules_dir.glob("*.dlog")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    heads = [head for rule in program.rules for head in rule.heads if isinstance(head.p, NamedNode)]
    classes = frozenset(h.o.value for h in heads if h.p.value == v.RDF_TYPE and isinstance(h.o, NamedNode))
    predicates = frozenset(h.p.value for h in heads if h.p.value != v.RDF_TYPE) | READ_TIME
    rules = engine_for(program, engine or os.environ.get("ENGRAM_RULE_ENGINE", "core"))
    return Knowledge(ontology, shapes, rules, digest.hexdigest(), classes, predicates)
