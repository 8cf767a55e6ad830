"""The Python client library against a small in-test relay speaking the protocol over real sockets on 127.0.0.1.

The in-test relay implements the session, queue and ack rules of PROTOCOL.md in a few lines, with hooks to drop
connections and forget sessions, so that the client's connect, reconnect, filter replay, iteration and ack logic is
checked without the real server.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import clientproto as cp
from clientproto import ABSENT, Column, Command, Event, RelayClient
from clientproto import example as example_module

SECRET = "Freedelity"


@dataclass
class Queue:
    client_id: int
    name: str
    entries: list[Event] = field(default_factory=list)
    filters: dict[tuple[int, str, str], tuple[int, int]] = field(default_factory=dict)
    next_seq: int = 1
    acked_seq: int = 0
    served: int = 0
    #: Snapshots by table, newest last.
    snapshots: dict[tuple[str, str], list[cp.SnapshotItem]] = field(default_factory=dict)


@dataclass
class Received:
    connection: int
    command: int
    client_id: int
    token: int
    request: object


class FakeRelay:
    """A minimal relay: one thread per connection, state under one condition variable."""

    def __init__(self) -> None:
        self.keys = cp.accepted_keys(SECRET)
        self.cond = threading.Condition()
        self.queues: dict[str, Queue] = {}
        self.received: list[Received] = []
        #: Close the connection instead of answering the next N requests that are not PING/AUTH.
        self.drop_requests = 0
        #: Answer the next N session requests with 0xFB.
        self.forget_sessions = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.connection_count = 0
        self.snapshot_ids = 0
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    # ---------------------------------------------------------------------------------------------- plumbing

    def _accept(self) -> None:
        while self.running:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.cond:
                self.connection_count += 1
                number = self.connection_count
                self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def stop(self) -> None:
        self.running = False
        self.listener.close()
        self.kill_connections()

    def kill_connections(self) -> None:
        with self.cond:
            for conn in self.connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self.connections.clear()

    @staticmethod
    def _recv(conn: socket.socket, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = conn.recv(size - len(data))
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def _serve(self, conn: socket.socket, number: int) -> None:
        session: dict[str, object] = {}
        with conn:
            while True:
                raw = self._recv(conn, cp.REQUEST_HEADER_SIZE)
                if raw is None:
                    return
                try:
                    header = cp.decode_request_header(raw)
                    payload = self._recv(conn, header.payload_size) if header.payload_size else b""
                    if payload is None:
                        return
                    cp.verify_request(header, payload)
                    request = cp.decode_request(header.command, payload)
                except cp.ProtocolError as exc:
                    conn.sendall(cp.error_reply(exc))
                    if exc.close:
                        return
                    continue
                with self.cond:
                    self.received.append(Received(number, header.command, header.client_id, header.token, request))
                    if header.command not in cp.SESSIONLESS_COMMANDS and self.drop_requests:
                        self.drop_requests -= 1
                        return
                reply = self._handle(header, request, session)
                try:
                    conn.sendall(reply)
                except OSError:
                    return

    # ---------------------------------------------------------------------------------------------- protocol

    def _handle(self, header: cp.RequestHeader, request: object, session: dict[str, object]) -> bytes:
        if isinstance(request, cp.PingRequest):
            return cp.PONG_REPLY
        if isinstance(request, cp.AuthRequest):
            if request.key not in self.keys or not request.name:
                return cp.auth_failed_reply(request.key)
            with self.cond:
                queue = self.queues.get(request.name)
                if queue is None:
                    queue = self.queues[request.name] = Queue(len(self.queues) + 1, request.name)
                session.update(queue=queue, token=cp.new_token(), cursor=queue.acked_seq)
            return cp.auth_reply(request.key, session["token"], queue.client_id)  # type: ignore[arg-type]
        queue = session.get("queue")
        with self.cond:
            if self.forget_sessions:
                self.forget_sessions -= 1
                session.clear()
                queue = None
        if not isinstance(queue, Queue) or (header.client_id, header.token) != (queue.client_id, session["token"]):
            return cp.bad_session_reply(header.client_id, header.token)
        with self.cond:
            return self._session_request(queue, request, session)

    def _pending(self, queue: Queue, session: dict[str, object]) -> list[Event]:
        return [e for e in queue.entries if e.seq > session["cursor"]]  # type: ignore[operator]

    def _ack(self, queue: Queue, seq: int) -> int:
        before = len(queue.entries)
        queue.entries = [e for e in queue.entries if e.seq > seq]
        queue.acked_seq = max(queue.acked_seq, seq)
        return before - len(queue.entries)

    def _session_request(self, queue: Queue, request: object, session: dict[str, object]) -> bytes:
        if isinstance(request, cp.AddFilterRequest):
            queue.filters[(request.types, request.schema, request.table)] = (request.limit, request.policy)
            return cp.OK_REPLY
        if isinstance(request, cp.FilterIdentity):
            removed = queue.filters.pop((request.types, request.schema, request.table), None) is not None
            return cp.removefilter_reply(removed)
        if isinstance(request, cp.PollRequest | cp.PollV2Request):
            pending = self._pending(queue, session)
            if not pending:
                return cp.EMPTY_REPLY
            event = pending[0]
            self._ack(queue, event.seq)
            session["cursor"] = event.seq
            queue.served += 1
            args = (event.type, event.event_position, len(pending) - 1)
            if isinstance(request, cp.PollRequest):
                payload = cp.encode_poll(*args, event.schema, event.table, event.columns)
            else:
                payload = cp.encode_pollv2(*args, 77, event.schema, event.table, event.columns)
            return cp.poll_reply(payload)
        if isinstance(request, cp.FetchRequest):
            if request.ack_upto:
                self._ack(queue, request.ack_upto)
            deadline = time.monotonic() + request.wait_ms / 1000
            while not self._pending(queue, session) and time.monotonic() < deadline:
                self.cond.wait(deadline - time.monotonic())
            pending = self._pending(queue, session)
            batch = pending[: request.max_events]
            if not batch:
                return cp.EMPTY_REPLY
            session["cursor"] = batch[-1].seq
            queue.served += len(batch)
            if not request.manual_ack:
                self._ack(queue, batch[-1].seq)
            return cp.fetch_reply(len(pending) - len(batch), [cp.encode_event(e) for e in batch])
        if isinstance(request, cp.AckRequest):
            removed = self._ack(queue, request.seq)
            return cp.ack_reply(queue.acked_seq, removed)
        if isinstance(request, cp.SnapshotRequest):
            return self._snapshot(queue, request)
        if isinstance(request, cp.StatusRequest):
            status = cp.Status(
                client_id=queue.client_id,
                name=queue.name,
                queue_size=len(queue.entries),
                acked_seq=queue.acked_seq,
                last_seq=queue.next_seq - 1,
                served=queue.served,
                filters=[cp.FilterInfo(t, p, lim, s, tb) for (t, s, tb), (lim, p) in queue.filters.items()],
            )
            return cp.status_reply(status)
        return cp.message_reply(cp.Result.UNKNOWN_COMMAND, "unhandled")

    def _snapshot(self, queue: Queue, request: cp.SnapshotRequest) -> bytes:
        """The relay's rules in short: START needs a filter covering the table's inserts and gives the snapshot under
        way if any; CANCEL cancels what is under way; CANCEL and STATUS answer each table's newest snapshot."""
        items = []
        for name in request.tables:
            history = queue.snapshots.setdefault(name, [])
            newest = history[-1] if history else None
            if request.action == cp.SnapshotAction.START:
                covered = any(
                    types & 1 and fnmatch.fnmatchcase(name[0], schema) and fnmatch.fnmatchcase(name[1], table)
                    for types, schema, table in queue.filters
                )
                if not covered:
                    return cp.message_reply(cp.Result.MALFORMED, f"SNAPSHOT: no filter covers {name[0]}.{name[1]}")
                if newest is None or not newest.active:
                    self.snapshot_ids += 1
                    newest = cp.SnapshotItem(self.snapshot_ids, cp.SnapshotState.PENDING)
                    history.append(newest)
            elif request.action == cp.SnapshotAction.CANCEL and newest is not None and newest.active:
                newest = history[-1] = cp.SnapshotItem(newest.snapshot_id, cp.SnapshotState.CANCELLED, 0, None)
            items.append(newest or cp.SnapshotItem(0, cp.SnapshotState.NONE))
        return cp.snapshot_reply(items)

    # ---------------------------------------------------------------------------------------------- helpers

    def push_events(self, name: str, events: list[Event]) -> list[int]:
        """Queue these events for the client ``name`` (created if new), with the next sequence numbers."""
        with self.cond:
            queue = self.queues.get(name)
            if queue is None:
                queue = self.queues[name] = Queue(len(self.queues) + 1, name)
            for event in events:
                event.seq = queue.next_seq
                queue.next_seq += 1
                queue.entries.append(event)
            self.cond.notify_all()
        return [event.seq for event in events]

    def push(
        self, name: str, count: int = 1, event_type: int = 1, columns: dict[str, bytes | None] | None = None
    ) -> list[int]:
        """Queue row changes for the client ``name`` (created if new); returns their sequence numbers."""
        seqs = []
        with self.cond:
            queue = self.queues.get(name)
            if queue is None:
                queue = self.queues[name] = Queue(len(self.queues) + 1, name)
            for _ in range(count):
                seq = queue.next_seq
                queue.next_seq += 1
                cols = [Column(k, ABSENT, v) for k, v in (columns or {"id": str(seq).encode()}).items()]
                queue.entries.append(
                    Event(seq, event_type, "shop", "orders", "bin.000001", 1000 + seq, 0, 1700000000, "", cols)
                )
                seqs.append(seq)
            self.cond.notify_all()
        return seqs

    def commands(self, *, connection: int | None = None) -> list[int]:
        with self.cond:
            return [r.command for r in self.received if connection is None or r.connection == connection]


