"""Small readers for the binlog's integer encodings."""

from __future__ import annotations

from binlog.errors import TruncatedEventError


def lenenc_int(buf: bytes, pos: int) -> tuple[int, int]:
    """A length-encoded integer at ``pos``: (value, next position)."""
    try:
        first = buf[pos]
        if first < 0xFB:
            return first, pos + 1
        if first == 0xFC:
            return buf[pos + 1] | buf[pos + 2] << 8, pos + 3
        if first == 0xFD:
            return int.from_bytes(buf[pos + 1 : pos + 4], "little"), pos + 4
        if first == 0xFE:
            return int.from_bytes(buf[pos + 1 : pos + 9], "little"), pos + 9
    except IndexError:
        raise TruncatedEventError(f"length-encoded integer at offset {pos} runs past the event") from None
    # 0xFB is NULL in result sets and 0xFF an error marker; neither is valid inside an event.
    raise TruncatedEventError(f"invalid length-encoded integer prefix {first:#x} at offset {pos}")


def lenenc_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    length, pos = lenenc_int(buf, pos)
    if pos + length > len(buf):
        raise TruncatedEventError(f"length-encoded string at offset {pos} runs past the event")
    return bytes(buf[pos : pos + length]), pos + length


def need(buf: bytes, end: int, what: str) -> None:
    if end > len(buf):
        raise TruncatedEventError(f"{what}: needs {end} bytes, event has {len(buf)}")
