"""The relay server over real sockets: the original's bytes, every error path, sessions, POLL, POLLV2 and FETCH."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from django.db import connection

from clientproto import (
    BAD_CHECKSUM_REPLY,
    EMPTY_REPLY,
    FETCH_BYTE_BUDGET,
    MAX_PAYLOAD,
    MAX_UNAUTHENTICATED_PAYLOAD,
    Command,
    RelayClient,
    Result,
    SnapshotAction,
    accepted_keys,
    bad_session_reply,
    decode_ack_reply,
    decode_fetch_reply,
    decode_poll_reply,
    decode_pollv2_reply,
    encode_ack,
    encode_addfilter,
    encode_auth,
    encode_fetch,
    encode_removefilter,
    encode_reply,
    encode_request,
    encode_snapshot,
    php_key,
    server_key,
)
from devtools.wait import wait_for
from relay import store
from relay.models import Client, Filter, ServedEvent
from relay.server import event_loop_factory
from relay.server.wakeup import Waiter
from tests.helpers.queues import enqueue
from tests.helpers.relay_server import SECRET, RawClient, ServerThread, authed

pytestmark = pytest.mark.django_db(transaction=True)
T = TypeVar("T")

PING_REQUEST = bytes.fromhex("01000000000000002000010000000000000000002100010000000000 00000000".replace(" ", ""))
PING_REPLY = bytes.fromhex("00050000003901000050 4f4e4700".replace(" ", ""))
AUTH_REQUEST = bytes.fromhex(
    "020000001e000000200001000000000000000000570801000000000000000000"
    "7f56d9c6a946f20b00000000000000000a000000746573742d7465737400"
)
AUTH_REQUEST_PHP = bytes.fromhex(
    "020000001e0000000400010000000000000000005c0701000000000000000000"
    "e85c3b9a74760e7000000000000000000a000000746573742d7465737400"
)
BAD_CHECKSUM_PING = bytes.fromhex("0100000000000000200001000000000000000000200001000000000000000000")
BAD_CHECKSUM_BYTES = bytes.fromhex("ff110000002a070000") + b"Invalid Checksum\x00"
NO_SESSION_POLL = bytes.fromhex("0400000000000000200001000000000000000000240001000000000000000000")
NO_SESSION_REPLY = bytes.fromhex(
    "fb 51 00 00 00 c6 1b 00 00 43 6c 69 65 6e 74 49 44 20 30 20 2f 20 43 6c 69 65 6e 74 54 6f 6b 65"
    "6e 20 30 78 30 30 30 30 30 30 30 30 20 69 73 20 6e 6f 74 20 74 68 69 73 20 63 6f 6e 6e 65 63 74"
    "69 6f 6e 27 73 20 73 65 73 73 69 6f 6e 3a 20 41 55 54 48 20 66 69 72 73 74 00"
)


#: The server's two event loops: every test of a running server runs on both.
EVENT_LOOPS = ["asyncio", "uvloop"]


@pytest.fixture(params=EVENT_LOOPS)
def relay(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    server = ServerThread(event_loop=request.param).start()
    yield server
    server.stop()


def expected_auth_reply(key: int, name: str = "test-test") -> bytes:
    client = Client.objects.get(name=name)
    return encode_reply(Result.OK, struct.pack("<QII", key, client.token, client.id))


# -- the original's bytes -------------------------------------------------------------------------------------------


def test_ping_is_answered_byte_for_byte_without_a_session(relay: ServerThread) -> None:
    client = relay.connect()
    client.send(PING_REQUEST)
    assert client.reply() == PING_REPLY
    # Clients PING with the values of an earlier session too: still answered.
    client.send(encode_request(Command.PING, client_id=7, token=0xDEADBEEF))
    assert client.reply() == PING_REPLY


def test_auth_with_the_original_key_then_the_php_key(relay: ServerThread) -> None:
    client = relay.connect()
    client.send(AUTH_REQUEST)
    reply = client.reply()
    assert reply[:5] == bytes.fromhex("0010000000")
    assert reply[9:17] == bytes.fromhex("7f56d9c6a946f20b")  # the key, echoed
    assert reply == expected_auth_reply(0x0BF246A9C6D9567F)
    first = Client.objects.get(name="test-test")
    assert first.connected and first.remote_address.startswith("127.0.0.1:")

    php = relay.connect()
    php.send(AUTH_REQUEST_PHP)
    reply = php.reply()
    assert reply == expected_auth_reply(0x700E76749A3B5CE8)
    again = Client.objects.get(name="test-test")
    assert again.id == first.id  # same name, same ClientID
    assert again.token != first.token  # each AUTH a new token
    # The newer connection for the name closed the older one.
    assert client.closed_by_peer()


def test_auth_accepts_keys_with_bit_63_cleared() -> None:
    relay = ServerThread(secret="AdminPassword").start()
    try:
        client = relay.connect()
        for key in (0x7DE0CA17370C9025, 0xFDE0CA17370C9025, php_key("AdminPassword")):
            result, payload = client.request(Command.AUTH, encode_auth(key, "php-client"))
            assert result == Result.OK and struct.unpack("<Q", payload[:8])[0] == key
        assert 0x7DE0CA17370C9025 in accepted_keys("AdminPassword")
    finally:
        relay.stop()


def test_wrong_secret_or_empty_name_is_refused_with_the_original_layout(relay: ServerThread) -> None:
    client = relay.connect()
    client.send(encode_request(Command.AUTH, encode_auth(0x1122334455667788, "test-test")))
    assert client.reply() == bytes.fromhex("ff1000000073030000887766554433221100000000 00000000".replace(" ", ""))
    result, payload = client.request(Command.AUTH, struct.pack("<QIII", server_key(SECRET), 0, 0, 1) + b"\x00")
    assert result == Result.AUTH_FAILED and payload[8:] == bytes(8)
    client.send(PING_REQUEST)
    assert client.reply() == PING_REPLY  # a refused AUTH keeps the connection
    assert not Client.objects.exists()
    # An unauthenticated connection cannot poll.
    client.send(NO_SESSION_POLL)
    assert client.reply() == NO_SESSION_REPLY


def test_bad_checksum_gets_the_original_reply_then_a_close(relay: ServerThread) -> None:
    client = relay.connect()
    client.send(BAD_CHECKSUM_PING)
    assert client.reply() == BAD_CHECKSUM_BYTES == BAD_CHECKSUM_REPLY
    assert client.closed_by_peer()


# -- sessions -------------------------------------------------------------------------------------------------------


def test_every_request_after_auth_needs_the_session_of_its_connection(relay: ServerThread) -> None:
    client = authed(relay)
    other = authed(relay, "other")
    assert client.request(Command.POLL)[0] == Result.EMPTY
    for client_id, token in ((client.client_id, 0), (client.client_id, client.token ^ 1), (other.client_id, 0)):
        client.send(encode_request(Command.POLL, client_id=client_id, token=token))
        assert client.reply() == bad_session_reply(client_id, token)
    # Another connection's valid session is not this connection's session.
    client.send(encode_request(Command.POLL, client_id=other.client_id, token=other.token))
    assert client.reply()[0] == Result.BAD_SESSION
    for command in (Command.ADDFILTER, Command.FETCH, Command.ACK, Command.REMOVEFILTER, Command.STATUS):
        assert client.request(command, b"", token=0)[0] == Result.BAD_SESSION
    assert client.request(Command.POLL)[0] == Result.EMPTY  # still usable with the right session


def test_a_session_replaced_elsewhere_gets_0xfb(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": "1"}])
    # A newer session opened by another relay process: only the store knows.
    Client.objects.filter(id=client.client_id).update(token=12345)
    assert client.request(Command.POLL)[0] == Result.BAD_SESSION
    assert client.request(Command.PING)[0] == Result.OK
    result, _ = client.request(Command.AUTH, encode_auth(server_key(SECRET), "test-test"), client_id=0, token=0)
    assert result == Result.OK  # and it can start again


def test_disconnect_marks_the_client_disconnected(relay: ServerThread) -> None:
    client = authed(relay)
    assert Client.objects.get(id=client.client_id).connected
    client.close()
    deadline = time.monotonic() + 5
    while Client.objects.get(id=client.client_id).connected:
        assert time.monotonic() < deadline
        time.sleep(0.02)


# -- error paths ----------------------------------------------------------------------------------------------------


def test_unknown_command_gets_0xfd_and_the_connection_stays_usable(relay: ServerThread) -> None:
    client = authed(relay)
    client.send(encode_request(0x42, client_id=client.client_id, token=client.token))
    assert client.reply() == bytes.fromhex("fd1a000000b0090000636f6d6d616e642030783030343220697320756e6b6e6f776e00")
    assert client.request(Command.POLL)[0] == Result.EMPTY


def test_malformed_and_truncated_payloads_get_0xfa_with_a_message(relay: ServerThread) -> None:
    client = authed(relay)
    bad_filter = bytes.fromhex("00 00 00 00 00 00 05 00 00 00 73 68 6f 70 00 07 00 00 00 6f 72 64 65 72 73 00")
    result, payload = client.request(Command.ADDFILTER, bad_filter)
    assert result == Result.MALFORMED
    assert payload == b"ADDFILTER: FilterType 0x00 at offset 0 is not a non-empty mask of 0x01|0x02|0x04\x00"
    truncated = encode_addfilter(1, "shop", "orders")[:-3]
    result, payload = client.request(Command.ADDFILTER, truncated)
    assert result == Result.MALFORMED and b"TableName" in payload and payload.endswith(b"\x00")
    result, payload = client.request(Command.AUTH, b"\x01\x02\x03", client_id=0, token=0)
    assert result == Result.MALFORMED and payload.startswith(b"AUTH: ")
    result, payload = client.request(Command.FETCH, encode_fetch(0, 0))
    assert result == Result.MALFORMED and b"MaxEvents 0" in payload
    result, payload = client.request(Command.AUTH, encode_auth(server_key(SECRET), "é" * 513), client_id=0, token=0)
    assert result == Result.MALFORMED and b"ClientNameSize 1027" in payload  # 1026 bytes and its NUL: too long
    # A NUL inside a name (which no store keeps as it is) is refused like any malformed field; the session goes on.
    for command, payload in (
        (Command.ADDFILTER, encode_addfilter(1, "sh\x00op", "orders")),
        (Command.REMOVEFILTER, encode_removefilter(1, "shop", "or\x00ders")),
        (Command.SNAPSHOT, encode_snapshot(SnapshotAction.START, [("shop", "orders")], "id\x00=1")),
    ):
        result, reply = client.request(command, payload)
        assert result == Result.MALFORMED and b"a NUL byte inside the text" in reply, reply
    assert client.request(Command.POLL)[0] == Result.EMPTY
    assert not Filter.objects.exists()


def test_payload_over_the_limit_gets_0xfa_and_a_close(relay: ServerThread) -> None:
    client = authed(relay)
    header = struct.pack("<HHIIIIIII", Command.AUTH, 0, MAX_PAYLOAD + 1, 0, 0, 0, 0, 0, 0)
    client.send(header)
    result = client.reply()
    assert result[0] == Result.MALFORMED and b"over the limit of 1048576" in result
    assert client.closed_by_peer()
    # Before AUTH the limit is a few KiB (test_server_limits.py).
    client = relay.connect()
    client.send(struct.pack("<HHIIIIIII", Command.AUTH, 0, MAX_UNAUTHENTICATED_PAYLOAD + 1, 0, 0, 0, 0, 0, 0))
    result = client.reply()
    assert result[0] == Result.MALFORMED and b"before AUTH the limit is 4096" in result
    assert client.closed_by_peer()
    # After AUTH, exactly the limit is read (and here refused as a bad AUTH, on a connection that stays open).
    client = authed(relay)
    assert client.request(Command.AUTH, bytes(MAX_PAYLOAD), client_id=0, token=0)[0] == Result.MALFORMED
    assert client.request(Command.POLL)[0] == Result.EMPTY


def test_the_php_clients_poll_carrying_its_previous_reply_of_any_size_is_served(relay: ServerThread) -> None:
    """The original PHP client never clears its payload in poll(): each POLL carries the previous reply's payload,
    which the original relay read and ignored. A reply over MAX_PAYLOAD must not make the next POLL an error."""
    client = authed(relay, "php")
    big = "b" * (MAX_PAYLOAD + (512 << 10))
    enqueue(client.client_id, [{"id": "1"}, {"id": "2", "blob": big}, {"id": "3"}, {"id": "4"}])
    payload = b""
    values = []
    for _ in range(4):
        result, payload = client.request(Command.POLL, payload)
        assert result == Result.OK, payload[:200]
        values.append(decode_poll_reply(payload).columns[0].after)
    assert values == [b"1", b"2", b"3", b"4"]
    assert client.request(Command.POLL, payload)[0] == Result.EMPTY
    assert client.request(Command.PING, bytes(MAX_PAYLOAD + 1))[0] == Result.OK
    # Summed as it streams in, and still checked: a wrong checksum is the original's 0xFF, then a close.
    frame = bytearray(
        encode_request(Command.POLL, bytes(2 * MAX_PAYLOAD), client_id=client.client_id, token=client.token)
    )
    frame[-1] = 1
    client.send(bytes(frame[: len(frame) // 2]))
    time.sleep(0.1)
    client.send(bytes(frame[len(frame) // 2 :]))
    reply = client.reply()
    assert reply[0] == Result.AUTH_FAILED and reply.endswith(b"Invalid Checksum\0")
    assert client.closed_by_peer()
    # Other commands keep the limit (their payloads are read whole).
    client = authed(relay, "php")
    client.send(
        struct.pack("<HHIIIIIII", Command.FETCH, 0, MAX_PAYLOAD + 1, 0, client.client_id, client.token, 0, 0, 0)
    )
    assert client.reply()[0] == Result.MALFORMED


def test_clients_that_disconnect_mid_request_cost_nothing(relay: ServerThread) -> None:
    for partial in (PING_REQUEST[:10], encode_request(Command.AUTH, encode_auth(1, "x"))[:40], AUTH_REQUEST[:32]):
        client = relay.connect()
        client.send(partial)
        client.close()
    client = authed(relay)
    client.send(encode_request(Command.FETCH, encode_fetch(10, 2000), client_id=client.client_id, token=client.token))
    client.close()  # gone in the middle of a long-poll
    probe = relay.connect()
    probe.send(PING_REQUEST)
    assert probe.reply() == PING_REPLY


def test_random_garbage_never_disturbs_a_well_behaved_client(relay: ServerThread) -> None:
    good = authed(relay, "good")
    enqueue(good.client_id, [{"id": str(i)} for i in range(200)])
    served: list[int] = []
    latencies: list[float] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def well_behaved() -> None:
        deadline = time.monotonic() + 120
        try:
            while not (done.is_set() and len(served) == 200) and time.monotonic() < deadline:
                started = time.monotonic()
                result, payload = good.request(Command.POLL)
                latencies.append(time.monotonic() - started)
                if result == Result.OK:
                    served.append(int(decode_poll_reply(payload).columns[0].after))
                else:
                    assert result == Result.EMPTY
                    assert good.request(Command.PING) == (Result.OK, b"PONG\x00")
                time.sleep(0.005)  # a steady client, served throughout the garbage
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    worker = threading.Thread(target=well_behaved)
    worker.start()
    rng = random.Random(5)
    garbage = relay.connect(timeout=5)
    closes = 0
    try:
        for i in range(1000):
            kind = i % 4
            if kind == 0:  # pure noise: usually a bad checksum or an oversized PayloadSize
                frame = rng.randbytes(32 + rng.randrange(64))
            elif kind == 1:  # a valid frame of a random command with a random payload
                frame = encode_request(rng.randrange(0x20), rng.randbytes(rng.randrange(40)))
            elif kind == 2:  # a known command, valid checksum, random ids
                frame = encode_request(
                    rng.choice(list(Command)), rng.randbytes(rng.randrange(30)), client_id=rng.randrange(5), token=1
                )
            else:  # a checksum off by one
                frame = bytearray(encode_request(rng.choice(list(Command)), rng.randbytes(rng.randrange(30))))
                frame[20] ^= 1
                frame = bytes(frame)
            try:
                garbage.send(frame)
                garbage.sock.settimeout(0.5)
                garbage.reply()
            except (OSError, ValueError, Exception):  # noqa: BLE001 - closed, timed out or a reply we cut short
                garbage.close()
                closes += 1
                garbage = relay.connect(timeout=5)
    finally:
        done.set()
        worker.join(30)
    assert not failures, failures
    assert closes > 0
    assert max(latencies) < 2.0
    assert served == list(range(len(served))) and len(served) == 200  # in order, none lost, none twice
    probe = relay.connect()
    probe.send(PING_REQUEST)
    assert probe.reply() == PING_REPLY


def test_connection_limit_and_idle_timeout() -> None:
    relay = ServerThread(max_connections=2, idle_timeout=0.3).start()
    try:
        # Authenticated connections are never closed to make room (unauthenticated ones are: test_server_limits.py).
        first, second = authed(relay, "first"), authed(relay, "second")
        third = relay.connect()
        assert third.closed_by_peer()
        assert second.request(Command.PING) == (Result.OK, b"PONG\x00")
        assert first.closed_by_peer(timeout=3)  # idle for longer than 0.3 s
    finally:
        relay.stop()


# -- POLL and POLLV2 -----------------------------------------------------------------------------------------------


def test_poll_delivers_one_event_per_reply_and_removes_exactly_it(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": "42", "note": None, "city": "Liège"}, {"id": "43", "note": "NULL", "city": ""}])
    enqueue(client.client_id, [{"id": "42", "note": "x", "city": None}], kind=4)
    enqueue(
        client.client_id,
        [{"id": "43", "note": "new", "city": "b"}],
        kind=2,
        before=[{"id": "43", "note": None, "city": "a"}],
    )
    sizes = []
    events = []
    for _ in range(4):
        result, payload = client.request(Command.POLL)
        assert result == Result.OK
        event = decode_poll_reply(payload)
        events.append(event)
        sizes.append(event.queue_size)
        # Exactly one removed per reply (written right behind the reply).
        count = len(events)
        wait_for(lambda count=count: Client.objects.get(id=client.client_id).acked_seq == count)
    assert sizes == [3, 2, 1, 0]
    assert client.request(Command.POLL) == (Result.EMPTY, b"")
    first = events[0]
    assert first.event_type == 1 and first.schema == "shop" and first.table == "orders"
    assert first.position == (1_700_000_000 << 32) | 4000
    assert [(c.name, c.before, c.after) for c in first.columns] == [
        ("id", b"", b"42"),
        ("note", b"", b"NULL"),
        ("city", b"", "Liège".encode()),
    ]
    assert events[1].position == (1_700_000_000 << 32) | 4001
    assert [(c.before, c.after) for c in events[2].columns] == [(b"42", b""), (b"x", b""), (b"NULL", b"")]
    assert [(c.before, c.after) for c in events[3].columns] == [(b"43", b"43"), (b"NULL", b"new"), (b"a", b"b")]
    # The exact bytes of a POLL reply (the worked example's event, queue size 0).
    client.request(Command.PING)
    enqueue(client.client_id, [{"id": "42", "note": None, "city": "Liège"}], pos=4242)
    client.send(encode_request(Command.POLL, client_id=client.client_id, token=client.token))
    expected = bytes.fromhex(
        "0068000000f40f00000192100000 00f1536500000000 05000000 73686f7000 07000000 6f726465727300 03000000"
        "03000000 696400 01000000 00 03000000 343200 05000000 6e6f746500 01000000 00 05000000 4e554c4c00"
        "05000000 6369747900 01000000 00 07000000 4c69c3a8676500".replace(" ", "")
    )
    assert client.reply() == expected
    wait_for(lambda: Client.objects.get(id=client.client_id).served == 5)
    wait_for(lambda: ServedEvent.objects.filter(client_id=client.client_id).count() == 5)


def test_poll_queue_size_counts_the_entries_queued_while_the_session_held_a_read_ahead(relay: ServerThread) -> None:
    """QueueSize is what is left after this entry (the original's rule): entries queued after the session read its
    queue ahead are counted once the client polls again, however the reply is served."""
    from relay.server.queues import BOUNDS_FRESH

    client = authed(relay)
    enqueue(client.client_id, [{"id": "1"}, {"id": "2"}])
    result, payload = client.request(Command.POLL)
    assert result == Result.OK and decode_poll_reply(payload).queue_size == 1
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 1)  # the write-behind: bounds read
    enqueue(client.client_id, [{"id": "3"}, {"id": "4"}, {"id": "5"}])
    time.sleep(0.1 + BOUNDS_FRESH)
    sizes = []
    for _ in range(4):
        result, payload = client.request(Command.POLL)
        assert result == Result.OK
        sizes.append(decode_poll_reply(payload).queue_size)
    assert sizes == [3, 2, 1, 0]


def test_poll_serves_its_read_ahead_while_the_store_fails_to_give_the_queues_bounds(
    relay: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QueueSize's fresh bounds are worth a store call, not an outage: while the store fails, the entries the session
    holds are served with the bounds last read."""
    from django.db import OperationalError

    from relay.server import queues
    from relay.server.queues import BOUNDS_FRESH

    client = authed(relay)
    enqueue(client.client_id, [{"id": "1"}, {"id": "2"}, {"id": "3"}])
    result, payload = client.request(Command.POLL)
    assert result == Result.OK and decode_poll_reply(payload).queue_size == 2
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 1)

    def failing(*args: object) -> None:
        raise OperationalError("the store is gone")

    monkeypatch.setattr(queues, "_sync", failing)
    time.sleep(0.1 + BOUNDS_FRESH)
    result, payload = client.request(Command.POLL)
    assert result == Result.OK and decode_poll_reply(payload).queue_size == 1
    monkeypatch.undo()
    result, payload = client.request(Command.POLL)
    assert result == Result.OK and decode_poll_reply(payload).queue_size == 0
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 3)


