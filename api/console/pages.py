"""The console's pages that read: sign-in, this turn's context, memories, a memory (with the as-of
slider), live data, proposals, decisions, onboarding and the audit log.

Each page is the answers of the tenant's routes laid out for a person; nothing here decides what
the principal may see (the routes do), only which pages and buttons to offer.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from engram.api.console import charts, forms
from engram.api.console import session as sess
from engram.api.console.app import Console, Refused, Session, message
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.payloads import EVENT_TYPES
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

PAGE = 50  # memories, events and proposals per page
TIMELINE_MAX = 50  # events of one memory's timeline read from the log
LIGHT = {"explain": "false"}  # lists show statuses, never derivations: the list route's cheap form
STATUS_PREDICATES = {"budget": "budgetStatus", "target": "targetStatus"}  # context's status -> justify's


def routes(c: Console) -> list[Route]:
    return [
        Route("/", lambda r: RedirectResponse("/console/context", status_code=303)),
        Route("/signin", c.public(signin_form), methods=["GET"]),
        Route("/signin", c.public(signin), methods=["POST"]),
        Route("/signout", c.page(lambda r, s: signout(r), write=True), methods=["POST"]),
        Route("/context", c.page(lambda r, s: context(c, r, s))),
        Route("/memories", c.page(lambda r, s: memories(c, r, s))),
        Route("/memories/new", c.page(lambda r, s: new_memory(c, r, s))),
        Route("/memories/{memory_id}", c.page(lambda r, s: memory(c, r, s))),
        Route("/memories/{memory_id}/tree", c.page(lambda r, s: tree(c, r, s))),
        Route("/live", c.page(lambda r, s: live(c, r, s))),
        Route("/proposals", c.page(lambda r, s: proposals(c, r, s))),
        Route("/decisions", c.page(lambda r, s: decisions(c, r, s))),
        Route("/onboarding", c.page(lambda r, s: onboarding(c, r, s))),
        Route("/audit", c.page(lambda r, s: audit(c, r, s))),
    ]


# -- sign-in ---------------------------------------------------------------------------------


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


async def signin_form(c: Console, request: Request, error: str | None = None, status: int = 200) -> Response:
    nonce = sess.signin_nonce()
    response = c.render(request, None, "signin.html", status=status, nonce=nonce, error=error)
    response.set_cookie(sess.SIGNIN_COOKIE, nonce, max_age=600, **sess.cookie_options(_secure(request)))  # type: ignore[arg-type]
    return response


async def signin(c: Console, request: Request) -> Response:
    form = await request.form()
    nonce, sent = request.cookies.get(sess.SIGNIN_COOKIE), form.get("nonce")
    if not nonce or not isinstance(sent, str) or not sess.csrf_ok(nonce, sess.csrf_for(sent)):
        return await signin_form(
            c, request, "the sign-in form expired or came from another site; try again", 403
        )
    token = form.get("token")
    token = token.strip() if isinstance(token, str) else ""
    try:
        c.verifier().verify(token)
    except Exception as exc:  # BadToken and anything the token's bytes provoke: never a 500
        return await signin_form(c, request, f"not signed in: {exc}", 401)
    response = RedirectResponse("/console/context", status_code=303)
    response.set_cookie(sess.COOKIE, token, **sess.cookie_options(_secure(request)))  # type: ignore[arg-type]
    response.delete_cookie(sess.SIGNIN_COOKIE, path=sess.PATH)
    return response


async def signout(request: Request) -> Response:
    """Sign out (a POST with the session's CSRF token: another site's page cannot sign anyone out)."""
    response = RedirectResponse("/console/signin", status_code=303)
    response.delete_cookie(sess.COOKIE, path=sess.PATH)
    return response


# -- this turn's context ---------------------------------------------------------------------


async def context(c: Console, request: Request, s: Session) -> Response:
    q = request.query_params.get("q", "").strip()
    try:
        bundle = await c.get(request, s, "/context", {"q": q} if q else None)
    except Refused as exc:
        return c.render(request, s, "context.html", status=exc.status, q=q, bundle=None, error=exc.message)
    # the conflicts block names each memory by its label, as the blocks above it do
    labels = {m["id"]: m["label"] for block in bundle["blocks"] for m in block["items"]}
    return c.render(
        request, s, "context.html", q=q, bundle=bundle, predicates=STATUS_PREDICATES, labels=labels
    )


async def tree(c: Console, request: Request, s: Session) -> Response:
    """One status's derivation tree (justify), as a fragment the context page opens in place."""
    memory_id = request.path_params["memory_id"]
    status = request.query_params.get("status", "")
    try:
        answer = await c.get(request, s, f"/memories/{memory_id}/justify", {"status": status})
    except Refused as exc:
        return c.render(request, s, "tree.html", status=exc.status, derived=[], error=exc.message)
    return c.render(request, s, "tree.html", derived=answer["derived"])


