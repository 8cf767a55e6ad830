"""FETCH records: one row change with its per-client sequence number, position and column values.

Layout (little-endian; lstring = u32 len n+1, n bytes, 0x00)::

    u32     RecordSize    bytes of the record after this field (a reader skips fields it does not know)
    u64     Seq           per-client sequence number, strictly increasing, the unit of ACK
    u8      EventType     0x01 INSERT, 0x02 UPDATE, 0x04 DELETE; 0x10 SNAPSHOT_START, 0x20 SNAPSHOT_END (markers)
    u32     Timestamp     the binlog event's timestamp (Unix seconds, UTC)
    u64     Position      end position of the rows event in File (the binlog's log_pos)
    u32     Row           index of the row inside the rows event, from 0
    lstring File          binlog file name
    lstring Gtid          the transaction's GTID ("" when the source has none)
    lstring Schema
    lstring Table
    u32     ColumnCount
    ColumnCount times:
        lstring Name
        u8      Flags     0x01 before NULL, 0x02 after NULL, 0x04 before absent, 0x08 after absent
        lstring Before    only when Flags has neither 0x01 nor 0x04
        lstring After     only when Flags has neither 0x02 nor 0x08
    u8      RecordFlags   0x01 SNAPSHOT; only when non-zero: a record whose columns end at RecordSize has none

A NULL or absent value carries no bytes at all, so NULL is distinct from the text 'NULL' and from ''. "Absent" is
the image an event does not have (before for INSERT, after for DELETE) or a column a partial row image left out.

A snapshot's row is an INSERT with RecordFlags SNAPSHOT. A marker (SNAPSHOT_START, SNAPSHOT_END, with RecordFlags
SNAPSHOT) brackets one table's snapshot; its after image describes it (:meth:`Event.marker`).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import importlib
import json
import logging
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, cast

from .constants import MARKER_TYPES, MAX_NAME, ColumnFlags, EventType, RecordFlags, RecordType
from .wire import NUL, U32, Reader, name_lstring, text_lstring


class _Absent(enum.Enum):
    """Type of :data:`ABSENT`, the value of a column an image does not carry.

    A one-member enum so that ``value is ABSENT`` narrows the value's type for the type checker (as it does for None),
    at the cost of an identity test at run time.
    """

    ABSENT = "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


#: The value of a column that an image does not carry (distinct from None, which is SQL NULL).
ABSENT: Final = _Absent.ABSENT

Value = bytes | None | _Absent
#: What encoders accept for a value: text is encoded as UTF-8.
InValue = bytes | bytearray | str | None | _Absent

#: A record's fixed fields after RecordSize: Seq, EventType, Timestamp, Position, Row.
_FIXED = struct.Struct("<QBIQI")
_pack_fixed = _FIXED.pack
#: A record's head: RecordSize and Seq, the only part of a record that differs between the clients queueing a change.
RECORD_HEAD = struct.Struct("<IQ")
#: The fixed fields after the head: EventType, Timestamp, Position, Row (the same for every client).
RECORD_TAIL_FIXED = struct.Struct("<BIQI")
_pack_u32 = U32.pack
_FLAG = [bytes([i]) for i in range(16)]
_FLAG_BYTE = [bytes([i]) for i in range(256)]
_BEFORE_NULL = ColumnFlags.BEFORE_NULL.value
_AFTER_NULL = ColumnFlags.AFTER_NULL.value
_BEFORE_ABSENT = ColumnFlags.BEFORE_ABSENT.value
_AFTER_ABSENT = ColumnFlags.AFTER_ABSENT.value
_TYPE_NAMES: dict[int, str] = {record_type.value: record_type.name for record_type in RecordType}
_VALID_TYPES = frozenset(_TYPE_NAMES)
_SNAPSHOT = RecordFlags.SNAPSHOT.value
_NO_IMAGE_BEFORE = frozenset({RecordType.INSERT, *MARKER_TYPES})


class Column(NamedTuple):
    """One column of a row change: ``before``/``after`` are bytes, None for SQL NULL, or ABSENT."""

    name: str
    before: Value = ABSENT
    after: Value = ABSENT


@dataclass(slots=True)
class Event:
    """One row change as delivered to a client."""

    seq: int
    type: int
    schema: str
    table: str
    file: str = ""
    pos: int = 0
    row: int = 0
    timestamp: int = 0
    gtid: str = ""
    columns: list[Column] = field(default_factory=list)
    #: RecordFlags (0 for a row change of the binlog).
    flags: int = 0

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(self.type, f"0x{self.type:02x}")

    @property
    def snapshot(self) -> bool:
        """A snapshot's row (type INSERT) or marker, not a change read from the binlog."""
        return bool(self.flags & _SNAPSHOT)

    @property
    def is_marker(self) -> bool:
        return self.type in MARKER_TYPES

    def marker(self) -> SnapshotMarker | None:
        """What a SNAPSHOT_START or SNAPSHOT_END record says; None for a row change.

        Raises ValueError for a marker without its ``snapshot`` column.
        """
        if self.type not in MARKER_TYPES:
            return None
        after = self.after()
        text = {name: None if value is None else value.decode("utf-8", "replace") for name, value in after.items()}
        if not text.get("snapshot"):
            raise ValueError(f"{self.type_name} record {self.seq} has no snapshot column")

        def number(name: str) -> int | None:
            value = text.get(name)
            return int(value) if value else None

        start = self.type == RecordType.SNAPSHOT_START
        return SnapshotMarker(
            start=start,
            snapshot_id=int(text["snapshot"] or 0),
            schema=self.schema,
            table=self.table,
            where=text.get("where") if start else None,
            rows_estimate=number("rows_estimate") if start else None,
            rows=None if start else number("rows"),
            state=None if start else text.get("state"),
            error=None if start else text.get("error"),
        )

    @property
    def event_position(self) -> int:
        """The legacy POLL EventPosition: (timestamp << 32) | log_pos."""
        return ((self.timestamp & 0xFFFFFFFF) << 32) | (self.pos & 0xFFFFFFFF)

    def before(self) -> dict[str, bytes | None]:
        """Columns present in the before image, by name."""
        return {c.name: c.before for c in self.columns if c.before is not ABSENT}

    def after(self) -> dict[str, bytes | None]:
        """Columns present in the after image, by name."""
        return {c.name: c.after for c in self.columns if c.after is not ABSENT}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; values are text, or ``{"base64": ...}`` when they are not UTF-8 (BLOBs)."""
        data: dict[str, Any] = {
            "seq": self.seq,
            "type": self.type_name,
            "schema": self.schema,
            "table": self.table,
            "file": self.file,
            "pos": self.pos,
            "row": self.row,
            "timestamp": self.timestamp,
            "gtid": self.gtid,
        }
        if self.flags & _SNAPSHOT:
            data["snapshot"] = True
        if self.type not in _NO_IMAGE_BEFORE:
            data["before"] = {name: json_value(value) for name, value in self.before().items()}
        if self.type != EventType.DELETE:
            data["after"] = {name: json_value(value) for name, value in self.after().items()}
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class SnapshotMarker:
    """A snapshot marker's content. The start marker comes before the table's first snapshot row, the end marker
    after its last one (or where it stopped: ``state`` "cancelled" or "failed", with ``error``)."""

    start: bool
    #: The snapshot's id, as SNAPSHOT's reply gave it.
    snapshot_id: int
    schema: str
    table: str
    #: Start marker: the condition the rows meet (None: every row), and the table's estimated row count.
    where: str | None = None
    rows_estimate: int | None = None
    #: End marker: the rows queued, "done", "cancelled" or "failed", and the reason of a failure.
    rows: int | None = None
    state: str | None = None
    error: str | None = None


def json_value(value: bytes | None) -> str | dict[str, str] | None:
    """A value in JSON: text, or ``{"base64": ...}`` when it is not UTF-8 (BLOBs)."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def encode_record(
    seq: int,
    event_type: int,
    timestamp: int,
    file: str,
    pos: int,
    row: int,
    gtid: str,
    schema: str,
    table: str,
    columns: Iterable[tuple[str, InValue, InValue]],
    flags: int = 0,
) -> bytes:
    """One FETCH record. ``columns`` are (name, before, after) tuples or :class:`Column`; ``flags`` (RecordFlags)
    are written after the columns only when non-zero."""
    body = b"".join(
        (
            _pack_fixed(seq, event_type, timestamp, pos, row),
            name_lstring(file),
            text_lstring(gtid) if gtid else b"\x01\x00\x00\x00\x00",
            name_lstring(schema),
            name_lstring(table),
            encode_columns(columns),
            _FLAG_BYTE[flags] if flags else b"",
        )
    )
    return _pack_u32(len(body)) + body


