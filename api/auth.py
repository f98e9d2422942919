"""Bearer tokens: who is asking, proven. One dependency turns a token into a ``Principal``.

HS256 with the data directory's secret by default (``engram token`` mints one); RS256 / ES256
with ``ENGRAM_AUTH_PUBLIC_KEY`` (a PEM file) or ``ENGRAM_AUTH_JWKS`` (a JWKS file) in
production, where tokens are minted elsewhere. Claims: ``tenant``, ``sub`` (the caller), ``teams``,
``role`` (user / operator / pipeline / agent / auditor), ``user`` (an agent's: the user it acts
for), ``exp`` and ``iss``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from engram.projections.visibility import Principal
from engram.schemas import vocabulary as v

from engram.settings import Settings

ASYMMETRIC = ["RS256", "ES256"]
CHECKED_TOKENS = 4096  # tokens whose claims are kept, the oldest checked dropped first


class BadToken(Exception):
    """A token that does not prove who is asking; the message says why (never the token)."""


@dataclass(frozen=True)
class Claims:
    tenant: str
    principal: Principal


def mint(
    settings: Settings,
    tenant: str,
    *,
    role: str,
    user: str,
    teams: Sequence[str] = (),
    on_behalf_of: str | None = None,
    ttl_s: float = 3600.0,
) -> str:
    """An HS256 token signed with this deployment's secret (the embedded default's tokens)."""
    if (role == v.Role.AGENT) != (on_behalf_of is not None):
        raise ValueError("an agent's token names the user it acts for (--on-behalf-of); no other role's does")
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": settings.auth_issuer,
        "tenant": tenant,
        "sub": user,
        "role": role,
        "teams": list(teams),
        "iat": now,
        "exp": now + int(ttl_s),
    }
    if on_behalf_of is not None:
        claims["user"] = on_behalf_of
    try:  # the server's own check of a token's claims: never mint one it would refuse
        _claims(claims)
    except BadToken as exc:
        raise ValueError(str(exc).replace("the token's", "the")) from None
    return jwt.encode(claims, settings.token_secret(), algorithm="HS256")


class Verifier:
    """Checks tokens against the configured key: a JWKS file, a public key, or the HS256 secret."""

    def __init__(self, settings: Settings) -> None:
        self.issuer = settings.auth_issuer
        self._jwks: jwt.PyJWKSet | None = None
        if settings.auth_jwks is not None:
            self._jwks = jwt.PyJWKSet.from_dict(json.loads(settings.auth_jwks.read_text()))
            self.key: Any = None
            self.algorithms = ASYMMETRIC
        elif settings.auth_public_key is not None:
            self.key = settings.auth_public_key.read_text()
            self.algorithms = ASYMMETRIC
        else:
            self.key = settings.token_secret()
            self.algorithms = ["HS256"]
        self._checked: dict[str, tuple[Claims, float, float]] = {}  # token -> claims, exp, nbf

    def verify(self, token: str) -> Claims:
        """The token's claims, checked; a token checked before is answered from ``_checked`` until
        it expires (the signature of the same bytes under the same key checks the same: an agent
        sends one token with every call, ~0.25 ms of PyJWT each)."""
        now = time.time()
        if (seen := self._checked.get(token)) is not None and seen[1] > now >= seen[2]:
            return seen[0]
        raw = self._decode(token)
        claims = _claims(raw)
        self._checked[token] = (claims, float(raw["exp"]), float(raw.get("nbf", 0)))
        while len(self._checked) > CHECKED_TOKENS:
            self._checked.pop(next(iter(self._checked)))
        return claims

    def _decode(self, token: str) -> dict[str, Any]:
        try:
            key = self.key
            if self._jwks is not None:
                kid = jwt.get_unverified_header(token).get("kid")
                found = [k for k in self._jwks.keys if kid is None or k.key_id == kid]
                if not found:
                    raise BadToken("the token's key id is not in the configured JWKS")
                key = found[0].key
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "sub", "tenant", "role"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise BadToken("the token has expired") from exc
        except jwt.PyJWTError as exc:
            raise BadToken(f"not a valid token: {exc}") from exc
        return claims


def _claims(claims: dict[str, Any]) -> Claims:
    tenant, sub, role = claims["tenant"], claims["sub"], claims["role"]
    teams = claims.get("teams", [])
    on_behalf_of = claims.get("user")
    if not v.full_match(v.TENANT_RE, tenant):
        raise BadToken("the token's tenant is not a tenant id")
    if not v.full_match(v.ID_RE, sub):
        raise BadToken("the token's subject is not an id")
    if role not in v.values(v.Role):
        raise BadToken(f"the token's role must be one of {', '.join(v.Role)}")
    if not (isinstance(teams, list) and all(v.full_match(v.ID_RE, t) for t in teams)):
        raise BadToken("the token's teams must be a list of ids")
    if on_behalf_of is not None and not v.full_match(v.ID_RE, on_behalf_of):
        raise BadToken("the token's user is not an id")
    if (role == v.Role.AGENT) != (on_behalf_of is not None):
        raise BadToken("an agent's token names the user it acts for (claim 'user'); no other role's does")
    principal = Principal(user=on_behalf_of or sub, teams=frozenset(teams), role=v.Role(role), subject=sub)
    return Claims(tenant, principal)
