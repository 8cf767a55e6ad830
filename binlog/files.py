"""Reading binlog files with the same decoder the live stream uses: from a path, a binary file object or bytes.

A file is read in chunks, so a 1 GiB archived binlog never has to fit in memory at once; content that is already in
memory (a Spark task's copy of a file from HDFS or S3, say) is sliced as it is. Both go through one event splitter,
so their errors read the same.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from binlog.changes import Transaction
from binlog.constants import BIN_LOG_HEADER, LOG_EVENT_BINLOG_IN_USE_F, LOG_EVENT_HEADER_LEN
from binlog.errors import BinlogError, TruncatedEventError
from binlog.parser import EventDecoder
from binlog.schema import SchemaProvider

# Bytes asked of a file object at a time: big enough that a read costs little next to decoding what it returns,
# small enough that the buffer stays far below the size of an archived binlog. An event longer than this is read
# whole, in one request of its own size.
CHUNK_SIZE = 1 << 20

#: Where an event's flags begin (after its timestamp, type, server id, size and next position).
FLAGS_OFFSET = 17

BinlogContent = BinaryIO | bytes | bytearray | memoryview


class _Buffer:
    """A window on a binlog's bytes: what has been read and not yet consumed, refilled from ``read`` on demand."""

    __slots__ = ("base", "chunk_size", "data", "offset", "read")

    def __init__(self, content: BinlogContent, chunk_size: int) -> None:
        if isinstance(content, bytes | bytearray | memoryview):
            self.data = bytes(content)
            self.read = None
        else:
            self.data = b""
            self.read = content.read
        self.offset = 0  # index in ``data`` of the next unconsumed byte
        self.base = 0  # position in the file of data[0]
        self.chunk_size = chunk_size

    @property
    def position(self) -> int:
        return self.base + self.offset

    def available(self, needed: int) -> int:
        """Unconsumed bytes at hand after reading until there are ``needed`` or the content ends."""
        have = len(self.data) - self.offset
        while have < needed and self.read is not None:
            chunk = self.read(max(self.chunk_size, needed - have))
            if not chunk:
                self.read = None
                break
            # Keep only the unconsumed tail: the buffer never holds more than one chunk and one event.
            self.data = self.data[self.offset :] + chunk
            self.base += self.offset
            self.offset = 0
            have = len(self.data)
        return have

    def peek(self, start: int, end: int) -> bytes:
        return self.data[self.offset + start : self.offset + end]

    def take(self, size: int) -> bytes:
        event = self.data[self.offset : self.offset + size]
        self.offset += size
        return event

    def skip_to(self, position: int) -> None:
        """Consumes up to ``position`` (at or after the current one), reading past what it does not keep."""
        ahead = position - self.position
        if ahead > 0:
            self.available(ahead)
            self.offset += min(ahead, len(self.data) - self.offset)


def _next_event(buffer: _Buffer, name: str) -> bytes:
    pos = buffer.position
    have = buffer.available(LOG_EVENT_HEADER_LEN)
    if have < LOG_EVENT_HEADER_LEN:
        raise TruncatedEventError(f"{name}: file ends inside the event header at position {pos}")
    size = int.from_bytes(buffer.peek(9, 13), "little")
    if size < LOG_EVENT_HEADER_LEN:
        raise TruncatedEventError(f"{name}: event at position {pos} claims an impossible size {size}")
    have = buffer.available(size)
    if have < size:
        raise TruncatedEventError(f"{name}: event at position {pos} needs {size} bytes, the file has {have} left")
    return buffer.take(size)


def iter_events(
    content: BinlogContent, *, name: str = "binlog", start: int = 4, chunk_size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """The raw events of one binlog file's content, each as bytes (header, body and checksum).

    ``content`` is the file's bytes, or a binary file object positioned at its start (read in ``chunk_size``
    pieces; not closed here). ``name`` is what errors call the file.
    """
    buffer = _Buffer(content, chunk_size)
    if buffer.available(4) < 4 or buffer.take(4) != BIN_LOG_HEADER:
        raise BinlogError(f"{name} is not a binlog file (no \\xfebin magic)")
    if start > 4:
        # The format description (first event) is needed to read the rest; then jump.
        yield _next_event(buffer, name)
        buffer.skip_to(start)
    while buffer.available(1):
        yield _next_event(buffer, name)


def iter_file_events(path: str | os.PathLike[str], *, start: int = 4) -> Iterator[bytes]:
    """The raw events of one binlog file on disk, read in chunks."""
    with open(path, "rb") as handle:
        yield from iter_events(handle, name=os.fspath(path), start=start)


def read_binlog_contents(
    files: Iterable[tuple[str, BinlogContent]],
    *,
    schema_provider: SchemaProvider | None = None,
    start: int = 4,
    verify_checksum: bool = True,
) -> Iterator[Transaction]:
    """Committed transactions from (name, content) pairs of consecutive binlog files of one source, in order.

    ``name`` is the file's name or URI; its last path component (``binlog.000042``) goes into the positions.
    ``content`` is as for :func:`iter_events`. ``start`` is a position in the first file (an event boundary).
    """
    yield from decode_files(EventDecoder(schema_provider, verify_checksum=verify_checksum), files, start=start)


def decode_files(
    decoder: EventDecoder, files: Iterable[tuple[str, BinlogContent]], *, start: int = 4
) -> Iterator[Transaction]:
    """What ``decoder`` makes of the events of (name, content) pairs of consecutive binlog files: each transaction
    it completes.

    A source writes a transaction into one file whole, so a file that ends inside one was cut at an event boundary
    (TruncatedEventError, after the transactions before it), unless the source is still writing it: its format
    description says it is in use, and its open end is the transaction being written, left out as not committed.
    """
    for index, (name, content) in enumerate(files):
        decoder.file = os.path.basename(name)
        decoder.pos = 4
        events = iter_events(content, name=name, start=start if index == 0 else 4)
        first = next(events, None)  # the format description, whatever the start
        if first is None:
            continue
        in_use = bool(first[FLAGS_OFFSET] & LOG_EVENT_BINLOG_IN_USE_F)
        committed = start if index == 0 else 4
        for event in itertools.chain((first,), events):
            trx = decoder.feed(event)
            if trx is not None:
                committed = trx.position.pos
                yield trx
        if decoder.transaction_open and not in_use:
            raise TruncatedEventError(
                f"{name}: the file ends inside a transaction begun after position {committed}, before its commit "
                f"(a closed binlog ends between transactions): that transaction is left out"
            )


def read_binlog_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    schema_provider: SchemaProvider | None = None,
    start: int = 4,
    verify_checksum: bool = True,
) -> Iterator[Transaction]:
    """Committed transactions from binlog files on disk, in the order given (consecutive files of one source).

    Without a schema provider, column names come from the row metadata when the files have it, else are @1, @2...
    ``start`` is a position in the first file to begin at (it must be an event boundary).
    """
    yield from read_binlog_contents(
        opened(paths), schema_provider=schema_provider, start=start, verify_checksum=verify_checksum
    )


def opened(paths: Iterable[str | os.PathLike[str]]) -> Iterator[tuple[str, BinaryIO]]:
    """Each file open while its events are read; closed before the next one is opened, or when reading stops."""
    for path in paths:
        with open(path, "rb") as handle:
            yield os.fspath(path), handle