def test_pollv2_carries_the_instance_id_and_zero_name_ids(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": "42", "note": None}])
    result, payload = client.request(Command.POLLV2)
    assert result == Result.OK
    event = decode_pollv2_reply(payload)
    assert relay.server is not None
    assert event.instance_id == relay.server.instance_id and abs(event.instance_id - time.time()) < 60
    assert payload[17:21] == bytes(4)  # SchemaNameID
    assert [(c.name, c.after) for c in event.columns] == [("id", b"42"), ("note", b"NULL")]
    assert event.queue_size == 0 and event.position == (1_700_000_000 << 32) | 4000


def test_the_worker_unqueueing_under_a_poll_session_is_noticed(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i)} for i in range(10)])
    assert decode_poll_reply(client.request(Command.POLL)[1]).columns[0].after == b"0"  # read-ahead now holds 2..10
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 1)
    Client.objects.filter(id=client.client_id).update(acked_seq=5)  # the unqueue-oldest policy dropped 2..5
    # At most the POLL already under way serves from the read-ahead; its write learns the new head.
    second = decode_poll_reply(client.request(Command.POLL)[1]).columns[0].after
    assert second in (b"1", b"5")
    if second == b"1":
        time.sleep(0.2)
        assert decode_poll_reply(client.request(Command.POLL)[1]).columns[0].after == b"5"
    assert Client.objects.get(id=client.client_id).acked_seq >= 5


