"""Frame headers and checksums.

Request: a 32-byte little-endian header, then PayloadSize payload bytes::

    u16 Command, u16 Subcommand, u32 PayloadSize, u32 Version, u32 ClientID, u32 ClientToken,
    u32 Checksum, u32 Reserved1, u32 Reserved2

Checksum = every field but Checksum itself (Reserved1 and Reserved2 included, although the original README leaves
them out: both original clients add them) plus every payload byte as 0..255, mod 2^32.

Reply: a 9-byte header ``u8 Result, u32 PayloadSize, u32 Checksum`` then the payload, with
Checksum = Result + PayloadSize + every payload byte, mod 2^32. A reply always goes out as one ``bytes`` so the
server can send it in one write (the PHP client reads the header and payload with one ``socket_read`` each).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from .constants import LEGACY_VERSION, MAX_PAYLOAD, MAX_REPLY_PAYLOAD, REPLY_HEADER_SIZE, REQUEST_HEADER_SIZE
from .errors import BadChecksum, PayloadTooLarge, TruncatedFrame

_REQUEST = struct.Struct("<HHIIIIIII")
_REPLY = struct.Struct("<BII")
_MASK32 = 0xFFFFFFFF
_adler32 = zlib.adler32


#: Adler-32's first half is 1 + Σ bytes mod 65521: exactly 1 + Σ bytes for a chunk of up to 256 bytes (at most
#: 255 * 256 = 65280), so a payload's byte sum is the sum over its chunks of that half, minus one per chunk.
_SUM_CHUNK = 256
#: Below this size ``sum`` is faster than the chunked Adler-32.
_SUM_CHUNKED_FROM = 1024


def payload_sum(payload: bytes | bytearray | memoryview) -> int:
    """Σ payload bytes, each as 0..255.

    ``sum`` over bytes costs about 8 ns per byte, the cost of rendering a FETCH reply of cached records several
    times over; in chunks of Adler-32 (zlib, in C) it costs about a tenth of that.
    """
    size = len(payload)
    if size < _SUM_CHUNKED_FROM:
        return sum(payload)
    view = memoryview(payload)
    return (
        sum([_adler32(view[at : at + _SUM_CHUNK]) & 0xFFFF for at in range(0, size, _SUM_CHUNK)])
        - (size + _SUM_CHUNK - 1) // _SUM_CHUNK
    )


class RequestHeader(NamedTuple):
    command: int
    subcommand: int
    payload_size: int
    version: int
    client_id: int
    token: int
    checksum: int
    reserved1: int
    reserved2: int

    def expected_checksum(self, payload: bytes) -> int:
        return (
            self.command
            + self.subcommand
            + self.payload_size
            + self.version
            + self.client_id
            + self.token
            + self.reserved1
            + self.reserved2
            + payload_sum(payload)
        ) & _MASK32


class ReplyHeader(NamedTuple):
    result: int
    payload_size: int
    checksum: int

    def expected_checksum(self, payload: bytes) -> int:
        return (self.result + self.payload_size + payload_sum(payload)) & _MASK32


def request_checksum(
    command: int,
    payload: bytes = b"",
    *,
    subcommand: int = 0,
    version: int = LEGACY_VERSION,
    client_id: int = 0,
    token: int = 0,
    reserved1: int = 0,
    reserved2: int = 0,
) -> int:
    return (
        command + subcommand + len(payload) + version + client_id + token + reserved1 + reserved2 + payload_sum(payload)
    ) & _MASK32


def encode_request(
    command: int,
    payload: bytes = b"",
    *,
    subcommand: int = 0,
    version: int = LEGACY_VERSION,
    client_id: int = 0,
    token: int = 0,
    reserved1: int = 0,
    reserved2: int = 0,
    checksum: int | None = None,
) -> bytes:
    """A whole request frame. ``checksum`` overrides the computed one (tests of the bad-checksum path)."""
    if checksum is None:
        checksum = request_checksum(
            command,
            payload,
            subcommand=subcommand,
            version=version,
            client_id=client_id,
            token=token,
            reserved1=reserved1,
            reserved2=reserved2,
        )
    header = _REQUEST.pack(command, subcommand, len(payload), version, client_id, token, checksum, reserved1, reserved2)
    return header + payload


def decode_request_header(data: bytes, *, max_payload: int = MAX_PAYLOAD) -> RequestHeader:
    """The 32-byte request header. Raises PayloadTooLarge before the payload is read, so it never is."""
    if len(data) != REQUEST_HEADER_SIZE:
        raise TruncatedFrame(f"request header: {len(data)} bytes, a header is {REQUEST_HEADER_SIZE}")
    header = RequestHeader._make(_REQUEST.unpack(data))
    if header.payload_size > max_payload:
        raise PayloadTooLarge(
            f"request header: PayloadSize {header.payload_size} is over the limit of {max_payload} bytes "
            f"(command 0x{header.command:02x})"
        )
    return header


def verify_request(header: RequestHeader, payload: bytes) -> None:
    """Raise BadChecksum unless the header's checksum matches; the payload must be exactly PayloadSize bytes."""
    if len(payload) != header.payload_size:
        raise TruncatedFrame(f"request payload: {len(payload)} bytes, PayloadSize says {header.payload_size}")
    expected = header.expected_checksum(payload)
    if header.checksum != expected:
        raise BadChecksum(
            f"request checksum: header has 0x{header.checksum:08x}, header fields and payload sum to 0x{expected:08x}"
        )