@pytest.fixture
def relay() -> Iterator[FakeRelay]:
    server = FakeRelay()
    yield server
    server.stop()


def make_client(relay: FakeRelay, name: str = "billing", **kwargs: object) -> RelayClient:
    options: dict[str, object] = {"timeout": 5.0, "backoff": 0.01, "max_backoff": 0.05}
    options.update(kwargs)
    return RelayClient("127.0.0.1", relay.port, SECRET, name, **options)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------ tests


def test_connect_pings_then_authenticates_with_the_original_key(relay: FakeRelay) -> None:
    with make_client(relay) as client:
        assert client.client_id == 1 and client.token != 0
        client.ping()
    first, second, third = relay.received
    assert (first.command, second.command, third.command) == (Command.PING, Command.AUTH, Command.PING)
    assert (first.client_id, first.token) == (0, 0)
    assert (second.client_id, second.token) == (0, 0)
    assert second.request == cp.AuthRequest(cp.server_key(SECRET), 0, 0, "billing")
    # After AUTH every request carries the session.
    assert (third.client_id, third.token) == (client.client_id, client.token)


def test_wrong_secret_raises_auth_failed_without_retrying(relay: FakeRelay) -> None:
    client = RelayClient("127.0.0.1", relay.port, "wrong", "billing", timeout=5, backoff=0.01)
    with pytest.raises(cp.AuthFailed, match="AUTH refused"):
        client.connect()
    with pytest.raises(cp.AuthFailed):
        client.ping()  # reconnect-on-demand does not retry a refused AUTH
    assert relay.commands().count(Command.AUTH) == 2
    assert not client.connected