# -- FETCH, ACK, STATUS, filters -----------------------------------------------------------------------------------


def fetch(client: RawClient, max_events: int = 100, wait_ms: int = 0, manual: bool = False, ack_upto: int = 0):
    result, payload = client.request(
        Command.FETCH, encode_fetch(max_events, wait_ms, manual_ack=manual, ack_upto=ack_upto)
    )
    if result == Result.EMPTY:
        assert payload == b""
        return None
    assert result == Result.OK, payload
    return decode_fetch_reply(payload)


def test_fetch_auto_ack_batches(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i), "v": None if i % 2 else "NULL"} for i in range(25)])
    reply = fetch(client, 10)
    assert [e.seq for e in reply.events] == list(range(1, 11)) and reply.queue_size == 15
    first = reply.events[0]
    assert (first.file, first.pos, first.row, first.timestamp, first.gtid) == (
        "mysql-bin.000042",
        4000,
        0,
        1_700_000_000,
        "0-1-1",
    )
    assert first.after() == {"id": b"0", "v": b"NULL"} and reply.events[1].after() == {"id": b"1", "v": None}
    reply = fetch(client, 100)
    assert [e.seq for e in reply.events] == list(range(11, 26)) and reply.queue_size == 0
    assert fetch(client) is None
    assert Client.objects.get(id=client.client_id).acked_seq == 25


