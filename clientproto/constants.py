"""Numbers of the relay protocol: commands, result codes, event types, discard policies and limits.

The legacy values (commands 0x01..0x05, results 0x00, 0xFC, 0xFF, 0xF0, 0xFE) are the original relay's and must not
change: the PHP and Pascal clients hard-code them. Everything from 0x10 up, and results 0xFA, 0xFB and 0xFD, are this
relay's additions.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

#: Version the original relay put in its headers; the server never compares it, so any value is accepted.
LEGACY_VERSION = 0x00010020
#: Version sent by this package's client (informative only: a server must not reject other values).
PROTOCOL_VERSION = 0x00020000

REQUEST_HEADER_SIZE = 32
REPLY_HEADER_SIZE = 9

#: Largest request payload a server accepts. The original read any PayloadSize, so one frame could exhaust memory.
MAX_PAYLOAD = 1 << 20
#: Largest request payload a server accepts before AUTH succeeded on the connection. AUTH, the largest request an
#: unauthenticated client needs, is at most 20 + MAX_NAME + 1 bytes; a bigger PayloadSize gets 0xFA and a close, so
#: connections that never authenticate cost at most a few KiB each.
MAX_UNAUTHENTICATED_PAYLOAD = 4096
#: Default of the largest reply payload the Python client accepts (``RelayClient(max_reply_payload=...)``).
#: A reply holds one row change at least, whatever its size. MySQL's largest row event is 1 GiB (the ceiling of
#: max_allowed_packet), and a store keeps at most about 1 GB per change (PostgreSQL's text limit, SQLite's default
#: SQLITE_MAX_LENGTH), so a record is below 1 GiB and a FETCH reply below that plus FETCH_BYTE_BUDGET: 1 GiB + 64 MiB
#: covers every reply a relay can send. PayloadSize itself goes up to 4 GiB - 1.
MAX_REPLY_PAYLOAD = (1 << 30) + (64 << 20)
#: A FETCH reply stops taking records once its payload reaches this size (it always holds at least one record).
FETCH_BYTE_BUDGET = 4 << 20
#: Bounds of FETCH's MaxEvents and WaitMs.
MAX_FETCH_EVENTS = 10_000
MAX_WAIT_MS = 60_000
#: Longest client, schema or table name, in bytes (UTF-8). MySQL identifiers take at most 64 characters.
MAX_NAME = 1024


class Command(IntEnum):
    PING = 0x01
    AUTH = 0x02
    ADDFILTER = 0x03
    POLL = 0x04
    POLLV2 = 0x05
    # Extensions (not known to the original relay or its clients).
    FETCH = 0x10
    ACK = 0x11
    REMOVEFILTER = 0x12
    STATUS = 0x13
    SNAPSHOT = 0x14


class Result(IntEnum):
    OK = 0x00
    #: POLL/POLLV2/FETCH: nothing to deliver (empty payload).
    EMPTY = 0xFC
    #: AUTH refused, or bad request checksum (payload "Invalid Checksum\0", then the server closes).
    AUTH_FAILED = 0xFF
    #: Request after AUTH without the session's ClientID and token, or before any AUTH.
    BAD_SESSION = 0xFB
    #: Command number not known to the server.
    UNKNOWN_COMMAND = 0xFD
    #: Payload that does not decode, or is larger than MAX_PAYLOAD (then the server closes).
    MALFORMED = 0xFA
    #: Client-side only: the socket failed (the original Pascal client's code; never sent by a server).
    DISCONNECTED = 0xF0
    #: Client-side only: the reply checksum did not match.
    BAD_REPLY_CHECKSUM = 0xFE


#: The bad-checksum reply's result code; the same byte as AUTH_FAILED in the original.
BAD_CHECKSUM = Result.AUTH_FAILED


class EventType(IntFlag):
    """Row-change types; also the bits of a filter's type mask."""

    INSERT = 0x01
    UPDATE = 0x02
    DELETE = 0x04


#: A plain int, not a flag: ``~ALL_EVENT_TYPES`` must be the bits outside the three (IntFlag would invert within them).
ALL_EVENT_TYPES = int(EventType.INSERT | EventType.UPDATE | EventType.DELETE)


class RecordType(IntEnum):
    """The EventType byte of a FETCH record: a row change's type (EventType's values), or a marker around one
    table's snapshot. Markers are never filter bits (EventType stays the filter mask) and never reach POLL/POLLV2."""

    INSERT = 0x01
    UPDATE = 0x02
    DELETE = 0x04
    SNAPSHOT_START = 0x10
    SNAPSHOT_END = 0x20


#: The record types that are snapshot markers.
MARKER_TYPES = frozenset({RecordType.SNAPSHOT_START, RecordType.SNAPSHOT_END})


class RecordFlags(IntFlag):
    """The optional ``u8 RecordFlags`` after a FETCH record's columns; absent (the record ends after its columns)
    when no bit is set, so an ordinary row change is the same bytes as before snapshots existed."""

    #: A snapshot's row (EventType INSERT: the row as the table held it), or a snapshot marker.
    SNAPSHOT = 0x01


class SnapshotAction(IntEnum):
    """SNAPSHOT's first byte."""

    START = 0x00
    CANCEL = 0x01
    STATUS = 0x02


class SnapshotState(IntEnum):
    """A snapshot's state in SNAPSHOT replies."""

    PENDING = 0
    RUNNING = 1
    DONE = 2
    CANCELLED = 3
    FAILED = 4
    #: CANCEL or STATUS of a table the client never asked a snapshot of (SnapshotId 0).
    NONE = 0xFF


#: RowsTotal of a SNAPSHOT reply item when the table's size is not known (yet).
UNKNOWN_ROWS = 0xFFFF_FFFF_FFFF_FFFF


class DiscardPolicy(IntEnum):
    NO_DISCARD = 0
    UNQUEUE_OLDEST = 1
    IGNORE_NEWEST = 2


class FetchFlags(IntFlag):
    #: Delivered records stay in the queue until ACKed; without it they are acknowledged as they are sent.
    MANUAL_ACK = 0x01


class ColumnFlags(IntFlag):
    """Per-column flags of a FETCH record: which images carry no value bytes, and why."""

    BEFORE_NULL = 0x01
    AFTER_NULL = 0x02
    #: No before image for this column: an INSERT, or a column left out of a partial (MINIMAL/NOBLOB) row image.
    BEFORE_ABSENT = 0x04
    AFTER_ABSENT = 0x08


#: Letters of a type mask in the example consumer and in STATUS displays.
TYPE_LETTERS = {"I": EventType.INSERT, "U": EventType.UPDATE, "D": EventType.DELETE}


def type_mask(types: int | str) -> int:
    """A filter's type mask from an int or from letters such as ``"IUD"``."""
    if isinstance(types, int):
        return types
    mask = 0
    for letter in types.upper():
        if letter not in TYPE_LETTERS:
            raise ValueError(f"event type letter {letter!r} is not one of I, U, D")
        mask |= TYPE_LETTERS[letter]
    return mask


def type_letters(mask: int) -> str:
    return "".join(letter for letter, bit in TYPE_LETTERS.items() if mask & bit)
