"""The relay protocol codec: the original's bytes (reference appendix), FNV keys, every payload, every error."""

from __future__ import annotations

import contextlib
import random
import struct
from collections.abc import Callable

import pytest

import clientproto as cp
from clientproto import (
    ABSENT,
    Column,
    Command,
    Event,
    MalformedPayload,
    PayloadTooLarge,
    ProtocolError,
    Result,
    TruncatedFrame,
    UnknownCommand,
)
from clientproto import records as records_module
from tests.helpers.clientproto_frames import (
    AUTH_REP,
    AUTH_REQ,
    BAD_CHECKSUM_REP,
    EMPTY_POLL_REP,
    PING_REP,
    PING_REQ,
    h,
)

# ---------------------------------------------------------------------------------- the reference's appendix


def test_ping_request_bytes() -> None:
    assert cp.encode_request(Command.PING, version=cp.LEGACY_VERSION) == PING_REQ
    header, payload = cp.decode_request_frame(PING_REQ)
    assert header == cp.RequestHeader(1, 0, 0, 0x00010020, 0, 0, 0x00010021, 0, 0)
    assert payload == b""
    assert cp.decode_request(header.command, payload) == cp.PingRequest()


def test_ping_reply_bytes() -> None:
    assert cp.PONG_REPLY == PING_REP
    header, payload = cp.decode_reply_frame(PING_REP)
    assert header == cp.ReplyHeader(0, 5, 0x139)
    assert payload == b"PONG\x00"


def test_auth_request_with_original_key() -> None:
    key = cp.server_key("Freedelity")
    assert key == 0x0BF246A9C6D9567F
    assert cp.encode_request(Command.AUTH, cp.encode_auth(key, "test-test"), version=cp.LEGACY_VERSION) == AUTH_REQ
    header, payload = cp.decode_request_frame(AUTH_REQ)
    assert header.checksum == 0x00010857
    request = cp.decode_request(header.command, payload)
    assert request == cp.AuthRequest(key=key, token=0, client_id=0, name="test-test")
    assert request.key in cp.accepted_keys("Freedelity")


def test_auth_request_with_php_key() -> None:
    key = cp.php_key("Freedelity")
    assert key == 0x700E76749A3B5CE8
    frame = cp.encode_request(Command.AUTH, cp.encode_auth(key, "test-test"), version=0x00010004)
    assert frame[32:40] == h("e8 5c 3b 9a 74 76 0e 70")
    # Same layout as the appendix's frame; only the key bytes, version and checksum differ.
    assert frame[40:] == AUTH_REQ[40:]
    expected_checksum = (2 + 30 + 0x00010004 + sum(frame[32:])) & 0xFFFFFFFF
    assert struct.unpack_from("<I", frame, 20)[0] == expected_checksum
    header, payload = cp.decode_request_frame(frame)
    assert cp.decode_request(header.command, payload).key in cp.accepted_keys("Freedelity")


def test_auth_reply_bytes() -> None:
    key = cp.server_key("Freedelity")
    assert cp.auth_reply(key, 0x12345601, 1) == AUTH_REP
    _header, payload = cp.decode_reply_frame(AUTH_REP)
    assert cp.decode_auth_reply(payload) == cp.AuthReply(key, 0x12345601, 1)
    failed = cp.auth_failed_reply(key)
    assert failed[0] == 0xFF
    assert cp.decode_auth_reply(failed[9:]) == cp.AuthReply(key, 0, 0)


def test_bad_checksum_and_empty_poll_replies() -> None:
    assert cp.BAD_CHECKSUM_REPLY == BAD_CHECKSUM_REP
    assert len(BAD_CHECKSUM_REP) - 9 == 17
    assert cp.error_reply(cp.BadChecksum("anything")) == BAD_CHECKSUM_REP
    assert cp.EMPTY_REPLY == EMPTY_POLL_REP
    assert cp.fetch_reply(5, []) == EMPTY_POLL_REP


def test_bad_checksum_is_detected() -> None:
    frame = bytearray(PING_REQ)
    frame[20] ^= 1
    with pytest.raises(cp.BadChecksum, match=r"0x00010020.*0x00010021"):
        cp.decode_request_frame(bytes(frame))
    frame = bytearray(AUTH_REQ)
    frame[-2] ^= 0x40  # a payload byte
    with pytest.raises(cp.BadChecksum):
        cp.decode_request_frame(bytes(frame))
    with pytest.raises(cp.BadChecksum, match="reply checksum"):
        cp.decode_reply_frame(PING_REP[:-1] + b"\x01")


# --------------------------------------------------------------------------------------------------- FNV keys

FNV_TABLE = [
    # secret, server/Pascal key, PHP (standard) key
    (b"Freedelity", 0x0BF246A9C6D9567F, 0x700E76749A3B5CE8),
    (b"AdminPassword", 0xFDE0CA17370C9025, 0x72AAF6C4E610D115),
    (b"allyourbasearebelongtous", 0x43496B0D221C6D9F, 0x5F433D8398E86A2E),
    (b"", 0xCBF29CE484222325, 0xCBF29CE484222325),
]


@pytest.mark.parametrize(("secret", "server", "php"), FNV_TABLE)
def test_fnv_table(secret: bytes, server: int, php: int) -> None:
    assert cp.server_key(secret) == server
    assert cp.server_key(secret.decode()) == server
    assert cp.php_key(secret) == php
    assert cp.fnv1a64(secret) == php


