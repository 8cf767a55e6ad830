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
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from .constants import LEGACY_VERSION, MAX_PAYLOAD, MAX_REPLY_PAYLOAD
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
    if size <= _SUM_CHUNK:  # Adler-32's first half is 1 + the byte sum, which cannot wrap: 1 + 256 * 255 < 65521
        return (_adler32(payload) & 0xFFFF) - 1
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
        return self.checksum_with(payload_sum(payload))

    def checksum_with(self, summed_payload: int) -> int:
        """The checksum of this header with a payload whose bytes sum to ``summed_payload`` (a payload summed as it
        streams in, never kept whole)."""
        return (
            self.command
            + self.subcommand
            + self.payload_size
            + self.version
            + self.client_id
            + self.token
            + self.reserved1
            + self.reserved2
            + summed_payload
        ) & _MASK32


class ReplyHeader(NamedTuple):
    result: int
    payload_size: int
    checksum: int

    def expected_checksum(self, payload: bytes) -> int:
        return self.checksum_with(payload_sum(payload))

    def checksum_with(self, summed_payload: int) -> int:
        return (self.result + self.payload_size + summed_payload) & _MASK32


_HeaderT = TypeVar("_HeaderT", RequestHeader, ReplyHeader)


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


@dataclass(frozen=True, slots=True)
class _Framing(Generic[_HeaderT]):
    """How one direction's frames are laid out and named in errors; the request and reply paths share it."""

    kind: str  # "request" or "reply", each error's first word
    layout: struct.Struct
    header_type: type[_HeaderT]
    first: str  # the header's first field (command, result), named by PayloadTooLarge
    summed: str  # what the checksum adds up, named by BadChecksum

    def decode_header(self, data: bytes, max_payload: int) -> _HeaderT:
        if len(data) != self.layout.size:
            raise TruncatedFrame(f"{self.kind} header: {len(data)} bytes, a header is {self.layout.size}")
        header = self.header_type._make(self.layout.unpack(data))
        if header.payload_size > max_payload:
            raise PayloadTooLarge(
                f"{self.kind} header: PayloadSize {header.payload_size} is over the limit of {max_payload} bytes "
                f"({self.first} 0x{header[0]:02x})"
            )
        return header

    def verify(self, header: _HeaderT, payload: bytes) -> None:
        """Raise BadChecksum unless the header's checksum matches; the payload must be exactly PayloadSize bytes."""
        if len(payload) != header.payload_size:
            raise TruncatedFrame(f"{self.kind} payload: {len(payload)} bytes, PayloadSize says {header.payload_size}")
        self.verify_summed(header, payload_sum(payload))

    def verify_summed(self, header: _HeaderT, summed_payload: int) -> None:
        """Raise BadChecksum unless the header's checksum matches a payload whose bytes sum to ``summed_payload`` (one
        summed as it streamed in, never kept whole)."""
        expected = header.checksum_with(summed_payload)
        if header.checksum != expected:
            raise BadChecksum(
                f"{self.kind} checksum: header has 0x{header.checksum:08x}, {self.summed} sum to 0x{expected:08x}"
            )

    def decode_frame(self, data: bytes, max_payload: int) -> tuple[_HeaderT, bytes]:
        size = self.layout.size
        if len(data) < size:
            raise TruncatedFrame(f"{self.kind} frame: {len(data)} bytes, shorter than the {size}-byte header")
        header = self.decode_header(data[:size], max_payload)
        payload = data[size:]
        self.verify(header, payload)
        return header, payload


_REQUESTS = _Framing("request", _REQUEST, RequestHeader, "command", "header fields and payload")
_REPLIES = _Framing("reply", _REPLY, ReplyHeader, "result", "result, size and payload")

#: The server verifies every request: bound methods, so no extra call per frame.
verify_request = _REQUESTS.verify
verify_summed_request = _REQUESTS.verify_summed
verify_reply = _REPLIES.verify


def decode_request_header(data: bytes, *, max_payload: int = MAX_PAYLOAD) -> RequestHeader:
    """The 32-byte request header. Raises PayloadTooLarge before the payload is read, so it never is."""
    return _REQUESTS.decode_header(data, max_payload)


def decode_request_frame(data: bytes, *, max_payload: int = MAX_PAYLOAD) -> tuple[RequestHeader, bytes]:
    """A whole request frame in one buffer (tests and tools): header checked, checksum verified."""
    return _REQUESTS.decode_frame(data, max_payload)


def encode_reply(result: int, payload: bytes = b"") -> bytes:
    """A whole reply frame, header and payload in one ``bytes`` for a single write."""
    return encode_summed_reply(result, payload, payload_sum(payload))


def encode_summed_reply(result: int, payload: bytes, byte_sum: int) -> bytes:
    """:func:`encode_reply` of a payload whose byte sum the caller knows (made of pieces summed once, ahead)."""
    size = len(payload)
    return _REPLY.pack(result, size, (result + size + byte_sum) & _MASK32) + payload


def encode_reply_parts(result: int, parts: Sequence[bytes]) -> bytes:
    """A reply frame from payload pieces (FETCH records), joined once."""
    return encode_reply(result, b"".join(parts))


def decode_reply_header(data: bytes, *, max_payload: int = MAX_REPLY_PAYLOAD) -> ReplyHeader:
    return _REPLIES.decode_header(data, max_payload)


def decode_reply_frame(data: bytes, *, max_payload: int = MAX_REPLY_PAYLOAD) -> tuple[ReplyHeader, bytes]:
    return _REPLIES.decode_frame(data, max_payload)
