"""The exceptions the binlog client raises."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from binlog.position import Position


class BinlogError(Exception):
    """Anything wrong with the binlog or the replication connection that the caller must see."""


class ChecksumError(BinlogError):
    """An event's CRC32 does not match its bytes: the stream stops, nothing after it is decoded."""

    def __init__(self, file: str, pos: int, expected: int, actual: int) -> None:
        super().__init__(
            f"binlog checksum mismatch in {file or '?'} at position {pos}: "
            f"event says {expected:#010x}, bytes give {actual:#010x}"
        )
        self.file = file
        self.pos = pos
        self.expected = expected
        self.actual = actual


class TruncatedEventError(BinlogError):
    """An event (or a value inside it) is shorter than its own header or layout says."""


class RolledBackPartError(BinlogError):
    """A ROLLBACK TO SAVEPOINT takes back rows of a transaction that already went out in parts (``chunk_rows``):
    the transaction must be read again from ``start`` and handed on whole."""

    def __init__(self, start: Position, message: str) -> None:
        super().__init__(message)
        self.start = start


class PurgedPositionError(BinlogError):
    """The source no longer has (or never had) the binlog file or GTID the stream was asked to start from."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(f"cannot replicate from binlog {file or '(gtid start)'}: {message}")
        self.file = file


class BinlogResetError(PurgedPositionError):
    """A binlog file of the source is not the one of that name read before: the source began it at another time (its
    FORMAT_DESCRIPTION's timestamp). The binlog was reset (RESET MASTER), or a restored or another server answers at
    this address: a position in the old file means nothing in the new one, and what the old file held after it is
    gone. Never retried."""

    def __init__(self, file: str, known: int, found: int) -> None:
        super().__init__(
            file,
            f"the source's {file} was begun at {_utc(found)}, but the {file} read before was begun at {_utc(known)}: "
            "the source's binlog was reset (RESET MASTER), or a restored or another server answers at this address",
        )
        self.known = known
        self.found = found


def _utc(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class UnreadablePositionError(BinlogError):
    """The binlog cannot be read from where it was asked to, for a reason other than purging: a position
    inside an event or past its file's end, a binlog truncated on the source, an event over its max_allowed_packet.
    No retry helps, and skipping forward would be a guess: the operator chooses the position."""

    def __init__(self, file: str, pos: int, message: str) -> None:
        super().__init__(f"cannot read the binlog from {file}:{pos}: {message}")
        self.file = file
        self.pos = pos


class ConnectionLostError(BinlogError):
    """The replication connection broke (closed, reset, timed out): the stream reconnects after it."""


class ServerError(BinlogError):
    """The source answered the replication request with an error packet."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"source error {code}: {message}")
        self.code = code
        self.server_message = message


class AccessDeniedError(BinlogError):
    """The source refused the user, or an operation for lack of a privilege: retrying cannot help.

    ``privilege`` names what is missing ("" when the login itself was refused: wrong user, password or host).
    """

    def __init__(self, code: int, user: str, privilege: str, server_message: str) -> None:
        if privilege:
            text = f"source user '{user}' lacks the {privilege} privilege (source error {code}: {server_message})"
        else:
            text = f"cannot connect as user '{user}': the source refused it (source error {code}: {server_message})"
        super().__init__(text)
        self.code = code
        self.user = user
        self.privilege = privilege
        self.server_message = server_message