def test_php_key_variant_is_accepted(relay: FakeRelay) -> None:
    with RelayClient("127.0.0.1", relay.port, "", "php", key=cp.php_key(SECRET) & ~(1 << 63)) as client:
        assert client.client_id == 1


def test_same_name_keeps_its_client_id_new_token(relay: FakeRelay) -> None:
    with make_client(relay, "a") as a, make_client(relay, "b") as b:
        assert (a.client_id, b.client_id) == (1, 2)
        token = a.token
        a.connect()
        assert a.client_id == 1 and a.token != token


def test_filters_are_remembered_and_resent_on_reconnect(relay: FakeRelay) -> None:
    with make_client(relay) as client:
        client.add_filter("IU", "shop", "orders", limit=100, policy=1)
        client.add_filter(4, "shop", "*")
        client.add_filter("D", "crm", "people")
        assert client.remove_filter("D", "crm", "people") is True
        assert client.remove_filter("D", "crm", "people") is False
        relay.kill_connections()
        client.ping()  # fails on the dead socket, reconnects, retries
        assert client.sessions == 2
    second = [r for r in relay.received if r.connection == 2]
    assert [r.command for r in second] == [
        Command.PING,
        Command.AUTH,
        Command.ADDFILTER,
        Command.ADDFILTER,
        Command.PING,
    ]
    assert [r.request for r in second[2:4]] == [
        cp.AddFilterRequest(3, 1, 100, "shop", "orders"),
        cp.AddFilterRequest(4, 0, 0, "shop", "*"),
    ]
    assert relay.queues["billing"].filters == {(3, "shop", "orders"): (100, 1), (4, "shop", "*"): (0, 0)}