def encode_columns(columns: Iterable[tuple[str, InValue, InValue]]) -> bytes:
    """The end of a record, ColumnCount and the columns: the part that depends on the row change alone.

    Text is encoded as strict UTF-8 (UnicodeEncodeError otherwise). A server may keep these bytes with the change
    and serve them as they are (relay/store/rowcodec.py does), instead of encoding every column of every record again.
    """
    names: list[str] = []
    before: list[InValue] = []
    after: list[InValue] = []
    for name, before_value, after_value in columns:
        names.append(name)
        before.append(before_value)
        after.append(after_value)
    return encode_images(names, before, after)


class _Layout:
    """The bytes of a table layout's columns that every row repeats, made once per layout: each column's Name, and
    Name with Flags for each way a column of a one-image change (INSERT or DELETE) can be written."""

    __slots__ = ("after_alone", "before_alone", "names")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = tuple(name_lstring(name) for name in names)
        self.after_alone = self._heads(_BEFORE_ABSENT, _AFTER_NULL, _AFTER_ABSENT)
        self.before_alone = self._heads(_AFTER_ABSENT, _BEFORE_NULL, _BEFORE_ABSENT)

    def _heads(self, other: int, null: int, absent: int) -> tuple[tuple[bytes, ...], ...]:
        """For an image given alone (``other``: the flag of the absent image), each column's Name and Flags when its
        value is present, NULL, absent."""
        cases = (other, other | null, other | absent)
        return tuple(tuple(name + _FLAG[flags] for name in self.names) for flags in cases)


