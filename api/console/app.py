"""The console's web app: sign-in, the session, and the in-process calls to the tenant's routes.

Mounted at ``/console`` as an app of its own (its forms are not JSON, and the generated create form
has fields no route could declare), behind the API's middleware: hosts, body limits, timing. Every
page asks the API's routes for what it shows, in process (httpx's ASGI transport into the whole
app, so a tenant another process owns is forwarded there by ``api.routing`` exactly as a client's
request would be), with the signed-in principal's own bearer token. The console pages themselves
need no routing: they hold no tenant state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jinja2
from engram.api.auth import BadToken, Claims, Verifier
from engram.api.console import session as sess
from engram.projections import governance
from engram.projections.visibility import Principal
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

HERE = Path(__file__).parent
SOURCE = v.Source.OPERATOR.value  # the console is the operator's channel: every write it makes says so

Handler = Callable[[Request, "Session"], Awaitable[Response]]


@dataclass(frozen=True)
class Session:
    """The signed-in principal: its token (sent on every call), claims and CSRF token."""

    token: str
    claims: Claims

    @property
    def tenant(self) -> str:
        return self.claims.tenant

    @property
    def who(self) -> Principal:
        return self.claims.principal

    @property
    def csrf(self) -> str:
        return sess.csrf_for(self.token)

    def may_emit(self, payload: type[ev.Payload]) -> bool:
        """Whether the principal's role may emit ``payload`` at all: the governance table itself
        (``projections.governance.DECISIONS``), so the console offers no action its role is refused."""
        return self.who.role in governance.DECISIONS[payload].roles

    def may_change(self, memory: dict[str, Any]) -> bool:
        """Whether to offer revise, supersede and restore of ``memory``: its owner (a user-scoped
        memory's user) or, for a shared one, an operator or its author. A display decision only: the
        API decides again (``governance._may_change``) and its refusal is shown as given."""
        role = self.who.role
        if memory.get("scope") == v.Scope.USER:
            owner = (memory.get("stakeholders") or {}).get("user_id")
            return owner == self.who.user and role in (v.Role.USER, v.Role.AGENT, v.Role.OPERATOR)
        author = (memory.get("actor") or {}).get("id")
        return role == v.Role.OPERATOR or (role != v.Role.AGENT and author == self.who.subject)


class Refused(Exception):
    """An answer of the API that is not a success: its status and its own message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def message(response: httpx.Response) -> str:
    """The API's reason for a refusal, as it wrote it (every ``msg`` of its ``detail``)."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        return f"{response.status_code} {response.reason_phrase}"
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict)) or str(detail)
    return str(detail)


class Console:
    """The console for ``api`` (the FastAPI app it is mounted in, whose routes it calls)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.client: httpx.AsyncClient | None = None
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.ChainableUndefined,  # an absent key of an answer reads as empty
            trim_blocks=True,
            lstrip_blocks=True,
        )

    # -- the session -----------------------------------------------------------------------

    def verifier(self) -> Verifier:
        return self.api.state.verifier  # type: ignore[no-any-return]

    def session(self, request: Request) -> Session | None:
        token = request.cookies.get(sess.COOKIE)
        if not token:
            return None
        try:
            return Session(token, self.verifier().verify(token))
        except BadToken:
            return None

    def public(
        self, handler: Callable[[Console, Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A page anyone may load (the sign-in form)."""

        async def endpoint(request: Request) -> Response:
            return await handler(self, request)

        return endpoint

    def page(self, handler: Handler, *, write: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """A page of a signed-in principal (else to the sign-in page); a write checks the form's
        CSRF token first (403 if it is not the session's)."""

        async def endpoint(request: Request) -> Response:
            s = self.session(request)
            if s is None:
                return RedirectResponse("/console/signin", status_code=303)
            if write:
                form = await request.form()
                sent = form.get("csrf")
                if not sess.csrf_ok(s.token, sent if isinstance(sent, str) else None):
                    return self.render(
                        request,
                        s,
                        "error.html",
                        status=403,
                        error="the form's CSRF token is not this session's",
                    )
            return await handler(request, s)

        return endpoint

    # -- calls to the API ------------------------------------------------------------------

    async def call(
        self,
        request: Request,
        s: Session,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = None,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """One request to the tenant's route ``path`` (under ``/v1/tenants/{tenant}``), as the
        signed-in principal, in process."""
        if self.client is None:
            transport = httpx.ASGITransport(app=self.api, raise_app_exceptions=False)
            self.client = httpx.AsyncClient(transport=transport, base_url="http://engram", timeout=None)
        headers = {"Authorization": f"Bearer {s.token}"}
        if host := request.headers.get("host"):
            headers["host"] = host
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return await self.client.request(
            method, f"/v1/tenants/{s.tenant}{path}", params=params, json=json, headers=headers
        )

    async def get(self, request: Request, s: Session, path: str, params: Any = None) -> Any:
        """A read's JSON, or ``Refused`` with the API's message."""
        r = await self.call(request, s, "GET", path, params=params)
        if r.status_code != 200:
            raise Refused(r.status_code, message(r))
        return r.json()

    async def write(
        self, request: Request, s: Session, method: str, path: str, body: Any, *, key: str | None = None
    ) -> Any:
        """A write, answered once the projection applied it (``wait=true``), so the page it
        redirects to shows it; ``Refused`` with the API's message otherwise."""
        r = await self.call(
            request, s, method, path, params={"wait": "true"}, json=body, idempotency_key=key or None
        )
        if r.status_code not in (200, 202):
            raise Refused(r.status_code, message(r))
        return r.json()

    # -- rendering -------------------------------------------------------------------------

    def render(
        self, request: Request, s: Session | None, template: str, *, status: int = 200, **context: Any
    ) -> HTMLResponse:
        nav = self.nav(s) if s is not None else []
        html = self.env.get_template(template).render(
            s=s, nav=nav, path=request.url.path, error=context.pop("error", None), **context
        )
        return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})

    def nav(self, s: Session) -> list[tuple[str, str]]:
        """The pages the principal may use: no link to a page its role is refused."""
        pages = [("/console/context", "Context"), ("/console/memories", "Memories")]
        pages.append(("/console/memories/new", "New memory"))
        pages += [("/console/live", "Live data"), ("/console/proposals", "Proposals")]
        pages.append(("/console/decisions", "Decisions"))
        if s.who.sees_everything:  # the onboarding status and the event log: operators and auditors
            pages += [("/console/onboarding", "Onboarding"), ("/console/audit", "Audit")]
        return pages


def redirect(path: str, **params: Any) -> RedirectResponse:
    query = urlencode({k: val for k, val in params.items() if val is not None})
    return RedirectResponse(path + ("?" + query if query else ""), status_code=303)
