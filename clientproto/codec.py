"""The server's entry points: decode any request, build any reply frame.

A server's loop, in outline (asyncio)::

    header = decode_request_header(await reader.readexactly(REQUEST_HEADER_SIZE))  # PayloadTooLarge: reply, close
    payload = await reader.readexactly(header.payload_size)
    verify_request(header, payload)                         # BadChecksum: send BAD_CHECKSUM_REPLY, close
    request = decode_request(header.command, payload)       # UnknownCommand 0xFD / MalformedPayload 0xFA
    ... check the session (every command but PING and AUTH) ... answer with one of the frames below

and on any :class:`ProtocolError` ``exc``: ``writer.write(error_reply(exc))``, then close if ``exc.close``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .constants import Command, Result
from .errors import BadChecksum, ProtocolError, UnknownCommand
from .extensions import (
    AckRequest,
    FetchRequest,
    SnapshotItem,
    SnapshotRequest,
    Status,
    StatusRequest,
    decode_ack,
    decode_fetch,
    decode_removefilter,
    decode_snapshot,
    decode_status,
    encode_ack_reply,
    encode_fetch_reply,
    encode_removefilter_reply,
    encode_snapshot_reply,
    encode_status_reply,
)
from .header import encode_reply, encode_reply_parts
from .payloads import (
    PONG,
    AddFilterRequest,
    AuthRequest,
    FilterIdentity,
    PingRequest,
    PollRequest,
    PollV2Request,
    decode_addfilter,
    decode_auth,
    decode_ping,
    decode_poll,
    decode_pollv2,
    encode_auth_reply,
)
from .wire import text_message

Request = (
    PingRequest
    | AuthRequest
    | AddFilterRequest
    | PollRequest
    | PollV2Request
    | FetchRequest
    | AckRequest
    | FilterIdentity
    | StatusRequest
    | SnapshotRequest
)

DECODERS: dict[int, Callable[[bytes], Request]] = {
    Command.PING: decode_ping,
    Command.AUTH: decode_auth,
    Command.ADDFILTER: decode_addfilter,
    Command.POLL: decode_poll,
    Command.POLLV2: decode_pollv2,
    Command.FETCH: decode_fetch,
    Command.ACK: decode_ack,
    Command.REMOVEFILTER: decode_removefilter,
    Command.STATUS: decode_status,
    Command.SNAPSHOT: decode_snapshot,
}

#: Commands a connection may send without (or regardless of) a session: the original clients PING with whatever
#: ClientID/token they hold, and AUTH starts a session.
SESSIONLESS_COMMANDS = frozenset({Command.PING, Command.AUTH})

_MAX_MESSAGE = 512


def decode_request(command: int, payload: bytes) -> Request:
    """The request dataclass for a command's payload; raises UnknownCommand or MalformedPayload."""
    decoder = DECODERS.get(command)
    if decoder is None:
        raise UnknownCommand(f"command 0x{command:04x} is unknown")
    return decoder(payload)


# -------------------------------------------------------------------------------------------- whole reply frames

PONG_REPLY = encode_reply(Result.OK, PONG)
OK_REPLY = encode_reply(Result.OK)
EMPTY_REPLY = encode_reply(Result.EMPTY)
BAD_CHECKSUM_MESSAGE = b"Invalid Checksum\x00"
BAD_CHECKSUM_REPLY = encode_reply(Result.AUTH_FAILED, BAD_CHECKSUM_MESSAGE)
BAD_SESSION_REPLY = encode_reply(
    Result.BAD_SESSION, text_message("no session: AUTH first, then send its ClientID and ClientToken")
)


def message_reply(result: int, message: str) -> bytes:
    """An error reply whose payload is the message text and a NUL (the original's bad-checksum convention)."""
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return encode_reply(result, text_message(message))


def error_reply(exc: ProtocolError) -> bytes:
    """The reply to a request that raised ``exc``; the bad-checksum one is the original's, byte for byte."""
    if isinstance(exc, BadChecksum):
        return BAD_CHECKSUM_REPLY
    return message_reply(exc.result, str(exc))


def bad_session_reply(client_id: int, token: int) -> bytes:
    return message_reply(
        Result.BAD_SESSION,
        f"ClientID {client_id} / ClientToken 0x{token:08x} is not this connection's session: AUTH first",
    )


def auth_reply(key: int, token: int, client_id: int) -> bytes:
    """Successful AUTH: 0x00 with the echoed key, the session token and the client's stable ClientID."""
    return encode_reply(Result.OK, encode_auth_reply(key, token, client_id))


def auth_failed_reply(key: int) -> bytes:
    """Refused AUTH: 0xFF with the original's layout, token and id 0."""
    return encode_reply(Result.AUTH_FAILED, encode_auth_reply(key, 0, 0))


def poll_reply(payload: bytes) -> bytes:
    """POLL/POLLV2 with an event (payload from encode_poll / encode_pollv2)."""
    return encode_reply(Result.OK, payload)


def fetch_reply(queue_size: int, records: Sequence[bytes]) -> bytes:
    """FETCH with records (from encode_record); with none it is EMPTY_REPLY."""
    if not records:
        return EMPTY_REPLY
    return encode_reply_parts(Result.OK, encode_fetch_reply(queue_size, records))


def ack_reply(acked_seq: int, removed: int) -> bytes:
    return encode_reply(Result.OK, encode_ack_reply(acked_seq, removed))


def removefilter_reply(removed: bool) -> bytes:
    return encode_reply(Result.OK, encode_removefilter_reply(removed))


def status_reply(status: Status) -> bytes:
    return encode_reply(Result.OK, encode_status_reply(status))


def snapshot_reply(items: Sequence[SnapshotItem]) -> bytes:
    return encode_reply(Result.OK, encode_snapshot_reply(items))
