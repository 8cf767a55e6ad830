"""TRANSACTION_PAYLOAD: a whole MySQL transaction as one event (``binlog_transaction_compression=ON``, 8.0.20+).

Layout (MySQL ``libbinlogevents`` ``codecs/binary.cpp``, ``Transaction_payload::encode``/``decode``). The event has
no post-header (whatever the FORMAT_DESCRIPTION says for type 40: readers start at the body); the body is::

    field*  end-mark  payload
    field    ::= type length value     -- each a packed integer (net_field_length: < 251 one byte; 0xfc + u16;
                                       --  0xfd + u24; 0xfe + u64); ``length`` is the size of the packed ``value``
    type     ::= 1 payload size | 2 compression type | 3 uncompressed size   (others: skipped by ``length``)
    end-mark ::= 0 (a lone packed integer)
    payload  ::= ``payload size`` bytes: the transaction's events, compressed as ``compression type`` says
                 (0 ZSTD: one or more zstd frames; 255 NONE: stored as is)

The events inside are ordinary events (19-byte header with their own size, their timestamp and server id, end
position 0) without checksums: the payload event's own CRC32 covers them. The ``zstandard`` package decompresses;
it is imported on first use, so sources that never compress need not have it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from binlog.constants import (
    LOG_EVENT_HEADER_LEN,
    OTW_PAYLOAD_COMPRESSION_TYPE_FIELD,
    OTW_PAYLOAD_HEADER_END_MARK,
    OTW_PAYLOAD_SIZE_FIELD,
    OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD,
    TRANSACTION_COMPRESSION_NONE,
    TRANSACTION_COMPRESSION_ZSTD,
)
from binlog.errors import BinlogError, TruncatedEventError
from binlog.reader import lenenc_int

_FIELD_NAMES = {
    OTW_PAYLOAD_SIZE_FIELD: "payload size",
    OTW_PAYLOAD_COMPRESSION_TYPE_FIELD: "compression type",
    OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD: "uncompressed size",
}


@dataclass(frozen=True, slots=True)
class TransactionPayload:
    """The header fields of a TRANSACTION_PAYLOAD body and its (still compressed) payload bytes."""

    compression: int
    uncompressed_size: int
    payload: bytes


def parse_transaction_payload(body: bytes) -> TransactionPayload:
    """Split a TRANSACTION_PAYLOAD body (after the common header, without checksum) into header fields and payload."""
    fields: dict[int, int] = {}
    p = 0
    while True:
        if p >= len(body):
            raise TruncatedEventError("payload header has no end mark")
        field_type, p = lenenc_int(body, p)
        if field_type == OTW_PAYLOAD_HEADER_END_MARK:
            break
        length, p = lenenc_int(body, p)
        if p + length > len(body):
            raise TruncatedEventError(f"payload header field {field_type} of {length} bytes runs past the event")
        if field_type in _FIELD_NAMES:
            value, after = lenenc_int(body, p)
            if after != p + length:
                raise BinlogError(
                    f"payload header field {_FIELD_NAMES[field_type]} says {length} bytes but its value takes "
                    f"{after - p}"
                )
            fields[field_type] = value
        # Unknown fields are skipped by their length, as MySQL does: later versions may add some.
        p += length
    # A missing compression type means NONE, a missing payload size the rest of the body (MySQL writes both).
    compression = fields.get(OTW_PAYLOAD_COMPRESSION_TYPE_FIELD, TRANSACTION_COMPRESSION_NONE)
    size = fields.get(OTW_PAYLOAD_SIZE_FIELD, len(body) - p)
    if p + size > len(body):
        raise TruncatedEventError(f"payload size says {size} bytes but the event has {len(body) - p} after its header")
    return TransactionPayload(compression, fields.get(OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD, size), body[p : p + size])


def uncompress_payload(payload: TransactionPayload) -> bytes:
    """The events of a payload as one byte string."""
    if payload.compression == TRANSACTION_COMPRESSION_NONE:
        return payload.payload
    if payload.compression == TRANSACTION_COMPRESSION_ZSTD:
        return _zstd_decompress(payload.payload)
    raise BinlogError(f"unknown payload compression type {payload.compression} (MySQL defines 0 ZSTD and 255 NONE)")


def _zstandard() -> ModuleType:
    try:
        import zstandard
    except ImportError:
        raise BinlogError(
            "decoding MySQL compressed transactions (binlog_transaction_compression=ON) needs the 'zstandard' "
            "package: pip install zstandard"
        ) from None
    return zstandard


def _zstd_decompress(data: bytes) -> bytes:
    """Every zstd frame in ``data``, decompressed and joined; the last frame must be complete.

    MySQL's frames do not record their content size, so the one-shot ``decompress`` cannot be used; a
    decompression object reads one frame, and whatever follows it starts the next.
    """
    zstandard = _zstandard()
    if not data:
        raise TruncatedEventError("zstd payload is empty")
    parts: list[bytes] = []
    rest = data
    while rest:
        frame = zstandard.ZstdDecompressor().decompressobj()
        try:
            parts.append(frame.decompress(rest))
        except zstandard.ZstdError as exc:
            raise BinlogError(f"zstd payload does not decompress: {exc}") from None
        if not frame.eof:
            raise TruncatedEventError(f"zstd payload ends inside a frame ({len(data)} bytes given)")
        rest = frame.unused_data
    return b"".join(parts)


def split_events(data: bytes) -> list[bytes]:
    """The events of an uncompressed payload, each whole (header and body, no checksum); they must fill it exactly."""
    events: list[bytes] = []
    p = 0
    while p < len(data):
        if p + LOG_EVENT_HEADER_LEN > len(data):
            raise TruncatedEventError(
                f"payload ends inside the header of its event at offset {p} ({len(data) - p} bytes left)"
            )
        size = int.from_bytes(data[p + 9 : p + 13], "little")
        if size < LOG_EVENT_HEADER_LEN:
            raise BinlogError(f"event at payload offset {p} claims an impossible size {size}")
        if p + size > len(data):
            raise TruncatedEventError(
                f"event at payload offset {p} needs {size} bytes, the payload has {len(data) - p} left"
            )
        events.append(data[p : p + size])
        p += size
    return events