def test_dropped_request_is_retried_after_reconnect(relay: FakeRelay) -> None:
    relay.push("billing", 3)
    with make_client(relay) as client:
        relay.drop_requests = 2  # the FETCH is dropped twice: two reconnections with backoff
        events = client.fetch(10, 0, manual_ack=True)
        assert [e.seq for e in events] == [1, 2, 3]
        assert client.sessions == 3


def test_bad_session_reply_makes_the_client_authenticate_again(relay: FakeRelay) -> None:
    with make_client(relay) as client:
        relay.forget_sessions = 1
        client.ping()  # PING needs no session
        assert client.status().client_id == 1
        assert client.sessions == 2


def test_no_reconnect_raises_connection_lost(relay: FakeRelay) -> None:
    with make_client(relay, reconnect=False) as client:
        relay.kill_connections()
        with pytest.raises(cp.ConnectionLost, match=f"127.0.0.1:{relay.port}"):
            client.ping()


def test_unreachable_relay_gives_up_after_max_retries() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    client = RelayClient("127.0.0.1", port, SECRET, "x", timeout=1, backoff=0.01, max_retries=3)
    started = time.monotonic()
    with pytest.raises(cp.ConnectionLost) as info:
        client.ping()
    assert isinstance(info.value.__cause__, OSError)
    assert time.monotonic() - started < 2


def test_poll_returns_legacy_events(relay: FakeRelay) -> None:
    relay.push("billing", 1, 1, {"id": b"7", "note": None})
    relay.push("billing", 1, 4, {"id": b"8"})
    with make_client(relay) as client:
        first = client.poll()
        assert first is not None
        assert (first.seq, first.type, first.schema, first.table) == (0, 1, "shop", "orders")
        assert (first.timestamp, first.pos) == (1700000000, 1001)
        # The legacy format renders NULL as the text NULL; the missing before image becomes ABSENT.
        assert first.columns == [Column("id", ABSENT, b"7"), Column("note", ABSENT, b"NULL")]
        assert client.queue_size == 1
        second = client.poll_v2()
        assert second is not None and second.type == 4
        assert second.columns == [Column("id", b"", ABSENT)]
        assert client.poll() is None


def test_manual_ack_redelivers_unacknowledged_events_in_the_next_session(relay: FakeRelay) -> None:
    relay.push("billing", 5)
    client = make_client(relay)
    client.connect()
    assert [e.seq for e in client.fetch(3, 0, manual_ack=True)] == [1, 2, 3]
    assert [e.seq for e in client.fetch(3, 0, manual_ack=True)] == [4, 5]
    assert client.fetch(3, 0, manual_ack=True) == []
    client.ack(2)
    client.close()  # "crash" before acknowledging 3..5

    with make_client(relay) as again:
        assert [e.seq for e in again.fetch(10, 0, manual_ack=True)] == [3, 4, 5]
        assert again.ack(5) == cp.AckReply(5, 3)
        assert again.ack(5) == cp.AckReply(5, 0)  # idempotent
    with make_client(relay) as third:
        assert third.fetch(10, 0, manual_ack=True) == []


def test_auto_ack_fetch_removes_what_it_delivers(relay: FakeRelay) -> None:
    relay.push("billing", 4)
    with make_client(relay) as client:
        assert [e.seq for e in client.fetch(3)] == [1, 2, 3]
        assert client.queue_size == 1
    with make_client(relay) as client:
        assert [e.seq for e in client.fetch(3)] == [4]


