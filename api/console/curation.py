"""The console's writes: each form becomes one request to a tenant's write route, so each is one
event, decided by the API (governance, shapes, conflicts) and refused with its own message, shown
inline on the page the form is on.

A form carries an idempotency key minted when the page was rendered: a form sent twice (a double
click, a reload) is one event. Writes wait for the projection (``wait=true``), so the page they
redirect to already shows the change.
"""

from __future__ import annotations

from typing import Any

from engram.api.console import forms, pages
from engram.api.console.app import SOURCE, Console, Refused, Session, message, redirect
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

MEMORY_ACTIONS = ("edit", "supersede", "restore", "forget", "hold", "release", "resolve")


def routes(c: Console) -> list[Route]:
    post = ["POST"]
    return [
        Route("/memories", c.page(lambda r, s: create(c, r, s), write=True), methods=post),
        Route("/memories/{memory_id}/{action}", c.page(lambda r, s: act(c, r, s), write=True), methods=post),
        Route("/live/{what}", c.page(lambda r, s: observe(c, r, s), write=True), methods=post),
        Route(
            "/proposals/{memory_id}/{decision}",
            c.page(lambda r, s: decide(c, r, s), write=True),
            methods=post,
        ),
        Route("/onboarding", c.page(lambda r, s: onboard(c, r, s), write=True), methods=post),
    ]


async def _form(request: Request) -> dict[str, str]:
    return {k: val for k, val in (await request.form()).multi_items() if isinstance(val, str)}


def _text(form: dict[str, str], name: str) -> str | None:
    got = form.get(name, "").strip()
    return got or None


async def create(c: Console, request: Request, s: Session) -> Response:
    form = await _form(request)
    tool = await c.get(request, s, "/memory-tool")
    try:
        body = forms.create_body(tool, form) | {"source": SOURCE}
        if form.get("on_conflict"):
            body["on_conflict"] = form["on_conflict"]
        done = await c.write(request, s, "POST", "/memories", body, key=form.get("key"))
    except (Refused, forms.FormError) as exc:
        return await pages.new_memory(c, request, s, form=form, error=_why(exc), status=_status(exc))
    return redirect(f"/console/memories/{done['memory_id']}")


async def act(c: Console, request: Request, s: Session) -> Response:
    """One change to a memory from its page: revise (PATCH, three states), supersede, restore,
    forget with a reason, place or release a legal hold, resolve its conflicts by a policy."""
    memory_id, action = request.path_params["memory_id"], request.path_params["action"]
    form = await _form(request)
    key = form.get("key")
    base = f"/memories/{memory_id}"
    why = {"source": SOURCE}
    try:
        if action == "edit":
            m = await c.get(request, s, base)
            tool = await c.get(request, s, "/memory-tool")
            try:
                props = forms.class_fields(tool, m["memory_class"])
            except forms.FormError:
                props = []
            fields = [
                *forms.EDITABLE,
                *(forms.Field(forms.PROPERTY_PREFIX + f.name, f.type, enum=f.enum) for f in props),
            ]
            body = forms.patch_body(fields, form)
            if not body:
                raise forms.FormError("nothing to change: set or clear a field")
            await c.write(request, s, "PATCH", base, body | why, key=key)
        elif action == "supersede":
            await c.write(
                request,
                s,
                "POST",
                base + "/supersede",
                why | {"superseded_by": form.get("superseded_by", "").strip()},
                key=key,
            )
        elif action == "restore":
            await c.write(request, s, "POST", base + "/restore", why, key=key)
        elif action == "forget":
            await c.write(
                request, s, "POST", base + "/forget", why | {"reason": _text(form, "reason")}, key=key
            )
        elif action == "hold":
            body = why | {"memory_id": memory_id, "reason": _text(form, "reason")}
            await c.write(request, s, "POST", "/legal-holds", body, key=key)
        elif action == "release":
            await c.write(
                request,
                s,
                "POST",
                f"/legal-holds/{memory_id}/release",
                why | {"reason": _text(form, "reason")},
                key=key,
            )
        elif action == "resolve":
            body = why | {"policy": form.get("policy", ""), "memory_ids": [memory_id]}
            r = await c.call(
                request,
                s,
                "POST",
                "/conflicts/resolve",
                params={"apply": "true", "wait": "true"},
                json=body,
                idempotency_key=key,
            )
            if r.status_code not in (200, 202):
                raise Refused(r.status_code, message(r))
        else:
            raise Refused(404, f"no such action {action[:32]!r}; one of {', '.join(MEMORY_ACTIONS)}")
    except (Refused, forms.FormError) as exc:
        return await pages.memory(c, request, s, error=_why(exc), status=_status(exc))
    return redirect(f"/console/memories/{memory_id}")


