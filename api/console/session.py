"""The console's sign-in: the bearer token in an HttpOnly, SameSite=Strict cookie, and a CSRF token
every form carries.

The CSRF token is an HMAC of a fixed label keyed by the session's bearer token: only a page that
could read the token (ours, server side) can write it, and any process of a group checks it with no
state of its own. Before sign-in there is no session yet, so the sign-in form uses a double-submit
cookie (a random value in a SameSite=Strict cookie and in the form) against login CSRF.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COOKIE = "engram_console"
SIGNIN_COOKIE = "engram_console_signin"
PATH = "/console"
LABEL = b"engram-console-csrf-v1"


def csrf_for(token: str) -> str:
    """The CSRF token of the session holding ``token``."""
    return hmac.new(token.encode(), LABEL, hashlib.sha256).hexdigest()


def csrf_ok(token: str | None, sent: str | None) -> bool:
    """Whether a form's ``csrf`` field belongs to the session's token (constant time)."""
    if not token or not sent:
        return False
    return hmac.compare_digest(csrf_for(token), sent)


def signin_nonce() -> str:
    return secrets.token_urlsafe(24)


def cookie_options(secure: bool) -> dict[str, object]:
    """The session and sign-in cookies' attributes: never readable by scripts, never sent on a
    request another site starts, only under /console."""
    return {"httponly": True, "samesite": "strict", "path": PATH, "secure": secure}