# -- memories --------------------------------------------------------------------------------

FILTERS = ("kind", "scope", "class", "min_importance", "active")


async def memories(c: Console, request: Request, s: Session) -> Response:
    q = request.query_params.get("q", "").strip()
    chosen = {k: request.query_params.get(k, "") for k in FILTERS}
    try:
        offset = max(0, int(request.query_params.get("offset", "0")))
    except ValueError:
        offset = 0
    tool = await c.get(request, s, "/memory-tool")
    try:
        if q:  # search: the recall route, its ranking and eligibility
            body: dict[str, Any] = {"q": q, "limit": PAGE}
            if chosen["kind"]:
                body["kind"] = [chosen["kind"]]
            if chosen["class"]:
                body["class"] = [chosen["class"]]
            if least := chosen["min_importance"]:  # else recall's own floor (Low); not a number: its 422
                body["min_importance"] = int(least) if least.isdigit() else least
            answer = await c.call(request, s, "POST", "/recall", json=body)
            if answer.status_code != 200:
                raise Refused(answer.status_code, message(answer))
            rows, count = answer.json()["data"], len(answer.json()["data"])
        else:
            params = {k: val for k, val in chosen.items() if val} | LIGHT | {"limit": PAGE, "offset": offset}
            page = await c.get(request, s, "/memories", params)
            rows, count = page["data"], page["count"]
    except Refused as exc:
        rows, count, error, status = [], 0, exc.message, exc.status
    else:
        error, status = None, 200
    return c.render(
        request, s, "memories.html", status=status, error=error, rows=rows, count=count, q=q,
        chosen=chosen, offset=offset, page=PAGE, classes=forms.classes(tool), vocab=vocab(),
    )  # fmt: skip


def vocab() -> dict[str, Any]:
    return {
        "kind": [k.value for k in v.Kind],
        "scope": [s.value for s in v.Scope],
        "importance": [str(i.value) for i in v.Importance],
        "importance_names": {str(i.value): f"{i.value} {i.name.lower()}" for i in v.Importance},
    }


async def new_memory(
    c: Console, request: Request, s: Session, *, form: dict[str, str] | None = None, error: str | None = None,
    status: int = 200,
) -> Response:  # fmt: skip
    """The create form of a class, generated from the ontology's shapes (the memory-tool route)."""
    tool = await c.get(request, s, "/memory-tool")
    form = form or {}
    names = forms.classes(tool)
    chosen = form.get("memory_class") or request.query_params.get("class") or "Memory"
    if chosen not in names:
        chosen, error = "Memory", error or f"unknown memory class {chosen[:64]!r}"
    return c.render(
        request, s, "new.html", status=status, error=error, classes=names, chosen=chosen,
        fields=forms.class_fields(tool, chosen), vocab=vocab(), form=form, key=str(uuid.uuid4()),
        may_share=s.who.role == v.Role.OPERATOR,
    )  # fmt: skip