def test_php_wire_bytes_of_the_table() -> None:
    assert struct.pack("<Q", cp.php_key("Freedelity")) == h("e8 5c 3b 9a 74 76 0e 70")
    assert struct.pack("<Q", cp.php_key("AdminPassword")) == h("15 d1 10 e6 c4 f6 aa 72")
    assert struct.pack("<Q", cp.php_key("")) == h("25 23 22 84 e4 9c f2 cb")
    assert struct.pack("<Q", cp.server_key("Freedelity")) == h("7f 56 d9 c6 a9 46 f2 0b")


def test_fnv32() -> None:
    assert cp.fnv1a32(b"Freedelity") == 0x9EF35F88
    assert cp.fnv1a32(b"\x00Freedelit") == 0xACA647BF


def test_accepted_keys() -> None:
    keys = cp.accepted_keys("AdminPassword")
    # PHP's pack("Q") clears bit 63: 0xFDE0CA17370C9025 goes out as 0x7DE0CA17370C9025.
    assert keys == {0xFDE0CA17370C9025, 0x7DE0CA17370C9025, 0x72AAF6C4E610D115}
    assert cp.accepted_keys(b"Freedelity") == {0x0BF246A9C6D9567F, 0x700E76749A3B5CE8}
    assert 0x0BF246A9C6D9567F & ~(1 << 63) in cp.accepted_keys("Freedelity")
    assert cp.fnv1a64(b"x") not in cp.accepted_keys("Freedelity")
    with pytest.raises(ValueError, match="empty"):
        cp.accepted_keys("")


def test_new_token_is_random_and_nonzero() -> None:
    tokens = {cp.new_token() for _ in range(100)}
    assert 0 not in tokens
    assert len(tokens) > 90
    assert all(0 < t <= 0xFFFFFFFF for t in tokens)


# -------------------------------------------------------------------------------------------------- checksums


def test_checksum_wraps_mod_2_32() -> None:
    header = cp.RequestHeader(0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0xFFFFFFFF, 0xFFFFFFFF)
    assert header.expected_checksum(b"") == 0x0001FFF8
    # Through the encoder, with a real payload: all fields at their maximum, payload of 0xFF bytes.
    payload = b"\xff" * 1000
    frame = cp.encode_request(
        0xFFFF,
        payload,
        subcommand=0xFFFF,
        version=0xFFFFFFFF,
        client_id=0xFFFFFFFF,
        token=0xFFFFFFFF,
        reserved1=0xFFFFFFFF,
        reserved2=0xFFFFFFFF,
    )
    expected = (0xFFFF * 2 + 0xFFFFFFFF * 5 + 1000 + 255 * 1000) % (1 << 32)
    assert struct.unpack_from("<I", frame, 20)[0] == expected
    assert cp.decode_request_frame(frame)[0].checksum == expected
    reply = cp.encode_reply(0xFF, payload)
    assert cp.decode_reply_frame(reply)[0].checksum == (0xFF + 1000 + 255 * 1000) % (1 << 32)


def test_reserved_fields_are_in_the_checksum() -> None:
    frame = cp.encode_request(Command.PING, reserved1=7, reserved2=9)
    assert struct.unpack_from("<I", frame, 20)[0] == 1 + cp.LEGACY_VERSION + 16
    cp.decode_request_frame(frame)


def test_payload_sum_is_the_byte_sum_at_every_size() -> None:
    rng = random.Random(7)
    sizes = [0, 1, 255, 256, 257, 1023, 1024, 1025, 65535, 65536, 70001, 1 << 20]
    for size in sizes:
        for payload in (rng.randbytes(size), b"\xff" * size):
            expected = sum(payload)
            assert cp.payload_sum(payload) == expected, size
            assert cp.payload_sum(bytearray(payload)) == cp.payload_sum(memoryview(payload)) == expected, size


def test_reply_parts_equal_one_payload() -> None:
    parts = [b"abc", b"", b"\xff" * 300]
    assert cp.encode_reply_parts(0, parts) == cp.encode_reply(0, b"".join(parts))


# ------------------------------------------------------------------------------------------------ round trips


def roundtrip_request(command: int, payload: bytes) -> object:
    frame = cp.encode_request(command, payload, client_id=3, token=0xDEADBEEF)
    header, body = cp.decode_request_frame(frame)
    assert (header.client_id, header.token, header.command) == (3, 0xDEADBEEF, command)
    return cp.decode_request(header.command, body)


def test_auth_roundtrip_unicode_name() -> None:
    assert roundtrip_request(Command.AUTH, cp.encode_auth(42, "caisse-été")) == cp.AuthRequest(42, 0, 0, "caisse-été")


def test_auth_without_nul_and_empty_name() -> None:
    payload = struct.pack("<QIII", 5, 0, 0, 3) + b"abc"
    assert cp.decode_request(Command.AUTH, payload).name == "abc"
    # ClientNameSize 0 decodes (the server refuses it with 0xFF, as the original did).
    assert cp.decode_request(Command.AUTH, struct.pack("<QIII", 5, 0, 0, 0)).name == ""
    assert cp.decode_request(Command.AUTH, struct.pack("<QIII", 5, 0, 0, 1) + b"\x00").name == ""


def test_addfilter_roundtrip() -> None:
    payload = cp.encode_addfilter(0x05, "shop", "ord*", limit=-1, policy=2)
    assert payload == h("05 02 ff ff ff ff 05 00 00 00") + b"shop\x00" + h("05 00 00 00") + b"ord*\x00"
    assert roundtrip_request(Command.ADDFILTER, payload) == cp.AddFilterRequest(5, 2, -1, "shop", "ord*")
    # The original dropped the new change for any FilterDiscardType but 0 and 1: so does the relay.
    for policy in (3, 0x80, 0xFF):
        payload = cp.encode_addfilter(0x01, "s", "t", limit=5, policy=policy)
        assert roundtrip_request(Command.ADDFILTER, payload) == cp.AddFilterRequest(1, 2, 5, "s", "t")