def test_manual_ack_client_killed_before_acking_gets_the_same_events_again(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i)} for i in range(6)])
    first = fetch(client, 4, manual=True)
    assert [e.seq for e in first.events] == [1, 2, 3, 4] and first.queue_size == 2
    second = fetch(client, 4, manual=True, ack_upto=2)  # acknowledges 1..2, continues after 4
    assert [e.seq for e in second.events] == [5, 6]
    client.close()  # killed before acknowledging 3..6
    again = authed(relay)
    assert again.client_id == client.client_id
    replay = fetch(again, 10, manual=True)
    assert [e.seq for e in replay.events] == [3, 4, 5, 6]
    assert [e.after()["id"] for e in replay.events] == [e.after()["id"] for e in first.events[2:] + second.events]
    assert decode_ack_reply(again.request(Command.ACK, encode_ack(6))[1]) == decode_ack_reply(struct.pack("<QQ", 6, 4))
    assert decode_ack_reply(again.request(Command.ACK, encode_ack(6))[1]).removed == 0  # idempotent
    assert fetch(again, 10, manual=True) is None


def test_long_poll_fetch_wakes_on_commit(relay: ServerThread) -> None:
    client = authed(relay)
    delays = []
    for round_ in range(5):
        committed_at: list[float] = []

        def commit(n: int = round_, committed_at: list[float] = committed_at) -> None:
            time.sleep(0.2)
            try:
                enqueue(client.client_id, [{"id": str(n)}])
                committed_at.append(time.monotonic())
            finally:
                connection.close()  # this thread's own store connection: else it outlives the test database

        writer = threading.Thread(target=commit)
        started = time.monotonic()
        writer.start()
        reply = fetch(client, 10, wait_ms=5000)
        received = time.monotonic()
        writer.join()
        assert reply is not None and reply.events[0].after() == {"id": str(round_).encode()}
        assert received - started >= 0.19
        delays.append(received - committed_at[0])
    assert max(delays) < 0.05, delays
    # With nothing committed the wait runs out and the reply is empty.
    started = time.monotonic()
    assert fetch(client, 10, wait_ms=300) is None
    assert 0.29 <= time.monotonic() - started < 1.5


@pytest.mark.parametrize("ending", ["close", "half-close"])
def test_a_long_poll_of_a_client_that_closed_takes_nothing_from_its_queue(relay: ServerThread, ending: str) -> None:
    """A client closes the connection (or its sending side) while its auto-ack FETCH waits; a row then committed must
    not be written to a socket nobody may read and counted as delivered: it comes to the client's next session."""
    client = authed(relay, "gone")
    client.send(encode_request(Command.FETCH, encode_fetch(10, 10_000), client_id=client.client_id, token=client.token))
    time.sleep(0.3)  # the long-poll waits
    if ending == "close":
        client.close()
    else:
        client.sock.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        frame = client.reply()  # the wait ends at once, empty; then the relay closes
        assert frame[0] == Result.EMPTY and time.monotonic() - started < 2
        assert client.closed_by_peer()
        client.close()
    time.sleep(0.2)
    enqueue(client.client_id, [{"id": "1"}])
    wait_for(lambda: not Client.objects.get(id=client.client_id).connected)
    time.sleep(0.2)
    assert Client.objects.get(id=client.client_id).served == 0  # the session's end wrote nothing delivered
    again = authed(relay, "gone")
    reply = fetch(again, 10)
    assert reply is not None and [e.after() for e in reply.events] == [{"id": b"1"}]


def test_a_reply_written_after_the_client_closed_its_side_delivers_nothing(relay: ServerThread) -> None:
    """TCP takes a reply only in part; the client shuts its sending side, then reads the rest. The relay cannot know a
    client that closed will read, so the reply counts for nothing: its rows come again (at-least-once)."""
    client = _reluctant_reader(relay)
    enqueue(client.client_id, [{"id": "1", "blob": "x" * (8 << 20)}])
    client.send(encode_request(Command.FETCH, encode_fetch(10, 0), client_id=client.client_id, token=client.token))
    time.sleep(0.5)  # the relay writes what TCP takes, then waits for the rest
    client.sock.shutdown(socket.SHUT_WR)
    frame = client.reply()
    assert frame[0] == Result.OK
    assert client.closed_by_peer()
    client.close()
    wait_for(lambda: not Client.objects.get(id=client.client_id).connected)
    again = authed(relay, "reluctant")
    assert [e.seq for e in fetch(again, 10).events] == [1]