_layouts: dict[tuple[str, ...], _Layout] = {}


def _layout(names: Sequence[str]) -> _Layout:
    key = names if type(names) is tuple else tuple(names)
    layout = _layouts.get(key)
    if layout is None:
        if len(_layouts) >= 10_000:  # bounded: a source with ever-new layouts must not grow this forever
            _layouts.clear()
        layout = _layouts[key] = _Layout(key)
    return layout


def encode_images(names: Sequence[str], before: Sequence[InValue] | None, after: Sequence[InValue] | None) -> bytes:
    """What :func:`encode_columns` gives for the columns ``zip(names, before, after)``, where an image that is None
    is absent throughout (an INSERT's before, a DELETE's after).

    The worker encodes every stored row change this way: the names' bytes come from a cache per table layout, and
    the columns are encoded by the compiled module (``clientproto/_records.c``) where it is built, else by
    :func:`encode_images_python`, which gives the same bytes.
    """
    if _compiled is None:
        return encode_images_python(names, before, after)
    return cast(bytes, _compiled.encode_images(_layout(names).names, before, after))


def record_text(
    prefix: str, names: Sequence[str], before: Sequence[Any] | None, after: Sequence[Any] | None
) -> str | None:
    """``prefix`` and the base64 of :func:`encode_images`' bytes, made in one call by the compiled module, for images
    of text (``str`` itself) and NULLs alone; None where the module is not built, or an image holds anything else or
    text that is not valid UTF-8 (the caller's own code then says what those give)."""
    if _compiled is None:
        return None
    return cast(str | None, _compiled.record_text(prefix, _layout(names).names, before, after))


def encode_images_python(
    names: Sequence[str], before: Sequence[InValue] | None, after: Sequence[InValue] | None
) -> bytes:
    """:func:`encode_images` in Python: a change with one image takes a loop without flag arithmetic (about half the
    cost of the general loop)."""
    layout = _layout(names)
    parts: list[bytes | bytearray] = [b""]  # ColumnCount, once known
    if before is None or after is None:
        image = after if before is None else before
        heads = layout.after_alone if before is None else layout.before_alone
        for present, null, absent, value in zip(*heads, image or (), strict=False):
            if type(value) is str:
                data = value.encode("utf-8")
                parts += (present, _pack_u32(len(data) + 1), data, NUL)
            elif value is None:
                parts.append(null)
            elif value is ABSENT:
                parts.append(absent)
            else:  # bytes, or text of a str subclass
                data = value.encode("utf-8") if isinstance(value, str) else value
                parts += (present, _pack_u32(len(data) + 1), data, NUL)
        count = min(len(layout.names), len(image)) if image is not None else 0
    else:
        count = min(len(layout.names), len(before), len(after))
        for name, before_value, after_value in zip(layout.names, before, after, strict=False):
            before_data: bytes | bytearray | None = None
            after_data: bytes | bytearray | None = None
            if before_value is None:
                flags = _BEFORE_NULL
            elif before_value is ABSENT:
                flags = _BEFORE_ABSENT
            else:
                flags = 0
                before_data = before_value.encode("utf-8") if isinstance(before_value, str) else before_value
            if after_value is None:
                flags |= _AFTER_NULL
            elif after_value is ABSENT:
                flags |= _AFTER_ABSENT
            else:
                after_data = after_value.encode("utf-8") if isinstance(after_value, str) else after_value
            parts += (name, _FLAG[flags])
            if before_data is not None:
                parts += (_pack_u32(len(before_data) + 1), before_data, NUL)
            if after_data is not None:
                parts += (_pack_u32(len(after_data) + 1), after_data, NUL)
    parts[0] = _pack_u32(count)
    return b"".join(parts)