async def observe(c: Console, request: Request, s: Session) -> Response:
    """Post a spend or a KPI observation (pipelines and operators)."""
    what = request.path_params["what"]
    form = await _form(request)
    try:
        if what == "spend":
            body: dict[str, Any] = {
                "platform": form.get("platform", "").strip(),
                "amount": forms.value(forms.Field("amount", "number"), form.get("amount", "")),
                "currency": form.get("currency", "").strip(),
                "period": form.get("period", "").strip(),
            }
            path = "/spend"
        elif what == "kpis":
            body = {
                "metric": form.get("metric", "").strip(),
                "value": forms.value(forms.Field("value", "number"), form.get("value", "")),
                "period": form.get("period", "").strip(),
            }
            path = "/kpis"
        else:
            raise Refused(404, f"no such observation {what[:32]!r}; spend or kpis")
        await c.write(request, s, "POST", path, body | {"source": SOURCE}, key=form.get("key"))
    except (Refused, forms.FormError) as exc:
        return await pages.live(c, request, s, error=_why(exc), status=_status(exc))
    return redirect("/console/live")


async def decide(c: Console, request: Request, s: Session) -> Response:
    memory_id, decision = request.path_params["memory_id"], request.path_params["decision"]
    form = await _form(request)
    try:
        body = {"source": SOURCE, "reason": _text(form, "reason")}
        await c.write(request, s, "POST", f"/proposals/{memory_id}/{decision}", body, key=form.get("key"))
    except Refused as exc:
        return await pages.proposals(c, request, s, error=_why(exc), status=_status(exc))
    return redirect(f"/console/memories/{memory_id}")


async def onboard(c: Console, request: Request, s: Session) -> Response:
    """A new tenant's spine: an objective (a budget cap or a KPI target), a fact, a preference."""
    form = await _form(request)
    body: dict[str, Any] = {}
    try:
        if _text(form, "objective_label"):
            objective: dict[str, Any] = {
                "label": form["objective_label"],
                "content": form.get("objective_content", ""),
            }
            if form.get("objective_type") == "target":
                goal = forms.value(forms.Field("goal", "number"), form.get("goal", ""))
                objective["target"] = {"metric": form.get("metric", "").strip(), "goal": goal}
            else:
                amount = forms.value(forms.Field("amount", "number"), form.get("amount", ""))
                objective["budget"] = {
                    "platform": form.get("platform", "").strip(), "amount": amount,
                    "currency": form.get("currency", "").strip(), "period": form.get("period", "month"),
                }  # fmt: skip
            body["objective"] = objective
        for slot in ("fact", "preference"):
            if _text(form, f"{slot}_label"):
                body[slot] = {"label": form[f"{slot}_label"], "content": form.get(f"{slot}_content", "")}
        await c.write(request, s, "POST", "/onboarding", body, key=form.get("key"))
    except (Refused, forms.FormError) as exc:
        return await pages.onboarding(c, request, s, error=_why(exc), status=_status(exc))
    return redirect("/console/onboarding")


def _why(exc: Exception) -> str:
    return exc.message if isinstance(exc, Refused) else str(exc)


def _status(exc: Exception) -> int:
    return exc.status if isinstance(exc, Refused) else 422