def test_a_connection_closed_once_its_last_reply_is_with_tcp_ends_without_an_event_loop_error(
    relay: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    """The relay closes a connection whose client closed its side once the last reply is with TCP; TCP took that
    reply in part, and the rest as the client read it: the connection ends once, without the event loop's "Exception
    in callback" error."""
    client = _reluctant_reader(relay)
    enqueue(client.client_id, [{"id": "1", "blob": "x" * (8 << 20)}])
    client.send(encode_request(Command.POLL, client_id=client.client_id, token=client.token))
    time.sleep(0.5)  # the relay writes what TCP takes, then waits for the rest
    client.sock.shutdown(socket.SHUT_WR)
    assert client.reply()[0] == Result.OK
    assert client.closed_by_peer()
    client.close()
    wait_for(lambda: not Client.objects.get(id=client.client_id).connected)
    assert relay.server is not None and not relay.server.connections
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert not errors, [record.getMessage() for record in errors]


def test_a_commit_wakes_the_long_polls_of_its_clients_and_no_other(relay: ServerThread) -> None:
    """On PostgreSQL the worker's NOTIFY names the clients whose queues grew: a busy client's commits do not make
    every idle long-poll read its queue again (on SQLite the watch compares each waiter's own queue)."""
    idle, busy = authed(relay, "idle"), authed(relay, "busy")
    assert relay.server is not None and relay.loop is not None
    notifier = relay.server.notifier

    def on_loop(call: Callable[[], T]) -> T:
        async def run() -> T:
            return call()

        assert relay.loop is not None
        return asyncio.run_coroutine_threadsafe(run(), relay.loop).result(10)

    def waiting(client_id: int) -> list[Waiter]:
        return list(notifier._waiters.get(client_id, ()))

    replies: dict[str, object] = {}
    threads = [
        threading.Thread(target=lambda c=c, n=n: replies.setdefault(n, fetch(c, 10, wait_ms=5000)))
        for c, n in ((idle, "idle"), (busy, "busy"))
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: on_loop(lambda: bool(waiting(idle.client_id)) and bool(waiting(busy.client_id))))
    idle_waiter = on_loop(lambda: waiting(idle.client_id)[0])
    before = on_loop(lambda: notifier.generation_of(idle.client_id))
    enqueue(busy.client_id, [{"id": "1"}])
    threads[1].join(5)
    assert replies["busy"] is not None
    time.sleep(0.2)  # the notification reached every waiter it was going to reach
    if connection.vendor == "postgresql":
        assert not idle_waiter.event.is_set()
        assert on_loop(lambda: notifier.generation_of(idle.client_id)) == before
    enqueue(idle.client_id, [{"id": "2"}])
    threads[0].join(5)
    assert replies["idle"] is not None


def test_filters_status_and_the_python_client(relay: ServerThread) -> None:
    with RelayClient("127.0.0.1", relay.port, SECRET, "py", timeout=10) as py:
        py.add_filter("IU", "shop", "orders", 1000, 1)
        py.add_filter("IU", "shop", "orders", 500, 2)  # same identity: updates
        py.add_filter("D", "shop", "*")
        assert sorted(Filter.objects.values_list("event_mask", "queue_limit", "discard_policy")) == [
            (3, 500, 2),
            (4, 0, 0),
        ]
        assert py.remove_filter("D", "shop", "*") and not py.remove_filter("D", "shop", "*")
        enqueue(py.client_id, [{"id": str(i)} for i in range(5)])
        events = py.fetch(3, manual_ack=True)
        status = py.status()
        assert (status.client_id, status.name, status.queue_size, status.pending, status.last_seq) == (
            py.client_id,
            "py",
            5,
            3,
            5,
        )
        assert [(f.types, f.policy, f.limit, f.schema, f.table) for f in status.filters] == [
            (3, 2, 500, "shop", "orders")
        ]
        seen = [e.seq for e in events] + [e.seq for e in py.events(batch=2, wait_ms=0, stop_when_idle=True)]
        assert seen == [1, 2, 3, 4, 5]
        assert py.status().queue_size == 0
        assert py.poll() is None


def test_shutdown_answers_in_flight_long_polls_and_marks_sessions_disconnected() -> None:
    relay = ServerThread().start()
    client = authed(relay)
    client.send(encode_request(Command.FETCH, encode_fetch(10, 30_000), client_id=client.client_id, token=client.token))
    time.sleep(0.2)
    started = time.monotonic()
    relay.stop()
    assert time.monotonic() - started < 5
    assert client.reply() == EMPTY_REPLY
    assert client.closed_by_peer()
    assert not Client.objects.get(id=client.client_id).connected


def test_requests_never_wait_out_the_write_behind_delay(relay: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    # A request writes what is pending itself: it does not wait for the sleeping write-behind task.
    from relay.server import queues

    monkeypatch.setattr(queues, "SYNC_DELAY", 2.0)
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i)} for i in range(10)])
    started = time.monotonic()
    seqs = [e.seq for _ in range(5) for e in fetch(client, 2).events]
    assert time.monotonic() - started < 1.5
    assert seqs == list(range(1, 11))
    assert fetch(client) is None
    # Everything but (at most) the last reply's deliveries is in the store already; the rest follows.
    assert Client.objects.get(id=client.client_id).acked_seq >= 8
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 10)


def _stored_variants() -> list:
    from relay.store import StoredEntry, rowcodec

    images = [
        (1, None, ["1", "ACME", None, "NULL", "", b"\x00\xff", "h\u00e9llo \u20ac"]),
        (2, ["1", "old", None, "x", "", b"\x01", "\ud800bad"], ["1", "new", "now", None, "", b"\x02", "ok"]),
        (4, ["9", "gone", None, "NULL", "", b"", "z"], None),
        (2, ["1", rowcodec.MISSING, "a", None, "", b"\x03", "b"], ["1", "c", rowcodec.MISSING, "d", None, b"", "e"]),
    ]
    names = ["id", "name", "note", "text", "empty", "blob", "uni"]
    entries = []
    forms = (rowcodec.encode, rowcodec.encode_json)  # what the worker writes, and what older stores hold
    for i, (kind, before, after) in enumerate(images * 4):
        entries.append(
            StoredEntry(
                100 + i,
                kind,
                "shop",
                f"t{i % 2}",
                "mysql-bin.000007",
                (1 << 40) + i,
                i % 3,
                (1 << 33) + i,  # cut to 32 bits on the wire
                "" if i % 2 else f"0-1-{i}",
                forms[i // len(images) % 2](names, before, after),
                change_id=500 + i,
            )
        )
    assert entries[0].data.startswith(rowcodec.RECORD_FORM) and entries[len(images)].data.startswith("{")
    entries.append(entries[0]._replace(seq=200, data='{"c":["a","b"],"b":null,"a":["x"]}'))  # fewer values
    return entries


def test_cached_fetch_frames_are_byte_identical_to_the_reference_encoder() -> None:
    from clientproto import fetch_reply
    from relay.server import render
    from relay.store import rowcodec
    from tests.helpers.records import reference_record, reference_records

    entries = _stored_variants()
    cache = render.RenderCache(size=8)  # small: evictions happen along the way
    for _ in range(3):  # cold, then warm (and evicted) caches give the same bytes
        for budget in (1, 300, 1 << 30):
            records = reference_records(entries, budget)
            frame, count = render.fetch_frame(cache, entries, budget, entries[-1].seq + 5)
            assert count == len(records)
            assert frame == fetch_reply(entries[-1].seq + 5 - entries[count - 1].seq, records)
    for entry in entries:
        assert render.fetch_tail(entry) == reference_record(entry)[12:]
    # The same change queued for another client (another seq) shares the cached tail, with its own seq.
    other = [entry._replace(seq=entry.seq + 1000) for entry in entries]
    frame, count = render.fetch_frame(cache, other, 1 << 30, other[-1].seq)
    assert frame == fetch_reply(0, reference_records(other, 1 << 30)) and count == len(other)
    # A change with the same id and position but other content (a store recreated under a running server hands out
    # ids again) is never served from the cache, nor is an entry without a change id.
    changed = entries[0]._replace(data=rowcodec.encode(["id", "name"], None, ["1", "ACNE"]))
    for entry in (changed, changed._replace(change_id=0)):
        assert render.fetch_frame(cache, [entry], 1 << 30, entry.seq)[0] == fetch_reply(
            0, reference_records([entry], 1 << 30)
        )
    assert render.RenderCache(size=0).record(entries[0])[0] == render.RenderCache().record(entries[0])[0]
    assert len(cache) <= 8


def test_render_cache_is_bounded_by_bytes_and_keeps_what_it_can() -> None:
    from relay.server import render

    entries = _stored_variants()[:-1]  # a change id each
    one = max(len(render.fetch_tail(entry)) + len(entry.data) for entry in entries)
    cache = render.RenderCache(size=1000, max_bytes=4 * one)  # two records a generation at most
    for entry in entries:
        cache.record(entry)
        assert len(cache) <= 4
    assert cache.known(entries[-1].change_id)[:2] == (entries[-1][1:], store.change_check(entries[-1][1:]))
    assert cache.known(entries[0].change_id) is None  # dropped with its generation
    assert len(render.RenderCache(size=0)) == 0 and render.RenderCache(size=0).known(1) is None
    unbounded = render.RenderCache()
    for entry in entries:
        unbounded.record(entry)
    assert len(unbounded) == len({entry.change_id for entry in entries})


def test_clients_sharing_changes_get_the_same_events(relay: ServerThread) -> None:
    a, b = authed(relay, "share-a"), authed(relay, "share-b")
    rows = [{"id": str(i), "v": None if i % 3 else "text"} for i in range(40)]
    enqueue(a.client_id, rows)
    enqueue(b.client_id, rows[:5])
    enqueue(b.client_id, rows)
    first = fetch(a, 100)
    second = fetch(b, 100)
    assert [e.seq for e in first.events] == list(range(1, 41))
    assert [e.seq for e in second.events] == list(range(1, 46))
    assert [e.columns for e in second.events[5:]] == [e.columns for e in first.events]
    assert first.queue_size == 0 and second.queue_size == 0


def test_a_store_restored_under_the_running_server_is_served_as_it_holds(relay: ServerThread) -> None:
    """Change ids are the server's cache keys; a store restored (or recreated) under it hands them out again for
    other rows. The server serves the rows the store holds, not the records it rendered before."""
    from relay.models import Change, QueueEntry, QueueState
    from relay.store import rowcodec

    a, b = authed(relay, "restore-a"), authed(relay, "restore-b")
    enqueue(a.client_id, [{"id": str(i)} for i in range(20)])
    before = fetch(a, 100)
    assert [e.columns[0].after for e in before.events] == [str(i).encode() for i in range(20)]
    change_ids = list(Change.objects.order_by("id").values_list("id", flat=True))
    # Every other change becomes another row of the same size at the same position of another binlog file.
    restored = [("x" * len(str(n)) if n % 2 else str(n)) for n in range(20)]
    for n, change_id in enumerate(change_ids):
        Change.objects.filter(id=change_id).update(
            binlog_file="mysql-bin.000777" if n % 2 else "mysql-bin.000042",
            data=rowcodec.encode(["id"], None, [restored[n]]),
        )
    QueueEntry.objects.create(client_id=b.client_id, seq=1, count=20, change_id=change_ids[0])
    QueueState.objects.filter(client_id=b.client_id).update(last_seq=20)
    after = fetch(b, 100)
    assert [e.columns[0].after for e in after.events] == [value.encode() for value in restored]
    assert [e.file for e in after.events] == ["mysql-bin.000777" if n % 2 else "mysql-bin.000042" for n in range(20)]


def test_fetch_read_ahead_never_reorders_duplicates_or_loses(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i)} for i in range(60)])
    seqs = [e.seq for e in fetch(client, 10).events]  # the next 10 are read while the client takes these
    seqs += [e.seq for e in fetch(client, 10).events]  # served from the read-ahead
    seqs += [e.seq for e in fetch(client, 5).events]  # another size: read again
    _, payload = client.request(Command.POLL)  # a POLL after a FETCH: the very next entry
    seqs.append(decode_poll_reply(payload).queue_size and 26)
    seqs += [e.seq for e in fetch(client, 10).events]
    reply = fetch(client, 10, manual=True)  # manual ack: never from the auto-ack read-ahead
    seqs += [e.seq for e in reply.events]
    assert seqs == list(range(1, 47))
    enqueue(client.client_id, [{"id": "late"}])  # committed while the read-ahead of 47..56 was taken
    client.close()  # the read-ahead was never sent: a new session gets everything after what was
    again = authed(relay)
    replay = [e.seq for e in fetch(again, 100, manual=True).events]
    assert replay == list(range(37, 62))  # 37..46 were sent with manual ack and never acknowledged
    assert Client.objects.get(id=client.client_id).acked_seq == 36