def _load_compiled() -> Any:
    """The compiled column encoder, or None where it is not built, was built from another version of its source
    (said in the log), or RELAY_NATIVE=0 turns it off."""
    if os.environ.get("RELAY_NATIVE", "1") == "0":
        return None
    try:
        module = importlib.import_module("clientproto._records")
    except ImportError:
        return None
    source = os.path.join(os.path.dirname(__file__), "_records.c")
    try:
        with open(source, "rb") as file:
            current = hashlib.sha1(file.read()).hexdigest()
    except OSError:
        current = "(unreadable)"
    if current != getattr(module, "SOURCE_SHA1", None):
        logging.getLogger(__name__).warning(
            "%s was built from another version of %s than the one here: it is not used, and the Python code runs "
            "instead (scripts/bootstrap builds it again)",
            module.__file__,
            source,
        )
        return None
    module.configure(ABSENT, _BEFORE_NULL, _AFTER_NULL, _BEFORE_ABSENT, _AFTER_ABSENT)
    return module


_compiled = _load_compiled()


def compiled_encoder() -> Any:
    """The compiled column encoder in use, or None where :func:`encode_images` runs in Python."""
    return _compiled


def encode_event(event: Event) -> bytes:
    return encode_record(
        event.seq,
        event.type,
        event.timestamp,
        event.file,
        event.pos,
        event.row,
        event.gtid,
        event.schema,
        event.table,
        event.columns,
        event.flags,
    )


class _Slow(Exception):
    """Internal: the fast path met something odd; the checked path decodes again and names the problem."""


_unpack_u32 = U32.unpack_from
_unpack_fixed = _FIXED.unpack_from
_new_column = Column._make
_NAME_CACHE: dict[bytes, str] = {}


def _fast_record(data: bytes, o: int, end: int) -> Event:
    """Decode one record without per-field error reporting: about five times faster than the checked path,
    which matters to a Python consumer reading tens of thousands of events per second."""
    seq, event_type, timestamp, pos, row = _unpack_fixed(data, o)
    o += 25
    if event_type not in _VALID_TYPES or o > end:
        raise _Slow
    texts = []
    for _ in range(4):
        n = _unpack_u32(data, o)[0]
        o += 4
        e = o + n - 1
        if n == 0 or e >= end or data[e] or n > MAX_NAME + 1:
            raise _Slow
        texts.append(data[o:e].decode("utf-8"))
        o = e + 1
    columns, o = _fast_columns(data, o, end)
    file, gtid, schema, table = texts
    # RecordFlags, when the record goes on after its columns; bytes after it are fields of a later version.
    flags = data[o] if o < end else 0
    return Event(seq, event_type, schema, table, file, pos, row, timestamp, gtid, columns, flags)


