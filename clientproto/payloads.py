"""Payloads of the original relay's commands: PING, AUTH, ADDFILTER, POLL and POLLV2, byte for byte.

Requests decode into small frozen dataclasses (server side); replies encode from plain values (server side) and
decode into dataclasses (client side). Names are UTF-8 ``str``; column values are ``bytes``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from .constants import ALL_EVENT_TYPES, MAX_NAME, DiscardPolicy
from .records import ABSENT, Column, InValue
from .wire import EMPTY_LSTRING, NUL, U32, Reader, lstring, name_lstring

#: PING reply payload. Clients ignore it, but the original sends exactly this.
PONG = b"PONG\x00"

_AUTH = struct.Struct("<QIII")
_AUTH_REPLY = struct.Struct("<QII")
_FILTER = struct.Struct("<BBi")
_POLL_HEAD = struct.Struct("<BQI")
_POLLV2_HEAD = struct.Struct("<BQIII")
_pack_u32 = U32.pack
_NULL_LSTRING = lstring(b"NULL")
_ZERO_U32 = b"\x00\x00\x00\x00"


# ---------------------------------------------------------------------------------------------------------- PING


@dataclass(frozen=True, slots=True)
class PingRequest:
    """PING: no payload; any payload sent anyway is ignored, as the original did."""


def decode_ping(payload: bytes) -> PingRequest:
    return PingRequest()


# ---------------------------------------------------------------------------------------------------------- AUTH


@dataclass(frozen=True, slots=True)
class AuthRequest:
    key: int
    #: Both ignored as input (clients send 0); kept for logs.
    token: int
    client_id: int
    #: The client name without the trailing NUL the original clients send. May be "" (the server refuses it).
    name: str


@dataclass(frozen=True, slots=True)
class AuthReply:
    key: int
    token: int
    client_id: int


def encode_auth(key: int, name: str, *, token: int = 0, client_id: int = 0) -> bytes:
    """AUTH request payload: u64 AuthKey, u32 ClientToken, u32 ClientId, u32 ClientNameSize, name + NUL."""
    raw = name.encode("utf-8") + NUL
    return _AUTH.pack(key, token, client_id, len(raw)) + raw


def decode_auth(payload: bytes) -> AuthRequest:
    reader = Reader(payload, "AUTH")
    key, token, client_id, size = reader.unpack(_AUTH, "AuthKey/ClientToken/ClientId/ClientNameSize")
    if size > MAX_NAME + 1:
        raise reader.fail(f"ClientNameSize {size} at offset 16 is over the limit of {MAX_NAME + 1}")
    raw = reader.raw(size, "ClientName")
    reader.end()
    # The original clients count and send the name's NUL; the original server kept it. We store the name without.
    if raw.endswith(NUL):
        raw = raw[:-1]
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise reader.fail(f"ClientName at offset 20 is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if "\x00" in name:
        raise reader.fail("ClientName at offset 20 contains a NUL byte before its end")
    return AuthRequest(key, token, client_id, name)


def encode_auth_reply(key: int, token: int, client_id: int) -> bytes:
    """AUTH reply payload: u64 AuthKey (echo), u32 ClientToken, u32 ClientID. The README's order is wrong."""
    return _AUTH_REPLY.pack(key, token, client_id)


def decode_auth_reply(payload: bytes) -> AuthReply:
    reader = Reader(payload, "AUTH reply")
    key, token, client_id = reader.unpack(_AUTH_REPLY, "AuthKey/ClientToken/ClientID")
    reader.end()
    return AuthReply(key, token, client_id)


# ------------------------------------------------------------------------------------------------------ ADDFILTER


@dataclass(frozen=True, slots=True)
class AddFilterRequest:
    #: Bit mask of EventType (1 insert, 2 update, 4 delete).
    types: int
    #: DiscardPolicy: 0 no discard, 1 unqueue oldest, 2 ignore newest.
    policy: int
    #: Queue limit, signed on the wire; <= 0 means unlimited.
    limit: int
    #: Exact names, or patterns with * and ?.
    schema: str
    table: str


@dataclass(frozen=True, slots=True)
class FilterIdentity:
    """What names a filter: REMOVEFILTER's payload, and the key under which ADDFILTER updates one."""

    types: int
    schema: str
    table: str


def encode_filter_names(schema: str, table: str) -> bytes:
    return lstring(schema.encode("utf-8")) + lstring(table.encode("utf-8"))


def encode_addfilter(types: int, schema: str, table: str, limit: int = 0, policy: int = 0) -> bytes:
    """ADDFILTER payload: u8 FilterType, u8 FilterDiscardType, i32 FilterQueueLimit, lstring schema, lstring table."""
    return _FILTER.pack(types, policy, limit) + encode_filter_names(schema, table)


def check_types(reader: Reader, types: int, at: int) -> None:
    if not types or types & ~ALL_EVENT_TYPES:
        raise reader.fail(f"FilterType 0x{types:02x} at offset {at} is not a non-empty mask of 0x01|0x02|0x04")


def read_filter_names(reader: Reader) -> tuple[str, str]:
    schema_at = reader.offset
    schema = reader.text("SchemaName")
    table_at = reader.offset
    table = reader.text("TableName")
    reader.end()
    if not schema:
        raise reader.fail(f"SchemaName at offset {schema_at} is empty")
    if not table:
        raise reader.fail(f"TableName at offset {table_at} is empty")
    return schema, table