def test_fetch_read_ahead_is_not_served_to_a_replaced_session(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i)} for i in range(30)])
    assert [e.seq for e in fetch(client, 10).events] == list(range(1, 11))
    # The read-ahead of 11..20 writes the delivery of 1..10 first (a newer AUTH before that write would get
    # 1..10 again: write-behind is at-least-once).
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 10)
    newer = authed(relay)  # closes the older connection; its read-ahead of 11..20 is never served
    assert client.closed_by_peer()
    assert [e.seq for e in fetch(newer, 100).events] == list(range(11, 31))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the server LISTENs on PostgreSQL only")
def test_read_aheads_are_dropped_when_the_listen_connection_was_lost(relay: ServerThread) -> None:
    """While the server's LISTEN connection is down it hears no head moves of the worker's unqueue-oldest policy:
    once it listens again, no read-ahead from before is served."""
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i)} for i in range(6)])
    assert [e.seq for e in fetch(client, 1).events] == [1]  # the read-ahead of 2 follows
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 1)
    # The worker's policy drops 2 and 3 while nobody listens (its notification is lost with the connection).
    Client.objects.filter(id=client.client_id).update(acked_seq=3)

    def listening() -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
            )
            return {pid for (pid,) in cursor.fetchall()}

    before = listening()
    assert before
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s) AS pid", [list(before)])
    wait_for(lambda: listening() - before, timeout=15, message="the server listens again")
    assert [e.seq for e in fetch(client, 1).events] == [4]


# -- the POLL path: pre-rendered replies, requests served without a task, the topped-up read-ahead ------------------


def test_pre_rendered_poll_frames_are_byte_identical_to_the_reference_encoder() -> None:
    from clientproto import encode_poll, encode_pollv2, poll_reply
    from relay.server import render
    from relay.store.rowcodec import wire_columns

    entries = _stored_variants()
    entries += [entry._replace(kind=8) for entry in entries[:4]]  # a snapshot's rows go out as INSERTs
    for entry in entries:
        event_type = 1 if entry.kind == 8 else entry.kind
        position = ((entry.timestamp & 0xFFFFFFFF) << 32) | (entry.binlog_pos & 0xFFFFFFFF)
        columns = wire_columns(entry.data)
        names = (entry.schema_name, entry.table_name)
        for v2, instance_id in ((False, 0), (True, 1_699_990_000), (True, 0xFFFFFFFF)):
            rendered = render.poll_render(entry, v2, instance_id)
            for queue_size in (0, 3, 255, 256, 65_536, 0xFFFFFFFF, 1 << 40):
                if v2:
                    payload = encode_pollv2(event_type, position, queue_size, instance_id, *names, columns)
                else:
                    payload = encode_poll(event_type, position, queue_size, *names, columns)
                assert render.poll_frame(rendered, queue_size) == poll_reply(payload), (entry, v2, queue_size)
    # Shared between sessions, keyed by content: the same change for another client (another seq) shares its
    # render; other content, another command or another InstanceID never does.
    cache = render.PollRenderCache(size=8)  # small: evictions happen along the way
    for _ in range(2):
        for entry in entries:
            for v2, instance_id in ((False, 0), (True, 7)):
                assert cache.render(entry._replace(seq=entry.seq + 1000), v2, instance_id) == render.poll_render(
                    entry, v2, instance_id
                )
    assert len(cache) <= 8
    first = entries[0]
    assert cache.render(first, True, 7) is cache.render(first._replace(seq=1), True, 7)
    assert cache.render(first, True, 8).instance_id == 8 and not cache.render(first, False, 7).v2
    changed = first._replace(data=entries[1].data)
    assert cache.render(changed, True, 7) == render.poll_render(changed, True, 7) != cache.render(first, True, 7)


def test_requests_sent_ahead_are_answered_in_order(relay: ServerThread) -> None:
    client = authed(relay)
    enqueue(client.client_id, [{"id": str(i)} for i in range(4)])

    def frame(command: int, payload: bytes = b"") -> bytes:
        return encode_request(command, payload, client_id=client.client_id, token=client.token)

    # One write: POLLs served from the read-ahead, requests that need the store, a PING, an error, in between.
    client.send(
        frame(Command.POLL)
        + frame(Command.STATUS)
        + frame(Command.POLL)
        + frame(Command.PING)
        + frame(Command.POLLV2)
        + frame(0x42)
        + frame(Command.POLL)
        + frame(Command.POLL)
    )
    replies = [client.reply() for _ in range(8)]
    assert [reply[0] for reply in replies] == [
        Result.OK,
        Result.OK,
        Result.OK,
        Result.OK,
        Result.OK,
        Result.UNKNOWN_COMMAND,
        Result.OK,
        Result.EMPTY,
    ]
    polled = [replies[0], replies[2], replies[6]]
    assert [decode_poll_reply(reply[9:]).columns[0].after for reply in polled] == [b"0", b"1", b"3"]
    assert decode_pollv2_reply(replies[4][9:]).columns[0].after == b"2"
    assert replies[3][9:] == b"PONG\x00"
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 4)


