"""docs/events.md's recipe for a new event type, followed step by step on a copy of the source tree
(nothing else is edited): the new type round-trips through the pipeline, is projected and is
governed, and a recipe without its governance step fails at import instead of allowing the type."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# copied as the wheel installs them (each stage folder inside engram/), so the copy is what imports
STAGES = ("schemas", "projections", "streams", "commands", "api", "ontology", "rules")

AVSC = {
    "type": "record",
    "name": "MemoryPinned",
    "namespace": "engram.events",
    "doc": "A memory kept at the top of the context.",
    "fields": [
        {"name": "memory_id", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
PAYLOAD_CLASS = '''
@dataclass(frozen=True, kw_only=True)
class MemoryPinned(MemoryEvent):
    """A memory kept at the top of the context."""

    note: str | None = None


'''
PLANNER = """
@planner(ev.MemoryPinned)
def _pinned(b: Builder, p: ev.MemoryPinned) -> None:
    m = b.existing(p.memory_id)
    b.replace(m, e("pinned"), Literal(True))
    b.touch(m)


"""
GOVERNANCE = """
@governs(ev.MemoryPinned, roles=WRITERS, refused="a {role} does not pin memories")
def _pinned(actor: Actor, state: GraphState, p: ev.MemoryPinned) -> str | None:
    return _may_change(actor, state, p.memory_id, "pin")


"""
EXAMPLE = '\nEXAMPLES["MemoryPinned"] = {"memory_id": "m1", "note": "always show"}\n'

CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
from engram.projections import governance
from engram.projections.knowledge import load_knowledge
from engram.projections.plan import FactSet
from engram.projections.validation import checked_plan
from engram.schemas.events import Position
from engram.streams import codec
from engram.streams.pipeline import Pipeline
from tests.factories import EXAMPLES, envelope, event, remembered

pipeline = Pipeline(load_knowledge())
framed = pipeline.write(envelope("MemoryPinned", EXAMPLES["MemoryPinned"]))
assert pipeline.read(framed.value) == framed.event, "round trip"
assert codec.decode(codec.encode(framed.event)).payload.note == "always show"
state = FactSet()
first = event("MemoryRemembered", remembered("m1"))
state.apply(checked_plan(load_knowledge(), first, Position(0, 0), state))
delta = checked_plan(load_knowledge(), framed.event, Position(0, 1), state)
assert any(q.predicate.value.endswith("#pinned") for q in delta.adds), "projected"
etl = event("MemoryPinned", EXAMPLES["MemoryPinned"], actor={"id": "etl", "role": "pipeline"})
assert governance.role_refusal(etl).startswith("a pipeline may only emit KpiObserved, SpendObserved")
user = event("MemoryPinned", EXAMPLES["MemoryPinned"], actor={"id": "sam", "role": "user"})
try:
    checked_plan(load_knowledge(), user, Position(0, 1), state)
except governance.Forbidden as exc:
    assert "only an operator or its author may pin company memory m1" in str(exc), exc
else:
    raise AssertionError("a user pinned a company memory")
print("governed")
"""


def insert_before(path: Path, marker: str, text: str) -> None:
    source = path.read_text()
    assert marker in source, f"{path.name} no longer has {marker!r}: docs/events.md needs a look"
    path.write_text(source.replace(marker, text + marker, 1))


def follow_the_recipe(root: Path, *, governance_step: bool) -> None:
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "engram", root / "engram", ignore=ignore)
    for stage in STAGES:
        shutil.copytree(ROOT / stage, root / "engram" / stage, ignore=ignore)
    code = root / "engram"
    (root / "tests").mkdir()
    for name in ("__init__.py", "factories.py"):
        shutil.copy(ROOT / "tests" / name, root / "tests" / name)
    avro = code / "schemas" / "avro"
    # 1. the record
    (avro / "engram.events.MemoryPinned.avsc").write_text(json.dumps(AVSC, indent=2) + "\n")
    # 2. the Envelope's union
    envelope = json.loads((avro / "engram.events.Envelope.avsc").read_text())
    next(f for f in envelope["fields"] if f["name"] == "payload")["type"].append("engram.events.MemoryPinned")
    (avro / "engram.events.Envelope.avsc").write_text(json.dumps(envelope, indent=2) + "\n")
    # 3. engram schema-history
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "engram.cli", "schema-history"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    # 4. the payload class, 5. its planner, 6. its governance decision, 7. its example
    insert_before(code / "schemas" / "payloads.py", "def _subclasses(", PAYLOAD_CLASS)
    insert_before(code / "projections" / "plan.py", "_unplanned = ", PLANNER)
    if governance_step:
        insert_before(code / "projections" / "governance.py", "def undecided(", GOVERNANCE)
    (root / "tests" / "factories.py").write_text((root / "tests" / "factories.py").read_text() + EXAMPLE)


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHECK, str(root)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_documented_recipe_adds_an_event_type_that_round_trips_and_is_governed(tmp_path: Path) -> None:
    follow_the_recipe(tmp_path, governance_step=True)
    history = list((tmp_path / "engram" / "schemas" / "avro" / "history").glob("*.avsc"))
    assert len(history) == len(list((ROOT / "schemas" / "avro" / "history").glob("*.avsc"))) + 1
    done = run_check(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "governed"


def test_the_recipe_without_its_governance_step_fails_at_import(tmp_path: Path) -> None:
    follow_the_recipe(tmp_path, governance_step=False)
    done = run_check(tmp_path)
    assert done.returncode != 0
    assert "ImportError: no governance decision (@governs) for MemoryPinned" in done.stderr, done.stderr