async def memory(
    c: Console, request: Request, s: Session, *, error: str | None = None, status: int = 200
) -> Response:
    """A memory's page: fields, statuses with their explanations, conflicts, lineage, the timeline
    of its events, the supersession chain, and (``at``) the memory as the system knew it after its
    n-th event, replayed by the justify route's ``as_of``."""
    memory_id = request.path_params["memory_id"]
    try:
        m, lineage = await asyncio.gather(
            c.get(request, s, f"/memories/{memory_id}"), c.get(request, s, f"/memories/{memory_id}/lineage")
        )
    except Refused as exc:
        return c.render(request, s, "error.html", status=exc.status, error=exc.message)
    events = lineage["events"]
    timeline = await _timeline(c, request, s, events) if s.who.sees_everything else []
    at, then = request.query_params.get("at"), None
    index = len(events) - 1
    if at is not None and at.isdigit() and int(at) < len(events):
        index = int(at)
        position = f"{events[index]['partition']}:{events[index]['offset']}"
        try:
            then = await c.get(request, s, f"/memories/{memory_id}/justify", {"as_of": position})
        except Refused as exc:
            error = error or exc.message
    tool = await c.get(request, s, "/memory-tool")
    try:
        props = forms.class_fields(tool, m["memory_class"])
    except forms.FormError:
        props = []  # a class the ontology no longer has (a forgotten memory's is Memory)
    return c.render(
        request, s, "memory.html", status=status, error=error, m=m, lineage=lineage, timeline=timeline,
        index=index, then=then, props=props, editable=forms.EDITABLE, key=str(uuid.uuid4()),
        may_change=s.may_change(m), may_forget=s.may_emit(ev.MemoryForgotten),
        may_hold=s.may_emit(ev.LegalHoldPlaced), policies=POLICIES,
    )  # fmt: skip


POLICIES = ("prefer_newer", "prefer_higher_confidence", "prefer_more_specific_scope", "prefer_human")


