"""Limits before AUTH: small payloads, an AUTH deadline, timeouts on partial frames, connection caps, bounded memory.

The first tests run the server in the test process (fast, exact); the last three run ``manage.py runrelay`` as a
process, as it runs in production, and measure it from outside: its RSS under 300 1-MiB unauthenticated payloads,
how soon it closes 500 connections that never authenticate, and whether a client gets in during a connection flood.
Everything stays on 127.0.0.1 and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clientproto import (
    MAX_UNAUTHENTICATED_PAYLOAD,
    Command,
    RelayClient,
    Result,
    encode_auth,
    encode_request,
    server_key,
)
from devtools.wait import wait_for
from relay.models import Client
from relay.server import server as server_module
from relay.server.connection import MAX_UNAUTHENTICATED_REQUESTS, TURN_REQUESTS
from tests.helpers.processes import TEST_SECRET, RelayProcess, start_relay
from tests.helpers.relay_server import SECRET, ServerThread, authed

pytestmark = pytest.mark.django_db(transaction=True)

PING = bytes.fromhex("0100000000000000200001000000000000000000210001000000000000000000")
PONG = bytes.fromhex("00050000003901000050") + b"ONG\x00"


def auth_header(payload_size: int) -> bytes:
    """An AUTH request header announcing ``payload_size`` bytes (the checksum does not matter: the size is checked
    first)."""
    return struct.pack("<HHIIIIIII", Command.AUTH, 0, payload_size, 0x00010020, 0, 0, 0, 0, 0)


@pytest.fixture(params=["asyncio", "uvloop"])
def limited(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    monkeypatch.setattr(server_module, "EVICTION_GRACE", 0.0)  # any connection without a session may make room
    server = ServerThread(
        event_loop=request.param, auth_timeout=0.5, io_timeout=0.5, idle_timeout=600, max_connections_per_address=4
    ).start()
    yield server
    server.stop()


# -- in the test process --------------------------------------------------------------------------------------------


def test_before_auth_a_payload_is_at_most_a_few_kib(limited: ServerThread) -> None:
    client = limited.connect()
    client.send(auth_header(MAX_UNAUTHENTICATED_PAYLOAD + 1) + bytes(64 << 10))
    result = client.reply()
    assert result[0] == Result.MALFORMED and b"before AUTH the limit is 4096 bytes" in result
    assert client.closed_by_peer()
    # The largest AUTH fits, and is answered on a connection that stays open.
    client = limited.connect()
    result, _ = client.request(Command.AUTH, encode_auth(server_key(SECRET), "n" * 1024))
    assert result == Result.OK  # the protocol's longest name (1024 bytes), stored as it is
    assert Client.objects.filter(name="n" * 1024).exists()
    assert client.request(Command.PING) == (Result.OK, b"PONG\x00")


def test_requests_pipelined_before_auth_end_the_connection_after_a_few(limited: ServerThread) -> None:
    client = limited.connect()
    refused = encode_request(Command.AUTH, encode_auth(server_key(SECRET) ^ 1, "guess"))
    client.send(refused * 1000)  # sent ahead without reading a reply: the server must not spend itself on them
    answered = 0
    with contextlib.suppress(ConnectionError):
        while client.reply()[0] == Result.AUTH_FAILED:
            answered += 1
    assert answered <= MAX_UNAUTHENTICATED_REQUESTS  # the close may come before the last of them are answered
    assert client.closed_by_peer()
    # After AUTH, requests are not counted.
    good = authed(limited, "pipelining")
    for _ in range(3 * MAX_UNAUTHENTICATED_REQUESTS):
        assert good.request(Command.PING) == (Result.OK, b"PONG\x00")


def test_pings_before_auth_are_answered_every_time(limited: ServerThread) -> None:
    """The original answers PING without AUTH, and a health check may ping a relay over one connection: PINGs are
    not counted among the requests a connection may send without a session (the AUTH deadline still bounds it)."""
    client = limited.connect()
    for _ in range(3 * MAX_UNAUTHENTICATED_REQUESTS):
        client.send(PING)
        assert client.reply() == PONG
    client.send(PING * 200)
    assert all(client.reply() == PONG for _ in range(200))


def test_a_connection_must_authenticate_within_the_deadline(limited: ServerThread) -> None:
    started = time.monotonic()
    silent, pinging, partial = limited.connect(), limited.connect(), limited.connect()
    pinging.send(PING)
    assert pinging.reply() == PONG
    partial.send(PING[:10])
    good = authed(limited, "good")  # a session: no deadline
    for client in (silent, pinging, partial):
        assert client.closed_by_peer(timeout=5)
    assert time.monotonic() - started < 3
    time.sleep(0.7)
    assert good.request(Command.PING) == (Result.OK, b"PONG\x00")


def test_a_partial_header_or_payload_is_bound_by_the_io_timeout_after_auth(limited: ServerThread) -> None:
    for partial in (PING[:10], PING[:31], auth_header(100) + b"x" * 50):
        client = authed(limited, "partial")
        started = time.monotonic()
        client.send(partial)
        assert client.closed_by_peer(timeout=5)
        assert time.monotonic() - started < 3  # io_timeout 0.5 s, not the idle timeout of 600 s


def test_a_full_address_closes_its_oldest_unauthenticated_connection(
    limited: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "relay.server")
    first, second = authed(limited, "first"), authed(limited, "second")
    waiting = [limited.connect(), limited.connect()]
    for client in waiting:  # accepted and counted
        client.send(PING)
        assert client.reply() == PONG
    newcomers = []
    for _ in range(5):  # each takes the place of the oldest connection without a session
        newcomers.append(limited.connect())
        newcomers[-1].send(PING)
        assert newcomers[-1].reply() == PONG
    assert all(client.closed_by_peer(timeout=2) for client in [*waiting, *newcomers[:3]])
    assert not any(client.closed_by_peer(timeout=0.05) for client in newcomers[3:])
    # Authenticated connections are never closed to make room.
    for client in (first, second):
        assert client.request(Command.PING) == (Result.OK, b"PONG\x00")
    caps = [r.getMessage() for r in caplog.records if "--max-connections-per-address" in r.getMessage()]
    assert len(caps) == 1 and "127.0.0.1" in caps[0]  # once per interval, however often the cap is hit
    # When every connection of the address has a session, a new one is refused.
    third, fourth = authed(limited, "third"), authed(limited, "fourth")
    assert limited.connect().closed_by_peer(timeout=2)
    assert third.request(Command.PING) == (Result.OK, b"PONG\x00")
    assert fourth.request(Command.PING) == (Result.OK, b"PONG\x00")


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_connections_that_never_send_a_whole_request_make_room_first(event_loop: str) -> None:
    relay = ServerThread(
        event_loop=event_loop, max_connections=4
    ).start()  # the real graces: 50 ms silent, 1 s without AUTH
    try:
        first = authed(relay, "first")
        pinged = relay.connect()  # a whole request, no session yet
        pinged.send(PING)
        assert pinged.reply() == PONG
        silent = [relay.connect(), relay.connect()]
        silent[0].send(PING[:1])  # a byte, never a whole request
        time.sleep(0.2)
        # Each newcomer takes the place of the oldest silent connection, though none is a second without a session.
        newcomers = [authed(relay, f"new-{n}") for n in range(2)]
        assert all(client.closed_by_peer(timeout=2) for client in silent)
        for client in (first, pinged, *newcomers):
            assert client.request(Command.PING) == (Result.OK, b"PONG\x00")
        # None silent left, and the one without a session is under a second old: the next newcomer is refused.
        assert relay.connect().closed_by_peer(timeout=2)
        assert pinged.request(Command.PING) == (Result.OK, b"PONG\x00")
    finally:
        relay.stop()


# -- manage.py runrelay as a process --------------------------------------------------------------------------------


def rss(pid: int) -> int:
    """Resident memory of a process, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def pid_of(relay: RelayProcess) -> int:
    assert relay.process is not None
    return relay.process.pid


