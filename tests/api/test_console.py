"""The operator console in a real headless Chromium (Playwright, the system's chromium) against a
real server on the local broker: one server and one browser for the module, a tenant per test.

Flows: sign in (a bad token refused with the reason; the cookie HttpOnly and SameSite=Strict), read
this turn's context and open a status's derivation tree, create a BudgetConstraintMemory through the
form generated from the shapes and watch its status flip as spend is posted, supersede and restore,
move the as-of slider, forget with a reason, accept a proposal, a legal hold that stops a forget,
resolve a conflict by policy, onboard a fact, a refusal shown inline with the
API's words, a form without the session's CSRF token refused, and a user's token that sees only
what it may (no audit, no forget, not another user's memory). Every page is screenshotted to
tests/artifacts/ and checked by axe-core (no serious or critical violation) and for unlabelled
controls with Chromium's own accessibility tree.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from typing import Any

# a missing browser fails these tests, never skips them: `./dev test` installs both
import playwright.sync_api as playwright_api
import pytest
from engram.api.auth import mint
from engram.schemas import vocabulary as v

from engram.settings import REPO, Settings
from tests.harness import Server, serving

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.integration
ARTIFACTS = REPO / "tests" / "artifacts"
# axe-core (Deque, MPL-2.0; tests/api/assets/axe-core.LICENSE), a test asset, never in the package
AXE = REPO / "tests" / "api" / "assets" / "axe.min.js"
# roles whose nodes must have an accessible name (Chromium's computation, as a screen reader gets it)
NAMED_ROLES = {
    "textbox", "searchbox", "combobox", "listbox", "slider", "spinbutton", "button", "checkbox",
    "link", "radio", "img",
}  # fmt: skip


@pytest.fixture(scope="module")
def srv(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = serving(broker, tmp_path_factory.mktemp("console"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.fail("no system chromium: `./dev test` installs it (apt-get install chromium)")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def fresh() -> str:
    return f"con-{uuid.uuid4().hex[:10]}"


def write(srv: Server, t: str, path: str, body: dict[str, Any], who: dict[str, Any] | None = None) -> Any:
    headers = srv.bearer(t, **who) if who else {}
    r = srv.http.post(f"{srv.url}/v1/tenants/{t}{path}", params={"wait": "true"}, json=body, headers=headers)
    assert r.status_code == 202, r.text
    return r.json()


def memory(label: str, **extra: Any) -> dict[str, Any]:
    return {
        "source": "operator", "label": label, "content": f"{label}, said plainly.", "kind": "fact",
        "importance": 5, **extra,
    }  # fmt: skip


CAP = memory(
    "Meta monthly cap", kind="objective", memory_id="meta-cap", memory_class="BudgetConstraintMemory",
    properties={"platform": "meta", "amount": 40000, "currency": "USD", "period": "month"},
)  # fmt: skip


def signed_in(srv: Server, browser: Any, t: str, role: str = "operator", user: str = "dana") -> Any:
    """A browser context signed in to the console as ``user`` of ``t`` through the sign-in page."""
    context = browser.new_context(base_url=srv.url)
    page = context.new_page()
    page.goto("/console/")
    assert page.url.endswith("/console/signin")
    page.get_by_label("Bearer token").fill(mint(srv.settings, t, role=role, user=user))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/context")
    return page


def shot(page: Any, name: str) -> None:
    """A screenshot for people, and the accessibility checks for every page: axe-core finds no
    serious or critical violation, and Chromium's own accessibility tree gives each control a name."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"), full_page=True)
    cdp = page.context.new_cdp_session(page)
    nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
    cdp.detach()
    unnamed = [
        n.get("role", {}).get("value")
        for n in nodes
        if not n.get("ignored")
        and n.get("role", {}).get("value") in NAMED_ROLES
        and not str(n.get("name", {}).get("value", "")).strip()
    ]
    assert unnamed == [], f"{name}: controls without an accessible name: {unnamed}"
    assert page.evaluate("document.documentElement.lang") == "en"
    assert page.locator("h1").count() == 1, f"{name}: one h1 per page"
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
            .filter(v => v.impact === "serious" || v.impact === "critical")
            .map(v => ({id: v.id, impact: v.impact, help: v.help,
                        nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}))"""
    )
    assert found == [], f"{name}: axe-core's serious or critical violations: {found}"


def test_sign_in_refuses_a_bad_token_and_keeps_a_good_one_out_of_scripts(srv: Server, browser: Any) -> None:
    t = fresh()
    context = browser.new_context(base_url=srv.url)
    page = context.new_page()
    page.goto("/console/memories")
    assert page.url.endswith("/console/signin")
    shot(page, "signin")
    page.get_by_label("Bearer token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    assert "not signed in: not a valid token" in page.get_by_role("alert").inner_text()
    page.get_by_label("Bearer token").fill(mint(srv.settings, t, role="operator", user="dana"))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/context")
    (cookie,) = [c for c in context.cookies() if c["name"] == "engram_console"]
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/console")
    assert page.evaluate("document.cookie") == ""  # no script reads the token
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/signin")
    page.goto("/console/context")
    assert page.url.endswith("/console/signin")
    context.close()


def test_the_context_shows_the_bundle_and_a_status_opens_into_its_derivation(
    srv: Server, browser: Any
) -> None:
    t = fresh()
    write(srv, t, "/memories", CAP)
    write(
        srv,
        t,
        "/spend",
        {"source": "pipeline", "platform": "meta", "amount": 34000, "currency": "USD", "period": "2026-11"},
    )
    page = signed_in(srv, browser, t)
    page.get_by_label("Question the agent is asked").fill("how much can we spend on meta?")
    page.get_by_role("button", name="Build the context").click()
    item = page.locator("li.item", has_text="Meta monthly cap")
    assert "budget: near_limit" in item.inner_text()
    item.locator("summary").click()
    tree = item.locator(".tree")
    tree.wait_for()
    assert "near_limit: spend 34,000 of cap 40,000 = 85% (threshold 85%)" in tree.inner_text()
    assert "budget.dlog" in tree.inner_text()
    shot(page, "context")
    page.context.close()


def test_the_contexts_conflicts_read_as_sentences_with_links_not_a_raw_dict(
    srv: Server, browser: Any
) -> None:
    t = fresh()
    write(srv, t, "/memories", CAP)
    newer = {**CAP, "memory_id": "meta-cap-2", "label": "Meta cap, raised", "on_conflict": "keep_both"}
    write(srv, t, "/memories", {**newer, "properties": {**CAP["properties"], "amount": 45000}})
    page = signed_in(srv, browser, t)
    page.goto("/console/context")
    block = page.locator("section", has=page.get_by_role("heading", name="Conflicts"))
    (line,) = block.locator("li.conflict").all()
    text = " ".join(line.inner_text().split())
    assert text.startswith("Meta cap, raised wins over Meta monthly cap: same scope: the newer one wins"), (
        text
    )
    assert "{" not in block.inner_text() and "looks_accidental" not in block.inner_text()
    hrefs = [a.get_attribute("href") for a in line.locator("a").all()]
    assert hrefs == ["/console/memories/meta-cap-2", "/console/memories/meta-cap"]
    shot(page, "context-conflicts")
    page.context.close()


def test_a_budget_cap_made_in_the_generated_form_flips_status_as_spend_is_posted(
    srv: Server, browser: Any
) -> None:
    t = fresh()
    page = signed_in(srv, browser, t)
    page.goto("/console/memories/new")
    # the class's own form, generated from its shapes: the page reloads with its fields
    page.get_by_label("Class").select_option("BudgetConstraintMemory")
    page.wait_for_url("**class=BudgetConstraintMemory")
    for name in ("platform (required)", "amount (required)", "currency (required)", "period"):
        assert page.get_by_label(name).count() == 1, name
    page.get_by_label("Label").fill("TikTok monthly cap")
    page.get_by_label("Content").fill("Never spend more than $1,000 a month on TikTok.")
    page.get_by_label("Kind").select_option("objective")
    page.get_by_label("Importance").select_option("5")
    page.get_by_label("platform (required)").fill("tiktok")
    page.get_by_label("amount (required)").fill("1000")
    page.get_by_label("currency (required)").fill("USD")
    page.get_by_label("period", exact=False).select_option("month")
    shot(page, "new")
    page.get_by_role("button", name="Remember").click()
    page.wait_for_url("**/console/memories/*")
    assert page.locator("h1").inner_text().startswith("TikTok monthly cap")
    memory_id = page.url.rsplit("/", 1)[1]

    def post_spend(amount: str) -> None:
        page.goto("/console/live")
        form = page.locator("#spend")
        form.get_by_label("Platform").fill("tiktok")
        form.get_by_label("Amount").fill(amount)
        form.get_by_label("Currency").fill("USD")
        form.get_by_label("Period").fill("2026-11")
        form.get_by_role("button", name="Post spend").click()
        page.wait_for_url("**/console/live")

    post_spend("500")
    assert page.locator(f'[data-cap="{memory_id}"]').inner_text() == "within_budget"
    post_spend("1200")  # a correction of the period
    assert page.locator(f'[data-cap="{memory_id}"]').inner_text() == "over_budget"
    assert page.locator("svg.chart").count() >= 1
    shot(page, "live")
    page.goto(f"/console/memories/{memory_id}")
    assert "budgetStatus: over_budget" in page.locator("#status-list").inner_text()
    page.context.close()


def test_supersede_restore_the_as_of_slider_and_forget(srv: Server, browser: Any) -> None:
    t = fresh()
    write(srv, t, "/memories", memory("Markets", memory_id="markets"))
    write(srv, t, "/memories", memory("Markets 2027", memory_id="markets-2027"))
    page = signed_in(srv, browser, t)
    page.goto("/console/memories/markets")
    page.get_by_label("Superseded by (memory id)").fill("no-such-memory")
    page.get_by_role("button", name="Supersede").click()
    assert "memory no-such-memory not found" in page.get_by_role("alert").inner_text()  # the API's words
    page.get_by_label("Superseded by (memory id)").fill("markets-2027")
    page.get_by_role("button", name="Supersede").click()
    page.wait_for_url("**/console/memories/markets")
    assert "inactive" in page.locator("h1").inner_text()
    assert "markets-2027" in page.locator("#chain ~ p").first.inner_text()
    page.get_by_role("button", name="Restore").click()
    page.wait_for_url("**/console/memories/markets")
    assert page.locator("h1 .tag").first.inner_text() == "active"
    timeline = page.locator("ol.timeline li")
    assert [timeline.nth(i).locator("strong").inner_text() for i in range(3)] == [
        "MemoryRemembered", "MemorySuperseded", "MemoryRestored",
    ]  # fmt: skip
    slider = page.get_by_label("After event 3 of 3")
    slider.focus()
    slider.press("ArrowLeft")  # back one event: the memory as it was once superseded
    page.wait_for_url("**at=1")
    then = page.locator("#then")
    assert "inactive" in then.inner_text() and "markets-2027" in then.inner_text()
    page.get_by_label("After event 2 of 3").press("ArrowLeft")
    page.wait_for_url("**at=0")
    assert ", active" in page.locator("#then").inner_text()
    shot(page, "memory")
    page.get_by_label("Reason for forgetting").fill("customer asked, ticket 12")
    page.get_by_role("button", name="Forget").click()
    page.wait_for_url("**/console/memories/markets")
    assert "forgotten" in page.locator("h1").inner_text()
    assert "customer asked, ticket 12" in page.locator("dl.fields").inner_text()
    page.context.close()


def test_edit_keeps_clears_and_sets_and_a_proposal_is_accepted(srv: Server, browser: Any) -> None:
    t = fresh()
    target = memory(
        "ROAS target", kind="objective", memory_id="roas-3", memory_class="PerformanceTargetMemory",
        properties={"metric": "roas", "goal": 3}, expires_at="2030-01-01T00:00:00Z",
    )  # fmt: skip
    write(srv, t, "/memories", target)
    heard = {
        **target,
        "memory_id": "roas-4",
        "source": "extraction",
        "confidence": 0.8,
        "properties": {"metric": "roas", "goal": 4},
    }
    heard.pop("expires_at")
    write(srv, t, "/memories", heard)
    page = signed_in(srv, browser, t)
    page.goto("/console/memories/roas-3")
    page.get_by_text("Edit", exact=True).click()
    edit = page.locator("#edit")
    edit.locator('select[name="state.content"]').select_option("set")
    edit.locator('input[name="content"]').fill("Keep ROAS at or above 3.")
    edit.locator('select[name="state.expires_at"]').select_option("clear")
    kinds = edit.locator('select[name="kind"] option')
    assert kinds.all_inner_texts() == [k.value for k in v.Kind]  # offered as a choice, the current one chosen
    assert edit.locator('select[name="kind"]').input_value() == "objective"
    edit.locator('select[name="state.kind"]').select_option("set")
    edit.locator('select[name="kind"]').select_option("context")
    edit.get_by_role("button", name="Revise").click()
    page.wait_for_url("**/console/memories/roas-3")
    fields = page.locator("dl.fields").inner_text()
    assert srv.http.get(f"{srv.url}/v1/tenants/{t}/memories/roas-3").json()["kind"] == "context"
    assert (
        "Keep ROAS at or above 3." in fields
        and "Expires" not in fields
        and "ROAS target" in page.locator("h1").inner_text()
    )
    page.goto("/console/proposals")
    proposal = page.locator("#proposal-roas-4")
    assert "Would replace roas-3" in proposal.inner_text()
    shot(page, "proposals")
    proposal.get_by_label("Reason to accept").fill("the new quarter's goal")
    proposal.get_by_role("button", name="Accept").click()
    page.wait_for_url("**/console/memories/roas-4")
    assert page.locator("h1 .tag").first.inner_text() == "active"
    page.goto("/console/memories/roas-3")
    assert "inactive" in page.locator("h1").inner_text()
    page.context.close()


def test_the_memories_page_filters_by_least_importance(srv: Server, browser: Any) -> None:
    t = fresh()
    for label, importance in (("Low note", 2), ("High note", 4), ("Critical note", 5)):
        write(srv, t, "/memories", memory(label, importance=importance))
    page = signed_in(srv, browser, t)
    page.goto("/console/memories")
    assert "3 memories." in page.locator("main").inner_text()
    page.get_by_label("Importance at least").select_option("4")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**min_importance=4**")
    labels = page.locator("tbody td:first-child").all_inner_texts()
    assert labels == ["Critical note", "High note"], labels
    assert "2 memories." in page.locator("main").inner_text()
    assert page.get_by_label("Importance at least").input_value() == "4"  # kept for the next page
    page.get_by_label("Search (recall)").fill("note")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**q=note**")
    found = sorted(page.locator("tbody td:first-child").all_inner_texts())
    assert found == ["Critical note", "High note"], found  # recall with the same floor
    shot(page, "memories-importance")
    page.context.close()


def test_a_form_without_the_sessions_csrf_token_is_refused(srv: Server, browser: Any) -> None:
    t = fresh()
    write(srv, t, "/memories", memory("Markets", memory_id="markets"))
    page = signed_in(srv, browser, t)
    for csrf in (None, "0" * 64):
        form = {"reason": "forged"} | ({"csrf": csrf} if csrf else {})
        r = page.request.post("/console/memories/markets/forget", form=form)
        assert r.status == 403 and "CSRF" in r.text()
    page.goto("/console/memories/markets")
    assert "forgotten" not in page.locator("h1").inner_text()
    assert page.request.post("/console/signout", form={}).status == 403  # no sign-out from elsewhere
    page.goto("/console/context")
    assert page.url.endswith("/console/context")  # still signed in
    page.context.close()


def test_a_users_console_shows_and_offers_only_what_the_user_may(srv: Server, browser: Any) -> None:
    t = fresh()
    write(srv, t, "/memories", memory("Markets", memory_id="markets"))
    ann = {"role": "user", "user": "ann"}
    private = {"source": "agent", "scope": "user", "stakeholders": {"user_id": "ann"}}
    write(
        srv,
        t,
        "/memories",
        memory("Ann's report format", memory_id="ann-format", importance=3) | private,
        ann,
    )
    page = signed_in(srv, browser, t, role="user", user="sam")
    nav = page.get_by_role("navigation", name="Pages").inner_text()
    assert "Audit" not in nav and "Onboarding" not in nav
    page.goto("/console/memories")
    listed = page.locator("tbody").inner_text()
    assert "Markets" in listed and "Ann" not in listed
    shot(page, "memories")
    page.goto("/console/memories/ann-format")
    assert "memory ann-format not found" in page.get_by_role("alert").inner_text()
    page.goto("/console/memories/markets")
    for action in ("Forget", "Supersede", "Place a legal hold", "Revise"):
        assert page.get_by_role("button", name=action).count() == 0, action
    page.goto("/console/audit")  # not offered; asked for anyway, the API refuses it
    assert "only an operator or an auditor may read" in page.get_by_role("alert").inner_text()
    page.context.close()


def test_every_other_page_renders_for_an_operator(srv: Server, browser: Any) -> None:
    t = fresh()
    write(srv, t, "/memories", CAP)
    over = {"platform": "meta", "amount": 50000, "currency": "USD", "period": "2026-12"}
    write(srv, t, "/decisions", {"decision_id": "more-meta", "decision": "Spend 50k on Meta", "spend": over})
    page = signed_in(srv, browser, t)
    page.goto("/console/decisions")  # every decision, no objective chosen: the breach flagged
    assert "Spend 50k on Meta" in page.locator("tr.breach").inner_text()
    assert "breached_constraint" in page.locator("tr.breach").inner_text()
    for name, path, heading in (
        ("decisions", "/console/decisions?relied_on=meta-cap", "Decisions"),
        ("onboarding", "/console/onboarding", "Onboarding"),
        ("audit", "/console/audit?type=MemoryRemembered", "Audit"),
    ):
        page.goto(path)
        assert page.locator("h1").inner_text() == heading
        shot(page, name)
    assert "meta-cap" in page.locator("tbody").inner_text()  # the audit page's one event
    page.context.close()


def test_a_legal_hold_stops_a_forget_conflicts_resolve_by_policy_and_onboarding(
    srv: Server, browser: Any
) -> None:
    t = fresh()
    write(srv, t, "/memories", memory("Tone", memory_id="tone-old", content="Formal."))
    write(srv, t, "/memories", memory("Tone", memory_id="tone-new", content="Warm.", on_conflict="keep_both"))
    page = signed_in(srv, browser, t)
    page.goto("/console/memories/tone-old")
    assert (
        "tone-new" in page.locator("#statuses ~ p, section p").filter(has_text="Conflicts with").inner_text()
    )
    page.get_by_label("Reason for the legal hold").fill("case 7")
    page.get_by_role("button", name="Place a legal hold").click()
    page.wait_for_url("**/console/memories/tone-old")
    page.get_by_label("Reason for forgetting").fill("asked to")
    page.get_by_role("button", name="Forget").click()
    assert "legal hold" in page.get_by_role("alert").inner_text()  # the API's 409, inline
    page.get_by_label("Resolve its conflicts by").select_option("prefer_newer")
    page.get_by_role("button", name="Resolve").click()
    page.wait_for_url("**/console/memories/tone-old")
    assert "inactive" in page.locator("h1").inner_text()
    assert "tone-new" in page.locator("#chain ~ p").first.inner_text()
    page.goto("/console/onboarding")
    assert "Missing: objective, fact, preference." in page.locator("main").inner_text()
    form = page.locator("#onboard")
    form.locator('input[name="fact_label"]').fill("Markets")
    form.locator('input[name="fact_content"]').fill("Outdoor gear in the US and Canada.")
    form.get_by_role("button", name="Onboard").click()
    page.wait_for_url("**/console/onboarding")
    assert "Missing: objective, preference." in page.locator("main").inner_text()
    page.context.close()
