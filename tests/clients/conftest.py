"""The client's tests run against a real ``engram serve`` (one per module) on a private slice of
the local broker, and, where a test needs a fault, through :class:`FaultyProxy`: a TCP proxy in
front of that server that drops answers or answers in its place, so the client meets a dropped
connection or a 503 exactly as it would on a network."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from engram.api.auth import mint
from engram.streams.objects import S3Objects, open_objects
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings


@dataclass
class Live:
    """The module's server and a token minter for its tenants."""

    server: Server
    settings: Settings

    @property
    def url(self) -> str:
        return self.server.url

    def token(self, tenant: str, *, role: str = "operator", user: str = "dana", **claims: object) -> str:
        return mint(self.settings, tenant, role=role, user=user, **claims)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def live(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("client")
    settings = isolated_settings(broker, root / "data")
    if settings.s3_endpoint:  # any S3 (ENGRAM_S3_ENDPOINT): a bucket of this module's own
        settings = settings.model_copy(update={"s3_bucket": settings.topic_prefix})
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    yield Live(srv, settings)
    srv.stop()
    if settings.s3_endpoint:
        objects = open_objects(settings)
        assert isinstance(objects, S3Objects)
        for key in objects.list():
            objects.delete(key)
        objects.client.delete_bucket(Bucket=objects.bucket)


def _read_message(sock: socket.socket, buffered: bytearray) -> bytes | None:
    """One HTTP/1.1 message (head and a Content-Length body) from ``sock``; None at EOF."""
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffered += chunk
    head_end = buffered.index(b"\r\n\r\n") + 4
    length = 0
    for line in bytes(buffered[:head_end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(buffered) < head_end + length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffered += chunk
    message = bytes(buffered[: head_end + length])
    del buffered[: head_end + length]
    return message


@dataclass
class FaultyProxy:
    """Forwards HTTP/1.1 requests to ``upstream``; the next ``drop`` answers are read from the
    server (so the request was handled) and then the client's connection is closed instead of
    answering; the next canned ``answers`` are sent instead of forwarding. ``requests`` keeps every
    request head the proxy saw."""

    upstream: tuple[str, int]
    drop: int = 0
    answers: list[bytes] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(self.upstream) as up:
            from_client, from_server = bytearray(), bytearray()
            while (request := _read_message(conn, from_client)) is not None:
                with self.lock:
                    self.requests.append(request.split(b"\r\n\r\n")[0])
                    canned = self.answers.pop(0) if self.answers else None
                if canned is not None:
                    conn.sendall(canned)
                    continue
                up.sendall(request)
                answer = _read_message(up, from_server)
                if answer is None:
                    return
                with self.lock:
                    dropping = self.drop > 0
                    self.drop -= dropping
                if dropping:  # the server handled it; the client never hears so
                    conn.shutdown(socket.SHUT_RDWR)
                    return
                conn.sendall(answer)

    def close(self) -> None:
        self.listener.close()


def canned(status: int, reason: str, *, retry_after: str | None = None) -> bytes:
    """An answer in the API's error shape, as the proxy sends it in the server's place."""
    body = json.dumps({"detail": [{"loc": [], "msg": reason, "type": "unavailable"}]}).encode()
    head = [f"HTTP/1.1 {status} Refused", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    if retry_after is not None:
        head.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@pytest.fixture
def proxy(live: Live) -> Iterator[FaultyProxy]:
    p = FaultyProxy(("127.0.0.1", live.server.settings.api_port))
    yield p
    p.close()