def test_a_new_auth_of_a_name_starts_after_every_row_its_previous_session_sent(relay: ServerThread) -> None:
    """POLL removes what it sends: a session that replaces another at once (AUTH again on the same connection, from
    another connection while the first is open, or right after the first closed) starts after its last reply, though
    the previous session's deliveries are written a few milliseconds behind its replies."""

    def polled(client: RawClient, count: int) -> list[int]:
        ids = []
        for _ in range(count):
            result, payload = client.request(Command.POLL)
            assert result == Result.OK
            ids.append(int(decode_poll_reply(payload).columns[0].after))
        return ids

    first = authed(relay, "again")
    enqueue(first.client_id, [{"id": str(i)} for i in range(40)])
    ids = polled(first, 5)
    for _ in range(3):  # the same connection, at once
        result, payload = first.request(Command.AUTH, encode_auth(server_key(SECRET), "again"))
        assert result == Result.OK
        _, first.token, first.client_id = struct.unpack("<QII", payload)
        ids += polled(first, 5)
    second = authed(relay, "again")  # another connection while the first is open: the first is closed
    assert first.closed_by_peer()
    ids += polled(second, 5)
    second.close()
    third = authed(relay, "again")  # right after the previous one closed
    ids += polled(third, 5)
    assert ids == list(range(30))
    wait_for(lambda: Client.objects.get(id=third.client_id).acked_seq == 30)


def test_a_new_auth_starts_after_the_rows_whose_write_a_request_of_the_old_session_carries(
    relay: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An auto-ack FETCH's rows are written by the session's next store call: a newer AUTH of the name that comes
    while that call is in the store (here made slow) starts after it, not before (the rows would come twice)."""
    from relay.server import queues

    first = authed(relay, "carried")
    enqueue(first.client_id, [{"id": str(i)} for i in range(5)])
    assert [e.seq for e in fetch(first, 10).events] == [1, 2, 3, 4, 5]
    read = queues._fetch

    def slow_read(*args: object) -> queues.FetchRead:
        time.sleep(0.5)
        return read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(queues, "_fetch", slow_read)
    first.send(encode_request(Command.FETCH, encode_fetch(10, 0), client_id=first.client_id, token=first.token))
    time.sleep(0.1)  # that FETCH's store call, which writes what the first one delivered, is under way
    second = authed(relay, "carried")
    monkeypatch.setattr(queues, "_fetch", read)
    assert fetch(second, 10) is None
    assert Client.objects.get(id=second.client_id).acked_seq == 5


def test_a_new_auth_starts_after_the_rows_a_request_took_up_once_the_write_behind_ended(
    relay: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request of the old session that waited for the write-behind, as the newer AUTH did, then takes what the
    session delivered meanwhile to the store: the newer session starts after that too."""
    from relay.server import queues

    first = authed(relay, "queued-behind")
    enqueue(first.client_id, [{"id": str(i)} for i in range(10)])
    refill, read = queues._refill, queues._fetch

    def slow(function: Callable[..., T]) -> Callable[..., T]:
        def call(*args: object) -> T:
            time.sleep(0.5)
            return function(*args)

        return call

    assert decode_poll_reply(first.request(Command.POLL)[1]).columns[0].after == b"0"
    monkeypatch.setattr(queues, "_refill", slow(refill))  # the write-behind (it tops the read-ahead up)
    monkeypatch.setattr(queues, "_fetch", slow(read))
    time.sleep(0.02)  # the write-behind of that POLL is in the store (the read-ahead's bounds are still fresh)
    ids = [decode_poll_reply(first.request(Command.POLL)[1]).columns[0].after for _ in range(2)]
    assert ids == [b"1", b"2"]  # from the read-ahead, while the write-behind is in the store
    first.send(encode_request(Command.FETCH, encode_fetch(10, 0), client_id=first.client_id, token=first.token))
    time.sleep(0.1)
    second = authed(relay, "queued-behind")
    monkeypatch.setattr(queues, "_refill", refill)
    monkeypatch.setattr(queues, "_fetch", read)
    assert decode_poll_reply(second.request(Command.POLL)[1]).columns[0].after == b"3"


def test_an_auth_never_waits_for_the_auths_of_another_name(relay: ServerThread) -> None:
    """AUTHs of one name run one at a time; another name's AUTH goes through meanwhile, whatever the names (these
    two fell on one of 64 shared locks before)."""
    busy = "storm"
    other = next(f"n{i}" for i in range(10_000) if zlib.crc32(f"n{i}".encode()) % 64 == zlib.crc32(busy.encode()) % 64)
    assert relay.server is not None and relay.loop is not None
    held, release = threading.Event(), asyncio.Event()

    async def hold() -> None:
        assert relay.server is not None
        async with relay.server.auth_lock(busy):
            held.set()
            await release.wait()

    holding = asyncio.run_coroutine_threadsafe(hold(), relay.loop)
    assert held.wait(5)
    try:
        started = time.monotonic()
        client = authed(relay, other)
        assert client.client_id and time.monotonic() - started < 2
    finally:
        relay.loop.call_soon_threadsafe(release.set)
        holding.result(5)
    assert authed(relay, busy).client_id  # its lock was let go, and forgotten


def test_a_poll_read_ahead_of_large_rows_holds_about_its_byte_budget(relay: ServerThread) -> None:
    """A POLL session keeps its read-ahead while its client is idle: with large rows it holds about
    POLL_READ_BYTES of them, not READ_AHEAD rows, and the queue still comes whole and in order."""
    from relay.server import queues

    client = authed(relay)
    value = "x" * 100_000
    enqueue(client.client_id, [{"id": str(i), "v": value} for i in range(40)])
    result, payload = client.request(Command.POLL)
    assert result == Result.OK and decode_poll_reply(payload).columns[0].after == b"0"
    time.sleep(0.05)  # the write-behind, and the top-up riding in it, are done

    async def held() -> list[int]:
        assert relay.server is not None
        (session,) = [c.session for c in relay.server.connections if c.session is not None]
        return [len(rendered.body) for _, rendered in session._ahead if rendered is not None]

    assert relay.loop is not None
    sizes = asyncio.run_coroutine_threadsafe(held(), relay.loop).result(10)
    assert sizes and sum(sizes) <= queues.POLL_READ_BYTES + 2 * len(value), sizes
    ids = [0] + [int(decode_poll_reply(client.request(Command.POLL)[1]).columns[0].after) for _ in range(39)]
    assert ids == list(range(40))
    assert client.request(Command.POLL) == (Result.EMPTY, b"")


def test_a_fetch_read_ahead_of_rows_over_the_batch_budget_is_not_held(relay: ServerThread) -> None:
    """An auto-ack FETCH session reads its next batch while its client takes in the current one, and keeps it while
    the client is idle: a batch far over the byte budget (a row change larger than it comes alone) is not kept, and
    the queue still comes whole and in order."""
    from relay.server import queues

    client = authed(relay)
    big = "b" * (2 * FETCH_BYTE_BUDGET + 1)
    enqueue(client.client_id, [{"id": "0", "v": big}, {"id": "1", "v": big}, {"id": "2", "v": "small"}])
    assert [e.seq for e in fetch(client, 10).events] == [1]
    time.sleep(0.3)  # the read-ahead of what follows is in

    async def held() -> int:
        assert relay.server is not None
        (session,) = [c.session for c in relay.server.connections if c.session is not None]
        task = session._next
        result = None if task is None else await asyncio.shield(task)
        return 0 if result is None else len(result.frame)

    assert relay.loop is not None
    size = asyncio.run_coroutine_threadsafe(held(), relay.loop).result(10)
    assert size <= queues.FETCH_READ_AHEAD_BUDGETS * FETCH_BYTE_BUDGET, size
    second = fetch(client, 10).events
    assert [e.seq for e in second] == [2] and second[0].columns[1].after == big.encode()
    assert [e.seq for e in fetch(client, 10).events] == [3]
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 3)


