"""Primitive wire types: little-endian integers and the NUL-ended, length-prefixed string ("lstring").

An lstring is ``u32 len = n + 1``, then n bytes, then one 0x00. Both original clients read ``len - 1`` bytes and skip
one, so the NUL is mandatory and len is never 0. :class:`Reader` is a bounds-checked cursor: every read past the end
or any bad value raises :class:`MalformedPayload` naming the field, its offset and the sizes involved.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from .constants import MAX_NAME
from .errors import MalformedPayload

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
U64 = struct.Struct("<Q")

NUL = b"\x00"
#: The lstring of the empty string, the most common one on the wire (legacy INSERT before images).
EMPTY_LSTRING = b"\x01\x00\x00\x00\x00"

_pack_u32 = U32.pack


def lstring(data: bytes) -> bytes:
    """Encode bytes as an lstring."""
    return _pack_u32(len(data) + 1) + data + NUL


@lru_cache(maxsize=65536)
def name_lstring(name: str) -> bytes:
    """Encode a name (schema, table, column, file) as an lstring; cached because the same few names recur."""
    return lstring(name.encode("utf-8"))


def text_lstring(text: str) -> bytes:
    return lstring(text.encode("utf-8"))


def text_message(text: str) -> bytes:
    """The payload of error replies: text then one NUL, as in the original's ``"Invalid Checksum\\0"``."""
    return text.encode("utf-8") + NUL


class Reader:
    """A cursor over one payload; ``what`` (the command name) prefixes every error message."""

    __slots__ = ("data", "limit", "offset", "what")

    def __init__(self, data: bytes, what: str, offset: int = 0, limit: int | None = None) -> None:
        self.data = data
        self.offset = offset
        #: Reads stop here: the end of the payload, or of one record inside it.
        self.limit = len(data) if limit is None else limit
        self.what = what

    def fail(self, message: str) -> MalformedPayload:
        return MalformedPayload(f"{self.what}: {message}")

    def _need(self, size: int, field: str) -> int:
        start = self.offset
        if start + size > self.limit:
            raise self.fail(
                f"{field} at offset {start} needs {size} bytes, only {self.limit - start} left "
                f"(payload is {len(self.data)} bytes)"
            )
        self.offset = start + size
        return start

    def u8(self, field: str) -> int:
        return self.data[self._need(1, field)]

    def u16(self, field: str) -> int:
        value: int = U16.unpack_from(self.data, self._need(2, field))[0]
        return value

    def u32(self, field: str) -> int:
        value: int = U32.unpack_from(self.data, self._need(4, field))[0]
        return value

    def i32(self, field: str) -> int:
        value: int = I32.unpack_from(self.data, self._need(4, field))[0]
        return value

    def u64(self, field: str) -> int:
        value: int = U64.unpack_from(self.data, self._need(8, field))[0]
        return value

    def unpack(self, fmt: struct.Struct, field: str) -> tuple[int, ...]:
        return fmt.unpack_from(self.data, self._need(fmt.size, field))

    def raw(self, size: int, field: str) -> bytes:
        start = self._need(size, field)
        return self.data[start : start + size]

    def lstring(self, field: str, max_size: int | None = None) -> bytes:
        """The bytes of an lstring, without its NUL."""
        at = self.offset
        size = self.u32(f"{field} length")
        if size == 0:
            raise self.fail(f"{field} at offset {at}: length 0, but a string carries at least its NUL byte")
        if max_size is not None and size - 1 > max_size:
            raise self.fail(f"{field} at offset {at}: {size - 1} bytes, more than the limit of {max_size}")
        start = self._need(size, field)
        end = start + size - 1
        if self.data[end] != 0:
            raise self.fail(f"{field} at offset {at}: the string's last byte is 0x{self.data[end]:02x}, not NUL")
        return self.data[start:end]

    def text(self, field: str, max_size: int | None = MAX_NAME) -> str:
        """An lstring holding UTF-8 text (names)."""
        at = self.offset
        data = self.lstring(field, max_size)
        # No name holds a NUL (MySQL refuses it in identifiers, and so does a SQL text): one inside is a client bug.
        inside = data.find(NUL)
        if inside >= 0:
            raise self.fail(f"{field} at offset {at}: a NUL byte inside the text (at byte {inside})")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{field} at offset {at}: not UTF-8 ({exc.reason} at byte {exc.start})") from None

    def remaining(self) -> int:
        return self.limit - self.offset

    def end(self) -> None:
        """Refuse trailing bytes: a payload longer than its fields is a client bug worth reporting."""
        if self.offset != self.limit:
            raise self.fail(
                f"{self.limit - self.offset} unexpected bytes after the last field at offset {self.offset} "
                f"(payload is {len(self.data)} bytes)"
            )
