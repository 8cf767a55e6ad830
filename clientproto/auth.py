"""AUTH keys: FNV-1a 64 of the shared secret, in every variant the original clients send.

* The original server and Pascal client hash with an off-by-one loop over a 1-based string: they hash a 0x00 byte
  (the top byte of the string's length field) followed by the secret without its last character.
* The PHP client hashes the secret with standard FNV-1a 64.
* PHP's ``pack("Q", $gmp)`` then clears bit 63 of whatever it sends.

A server accepts all four (:func:`accepted_keys`); this package's client sends :func:`server_key`, which the original
relay also accepts. The key is a static value sent in clear text: it identifies a deployment, it is no password
exchange, so the relay should only be reachable from trusted networks.
"""

from __future__ import annotations

import secrets

FNV64_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x00000100000001B3
FNV32_BASIS = 0x811C9DC5
FNV32_PRIME = 0x01000193
_MASK64 = 0xFFFFFFFFFFFFFFFF
_BIT63 = 1 << 63


def _secret_bytes(secret: str | bytes) -> bytes:
    # A secret read from a file that is not UTF-8 keeps its bytes (surrogateescape), as the original hashed them.
    return secret.encode("utf-8", "surrogateescape") if isinstance(secret, str) else bytes(secret)


def fnv1a64(data: bytes) -> int:
    h = FNV64_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & _MASK64
    return h


def fnv1a32(data: bytes) -> int:
    h = FNV32_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & 0xFFFFFFFF
    return h


def server_key(secret: str | bytes) -> int:
    """The key as the original server computed it (and the Pascal client sends it)."""
    data = _secret_bytes(secret)
    return fnv1a64(b"\x00" + data[:-1]) if data else FNV64_BASIS


def php_key(secret: str | bytes) -> int:
    """The key the PHP client computes (standard FNV-1a 64), before ``pack("Q")`` clears bit 63."""
    return fnv1a64(_secret_bytes(secret))


def accepted_keys(secret: str | bytes) -> frozenset[int]:
    """Every AuthKey a server accepts for ``secret``. An empty secret is refused: its key is the public FNV basis."""
    if not _secret_bytes(secret):
        raise ValueError("the AUTH secret is empty: its key would be the well-known FNV-1a basis 0xCBF29CE484222325")
    keys = (server_key(secret), php_key(secret))
    return frozenset(keys) | frozenset(key & ~_BIT63 for key in keys)


def new_token() -> int:
    """A random, non-zero session token (0 is what a client sends before AUTH)."""
    while True:
        token = secrets.randbits(32)
        if token:
            return token