class RssSampler:
    """The highest RSS of a process over a stretch of time, sampled every 10 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def served(port: int, name: str, *, retries: int = 0) -> float:
    """Seconds a new client takes to connect (PING, AUTH) and FETCH, reconnecting up to ``retries`` times."""
    started = time.monotonic()
    client = RelayClient(
        "127.0.0.1", port, TEST_SECRET, name, timeout=10, reconnect=retries > 0, max_retries=retries, backoff=0.05
    )
    client.fetch(10)  # connects first (PING, AUTH), retrying like any client
    client.close()
    return time.monotonic() - started


def test_unauthenticated_megabyte_payloads_leave_the_relay_memory_flat() -> None:
    relay, port = start_relay()
    pid = pid_of(relay)
    for n in range(5):  # warm up: the first sessions load code and fill caches
        served(port, f"warm-{n}")
    before = rss(pid)
    payload = bytes(range(256)) * (1 << 12)  # 1 MiB
    pings = PING * ((1 << 20) // len(PING))  # 1 MiB of valid requests, whose replies are never read
    sockets = []
    with RssSampler(pid) as sampler:
        for n in range(300):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setblocking(False)
            # A header for a 1 MiB AUTH, then as much of the payload as the socket takes (an error: the relay
            # already answered and closed); or PINGs sent as fast as the socket takes them.
            data = auth_header(len(payload)) + payload[: (1 << 20) - 4096] if n % 2 else pings
            with contextlib.suppress(OSError):
                sock.send(data)
            sockets.append(sock)
        assert served(port, "during") < 5
        time.sleep(1)
    after = rss(pid)
    for sock in sockets:
        sock.close()
    grown = max(sampler.peak, after) - before
    print(f"relay RSS {before / 2**20:.1f} MiB before, peak {sampler.peak / 2**20:.1f}, after {after / 2**20:.1f}")
    assert grown < 64 << 20, f"RSS grew by {grown / 2**20:.1f} MiB"


def test_unauthenticated_connections_are_all_closed_while_a_client_is_served() -> None:
    relay, port = start_relay()  # the default AUTH deadline: 10 s
    stop = threading.Event()
    latencies: list[float] = []
    failures: list[BaseException] = []

    def normal_client() -> None:
        try:
            with RelayClient("127.0.0.1", port, TEST_SECRET, "steady", reconnect=False, timeout=10) as client:
                while not stop.is_set():
                    started = time.monotonic()
                    client.fetch(10)
                    client.ping()
                    latencies.append(time.monotonic() - started)
                    time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    steady = threading.Thread(target=normal_client)
    steady.start()
    selector = selectors.DefaultSelector()
    opened: dict[socket.socket, float] = {}
    try:
        for n in range(500):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            if n % 5 < 2:
                sock.sendall(PING[:10])  # 200 stop in the middle of a header
            elif n % 5 == 2:
                sock.sendall(PING)  # 100 PING and never AUTH
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
            opened[sock] = time.monotonic()
        closed_after: list[float] = []
        deadline = time.monotonic() + 40
        while len(closed_after) < 500 and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except ConnectionResetError:
                    data = b""
                if data:  # the PONG
                    continue
                closed_after.append(time.monotonic() - opened[sock])
                selector.unregister(sock)
                sock.close()
        assert len(closed_after) == 500, f"{500 - len(closed_after)} of 500 still open after 40 s"
        print(f"500 unauthenticated connections closed after {min(closed_after):.1f}..{max(closed_after):.1f} s")
        assert max(closed_after) < 40
    finally:
        stop.set()
        steady.join(30)
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
    assert not failures, failures
    assert len(latencies) > 100 and max(latencies) < 2, (len(latencies), max(latencies, default=0))
    assert "did not authenticate within 10s" in relay.output


def test_a_flood_of_one_byte_connections_does_not_lock_a_client_out() -> None:
    relay, port = start_relay(None, "--max-connections", "400")
    stop = threading.Event()
    flood: list[socket.socket] = []
    opened = [0]

    def flooder() -> None:
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"\x01")
            except OSError:
                continue
            flood.append(sock)
            opened[0] += 1
            if len(flood) > 1500:  # the flood keeps its side open; the oldest ones are long closed by the relay
                flood.pop(0).close()

    threads = [threading.Thread(target=flooder) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: opened[0] >= 600, timeout=60, message="the flood past the limits")
        times = []
        for n in range(10):  # new clients keep getting in while the flood goes on
            times.append(served(port, f"flooded-{n}", retries=20))
        assert all(thread.is_alive() for thread in threads), "the flood ended before the clients were served"
        print(f"{opened[0]} flood connections; a new client was served in {max(times) * 1000:.0f} ms at most")
        assert max(times) < 5
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        for sock in flood:
            sock.close()
    assert served(port, "after") < 5
    # The caps were hit, and said so in a few lines rather than one per connection.
    lines = [line for line in relay.output.splitlines() if "--max-connections" in line]
    assert lines and len(lines) <= 10, lines[:20]


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_client_pipelining_hundreds_of_requests_shares_the_loop_with_the_others(
    event_loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection serves TURN_REQUESTS of its buffered requests a turn: another client's request that arrived
    behind 2,000 pipelined ones of a flooding client is answered after a few of them, not after all.

    The order is read on the server's side (each reply as the server writes it), so that it does not depend on how
    soon this process reads the replies; the server's loop is held while both clients send, so that it finds both
    requests in one turn."""
    from relay.server.connection import Connection

    written: list[str] = []
    send = Connection._send

    def noting_send(self: Connection, frame: bytes, close: bool = False) -> None:
        written.append(self.client_name)
        send(self, frame, close)

    monkeypatch.setattr(Connection, "_send", noting_send)
    relay = ServerThread(event_loop=event_loop).start()
    try:
        flood, other = authed(relay, "flood"), authed(relay, "other")
        for client in (flood, other):
            # A session's first PING records its activity in the store (a task, with a thread's round trip); the
            # next ones within PING_ACTIVITY_SECONDS are answered in the loop's turn, which is what is measured.
            assert client.request(Command.PING) == (Result.OK, b"PONG\x00")
        del written[:]
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(10)

        assert relay.loop is not None
        relay.loop.call_soon_threadsafe(hold)
        assert held.wait(10)
        count = 2000
        flood.send(PING * count)
        other.send(PING)
        time.sleep(0.2)  # both in the server's socket buffers (the flood's first part at least)
        release.set()
        assert other.recv_exactly(len(PONG)) == PONG
        assert flood.recv_exactly(count * len(PONG)) == PONG * count  # every request of the flood answered, in order
        first = written.index("other")
        assert first <= 2 * TURN_REQUESTS < count // 20, f"{first} of the flood's replies were written first"
        assert written.count("flood") == count
    finally:
        relay.stop()