def test_poll_requests_ignore_payload() -> None:
    assert roundtrip_request(Command.POLL, b"") == cp.PollRequest()
    assert roundtrip_request(Command.POLL, b"junk") == cp.PollRequest()
    assert roundtrip_request(Command.POLLV2, b"") == cp.PollV2Request()
    assert roundtrip_request(Command.STATUS, b"") == cp.StatusRequest()


def test_fetch_ack_removefilter_roundtrip() -> None:
    fetch = cp.encode_fetch(500, 1000, manual_ack=True, ack_upto=99)
    assert fetch == struct.pack("<IIIQ", 500, 1000, 1, 99)
    assert roundtrip_request(Command.FETCH, fetch) == cp.FetchRequest(500, 1000, True, 99)
    assert roundtrip_request(Command.FETCH, cp.encode_fetch(1, 0)) == cp.FetchRequest(1, 0, False, 0)
    assert roundtrip_request(Command.ACK, cp.encode_ack(2**64 - 1)) == cp.AckRequest(2**64 - 1)
    remove = cp.encode_removefilter(3, "s", "t")
    assert remove == b"\x03" + cp.lstring(b"s") + cp.lstring(b"t")
    assert roundtrip_request(Command.REMOVEFILTER, remove) == cp.FilterIdentity(3, "s", "t")


COLUMNS = [
    ("id", ABSENT, "7"),
    ("note", None, b"NULL"),
    ("blob", b"\x00\xff\x00", b""),
    ("gone", b"x", None),
    ("skipped", ABSENT, ABSENT),
    ("été", "ü", "ü2"),
]


def test_poll_reply_roundtrip_and_legacy_values() -> None:
    position = (1700000000 << 32) | 4242
    payload = cp.encode_poll(2, position, 17, "shop", "orders", COLUMNS)
    event = cp.decode_poll_reply(payload)
    assert (event.event_type, event.position, event.queue_size, event.schema, event.table) == (
        2,
        position,
        17,
        "shop",
        "orders",
    )
    assert event.columns == [
        Column("id", b"", b"7"),
        Column("note", b"NULL", b"NULL"),
        Column("blob", b"\x00\xff\x00", b""),
        Column("gone", b"x", b"NULL"),
        Column("skipped", b"", b""),
        Column("été", "ü".encode(), "ü2".encode()),
    ]
    # The exact bytes of a one-column insert, as the original produced them.
    one = cp.encode_poll(1, 0x0102030405060708, 0, "s", "t", [("c", ABSENT, "v")])
    assert one == (
        h("01 08 07 06 05 04 03 02 01 00 00 00 00")
        + cp.lstring(b"s")
        + cp.lstring(b"t")
        + h("01 00 00 00")
        + cp.lstring(b"c")
        + h("01 00 00 00 00")
        + cp.lstring(b"v")
    )
    assert cp.legacy_value(None) == b"NULL"
    assert cp.legacy_value(ABSENT) == b""
    assert cp.legacy_value("é") == "é".encode()


def test_pollv2_reply_roundtrip() -> None:
    payload = cp.encode_pollv2(4, 99, 2**40, 1234, "shop", "orders", COLUMNS[:2])
    event = cp.decode_pollv2_reply(payload)
    assert (event.event_type, event.position, event.queue_size, event.instance_id) == (4, 99, 0xFFFFFFFF, 1234)
    assert event.columns == [Column("id", b"", b"7"), Column("note", b"NULL", b"NULL")]
    # Name IDs are always 0, as in the original.
    assert payload[17:21] == b"\x00\x00\x00\x00"
    assert payload[:21] == struct.pack("<BQIII", 4, 99, 0xFFFFFFFF, 1234, 0)


def make_event(seq: int = 1, columns: list[Column] | None = None) -> Event:
    return Event(
        seq=seq,
        type=2,
        schema="shop",
        table="orders",
        file="mysql-bin.000042",
        pos=2**33 + 5,
        row=3,
        timestamp=1700000000,
        gtid="0-1-77",
        columns=[Column(*c) for c in COLUMNS] if columns is None else columns,
    )


def normalized(event: Event) -> Event:
    """What a decoder gives back: text values become UTF-8 bytes."""
    cols = [
        Column(c.name, *(v.encode() if isinstance(v, str) else v for v in (c.before, c.after))) for c in event.columns
    ]
    return Event(**{**{f: getattr(event, f) for f in event.__slots__}, "columns": cols})


def test_record_roundtrip() -> None:
    event = make_event()
    record = cp.encode_event(event)
    assert struct.unpack_from("<I", record)[0] == len(record) - 4
    frame = cp.fetch_reply(12, [record, cp.encode_event(make_event(2, []))])
    header, payload = cp.decode_reply_frame(frame)
    assert header.result == Result.OK
    reply = cp.decode_fetch_reply(payload)
    assert reply.queue_size == 12
    assert reply.events == [normalized(event), make_event(2, [])]
    got = reply.events[0]
    assert got.columns[1] == Column("note", None, b"NULL")  # NULL is not the text 'NULL'
    assert got.columns[4].before is ABSENT and got.columns[4].after is ABSENT
    assert got.event_position == (1700000000 << 32) | 5


def test_record_layout_bytes() -> None:
    record = cp.encode_record(7, 1, 100, "f", 200, 0, "", "s", "t", [("a", ABSENT, None), ("b", ABSENT, b"x")])
    body = (
        struct.pack("<QBIQI", 7, 1, 100, 200, 0)
        + cp.lstring(b"f")
        + cp.lstring(b"")
        + cp.lstring(b"s")
        + cp.lstring(b"t")
        + struct.pack("<I", 2)
        + cp.lstring(b"a")
        + bytes([0x04 | 0x02])
        + cp.lstring(b"b")
        + bytes([0x04])
        + cp.lstring(b"x")
    )
    assert record == struct.pack("<I", len(body)) + body