def decode_request_frame(data: bytes, *, max_payload: int = MAX_PAYLOAD) -> tuple[RequestHeader, bytes]:
    """A whole request frame in one buffer (tests and tools): header checked, checksum verified."""
    if len(data) < REQUEST_HEADER_SIZE:
        raise TruncatedFrame(f"request frame: {len(data)} bytes, shorter than the {REQUEST_HEADER_SIZE}-byte header")
    header = decode_request_header(data[:REQUEST_HEADER_SIZE], max_payload=max_payload)
    payload = data[REQUEST_HEADER_SIZE:]
    if len(payload) != header.payload_size:
        raise TruncatedFrame(f"request frame: {len(payload)} payload bytes, PayloadSize says {header.payload_size}")
    verify_request(header, payload)
    return header, payload


def encode_reply(result: int, payload: bytes = b"") -> bytes:
    """A whole reply frame, header and payload in one ``bytes`` for a single write."""
    size = len(payload)
    return _REPLY.pack(result, size, (result + size + payload_sum(payload)) & _MASK32) + payload


def encode_reply_parts(result: int, parts: Sequence[bytes]) -> bytes:
    """A reply frame from payload pieces (FETCH records), joined once."""
    return encode_reply(result, b"".join(parts))


def decode_reply_header(data: bytes, *, max_payload: int = MAX_REPLY_PAYLOAD) -> ReplyHeader:
    if len(data) != REPLY_HEADER_SIZE:
        raise TruncatedFrame(f"reply header: {len(data)} bytes, a header is {REPLY_HEADER_SIZE}")
    header = ReplyHeader._make(_REPLY.unpack(data))
    if header.payload_size > max_payload:
        raise PayloadTooLarge(
            f"reply header: PayloadSize {header.payload_size} is over the limit of {max_payload} bytes "
            f"(result 0x{header.result:02x})"
        )
    return header


def verify_reply(header: ReplyHeader, payload: bytes) -> None:
    if len(payload) != header.payload_size:
        raise TruncatedFrame(f"reply payload: {len(payload)} bytes, PayloadSize says {header.payload_size}")
    expected = header.expected_checksum(payload)
    if header.checksum != expected:
        raise BadChecksum(
            f"reply checksum: header has 0x{header.checksum:08x}, result, size and payload sum to 0x{expected:08x}"
        )


def decode_reply_frame(data: bytes, *, max_payload: int = MAX_REPLY_PAYLOAD) -> tuple[ReplyHeader, bytes]:
    if len(data) < REPLY_HEADER_SIZE:
        raise TruncatedFrame(f"reply frame: {len(data)} bytes, shorter than the {REPLY_HEADER_SIZE}-byte header")
    header = decode_reply_header(data[:REPLY_HEADER_SIZE], max_payload=max_payload)
    payload = data[REPLY_HEADER_SIZE:]
    verify_reply(header, payload)
    return header, payload
