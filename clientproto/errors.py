"""Errors of the relay protocol.

Every decoding failure raises a :class:`ProtocolError` subclass whose message names the field, offset and sizes,
and whose ``result`` is the result code a server answers with. Nothing in the codec raises anything else on bad
input, so a server can catch ``ProtocolError`` alone.
"""

from __future__ import annotations

from .constants import Result


class ProtocolError(Exception):
    """Bytes that do not follow the protocol."""

    #: Result code a server replies with for this error.
    result: int = Result.MALFORMED
    #: Whether a server must close the connection after replying (the stream can no longer be trusted).
    close: bool = False


class TruncatedFrame(ProtocolError):
    """Fewer bytes than a header needs."""

    close = True


class PayloadTooLarge(ProtocolError):
    """PayloadSize above the limit: the payload is not read, so the server replies then closes."""

    close = True


class ReplyTooLarge(PayloadTooLarge):
    """Client side: a reply's PayloadSize is over the client's ``max_reply_payload``. Retrying cannot help (the
    relay sends the same reply again), so the client closes the connection and raises this instead."""


class BadChecksum(ProtocolError):
    """The checksum field does not match the header fields and payload."""

    result = Result.AUTH_FAILED
    close = True


class MalformedPayload(ProtocolError):
    """A payload that does not decode: short, too long, a bad string, a value out of range."""


class UnknownCommand(ProtocolError):
    """A command number the protocol does not define."""

    result = Result.UNKNOWN_COMMAND


class RelayError(Exception):
    """The server answered with a result code other than the one expected (client side)."""

    def __init__(self, result: int, message: str) -> None:
        super().__init__(message)
        self.result = result


class AuthFailed(RelayError):
    """AUTH refused (0xFF): wrong secret or empty name."""


class BadSession(RelayError):
    """0xFB: the request did not carry this connection's session (ClientID and token)."""


class ClientReset(RelayError):
    """After a reconnection the relay knows this client under another ClientID (it was deleted, and the AUTH
    registered the name again): its queue starts over at Seq 1, so a request naming sequence numbers of the old one
    (ACK, FETCH's AckUpTo) is not sent again, where it would acknowledge entries never delivered."""


class ConnectionLost(ConnectionError):
    """The connection to the relay failed and the client was told not to reconnect (or ran out of retries)."""