def test_record_with_unknown_trailing_fields_is_skipped() -> None:
    """A newer server may append fields to a record: RecordSize lets an older client skip them."""
    record = cp.encode_event(make_event(1, []))
    extended = struct.pack("<I", len(record) - 4 + 3) + record[4:] + b"new"
    reply = cp.decode_fetch_reply(struct.pack("<IQ", 2, 0) + extended + cp.encode_event(make_event(2, [])))
    assert [e.seq for e in reply.events] == [1, 2]


# ------------------------------------------------------------------------------------------------ snapshots


def snapshot_row(seq: int = 31) -> bytes:
    return cp.encode_record(
        seq, 1, 1700000100, "mysql-bin.000042", 5000, 0, "", "shop", "orders", [("id", ABSENT, b"101")], 1
    )


def marker_record(seq: int, record_type: int, **columns: bytes | None) -> bytes:
    if not columns:
        columns = (
            {"snapshot": b"7", "where": None, "rows_estimate": b"40"}
            if record_type == cp.RecordType.SNAPSHOT_START
            else {"snapshot": b"7", "rows": b"1", "state": b"failed", "error": b"table dropped"}
        )
    return cp.encode_record(
        seq,
        record_type,
        1700000100,
        "mysql-bin.000042",
        5000,
        0,
        "",
        "shop",
        "orders",
        [(name, ABSENT, value) for name, value in columns.items()],
        cp.RecordFlags.SNAPSHOT,
    )


def test_record_flags_follow_the_columns_only_when_set() -> None:
    columns = [("id", ABSENT, b"101")]
    plain = cp.encode_record(31, 1, 1700000100, "f", 5000, 0, "", "shop", "orders", columns)
    assert cp.encode_record(31, 1, 1700000100, "f", 5000, 0, "", "shop", "orders", columns, 0) == plain
    flagged = cp.encode_record(31, 1, 1700000100, "f", 5000, 0, "", "shop", "orders", columns, 1)
    # One byte more, counted in RecordSize, after the columns: everything before it is the plain record's.
    assert flagged == struct.pack("<I", len(plain) - 4 + 1) + plain[4:] + b"\x01"
    events = cp.decode_fetch_reply(b"".join(cp.encode_fetch_reply(0, [plain, flagged]))).events
    assert [(e.seq, e.type, e.flags, e.snapshot) for e in events] == [(31, 1, 0, False), (31, 1, 1, True)]
    assert events[0].columns == events[1].columns and events[1].marker() is None and not events[1].is_marker
    # A reader that knows only the fields up to the columns (an older client) skips RecordFlags with RecordSize.
    assert cp.encode_event(events[1]) == flagged and cp.encode_event(events[0]) == plain


class _Text(str):
    """A str subclass, as a framework's safe-string type is: still text to the encoder."""


def _on_the_wire(value: object) -> object:
    """A value as decode_columns gives it back: text as its UTF-8 bytes, any binary value as bytes."""
    if isinstance(value, str):
        return value.encode()
    return bytes(value) if isinstance(value, bytearray) else value


def test_one_image_columns_encode_as_the_general_loop_does() -> None:
    """An INSERT's or DELETE's columns (the other image None) take a loop of their own, with heads cached per
    layout: it must give the bytes of the general loop with the absent image spelled out, for every kind of value."""
    rng = random.Random(18)
    values = ["", "x", "Zoë 中文 😀", "tab\tnul\x00", _Text("sub"), b"", b"\x00\xff", bytearray(b"ba"), None, ABSENT]
    for _ in range(400):
        width = rng.randrange(0, 9)
        names = tuple(rng.choice(["id", "naïve", "a", "b", f"c{width}"]) for _ in range(width))
        image = [rng.choice(values) for _ in range(rng.randrange(0, width + 2))]  # shorter or longer than names
        absent = [ABSENT] * len(image)
        insert = cp.encode_images(names, None, image)
        delete = cp.encode_images(list(names), image, None)  # a list of names shares the tuple's layout
        assert insert == cp.encode_images(names, absent, image)
        assert delete == cp.encode_images(names, image, absent)
        expected = [Column(name, ABSENT, _on_the_wire(value)) for name, value in zip(names, image, strict=False)]
        assert cp.decode_columns(insert) == expected
        assert cp.decode_columns(delete) == [Column(c.name, c.after, c.before) for c in expected]
        assert cp.encode_columns(zip(names, image, image, strict=False)) == cp.encode_images(names, image, image)
    assert cp.encode_images(("a",), None, None) == struct.pack("<I", 0)