def test_long_poll_returns_when_an_event_arrives(relay: FakeRelay) -> None:
    with make_client(relay, timeout=0.5) as client:
        started = time.monotonic()
        assert client.fetch(10, 700) == []  # socket timeout is extended by the wait
        assert 0.6 < time.monotonic() - started < 2
        threading.Timer(0.1, relay.push, args=("billing", 1)).start()
        started = time.monotonic()
        events = client.fetch(10, 5000)
        assert [e.seq for e in events] == [1]
        assert time.monotonic() - started < 1


def test_events_iterator_acks_each_batch_when_the_next_is_asked_for(relay: FakeRelay) -> None:
    relay.push("billing", 5)
    seen = []
    with make_client(relay) as client:
        for event in client.events(batch=2, wait_ms=0, manual_ack=True, stop_when_idle=True):
            seen.append(event.seq)
            # While the caller holds an event of a batch, nothing of that batch is acknowledged.
            assert relay.queues["billing"].acked_seq < event.seq
    assert seen == [1, 2, 3, 4, 5]
    fetches = [r.request for r in relay.received if r.command == Command.FETCH]
    assert [f.ack_upto for f in fetches] == [0, 2, 4, 5]
    assert all(f.manual_ack and f.max_events == 2 for f in fetches)
    assert relay.queues["billing"].entries == []


def test_events_iterator_break_leaves_the_batch_unacknowledged(relay: FakeRelay) -> None:
    relay.push("billing", 3)
    with make_client(relay) as client:
        for event in client.events(batch=10, wait_ms=0):
            if event.seq == 2:
                break
    with make_client(relay) as client:
        assert [e.seq for e in client.events(batch=10, wait_ms=0, stop_when_idle=True)] == [1, 2, 3]


def test_events_iterator_survives_reconnects_without_losing_or_repeating(relay: FakeRelay) -> None:
    relay.push("billing", 6)
    seen = []
    with make_client(relay) as client:
        for event in client.events(batch=2, wait_ms=0, stop_when_idle=True):
            seen.append(event.seq)
            if event.seq in (2, 3):
                relay.drop_requests = 1
            if event.seq == 5:
                relay.kill_connections()
        assert client.sessions == 4
    assert seen == [1, 2, 3, 4, 5, 6]
    assert relay.queues["billing"].entries == []


def test_status(relay: FakeRelay) -> None:
    relay.push("billing", 3)
    with make_client(relay) as client:
        client.add_filter("I", "shop", "orders")
        client.fetch(1, 0, manual_ack=True)
        status = client.status()
    assert (status.client_id, status.name, status.queue_size, status.last_seq, status.served) == (1, "billing", 3, 3, 1)
    assert status.filters == [cp.FilterInfo(1, 0, 0, "shop", "orders")]


def test_example_prints_json_lines(relay: FakeRelay, capsys: pytest.CaptureFixture[str]) -> None:
    relay.push("example", 2, 1, {"id": b"1", "name": "café".encode(), "note": None})
    argv = ["--host", "127.0.0.1", "--port", str(relay.port), "--secret", SECRET, "--name", "example"]
    argv += ["--filter", "I,shop.orders", "--filter", "IUD,shop.*,1000,1", "--manual-ack", "--until-idle"]
    assert example_module.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["seq"] for r in records] == [1, 2]
    assert records[0]["type"] == "INSERT"
    assert records[0]["after"] == {"id": "1", "name": "café", "note": None}
    assert "before" not in records[0]
    assert relay.queues["example"].filters == {(1, "shop", "orders"): (0, 0), (7, "shop", "*"): (1000, 1)}
    assert relay.queues["example"].entries == []


def test_example_count_acknowledges_what_it_printed(relay: FakeRelay, capsys: pytest.CaptureFixture[str]) -> None:
    relay.push("example", 3)
    argv = ["--port", str(relay.port), "--secret", SECRET, "--name", "example", "--manual-ack", "--count", "2"]
    assert example_module.main(argv) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert [e.seq for e in relay.queues["example"].entries] == [3]