async def _timeline(
    c: Console, request: Request, s: Session, events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Who, when, why and with what purpose of each of a memory's events, read from the log (the
    events route: operators and auditors)."""

    async def one(e: dict[str, Any]) -> dict[str, Any]:
        p, o = e["partition"], e["offset"]
        try:
            page = await c.get(request, s, "/events", {"from": f"{p}:{o}", "to": f"{p}:{o + 1}", "limit": 1})
        except Refused:
            return {"position": f"{p}:{o}", "event_id": e["event_id"]}
        return page["data"][0] if page["data"] else {"position": f"{p}:{o}", "event_id": e["event_id"]}

    return list(await asyncio.gather(*(one(e) for e in events[:TIMELINE_MAX])))


# -- live data -------------------------------------------------------------------------------


async def live(
    c: Console, request: Request, s: Session, *, error: str | None = None, status: int = 200
) -> Response:
    """KPIs and spend per period beside the targets and caps and their derived status, a chart per
    series (the periods read from the log, for operators and auditors; the current period for
    others, from the context's snapshot)."""
    bundle, caps, targets = await asyncio.gather(
        c.get(request, s, "/context"),
        c.get(
            request,
            s,
            "/memories",
            LIGHT | {"class": "BudgetConstraintMemory", "active": "true", "limit": PAGE},
        ),
        c.get(
            request,
            s,
            "/memories",
            LIGHT | {"class": "PerformanceTargetMemory", "active": "true", "limit": PAGE},
        ),
    )
    series: dict[str, dict[str, float]] = {}
    if s.who.sees_everything:
        log = await c.get(
            request, s, "/events", [("type", "KpiObserved"), ("type", "SpendObserved"), ("limit", 1000)]
        )
        for e in log["data"]:
            p = e["payload"]
            name = (
                f"kpi {p['metric']}"
                if e["type"] == "KpiObserved"
                else f"spend {p['platform']} {p['currency']}"
            )
            series.setdefault(name, {})[p["period"]] = p.get("value", p.get("amount"))
    for k in bundle["snapshot"]["kpis"]:
        series.setdefault(f"kpi {k['metric']}", {}).setdefault(k["period"], k["value"])
    for sp in bundle["snapshot"]["spend"]:
        series.setdefault(f"spend {sp['platform']} {sp['currency']}", {}).setdefault(
            sp["period"], sp["amount"]
        )
    limits: dict[str, float] = {}
    for m in caps["data"]:
        p = m["properties"]
        limits.setdefault(f"spend {p.get('platform')} {p.get('currency')}", p.get("amount"))
    for m in targets["data"]:
        limits.setdefault(f"kpi {m['properties'].get('metric')}", m["properties"].get("goal"))
    svgs = {
        name: charts.line_chart(name, sorted(points.items()), limits.get(name))
        for name, points in sorted(series.items())
    }
    return c.render(
        request, s, "live.html", status=status, error=error, snapshot=bundle["snapshot"], caps=caps["data"],
        targets=targets["data"], charts=svgs, may_observe=s.may_emit(ev.SpendObserved), key=str(uuid.uuid4()),
    )  # fmt: skip


# -- proposals, decisions, onboarding, audit -------------------------------------------------


async def proposals(
    c: Console, request: Request, s: Session, *, error: str | None = None, status: int = 200
) -> Response:
    page = await c.get(request, s, "/proposals", {"limit": PAGE})
    return c.render(
        request, s, "proposals.html", status=status, error=error, rows=page["data"], count=page["count"],
        key=str(uuid.uuid4()),
    )  # fmt: skip


async def decisions(c: Console, request: Request, s: Session) -> Response:
    """The decisions the principal may see, a page at a time, breaches flagged; or those that
    relied on one objective (the objectives to choose from are those the principal may see)."""
    objectives = await c.get(request, s, "/memories", LIGHT | {"kind": "objective", "limit": PAGE})
    chosen = request.query_params.get("relied_on", "")
    offset = request.query_params.get("offset", "0")
    offset = int(offset) if offset.isdigit() else 0
    params: dict[str, str | int] = {"limit": PAGE, "offset": offset} | (
        {"relied_on": chosen} if chosen else {}
    )
    page: dict[str, Any] = {"data": [], "count": 0}
    error, status = None, 200
    try:
        page = await c.get(request, s, "/decisions", params)
    except Refused as exc:
        error, status = exc.message, exc.status
    return c.render(
        request, s, "decisions.html", status=status, error=error, objectives=objectives["data"],
        chosen=chosen, rows=page["data"], count=page["count"], offset=offset, page=PAGE,
    )  # fmt: skip


async def onboarding(
    c: Console, request: Request, s: Session, *, error: str | None = None, status: int = 200
) -> Response:
    try:
        state = await c.get(request, s, "/onboarding")
    except Refused as exc:
        return c.render(request, s, "error.html", status=exc.status, error=exc.message)
    return c.render(
        request, s, "onboarding.html", status=status, error=error, state=state, key=str(uuid.uuid4()),
        may_onboard=s.who.role == v.Role.OPERATOR,
    )  # fmt: skip


async def audit(c: Console, request: Request, s: Session) -> Response:
    """The tenant's events as the log holds them, a page at a time, by type and time."""
    q = request.query_params
    types = [t for t in q.getlist("type") if t]
    params: list[tuple[str, str | int]] = [("type", t) for t in types] + [("limit", PAGE)]
    for name in ("from", "to", "cursor"):
        if q.get(name):
            params.append((name, q[name]))
    error, status, page = None, 200, {"data": [], "next": None, "skipped": 0}
    try:
        page = await c.get(request, s, "/events", params)
    except Refused as exc:
        error, status = exc.message, exc.status
    keep = [(k, val) for k, val in params if k in ("type", "from", "to")]
    return c.render(
        request, s, "audit.html", status=status, error=error, page=page, types=list(EVENT_TYPES),
        chosen=types, start=q.get("from", ""), end=q.get("to", ""), keep=keep,
    )  # fmt: skip