def test_compiled_column_encoder_writes_the_python_encoders_bytes() -> None:
    """clientproto/_records.c (loaded here whatever RELAY_NATIVE says; scripts/bootstrap builds it) against the Python
    encoder: the same bytes, or the same error, for random images of every kind of value."""
    import importlib

    compiled = importlib.import_module("clientproto._records")
    compiled.configure(ABSENT, 1, 2, 4, 8)
    rng = random.Random(6)
    values = ["", "x", "Zoë 中文 😀", "tab\tnul\x00", "lone \udc80", _Text("sub"), b"", b"\x00\xff", bytearray(b"ba"),
              memoryview(b"mv"), None, ABSENT]  # fmt: skip

    def outcome(encode: Callable[..., bytes], *args: object) -> object:
        try:
            return encode(*args)
        except (UnicodeEncodeError, TypeError) as exc:
            return type(exc)

    for _ in range(2000):
        width = rng.randrange(0, 9)
        names = tuple(rng.choice(["id", "naïve", "a", "b", f"c{width}"]) for _ in range(width))
        images = [[rng.choice(values) for _ in range(rng.randrange(0, width + 2))] for _side in range(2)]
        before, after = (None if rng.random() < 0.3 else image for image in images)
        expected = outcome(records_module.encode_images_python, names, before, after)
        heads = records_module._layout(names).names
        assert outcome(compiled.encode_images, heads, before, after) == expected, (names, before, after)
    for before, after in ((None, [7]), ([7], ["x"]), (["x", "y"], [ABSENT, 7])):  # not a value: refused alike
        expected = outcome(records_module.encode_images_python, ("a", "b"), before, after)
        assert expected is TypeError
        assert outcome(compiled.encode_images, records_module._layout(("a", "b")).names, before, after) is TypeError


def test_layout_heads_are_bounded() -> None:
    for n in range(10_050):
        cp.encode_images((f"column{n}",), None, ["v"])
    assert 0 < len(records_module._layouts) <= 10_000


def test_snapshot_rows_and_markers_decode() -> None:
    records = [
        marker_record(30, cp.RecordType.SNAPSHOT_START),
        snapshot_row(31),
        marker_record(32, cp.RecordType.SNAPSHOT_END),
        # Fields of a later version after RecordFlags are skipped.
        (lambda r: struct.pack("<I", len(r) - 4 + 3) + r[4:] + b"new")(snapshot_row(33)),
    ]
    reply = cp.decode_fetch_reply(b"".join(cp.encode_fetch_reply(2, records)))
    start, row, end, later = reply.events
    assert [e.type for e in reply.events] == [0x10, 0x01, 0x20, 0x01] and all(e.snapshot for e in reply.events)
    assert (start.type_name, end.type_name, start.is_marker, row.is_marker) == (
        "SNAPSHOT_START",
        "SNAPSHOT_END",
        True,
        False,
    )
    assert start.marker() == cp.SnapshotMarker(True, 7, "shop", "orders", where=None, rows_estimate=40)
    assert end.marker() == cp.SnapshotMarker(False, 7, "shop", "orders", rows=1, state="failed", error="table dropped")
    assert later.seq == 33 and later.flags == 1 and later.after() == {"id": b"101"}
    with_where = cp.decode_fetch_reply(
        b"".join(cp.encode_fetch_reply(0, [marker_record(1, 0x10, snapshot=b"8", where=b"id > 1", rows_estimate=None)]))
    ).events[0]
    marker = with_where.marker()
    assert marker is not None and (marker.snapshot_id, marker.where, marker.rows_estimate) == (8, "id > 1", None)
    broken = cp.decode_fetch_reply(b"".join(cp.encode_fetch_reply(0, [marker_record(1, 0x20, rows=b"1")]))).events[0]
    with pytest.raises(ValueError, match="no snapshot column"):
        broken.marker()
    # The checked path (a record the fast path passes on) reads RecordFlags too.
    for record in records[:3]:
        reader = cp.wire.Reader(record, "record", 4)
        assert records_module._checked_record(reader, 0).flags == 1
    # JSON: snapshot rows say so; markers show their columns as an after image.
    assert row.to_dict()["snapshot"] is True and "before" not in row.to_dict()
    assert start.to_dict()["type"] == "SNAPSHOT_START" and start.to_dict()["after"]["rows_estimate"] == "40"
    assert "before" not in start.to_dict() and "snapshot" not in Event(1, 1, "s", "t").to_dict()


def test_record_types_are_not_filter_bits() -> None:
    assert cp.EventType.INSERT | cp.EventType.UPDATE | cp.EventType.DELETE == 7 and cp.constants.ALL_EVENT_TYPES == 7
    assert [int(t) for t in cp.RecordType] == [0x01, 0x02, 0x04, 0x10, 0x20]
    assert {int(t) for t in cp.MARKER_TYPES} == {0x10, 0x20}
    for mask in (0x10, 0x20, 0x17):
        with pytest.raises(MalformedPayload, match=f"FilterType 0x{mask:02x}"):
            cp.decode_request(Command.ADDFILTER, cp.encode_addfilter(mask, "s", "t"))
    bad = snapshot_row()
    bad = bad[:12] + b"\x08" + bad[13:]  # the store's kind 8 is never a wire type
    with pytest.raises(MalformedPayload, match="EventType 0x08"):
        cp.decode_fetch_reply(struct.pack("<IQ", 1, 0) + bad)


def test_snapshot_request_bytes_and_roundtrip() -> None:
    payload = cp.encode_snapshot(cp.SnapshotAction.START, [("shop", "orders"), ("shop", "Liège")], "id > 100")
    assert payload == (
        b"\x00"
        + struct.pack("<I", 2)
        + cp.lstring(b"shop")
        + cp.lstring(b"orders")
        + cp.lstring(b"shop")
        + cp.lstring("Liège".encode())
        + cp.lstring(b"id > 100")
    )
    assert cp.decode_request(Command.SNAPSHOT, payload) == cp.SnapshotRequest(
        0, (("shop", "orders"), ("shop", "Liège")), "id > 100"
    )
    for action in (cp.SnapshotAction.CANCEL, cp.SnapshotAction.STATUS):
        request = cp.decode_request(Command.SNAPSHOT, cp.encode_snapshot(action, [("s", "t")]))
        assert request == cp.SnapshotRequest(action, (("s", "t"),), "")
    assert cp.encode_snapshot(2, [("s", "t")]).endswith(b"\x01\x00\x00\x00\x00")  # Where "" is one NUL