def test_a_long_queue_comes_whole_and_in_order_through_the_read_ahead(relay: ServerThread) -> None:
    from relay.server import queues

    client = authed(relay)
    total = 3 * queues.READ_AHEAD + 17
    enqueue(client.client_id, [{"id": str(i)} for i in range(total)])
    ids, sizes = [], []
    for n in range(total):
        if n == total // 2:  # more arrive while the read-ahead is being topped up
            enqueue(client.client_id, [{"id": str(total + i)} for i in range(5)])
        if n % 40 == 0:
            time.sleep(0.02)  # write-behinds (and so top-ups) happen in between
        command = Command.POLLV2 if n % 7 == 3 else Command.POLL  # the read-ahead is rendered for one of them
        result, payload = client.request(command)
        assert result == Result.OK, n
        event = decode_pollv2_reply(payload) if command == Command.POLLV2 else decode_poll_reply(payload)
        ids.append(int(event.columns[0].after))
        sizes.append(event.queue_size)
    ids += [int(decode_poll_reply(client.request(Command.POLL)[1]).columns[0].after) for _ in range(5)]
    assert ids == list(range(total + 5))
    assert client.request(Command.POLL) == (Result.EMPTY, b"")
    assert sizes[0] == total - 1 and sizes[-1] == 5
    assert sizes[: total // 2] == list(range(total - 1, total - 1 - total // 2, -1))
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == total + 5)
    wait_for(lambda: Client.objects.get(id=client.client_id).served == total + 5)
    history = ServedEvent.objects.filter(client_id=client.client_id).order_by("seq")
    wait_for(lambda: history.count() == 10 and history.last().seq == total + 5)  # type: ignore[union-attr]


def _reluctant_reader(relay: ServerThread) -> RawClient:
    """A connection whose receive buffer is small and which reads nothing unless asked: TCP takes little of a
    reply sent to it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", relay.port))
    client = RawClient(sock)
    result, payload = client.request(Command.AUTH, encode_auth(server_key(SECRET), "reluctant"))
    assert result == Result.OK
    _, client.token, client.client_id = struct.unpack("<QII", payload)
    return client


@pytest.mark.parametrize("command", [Command.POLL, Command.FETCH])
def test_a_reply_tcp_did_not_take_whole_delivers_nothing(relay: ServerThread, command: int) -> None:
    client = _reluctant_reader(relay)
    big = "x" * (24 << 20)  # more than the socket buffers on both sides hold
    enqueue(client.client_id, [{"id": "1", "blob": big}, {"id": "2", "blob": "small"}])
    payload = encode_fetch(10, 0) if command == Command.FETCH else b""
    client.send(encode_request(command, payload, client_id=client.client_id, token=client.token))
    time.sleep(1.0)  # the relay writes what TCP takes, then waits for the rest
    row = Client.objects.get(id=client.client_id)
    assert row.acked_seq == 0 and row.served == 0
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # with the reply half read: it delivered nothing
    wait_for(lambda: not Client.objects.get(id=client.client_id).connected)
    again = authed(relay, "reluctant")
    if command == Command.FETCH:
        assert [e.seq for e in fetch(again, 10).events] == [1]  # alone: it is over FETCH's byte budget
    else:
        result, reply = again.request(Command.POLL)
        assert result == Result.OK and decode_poll_reply(reply).columns[1].after == big.encode()
    row = Client.objects.get(id=client.client_id)
    assert row.served == 0 or row.acked_seq >= 1  # counted only by the second session


def test_a_reply_taken_slowly_is_delivered_once_tcp_has_it_all(relay: ServerThread) -> None:
    client = _reluctant_reader(relay)
    big = "y" * (8 << 20)
    enqueue(client.client_id, [{"id": "1", "blob": big}, {"id": "2"}])
    client.send(encode_request(Command.POLL, client_id=client.client_id, token=client.token))
    time.sleep(0.5)
    assert Client.objects.get(id=client.client_id).acked_seq == 0
    frame = client.reply()  # read at last: the relay hands TCP the rest, and the reply counts
    assert decode_poll_reply(frame[9:]).columns[1].after == big.encode()
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 1)
    assert decode_poll_reply(client.request(Command.POLL)[1]).columns[0].after == b"2"


@pytest.mark.parametrize("command", [Command.POLL, Command.FETCH])
def test_a_reply_tcp_has_not_taken_whole_is_cut_when_a_newer_auth_closes_its_connection(
    relay: ServerThread, command: int
) -> None:
    """The newer session starts at what the older one delivered, which a reply still being written is not part of:
    that reply must not reach the client whole (its rows come to the new session, once)."""
    client = _reluctant_reader(relay)
    big = "z" * (8 << 20)
    enqueue(client.client_id, [{"id": "1", "blob": big}, {"id": "2"}])
    payload = encode_fetch(10, 0) if command == Command.FETCH else b""
    client.send(encode_request(command, payload, client_id=client.client_id, token=client.token))
    time.sleep(0.5)  # the relay writes what TCP takes, then waits for the rest
    again = authed(relay, "reluctant")
    with pytest.raises(OSError):
        client.reply()
    client.close()
    if command == Command.FETCH:
        assert [e.seq for e in fetch(again, 10).events] == [1]
    else:
        result, reply = again.request(Command.POLL)
        assert result == Result.OK and decode_poll_reply(reply).columns[1].after == big.encode()


# -- the event loop -----------------------------------------------------------------------------------------------


def test_the_server_runs_on_the_chosen_event_loop(relay: ServerThread) -> None:
    assert relay.loop is not None
    uses_uvloop = type(relay.loop).__module__.startswith("uvloop")
    assert uses_uvloop == (relay.loop_factory is not asyncio.new_event_loop)  # type: ignore[attr-defined]


def test_the_event_loop_is_the_standard_one_unless_asked_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    monkeypatch.delenv("RELAY_EVENT_LOOP", raising=False)
    assert event_loop_factory() is asyncio.new_event_loop
    assert event_loop_factory("auto") is uvloop.new_event_loop  # installed (requirements.txt)
    assert event_loop_factory("asyncio") is asyncio.new_event_loop
    monkeypatch.setenv("RELAY_EVENT_LOOP", "asyncio")
    assert event_loop_factory() is asyncio.new_event_loop
    assert event_loop_factory("UVLoop") is uvloop.new_event_loop
    with pytest.raises(ValueError, match="RELAY_EVENT_LOOP='trio': not one of auto, uvloop, asyncio"):
        event_loop_factory("trio")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL table lock")
def test_a_ping_of_a_session_is_answered_while_the_store_is_stalled() -> None:
    """PING needs nothing from the store: a session's PING (its first, then one every PING_ACTIVITY_SECONDS, which
    is written as its last activity) is answered at once while a lock holds the client table; the write follows."""
    from tests.helpers.postgres import store_session

    relay = ServerThread().start()
    lock = store_session()
    try:
        client = authed(relay, "pinger")
        lock.cursor().execute(f"LOCK TABLE {Client._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        client.sock.settimeout(2)
        assert client.request(Command.PING) == (Result.OK, b"PONG\x00")
        assert client.request(Command.PING) == (Result.OK, b"PONG\x00")  # its write still waits: not written twice
    finally:
        lock.rollback()
        lock.close()
        relay.stop()


def test_a_request_racing_a_newer_auth_of_its_client_is_refused_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """A request checked against its session runs one loop turn later; a newer AUTH of the same name served in
    between takes the session over (the old connection is closed): the request is no unexpected error."""
    relay = ServerThread().start()
    try:
        old = authed(relay, "raced")
        new = relay.connect()
        assert new.request(Command.PING)[0] == 0  # accepted and served: the loop reads it from now on
        assert relay.loop is not None
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(10)

        with caplog.at_level(logging.INFO, logger="relay.server"):
            relay.loop.call_soon_threadsafe(hold)
            assert held.wait(10)
            # Both arrive while the loop is held, so one turn of the loop reads both: the AUTH first.
            new.send(encode_request(Command.AUTH, encode_auth(server_key(SECRET), "raced")))
            time.sleep(0.05)
            old.send(encode_request(Command.STATUS, client_id=old.client_id, token=old.token))
            time.sleep(0.2)
            release.set()
            assert new.reply()[0] == 0
            assert old.closed_by_peer()
            time.sleep(0.2)
        unexpected = [r for r in caplog.records if "unexpected error" in r.getMessage()]
        assert not unexpected, unexpected[0].exc_text or unexpected[0].getMessage()
    finally:
        relay.stop()
