"""Recall's pure parts: fusion, the blend, eligibility and packing to a token budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.projections.context import _conflicts, block_title
from engram.projections.fusion import fuse
from engram.projections.knowledge import load_knowledge
from engram.projections.recall import Hit, RecallQuery, eligible, forgetting, pack, rank, recency
from engram.projections.visibility import MemoryFacts, Principal
from engram.schemas import vocabulary as v

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def facts(mid: str, **kw: object) -> MemoryFacts:
    base: dict[str, object] = {
        "id": mid,
        "label": mid,
        "content": f"content {mid}",
        "kind": "fact",
        "scope": "company",
        "user": None,
        "teams": frozenset(),
        "importance": 3,
        "confidence": 1.0,
        "memory_class": "Memory",
        "classes": frozenset({v.ENGRAM + "Memory", v.ENGRAM + "ActiveMemory"}),
        "active": True,
        "valid_from": NOW.isoformat(),
    }
    base.update(kw)
    return MemoryFacts(**base)  # type: ignore[arg-type]


def test_fusions_rank_what_both_signals_agree_on_first() -> None:
    bm25 = {"a": 9.0, "b": 5.0, "c": 1.0}
    vector = {"a": 0.8, "c": 0.7, "d": 0.2}
    for method in ("default", "minmax", "zscore", "rrf"):
        fused = fuse(bm25, vector, method)  # type: ignore[arg-type]
        assert max(fused, key=fused.__getitem__) == "a", method
        assert set(fused) == {"a", "b", "c", "d"}
        assert all(0.0 <= s <= 1.0 for s in fused.values())
    assert set(fuse(bm25, vector, "bm25")) == {"a", "b", "c"}
    assert set(fuse(bm25, vector, "vector")) == {"a", "c", "d"}
    assert fuse(bm25, {}, "default") == fuse(bm25, {}, "bm25")  # one signal alone decides


def test_recency_and_forgetting_decay_with_age_and_importance() -> None:
    fresh, month = facts("f"), facts("m", valid_from=(NOW - timedelta(days=30)).isoformat())
    assert recency(fresh, NOW) == 1.0 and abs(recency(month, NOW) - 0.5) < 1e-9
    low = facts("l", importance=2, valid_from=(NOW - timedelta(days=60)).isoformat())
    high = facts("h", importance=5, valid_from=(NOW - timedelta(days=60)).isoformat())
    assert forgetting(high, NOW) > forgetting(low, NOW)


def test_blend_is_gated_by_confidence_and_class_weight() -> None:
    sure, unsure = facts("sure"), facts("unsure", confidence=0.3)
    hits = rank([unsure, sure], {"sure": 1.0, "unsure": 1.0}, {}, "default", NOW, lambda m: 1.0)
    assert [h.memory.id for h in hits] == ["sure", "unsure"]
    assert abs(hits[1].score - 0.3 * hits[0].score) < 1e-9
    heavy = rank([sure], {"sure": 1.0}, {}, "default", NOW, lambda m: 2.0)[0]
    assert abs(heavy.score - 2 * hits[0].score) < 1e-9


def test_eligibility_is_structural() -> None:
    q = RecallQuery(q="x")
    bob, alice = Principal("bob", frozenset({"growth"})), Principal("alice")
    assert eligible(facts("c"), q, alice)
    assert not eligible(facts("s", active=False), q, bob)
    assert not eligible(facts("e", expired=True), q, bob)
    assert not eligible(facts("d", importance=1), q, bob)  # Disabled is below the default floor
    assert not eligible(facts("c", confidence=0.4), RecallQuery(q="x", min_confidence=0.5), bob)
    mine = facts("u", scope="user", user="bob")
    assert eligible(mine, q, bob) and not eligible(mine, q, alice)
    team = facts("t", scope="team", teams=frozenset({"growth"}))
    assert eligible(team, q, bob) and not eligible(team, q, alice)
    assert not eligible(facts("k"), RecallQuery(q="x", kinds=frozenset({"preference"})), bob)
    budget = facts(
        "b", classes=frozenset({v.ENGRAM + c for c in ("BudgetConstraintMemory", "MarketingMemory")})
    )
    assert eligible(budget, RecallQuery(q="x", classes=frozenset({v.ENGRAM + "MarketingMemory"})), bob)


def test_pack_keeps_the_best_that_fit_the_budget() -> None:
    hits = [Hit(facts(f"m{i}", content="w " * n), 1.0 - i / 10) for i, n in enumerate([50, 5, 40, 5])]

    def count(text: str) -> int:
        return len(text.split())

    packed = pack(hits, 10, 20, count)
    assert [h.memory.id for h in packed] == ["m1", "m3"]  # m0 and m2 do not fit, smaller ones do
    assert sum(h.tokens for h in packed) <= 20
    assert len(pack(hits, 2, None, count)) == 2


def test_conflicts_more_specific_wins_and_accidental_is_flagged() -> None:
    def item(mid: str, scope: str, actor: str, at: str) -> dict[str, object]:
        return {"id": mid, "scope": scope, "set_by": {"actor": actor}, "set_at": at}

    company = item("c", "company", "dana", "2026-12-01T10:00:00Z")
    user = item("u", "user", "bob", "2026-12-01T10:03:00Z")
    team = item("t", "team", "tom", "2026-11-01T10:00:00Z")
    keys = {"c": {"k"}, "u": {"k"}, "t": {"k"}}
    flags = {(f["winner"], f["overridden"]): f for f in _conflicts([company, user, team], keys, set())}
    assert set(flags) == {("u", "c"), ("u", "t"), ("t", "c")}
    assert flags[("u", "c")]["looks_accidental"] is True  # three minutes apart, two people
    assert flags[("t", "c")]["looks_accidental"] is False  # a month apart
    assert sorted(user["wins_over"]) == ["c", "t"] and sorted(company["overridden_by"]) == ["t", "u"]


def test_block_titles_come_from_the_ontology_or_the_class_name() -> None:
    ontology = load_knowledge().ontology
    assert block_title("BudgetConstraintMemory", ontology) == "Budget constraints"
    assert block_title("HiringCriteriaMemory", ontology) in ("Hiring criterias", "Hiring criteria")