def test_snapshot_reply_bytes_and_roundtrip() -> None:
    items = [cp.SnapshotItem(7, cp.SnapshotState.RUNNING, 1500, 4000), cp.SnapshotItem(8, 0), cp.SnapshotItem(0, 0xFF)]
    payload = cp.encode_snapshot_reply(items)
    assert payload == struct.pack("<I", 3) + struct.pack("<QBQQ", 7, 1, 1500, 4000) + struct.pack(
        "<QBQQ", 8, 0, 0, 2**64 - 1
    ) + struct.pack("<QBQQ", 0, 0xFF, 0, 2**64 - 1)
    header, body = cp.decode_reply_frame(cp.snapshot_reply(items))
    assert header.result == Result.OK and cp.decode_snapshot_reply(body) == items
    assert [(i.state_name, i.active) for i in items] == [("running", True), ("pending", True), ("none", False)]
    assert cp.SnapshotItem(1, 9).state_name == "0x09"
    for bad, message in ((payload[:-1], "Count 3"), (payload + b"\x00", "Count 3"), (b"", "Count")):
        with pytest.raises(MalformedPayload, match=message):
            cp.decode_snapshot_reply(bad)


def test_ack_status_removefilter_replies() -> None:
    assert cp.decode_ack_reply(cp.ack_reply(10, 3)[9:]) == cp.AckReply(10, 3)
    assert cp.decode_removefilter_reply(cp.removefilter_reply(True)[9:]) is True
    assert cp.decode_removefilter_reply(cp.removefilter_reply(False)[9:]) is False
    status = cp.Status(
        client_id=4,
        name="billing",
        queue_size=10,
        pending=2,
        acked_seq=90,
        last_seq=100,
        served=1000,
        discarded=5,
        max_queue=77,
        binlog_file="mysql-bin.000003",
        binlog_pos=4567,
        filters=[cp.FilterInfo(7, 1, 100, "shop", "*"), cp.FilterInfo(1, 0, 0, "a", "b")],
    )
    _header, payload = cp.decode_reply_frame(cp.status_reply(status))
    assert cp.decode_status_reply(payload) == status


def test_event_json() -> None:
    event = make_event(columns=[Column("a", b"1", b"2"), Column("b", None, b"\xff\xfe"), Column("c", ABSENT, b"x")])
    data = event.to_dict()
    assert data["type"] == "UPDATE"
    assert data["before"] == {"a": "1", "b": None}
    assert data["after"] == {"a": "2", "b": {"base64": "//4="}, "c": "x"}
    assert event.to_json().startswith('{"seq":1,"type":"UPDATE","schema":"shop"')
    insert = Event(1, 1, "s", "t", columns=[Column("a", ABSENT, b"1")])
    assert "before" not in insert.to_dict()
    assert insert.to_dict()["after"] == {"a": "1"}


def test_type_masks() -> None:
    assert cp.type_mask("IUD") == 7
    assert cp.type_mask("d") == 4
    assert cp.type_mask(3) == 3
    assert cp.type_letters(5) == "ID"
    with pytest.raises(ValueError, match="X"):
        cp.type_mask("IX")


# ------------------------------------------------------------------------------------------- malformed input


def auth_payload(name_size: int, name: bytes) -> bytes:
    return struct.pack("<QIII", 1, 0, 0, name_size) + name