def test_example_count_without_manual_ack_takes_no_more_than_it_prints(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without manual ack the relay takes a batch from the queue as it sends it: a fetch of 500 for a count of 2
    would lose the rest of the batch. No fetch asks for more than the events still wanted."""
    relay.push("example", 5)
    argv = ["--port", str(relay.port), "--secret", SECRET, "--name", "example", "--count", "2", "--batch", "500"]
    assert example_module.main(argv) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert [e.seq for e in relay.queues["example"].entries] == [3, 4, 5]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I,shop.orders", (1, "shop", "orders", 0, 0)),
        ("iud, shop.*", (7, "shop", "*", 0, 0)),
        ("UD,a.b,50,2", (6, "a", "b", 50, 2)),
    ],
)
def test_example_filter_syntax(text: str, expected: tuple[int, str, str, int, int]) -> None:
    assert example_module.parse_filter(text) == expected


@pytest.mark.parametrize("text", ["I", "X,a.b", ",a.b", "I,ab", "I,a.b,x", "I,a.b,1,5", "I,a.b,1,1,1"])
def test_example_filter_syntax_errors(text: str) -> None:
    with pytest.raises(Exception, match="filter"):
        example_module.parse_filter(text)


def test_example_reports_connection_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    assert example_module.main(["--port", str(port), "--secret", "s", "--name", "n"]) == 1
    assert "relay:" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------ snapshots


def row_event(
    event_type: int,
    after: dict[str, bytes | None] | None,
    before: dict[str, bytes | None] | None = None,
    *,
    table: str = "orders",
    flags: int = 0,
) -> Event:
    """A row change (or marker) as the relay sends it: a column an image does not carry is ABSENT."""
    before, after = before or {}, after or {}
    names = list(dict.fromkeys([*before, *after]))
    columns = [Column(name, before.get(name, ABSENT), after.get(name, ABSENT)) for name in names]
    return Event(0, event_type, "shop", table, "bin.000001", 4, 0, 1700000000, "", columns, flags)


def marker_event(start: bool, snapshot_id: int = 1, *, where: bytes | None = None, state: bytes = b"done") -> Event:
    if start:
        after = {"snapshot": str(snapshot_id).encode(), "where": where, "rows_estimate": None}
        return row_event(0x10, after, flags=1)
    return row_event(
        0x20, {"snapshot": str(snapshot_id).encode(), "rows": b"2", "state": state, "error": None}, flags=1
    )


def test_snapshot_start_status_cancel(relay: FakeRelay) -> None:
    with make_client(relay) as client:
        with pytest.raises(cp.RelayError, match="SNAPSHOT START failed with result 0xfa: SNAPSHOT: no filter covers"):
            client.snapshot(["shop.orders"])
        assert client.ping() is None  # a refusal keeps the connection
        client.add_filter("IUD", "shop", "*")
        [item] = client.snapshot(["shop.orders"], where="id > 5")
        assert (item.snapshot_id, item.state, item.state_name, item.rows_total) == (1, 0, "pending", None)
        assert client.snapshot([("shop", "orders")]) == [item]  # under way: the same snapshot
        status = client.snapshot_status(["shop.orders", ("shop", "items")])
        assert status == [item, cp.SnapshotItem(0, cp.SnapshotState.NONE)]
        cancelled = client.cancel_snapshot(["shop.orders"])
        assert [(c.snapshot_id, c.state_name) for c in cancelled] == [(1, "cancelled")]
        assert client.cancel_snapshot(["shop.orders"]) == cancelled  # idempotent
        assert client.snapshot(["shop.orders"])[0].snapshot_id == 2  # a new one once the last one ended
        with pytest.raises(ValueError, match=r"SCHEMA\.TABLE"):
            client.snapshot(["orders"])
    requests = [r.request for r in relay.received if r.command == Command.SNAPSHOT]
    assert requests[1] == cp.SnapshotRequest(cp.SnapshotAction.START, (("shop", "orders"),), "id > 5")
    assert requests[3] == cp.SnapshotRequest(cp.SnapshotAction.STATUS, (("shop", "orders"), ("shop", "items")), "")


def test_snapshot_is_retried_after_a_reconnection(relay: FakeRelay) -> None:
    with make_client(relay) as client:
        client.add_filter("I", "shop", "orders")
        relay.drop_requests = 1
        [item] = client.snapshot(["shop.orders"])
        assert client.sessions == 2 and item.snapshot_id == 1
        assert client.snapshot(["shop.orders"]) == [item]


def test_table_mirror_rebuilds_a_table_from_snapshot_rows_and_changes() -> None:
    mirror = cp.TableMirror(key=("id",))
    # Rows known before the snapshot: 1 stays (the snapshot has it), 2 was deleted while nobody listened, 3 is
    # updated during the snapshot (before its chunk), which confirms it.
    for row in ({"id": b"1", "v": b"old"}, {"id": b"2", "v": b"gone"}, {"id": b"3", "v": b"x"}):
        mirror.apply(row_event(1, row))
    events = [
        marker_event(True),
        row_event(1, {"id": b"1", "v": b"a"}, flags=1),
        row_event(2, {"v": b"y"}, {"id": b"3"}),  # a partial (MINIMAL) image: the key before, the change after
        row_event(1, {"id": b"4", "v": b"new"}),  # inserted during the snapshot
        row_event(1, {"id": b"5", "v": b"b"}, flags=1),
        row_event(2, {"id": b"6", "v": b"b"}, {"id": b"5", "v": b"b"}),  # the key changes
        row_event(4, None, {"id": b"4", "v": b"new"}),
        marker_event(False),
    ]
    for event in events:
        mirror.apply(event)
    assert mirror.rows("shop", "orders") == {
        (b"1",): {"id": b"1", "v": b"a"},
        (b"3",): {"id": b"3", "v": b"y"},
        (b"6",): {"id": b"6", "v": b"b"},
    }
    assert mirror.rows("shop", "items") == {}


@pytest.mark.parametrize(("where", "state"), [(b"id > 0", b"done"), (None, b"cancelled"), (None, b"failed")])
def test_table_mirror_keeps_unconfirmed_rows_unless_a_whole_snapshot_is_done(where: bytes | None, state: bytes) -> None:
    mirror = cp.TableMirror(key={("shop", "orders"): ("id",)}, default_key=("k",))
    mirror.apply(row_event(1, {"id": b"2"}))
    mirror.apply(row_event(1, {"k": b"9"}, table="items"))
    mirror.apply(marker_event(True, where=where))
    mirror.apply(row_event(1, {"id": b"1"}, flags=1))
    mirror.apply(marker_event(False, state=state))
    assert set(mirror.rows("shop", "orders")) == {(b"1",), (b"2",)}
    assert set(mirror.rows("shop", "items")) == {(b"9",)}
    with pytest.raises(ValueError, match="key column 'k' is not in its image"):
        mirror.apply(row_event(1, {"id": b"1"}, table="items"))


def test_example_snapshot_prints_the_rebuilt_table(relay: FakeRelay, capsys: pytest.CaptureFixture[str]) -> None:
    relay.push_events(
        "example",
        [
            row_event(1, {"id": b"1", "v": b"before"}),
            marker_event(True),
            row_event(1, {"id": b"1", "v": "café".encode()}, flags=1),
            row_event(1, {"id": b"2", "v": None}, flags=1),
            row_event(4, None, {"id": b"2", "v": None}),
            marker_event(False),
        ],
    )
    argv = ["--port", str(relay.port), "--secret", SECRET, "--name", "example", "--filter", "IUD,shop.orders"]
    argv += ["--snapshot", "shop.orders", "--key", "id", "--until-idle"]
    assert example_module.main(argv) == 0
    out = capsys.readouterr()
    lines = [json.loads(line) for line in out.out.splitlines()]
    assert [line.get("type") for line in lines[:6]] == [
        "INSERT",
        "SNAPSHOT_START",
        "INSERT",
        "INSERT",
        "DELETE",
        "SNAPSHOT_END",
    ]
    assert [line.get("snapshot", False) for line in lines[:6]] == [False, True, True, True, False, True]
    assert lines[6] == {"table": "shop.orders", "rows": [{"id": "1", "v": "café"}]}
    assert "snapshot #1 of shop.orders: pending" in out.err
    with pytest.raises(Exception, match=r"SCHEMA\.TABLE"):
        example_module.parse_table("orders")
