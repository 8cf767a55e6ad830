"""Reading binlog files from disk with the same decoder the live stream uses."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from binlog.changes import Transaction
from binlog.constants import BIN_LOG_HEADER, LOG_EVENT_HEADER_LEN
from binlog.errors import BinlogError, TruncatedEventError
from binlog.parser import EventDecoder
from binlog.schema import SchemaProvider


def iter_file_events(path: str | os.PathLike[str], *, start: int = 4) -> Iterator[bytes]:
    """The raw events of one binlog file, each as bytes (header, body and checksum)."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != BIN_LOG_HEADER:
        raise BinlogError(f"{os.fspath(path)} is not a binlog file (no \\xfebin magic)")
    pos = 4
    if start > 4:
        # The format description (first event) is needed to read the rest; then jump.
        if len(data) < pos + LOG_EVENT_HEADER_LEN:
            raise TruncatedEventError(f"{os.fspath(path)}: file ends inside the first event header")
        size = int.from_bytes(data[pos + 9 : pos + 13], "little")
        yield data[pos : pos + size]
        pos = start
    end = len(data)
    while pos < end:
        if pos + LOG_EVENT_HEADER_LEN > end:
            raise TruncatedEventError(f"{os.fspath(path)}: file ends inside the event header at position {pos}")
        size = int.from_bytes(data[pos + 9 : pos + 13], "little")
        if size < LOG_EVENT_HEADER_LEN:
            raise TruncatedEventError(f"{os.fspath(path)}: event at position {pos} claims an impossible size {size}")
        if pos + size > end:
            raise TruncatedEventError(
                f"{os.fspath(path)}: event at position {pos} needs {size} bytes, the file has {end - pos} left"
            )
        yield data[pos : pos + size]
        pos += size


def read_binlog_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    schema_provider: SchemaProvider | None = None,
    start: int = 4,
    verify_checksum: bool = True,
) -> Iterator[Transaction]:
    """Committed transactions from binlog files, in the order given (consecutive files of one source).

    Without a schema provider, column names come from the row metadata when the files have it, else are @1, @2...
    ``start`` is a position in the first file to begin at (it must be an event boundary).
    """
    decoder = EventDecoder(schema_provider, verify_checksum=verify_checksum)
    for index, path in enumerate(paths):
        decoder.file = os.path.basename(os.fspath(path))
        decoder.pos = 4
        for event in iter_file_events(path, start=start if index == 0 else 4):
            trx = decoder.feed(event)
            if trx is not None:
                yield trx
