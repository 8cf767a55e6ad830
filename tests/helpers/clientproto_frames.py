"""The relay protocol's reference frames: the bytes of the original implementation's appendix (PING, AUTH with the
original key, a bad-checksum reply, an empty poll reply), written from the reference, independently of the codec."""

from __future__ import annotations


def h(text: str) -> bytes:
    """Bytes from the reference's hex notation ("01 00 ...", quoted text allowed as "PONG\\0")."""
    return bytes.fromhex(text)


# The reference's appendix.
PING_REQ = h("01 00 00 00 00 00 00 00 20 00 01 00 00 00 00 00 00 00 00 00 21 00 01 00 00 00 00 00 00 00 00 00")
PING_REP = h("00 05 00 00 00 39 01 00 00 50 4f 4e 47 00")
AUTH_REQ = h(
    "02 00 00 00 1e 00 00 00 20 00 01 00 00 00 00 00 00 00 00 00 57 08 01 00 00 00 00 00 00 00 00 00"
    "7f 56 d9 c6 a9 46 f2 0b 00 00 00 00 00 00 00 00 0a 00 00 00 74 65 73 74 2d 74 65 73 74 00"
)
AUTH_REP = h("00 10 00 00 00 0e 05 00 00 7f 56 d9 c6 a9 46 f2 0b 01 56 34 12 01 00 00 00")
BAD_CHECKSUM_REP = h("ff 11 00 00 00 2a 07 00 00") + b"Invalid Checksum\x00"
EMPTY_POLL_REP = h("fc 00 00 00 00 fc 00 00 00")
