"""The worked examples of PROTOCOL.md, generated with this codec (``python -m clientproto.worked_examples``).

The test suite checks that every example here appears in PROTOCOL.md verbatim, so the document cannot drift from
the code. The session used throughout: secret "Freedelity", client "test-test", ClientID 1, token 0x12345601.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from . import codec, extensions, payloads
from .auth import php_key, server_key
from .constants import LEGACY_VERSION, Command, RecordFlags, RecordType, SnapshotAction, SnapshotState
from .errors import ProtocolError
from .header import encode_request
from .records import ABSENT, encode_record

KEY = server_key("Freedelity")
CLIENT_ID = 1
TOKEN = 0x12345601


class _Session(TypedDict):
    client_id: int
    token: int
    version: int


SESSION: _Session = {"client_id": CLIENT_ID, "token": TOKEN, "version": LEGACY_VERSION}


@dataclass(frozen=True)
class Example:
    name: str
    frame: bytes
    request: bool

    def hex(self) -> str:
        """Request: the 32-byte header on one line, then the payload 32 bytes a line. Reply: 32 bytes a line.
        (The reference's appendix uses the same layout.)"""
        data = self.frame
        lines = []
        if self.request:
            lines.append(data[:32].hex(" "))
            data = data[32:]
        lines.extend(data[i : i + 32].hex(" ") for i in range(0, len(data), 32))
        return "\n".join(lines)


def _error(exc_source: tuple[int, bytes]) -> bytes:
    try:
        codec.decode_request(*exc_source)
    except ProtocolError as exc:
        return codec.error_reply(exc)
    raise AssertionError("the example request was supposed to fail")


def examples() -> list[Example]:
    ping = encode_request(Command.PING, version=LEGACY_VERSION)
    bad_ping = encode_request(Command.PING, version=LEGACY_VERSION, checksum=0x00010020)
    columns = [("id", ABSENT, "42"), ("note", ABSENT, None), ("city", ABSENT, "Liège")]
    poll_payload = payloads.encode_poll(1, (1700000000 << 32) | 4242, 3, "shop", "orders", columns)
    pollv2_payload = payloads.encode_pollv2(1, (1700000000 << 32) | 4242, 3, 1699990000, "shop", "orders", columns)
    record = encode_record(
        17,
        2,
        1700000000,
        "mysql-bin.000042",
        4242,
        0,
        "0-1-77",
        "shop",
        "orders",
        [("id", b"42", b"42"), ("note", None, b"NULL"), ("blob", ABSENT, ABSENT)],
    )
    status = extensions.Status(
        client_id=1,
        name="test-test",
        queue_size=5,
        pending=1,
        acked_seq=16,
        last_seq=21,
        served=17,
        discarded=0,
        max_queue=9,
        binlog_file="mysql-bin.000042",
        binlog_pos=5000,
        filters=[extensions.FilterInfo(1, 1, 1000, "shop", "orders")],
    )
    snapshot_request = extensions.encode_snapshot(SnapshotAction.START, [("shop", "orders")], "id > 100")
    snapshot_items = [extensions.SnapshotItem(7, SnapshotState.PENDING)]
    status_items = [extensions.SnapshotItem(7, SnapshotState.RUNNING, 1500, 4000)]
    # Snapshot #7 of shop.orders (condition id > 100): its start marker, its one row, its end marker, as the worker
    # queues them at mysql-bin.000042 position 5000.
    at = (1700000100, "mysql-bin.000042", 5000, 0, "", "shop", "orders")
    snapshot_records = [
        encode_record(
            30,
            RecordType.SNAPSHOT_START,
            *at,
            [("snapshot", ABSENT, "7"), ("where", ABSENT, "id > 100"), ("rows_estimate", ABSENT, "1")],
            RecordFlags.SNAPSHOT,
        ),
        encode_record(
            31, RecordType.INSERT, *at, [("id", ABSENT, "101"), ("note", ABSENT, None)], RecordFlags.SNAPSHOT
        ),
        encode_record(
            32,
            RecordType.SNAPSHOT_END,
            *at,
            [("snapshot", ABSENT, "7"), ("rows", ABSENT, "1"), ("state", ABSENT, "done"), ("error", ABSENT, None)],
            RecordFlags.SNAPSHOT,
        ),
    ]
    return [
        Example("PING request", ping, True),
        Example("PING reply", codec.PONG_REPLY, False),
        Example(
            "AUTH request (original key)",
            encode_request(Command.AUTH, payloads.encode_auth(KEY, "test-test"), version=LEGACY_VERSION),
            True,
        ),
        Example(
            "AUTH request (PHP key)",
            encode_request(Command.AUTH, payloads.encode_auth(php_key("Freedelity"), "test-test"), version=0x00010004),
            True,
        ),
        Example("AUTH reply", codec.auth_reply(KEY, TOKEN, CLIENT_ID), False),
        Example("AUTH refused", codec.auth_failed_reply(0x1122334455667788), False),
        Example(
            "ADDFILTER request",
            encode_request(Command.ADDFILTER, payloads.encode_addfilter(1, "shop", "orders", 1000, 1), **SESSION),
            True,
        ),
        Example("ADDFILTER reply", codec.OK_REPLY, False),
        Example("POLL request", encode_request(Command.POLL, **SESSION), True),
        Example("POLL reply", codec.poll_reply(poll_payload), False),
        Example("Empty reply", codec.EMPTY_REPLY, False),
        Example("POLLV2 request", encode_request(Command.POLLV2, **SESSION), True),
        Example("POLLV2 reply", codec.poll_reply(pollv2_payload), False),
        Example(
            "FETCH request",
            encode_request(Command.FETCH, extensions.encode_fetch(500, 1000, manual_ack=True, ack_upto=16), **SESSION),
            True,
        ),
        Example("FETCH reply", codec.fetch_reply(4, [record]), False),
        Example("ACK request", encode_request(Command.ACK, extensions.encode_ack(17), **SESSION), True),
        Example("ACK reply", codec.ack_reply(17, 1), False),
        Example(
            "REMOVEFILTER request",
            encode_request(Command.REMOVEFILTER, extensions.encode_removefilter(1, "shop", "orders"), **SESSION),
            True,
        ),
        Example("REMOVEFILTER reply", codec.removefilter_reply(True), False),
        Example("STATUS request", encode_request(Command.STATUS, **SESSION), True),
        Example("STATUS reply", codec.status_reply(status), False),
        Example("SNAPSHOT request", encode_request(Command.SNAPSHOT, snapshot_request, **SESSION), True),
        Example("SNAPSHOT reply", codec.snapshot_reply(snapshot_items), False),
        Example(
            "SNAPSHOT STATUS request",
            encode_request(
                Command.SNAPSHOT, extensions.encode_snapshot(SnapshotAction.STATUS, [("shop", "orders")]), **SESSION
            ),
            True,
        ),
        Example("SNAPSHOT STATUS reply", codec.snapshot_reply(status_items), False),
        Example("FETCH reply (snapshot)", codec.fetch_reply(0, snapshot_records), False),
        Example("Bad checksum request", bad_ping, True),
        Example("Bad checksum reply", codec.BAD_CHECKSUM_REPLY, False),
        Example("Bad session request", encode_request(Command.POLL, version=LEGACY_VERSION), True),
        Example("Bad session reply", codec.bad_session_reply(0, 0), False),
        Example("Unknown command request", encode_request(0x42, **SESSION), True),
        Example("Unknown command reply", _error((0x42, b"")), False),
        Example(
            "Malformed request",
            encode_request(Command.ADDFILTER, payloads.encode_addfilter(0, "shop", "orders"), **SESSION),
            True,
        ),
        Example(
            "Malformed reply",
            _error((Command.ADDFILTER, payloads.encode_addfilter(0, "shop", "orders"))),
            False,
        ),
    ]


def main() -> None:
    for example in examples():
        print(f"{example.name}:\n```\n{example.hex()}\n```\n")


if __name__ == "__main__":
    main()