def _fast_columns(data: bytes, o: int, end: int) -> tuple[list[Column], int]:
    """ColumnCount and the columns from offset ``o``: (the columns, the offset after them)."""
    count = _unpack_u32(data, o)[0]
    o += 4
    if o > end or count * 6 > end - o:
        raise _Slow
    columns: list[Column] = []
    append = columns.append
    cache = _NAME_CACHE
    for _ in range(count):
        n = _unpack_u32(data, o)[0]
        o += 4
        e = o + n - 1
        if n == 0 or e >= end or data[e] or n > MAX_NAME + 1:
            raise _Slow
        raw = data[o:e]
        name = cache.get(raw)
        if name is None:
            name = raw.decode("utf-8")
            if len(cache) < 65536:
                cache[raw] = name
        o = e + 1
        if o >= end:
            raise _Slow
        flags = data[o]
        o += 1
        if flags & 0xF0 or (flags & 0x05) == 0x05 or (flags & 0x0A) == 0x0A:
            raise _Slow
        if flags & 0x05:
            before: Value = None if flags & 0x01 else ABSENT
        else:
            n = _unpack_u32(data, o)[0]
            o += 4
            e = o + n - 1
            if n == 0 or e >= end or data[e]:
                raise _Slow
            before = data[o:e]
            o = e + 1
        if flags & 0x0A:
            after: Value = None if flags & 0x02 else ABSENT
        else:
            n = _unpack_u32(data, o)[0]
            o += 4
            e = o + n - 1
            if n == 0 or e >= end or data[e]:
                raise _Slow
            after = data[o:e]
            o = e + 1
        append(_new_column((name, before, after)))
    return columns, o


def decode_record(reader: Reader, index: int = 0) -> Event:
    """Read one record at the reader's offset; fields past the known ones (a newer server) are skipped.

    RecordFlags is read when the record goes on after its columns: a record of a server that predates it ends
    there. A reader that stops at the columns (older clients) skips it like any later field."""
    at = reader.offset
    size = reader.u32(f"record {index} RecordSize")
    if size > reader.remaining():
        raise reader.fail(f"record {index} at offset {at}: RecordSize {size} but only {reader.remaining()} bytes left")
    end = reader.offset + size
    try:
        event = _fast_record(reader.data, reader.offset, end)
    except (_Slow, struct.error, UnicodeDecodeError):
        event = _checked_record(Reader(reader.data, f"{reader.what} record {index}", reader.offset, end), at)
    reader.offset = end
    return event


def _checked_record(sub: Reader, at: int) -> Event:
    """The slow path, bounded by RecordSize so that a record never reads into the next one."""
    seq, event_type, timestamp, pos, row = sub.unpack(_FIXED, "Seq/EventType/Timestamp/Position/Row")
    if event_type not in _VALID_TYPES:
        raise sub.fail(f"EventType 0x{event_type:02x} at offset {at + 12} is not 0x01, 0x02, 0x04, 0x10 or 0x20")
    file = sub.text("File")
    gtid = sub.text("Gtid")
    schema = sub.text("Schema")
    table = sub.text("Table")
    columns = _checked_columns(sub)
    flags = sub.u8("RecordFlags") if sub.remaining() else 0
    return Event(seq, event_type, schema, table, file, pos, row, timestamp, gtid, columns, flags)


def _checked_columns(sub: Reader) -> list[Column]:
    count_at = sub.offset
    count = sub.u32("ColumnCount")
    # Each column takes at least 6 bytes (empty name + flags): refuse absurd counts before allocating.
    if count * 6 > sub.remaining():
        raise sub.fail(f"ColumnCount {count} at offset {count_at} cannot fit in the {sub.remaining()} bytes left")
    columns: list[Column] = []
    for i in range(count):
        name = sub.text(f"column {i} Name", MAX_NAME)
        flags_at = sub.offset
        flags = sub.u8(f"column {i} Flags")
        if flags & ~0x0F or (flags & 0x05) == 0x05 or (flags & 0x0A) == 0x0A:
            raise sub.fail(f"column {i} Flags 0x{flags:02x} at offset {flags_at}: unknown bits or NULL and absent")
        if flags & _BEFORE_NULL:
            before: Value = None
        elif flags & _BEFORE_ABSENT:
            before = ABSENT
        else:
            before = sub.lstring(f"column {i} Before")
        if flags & _AFTER_NULL:
            after: Value = None
        elif flags & _AFTER_ABSENT:
            after = ABSENT
        else:
            after = sub.lstring(f"column {i} After")
        columns.append(Column(name, before, after))
    return columns


def decode_columns(data: bytes) -> list[Column]:
    """The inverse of :func:`encode_columns`: ``data`` holds ColumnCount and the columns, nothing else."""
    try:
        columns, end = _fast_columns(data, 0, len(data))
        if end == len(data):
            return columns
    except (_Slow, struct.error, UnicodeDecodeError):
        pass
    sub = Reader(data, "columns")
    columns = _checked_columns(sub)
    if sub.remaining():
        raise sub.fail(f"{sub.remaining()} bytes after the last column")
    return columns