MALFORMED: list[tuple[int, bytes, type[ProtocolError], str]] = [
    (Command.AUTH, b"", MalformedPayload, "AUTH: AuthKey.*offset 0 needs 20 bytes, only 0 left"),
    (Command.AUTH, b"\x00" * 19, MalformedPayload, "needs 20 bytes, only 19 left"),
    (Command.AUTH, auth_payload(10, b"abc"), MalformedPayload, "ClientName at offset 20 needs 10 bytes, only 3"),
    (Command.AUTH, auth_payload(3, b"abcd"), MalformedPayload, "1 unexpected bytes after the last field at offset 23"),
    (Command.AUTH, auth_payload(2**32 - 1, b""), MalformedPayload, "ClientNameSize 4294967295 at offset 16"),
    (Command.AUTH, auth_payload(3, b"\xff\xfe\x00"), MalformedPayload, "not UTF-8"),
    (Command.AUTH, auth_payload(4, b"a\x00b\x00"), MalformedPayload, "NUL byte"),
    (Command.ADDFILTER, b"\x01\x00", MalformedPayload, "ADDFILTER: FilterType/FilterDiscardType/FilterQueueLimit"),
    (Command.ADDFILTER, cp.encode_addfilter(0, "s", "t"), MalformedPayload, "FilterType 0x00"),
    (Command.ADDFILTER, cp.encode_addfilter(8, "s", "t"), MalformedPayload, "FilterType 0x08"),
    (Command.ADDFILTER, cp.encode_addfilter(1, "", "t"), MalformedPayload, "SchemaName at offset 6 is empty"),
    (Command.ADDFILTER, cp.encode_addfilter(1, "s", ""), MalformedPayload, "TableName at offset 12 is empty"),
    (
        Command.ADDFILTER,
        cp.encode_addfilter(1, "s", "t")[:-1],
        MalformedPayload,
        "TableName at offset 16 needs 2 bytes, only 1 left",
    ),
    (Command.ADDFILTER, cp.encode_addfilter(1, "s", "t") + b"x", MalformedPayload, "1 unexpected bytes"),
    (
        Command.ADDFILTER,
        b"\x01\x00\x00\x00\x00\x00" + struct.pack("<I", 0),
        MalformedPayload,
        "SchemaName at offset 6: length 0",
    ),
    (
        Command.ADDFILTER,
        b"\x01\x00\x00\x00\x00\x00" + struct.pack("<I", 2) + b"sX" + cp.lstring(b"t"),
        MalformedPayload,
        "last byte is 0x58, not NUL",
    ),
    (
        Command.ADDFILTER,
        b"\x01\x00\x00\x00\x00\x00" + struct.pack("<I", 0xFFFFFFFF),
        MalformedPayload,
        "more than the limit",
    ),
    (Command.FETCH, b"\x01", MalformedPayload, "FETCH: MaxEvents/WaitMs/Flags/AckUpTo at offset 0 needs 20"),
    (Command.FETCH, cp.encode_fetch(0, 0), MalformedPayload, "MaxEvents 0"),
    (Command.FETCH, cp.encode_fetch(cp.MAX_FETCH_EVENTS + 1, 0), MalformedPayload, "MaxEvents 10001"),
    (Command.FETCH, cp.encode_fetch(1, cp.MAX_WAIT_MS + 1), MalformedPayload, "WaitMs 60001"),
    (Command.FETCH, struct.pack("<IIIQ", 1, 0, 2, 0), MalformedPayload, "Flags 0x00000002"),
    (Command.ACK, b"\x00" * 7, MalformedPayload, "ACK: Seq at offset 0 needs 8 bytes, only 7"),
    (Command.ACK, b"\x00" * 9, MalformedPayload, "1 unexpected bytes"),
    (Command.REMOVEFILTER, b"", MalformedPayload, "REMOVEFILTER: FilterType"),
    (Command.REMOVEFILTER, b"\x09" + cp.lstring(b"s") + cp.lstring(b"t"), MalformedPayload, "FilterType 0x09"),
    (Command.SNAPSHOT, b"\x00\x01\x00", MalformedPayload, "SNAPSHOT: Action/TableCount at offset 0 needs 5"),
    (Command.SNAPSHOT, cp.encode_snapshot(3, [("s", "t")]), MalformedPayload, "Action 0x03 at offset 0"),
    (Command.SNAPSHOT, cp.encode_snapshot(0, []), MalformedPayload, "TableCount 0 at offset 1"),
    (Command.SNAPSHOT, b"\x00\xff\xff\xff\xff" + bytes(40), MalformedPayload, "TableCount 4294967295"),
    (Command.SNAPSHOT, cp.encode_snapshot(0, [("s", "")]), MalformedPayload, "table 0 Table at offset 11 is empty"),
    (Command.SNAPSHOT, cp.encode_snapshot(0, [("", "t")]), MalformedPayload, "table 0 Schema at offset 5 is empty"),
    (Command.SNAPSHOT, cp.encode_snapshot(1, [("s", "t")], "x"), MalformedPayload, "Where at offset 17 must be empty"),
    (Command.SNAPSHOT, cp.encode_snapshot(2, [("s", "t")], "x"), MalformedPayload, "must be empty for STATUS"),
    (Command.SNAPSHOT, cp.encode_snapshot(0, [("s", "t")])[:-1], MalformedPayload, "Where at offset 21 needs 1"),
    (Command.SNAPSHOT, cp.encode_snapshot(0, [("s", "t")]) + b"x", MalformedPayload, "1 unexpected bytes"),
    (0x00, b"", UnknownCommand, "command 0x0000 is unknown"),
    (0x06, b"", UnknownCommand, "command 0x0006"),
    (0xFFFF, b"x", UnknownCommand, "command 0xffff"),
]


@pytest.mark.parametrize(("command", "payload", "error", "message"), MALFORMED)
def test_malformed_requests(command: int, payload: bytes, error: type[ProtocolError], message: str) -> None:
    with pytest.raises(error, match=message) as info:
        cp.decode_request(command, payload)
    reply = cp.error_reply(info.value)
    header, body = cp.decode_reply_frame(reply)
    assert header.result == (Result.UNKNOWN_COMMAND if error is UnknownCommand else Result.MALFORMED)
    assert body.endswith(b"\x00")


def test_header_errors() -> None:
    with pytest.raises(TruncatedFrame, match="31 bytes"):
        cp.decode_request_header(PING_REQ[:31])
    with pytest.raises(TruncatedFrame, match="shorter than"):
        cp.decode_request_frame(b"\x01")
    with pytest.raises(TruncatedFrame, match="PayloadSize says 30"):
        cp.decode_request_frame(AUTH_REQ[:-1])
    big = cp.encode_request(Command.AUTH, b"\x00" * 20)[:32]
    big = big[:4] + struct.pack("<I", cp.MAX_PAYLOAD + 1) + big[8:]
    with pytest.raises(PayloadTooLarge, match="1048577 is over the limit of 1048576") as info:
        cp.decode_request_header(big)
    assert info.value.close and info.value.result == Result.MALFORMED
    assert cp.decode_request_header(big, max_payload=2 << 20).payload_size == cp.MAX_PAYLOAD + 1
    with pytest.raises(TruncatedFrame):
        cp.decode_reply_header(b"\x00" * 8)
    with pytest.raises(PayloadTooLarge):
        cp.decode_reply_header(struct.pack("<BII", 0, cp.MAX_REPLY_PAYLOAD + 1, 0))