def test_idle_connections_past_the_descriptor_limit_do_not_lock_clients_out() -> None:
    """Under a common soft RLIMIT_NOFILE (512 here; systemd's default is 1024) and the default --max-connections
    (10,000), silent connections would use up the descriptors before any connection limit acts: accept() would fail
    (a traceback each) and a real client wait for the AUTH deadline. The relay raises its soft limit to what its
    connection limit needs."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    try:
        relay, port = start_relay()  # inherits the soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    flood = []
    try:
        for _ in range(700):
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        time.sleep(0.5)
        took = served(port, "real", retries=20)
        assert took < 5, f"a client waited {took:.1f}s to be served (descriptors exhausted by idle connections)"
        assert "Too many open files" not in relay.output
    finally:
        for sock in flood:
            sock.close()
        relay.stop()


def test_a_descriptor_limit_it_cannot_raise_lowers_the_connection_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the hard limit is low, the connection limits (which close silent connections to make room) are lowered
    to fit, with a warning, so that they act before accept() fails."""
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (512, 512))
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: None)
    options = server_module.ServerOptions(max_connections=10_000, max_connections_per_address=1_000)
    with caplog.at_level(logging.WARNING, logger="relay.server"):
        fitted = server_module.descriptor_room(options)
    room = 512 - server_module.RESERVED_DESCRIPTORS - options.store_threads
    assert (fitted.max_connections, fitted.max_connections_per_address) == (room, room)
    assert "only 512 file descriptors" in caplog.text
