"""The relay server in a background thread of the test process, and raw-socket helpers (tests/helpers/queues.py
fills the queues)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Any

from clientproto import (
    LEGACY_VERSION,
    REPLY_HEADER_SIZE,
    Command,
    Result,
    decode_reply_header,
    encode_auth,
    encode_request,
    server_key,
    verify_reply,
)
from relay.server import RelayServer, ServerOptions, event_loop_factory

SECRET = "Freedelity"


class ServerThread:
    """A RelayServer on 127.0.0.1 and an ephemeral port, with its own event loop in a thread."""

    def __init__(self, secret: str = SECRET, *, event_loop: str = "asyncio", **options: Any) -> None:
        """``event_loop``: "asyncio" or "uvloop", as ``relay.server.event_loop_factory`` names them."""
        self.secret = secret
        self.loop_factory = event_loop_factory(event_loop)
        self.options = ServerOptions(address="127.0.0.1", port=0, **options)
        self.server: RelayServer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="relay-server-test", daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        try:
            with asyncio.Runner(loop_factory=self.loop_factory) as runner:
                runner.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.server = RelayServer(self.secret, self.options)
        await self.server.start()
        self.loop = asyncio.get_running_loop()
        self._ready.set()
        await self.server.serve_until_stopped()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def stop(self, timeout: float = 30) -> None:
        if self.loop is not None and self._thread.is_alive():
            assert self.server is not None
            self.loop.call_soon_threadsafe(self.server.request_stop)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the relay server did not stop"

    def connect(self, timeout: float = 10) -> RawClient:
        return RawClient(socket.create_connection(("127.0.0.1", self.port), timeout=timeout))


class RawClient:
    """Hand-made frames over a real socket; replies read exactly as the PHP client does (header, then payload)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.client_id = 0
        self.token = 0

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionResetError(f"closed with {size} bytes still expected")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def reply(self) -> bytes:
        """One whole reply frame (header and payload) as raw bytes."""
        head = self.recv_exactly(REPLY_HEADER_SIZE)
        header = decode_reply_header(head)
        body = self.recv_exactly(header.payload_size) if header.payload_size else b""
        verify_reply(header, body)
        return head + body

    def request(self, command: int, payload: bytes = b"", **fields: Any) -> tuple[int, bytes]:
        """Sends a request with this client's session; returns (result, payload)."""
        fields.setdefault("client_id", self.client_id)
        fields.setdefault("token", self.token)
        fields.setdefault("version", LEGACY_VERSION)
        self.send(encode_request(command, payload, **fields))
        frame = self.reply()
        return frame[0], frame[REPLY_HEADER_SIZE:]

    def closed_by_peer(self, timeout: float = 5) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def authed(relay: ServerThread, name: str = "test-test") -> RawClient:
    """A raw client of ``relay`` that has AUTHed as ``name`` (its session's token and ClientID kept)."""
    client = relay.connect()
    result, payload = client.request(Command.AUTH, encode_auth(server_key(SECRET), name))
    assert result == Result.OK
    _, client.token, client.client_id = struct.unpack("<QII", payload)
    return client