def test_reply_decoder_errors() -> None:
    good_poll = cp.encode_poll(1, 0, 0, "s", "t", [("c", "a", "b")])
    cases = [
        (cp.decode_auth_reply, b"\x00" * 15, "AuthKey/ClientToken/ClientID at offset 0 needs 16"),
        (cp.decode_poll_reply, good_poll[:-1], "column 0 After"),
        (cp.decode_poll_reply, good_poll + b"\x00", "1 unexpected bytes"),
        (cp.decode_poll_reply, good_poll[:25] + b"\xff\xff\xff\xff", "ColumnsCount 4294967295"),
        (cp.decode_pollv2_reply, good_poll, "POLLV2 reply"),
        (cp.decode_fetch_reply, struct.pack("<IQ", 100, 0), "RecordCount 100"),
        (cp.decode_fetch_reply, struct.pack("<IQI", 1, 0, 1000) + b"\x00" * 60, "RecordSize 1000"),
        (cp.decode_ack_reply, b"", "ACK reply"),
        (cp.decode_status_reply, b"\x01", "STATUS reply: ClientID"),
        (cp.decode_removefilter_reply, b"\x00", "REMOVEFILTER reply"),
    ]
    for decoder, payload, message in cases:
        with pytest.raises(MalformedPayload, match=message):
            decoder(payload)


def test_record_errors_name_the_field() -> None:
    record = cp.encode_event(make_event())
    head = struct.pack("<IQ", 1, 0)
    bad_type = record[:12] + b"\x03" + record[13:]
    with pytest.raises(MalformedPayload, match=r"record 0.*EventType 0x03"):
        cp.decode_fetch_reply(head + bad_type)
    flags_at = record.index(cp.lstring(b"id")) + 7
    bad_flags = record[:flags_at] + b"\x05" + record[flags_at + 1 :]
    with pytest.raises(MalformedPayload, match="column 0 Flags 0x05"):
        cp.decode_fetch_reply(head + bad_flags)
    # RecordSize one byte short: the last value would read past the record into whatever follows.
    short = struct.pack("<I", len(record) - 5) + record[4:]
    with pytest.raises(MalformedPayload, match="record 0"):
        cp.decode_fetch_reply(head + short)


# ------------------------------------------------------------------------------------------------ garbage fuzz


def valid_requests() -> list[tuple[int, bytes]]:
    return [
        (Command.PING, b""),
        (Command.AUTH, cp.encode_auth(cp.server_key("x"), "client")),
        (Command.ADDFILTER, cp.encode_addfilter(7, "shop", "orders", 10, 1)),
        (Command.POLL, b""),
        (Command.FETCH, cp.encode_fetch(10, 100, manual_ack=True)),
        (Command.ACK, cp.encode_ack(5)),
        (Command.REMOVEFILTER, cp.encode_removefilter(1, "s", "t")),
        (Command.STATUS, b""),
        (Command.SNAPSHOT, cp.encode_snapshot(0, [("shop", "orders"), ("shop", "items")], "id > 5")),
    ]


def decode_any_request(frame: bytes) -> None:
    header, payload = cp.decode_request_frame(frame)
    cp.decode_request(header.command, payload)


def test_random_garbage_frames_only_raise_protocol_errors() -> None:
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for i in range(1000):
        kind = i % 4
        if kind == 0:  # pure noise of any length
            frame = rng.randbytes(rng.randrange(0, 120))
        elif kind == 1:  # a known command with a noise payload and a correct checksum: reaches the payload decoders
            command = rng.choice([c.value for c in Command] + [rng.randrange(0, 0x10000)])
            frame = cp.encode_request(command, rng.randbytes(rng.randrange(0, 80)), client_id=rng.randrange(2**32))
        elif kind == 2:  # a valid request with bytes flipped, checksum fixed up
            command, payload = rng.choice(valid_requests())
            mutated = bytearray(payload or b"\x00")
            for _ in range(rng.randrange(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            frame = cp.encode_request(command, bytes(mutated))
        else:  # a valid request truncated or extended, header kept
            command, payload = rng.choice(valid_requests())
            frame = cp.encode_request(command, payload)
            cut = rng.randrange(0, len(frame) + 8)
            frame = frame[:cut] + rng.randbytes(max(0, cut - len(frame)))
        try:
            decode_any_request(frame)
            outcomes["ok"] += 1
        except ProtocolError as exc:
            assert str(exc), "every error carries a message"
            cp.error_reply(exc)  # and turns into a reply
            outcomes["error"] += 1
    assert outcomes["error"] > 500 and outcomes["ok"] > 10


def test_random_garbage_replies_only_raise_protocol_errors() -> None:
    rng = random.Random(99)
    decoders = [
        cp.decode_auth_reply,
        cp.decode_poll_reply,
        cp.decode_pollv2_reply,
        cp.decode_fetch_reply,
        cp.decode_ack_reply,
        cp.decode_removefilter_reply,
        cp.decode_status_reply,
        cp.decode_snapshot_reply,
    ]
    samples = [
        cp.encode_poll(2, 1, 2, "s", "t", COLUMNS),
        cp.encode_pollv2(2, 1, 2, 3, "s", "t", COLUMNS),
        b"".join(cp.encode_fetch_reply(1, [cp.encode_event(make_event(i)) for i in range(3)])),
        cp.encode_status_reply(cp.Status(1, "n", filters=[cp.FilterInfo(1, 0, 0, "s", "t")])),
        cp.encode_snapshot_reply([cp.SnapshotItem(1, 1, 2, 3), cp.SnapshotItem(0, 0xFF)]),
        b"".join(cp.encode_fetch_reply(0, [marker_record(1, cp.RecordType.SNAPSHOT_END), snapshot_row(2)])),
    ]
    for i in range(1000):
        if i % 2:
            payload = rng.randbytes(rng.randrange(0, 200))
        else:
            mutated = bytearray(rng.choice(samples))
            for _ in range(rng.randrange(1, 6)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            payload = bytes(mutated[: rng.randrange(len(mutated) + 1)] if rng.random() < 0.3 else mutated)
        for decoder in decoders:
            with contextlib.suppress(ProtocolError):
                decoder(payload)
        with contextlib.suppress(ProtocolError):
            cp.decode_reply_frame(payload)