def decode_addfilter(payload: bytes) -> AddFilterRequest:
    reader = Reader(payload, "ADDFILTER")
    types, policy, limit = reader.unpack(_FILTER, "FilterType/FilterDiscardType/FilterQueueLimit")
    check_types(reader, types, 0)
    if policy not in DiscardPolicy._value2member_map_:
        # The original dropped the new change for any non-zero type but 1: a client that sends 3 keeps that meaning.
        policy = DiscardPolicy.IGNORE_NEWEST
    schema, table = read_filter_names(reader)
    return AddFilterRequest(types, policy, limit, schema, table)


# ------------------------------------------------------------------------------------------------- POLL / POLLV2


@dataclass(frozen=True, slots=True)
class PollRequest:
    """POLL: the payload is ignored, as in the original."""


@dataclass(frozen=True, slots=True)
class PollV2Request:
    """POLLV2: the payload is ignored, as in the original."""


def decode_poll(payload: bytes) -> PollRequest:
    return PollRequest()


def decode_pollv2(payload: bytes) -> PollV2Request:
    return PollV2Request()


@dataclass(slots=True)
class PollEvent:
    """A decoded POLL/POLLV2 reply. Values are the legacy text: NULL is b"NULL", a missing image is b""."""

    event_type: int
    #: (event timestamp << 32) | log_pos
    position: int
    #: Entries left in the queue after this one.
    queue_size: int
    schema: str
    table: str
    columns: list[Column] = field(default_factory=list)
    #: POLLV2 only.
    instance_id: int = 0


def legacy_value(value: InValue) -> bytes:
    """A value as the original clients expect it: SQL NULL is the text NULL, a missing image is ''."""
    if value is None:
        return b"NULL"
    if value is ABSENT:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _legacy_lstring(value: InValue) -> bytes:
    if value is None:
        return _NULL_LSTRING
    if value is ABSENT:
        return EMPTY_LSTRING
    data = value.encode("utf-8") if isinstance(value, str) else value
    return _pack_u32(len(data) + 1) + data + NUL


def encode_poll(
    event_type: int,
    position: int,
    queue_size: int,
    schema: str,
    table: str,
    columns: Sequence[tuple[str, InValue, InValue]],
) -> bytes:
    """POLL reply payload. Values may be bytes, str, None (sent as "NULL") or ABSENT (sent as "")."""
    parts = [
        _POLL_HEAD.pack(event_type, position, min(queue_size, 0xFFFFFFFF)),
        name_lstring(schema),
        name_lstring(table),
        _pack_u32(len(columns)),
    ]
    for name, before, after in columns:
        parts.append(name_lstring(name))
        parts.append(_legacy_lstring(before))
        parts.append(_legacy_lstring(after))
    return b"".join(parts)


def encode_pollv2(
    event_type: int,
    position: int,
    queue_size: int,
    instance_id: int,
    schema: str,
    table: str,
    columns: Sequence[tuple[str, InValue, InValue]],
) -> bytes:
    """POLLV2 reply payload: POLL's, plus InstanceID and the name IDs, which are always 0 as in the original."""
    parts = [
        _POLLV2_HEAD.pack(event_type, position, min(queue_size, 0xFFFFFFFF), instance_id, 0),
        name_lstring(schema),
        _ZERO_U32,
        name_lstring(table),
        _pack_u32(len(columns)),
    ]
    for name, before, after in columns:
        parts.append(_ZERO_U32)
        parts.append(name_lstring(name))
        parts.append(_legacy_lstring(before))
        parts.append(_legacy_lstring(after))
    return b"".join(parts)


def _read_count(reader: Reader, per_column: int) -> int:
    at = reader.offset
    count = reader.u32("ColumnsCount")
    if count * per_column > reader.remaining():
        raise reader.fail(f"ColumnsCount {count} at offset {at} cannot fit in the {reader.remaining()} bytes left")
    return count


def decode_poll_reply(payload: bytes) -> PollEvent:
    reader = Reader(payload, "POLL reply")
    event_type, position, queue_size = reader.unpack(_POLL_HEAD, "EventType/EventPosition/QueueSize")
    schema = reader.text("SchemaName")
    table = reader.text("TableName")
    columns = []
    for i in range(_read_count(reader, 15)):
        name = reader.text(f"column {i} Name")
        before = reader.lstring(f"column {i} Before")
        after = reader.lstring(f"column {i} After")
        columns.append(Column(name, before, after))
    reader.end()
    return PollEvent(event_type, position, queue_size, schema, table, columns)


def decode_pollv2_reply(payload: bytes) -> PollEvent:
    reader = Reader(payload, "POLLV2 reply")
    head = reader.unpack(_POLLV2_HEAD, "EventType/EventPosition/QueueSize/InstanceID/SchemaNameID")
    event_type, position, queue_size, instance_id, _schema_id = head
    schema = reader.text("SchemaName")
    reader.u32("TableNameID")
    table = reader.text("TableName")
    columns = []
    for i in range(_read_count(reader, 19)):
        reader.u32(f"column {i} NameID")
        name = reader.text(f"column {i} Name")
        before = reader.lstring(f"column {i} Before")
        after = reader.lstring(f"column {i} After")
        columns.append(Column(name, before, after))
    reader.end()
    return PollEvent(event_type, position, queue_size, schema, table, columns, instance_id)
