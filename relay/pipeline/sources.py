"""Readers that run inside Spark tasks: one input file's content in, its :class:`FileTally` records out.

Spark reads a file of a distributed file system and hands its task the bytes; a local file is opened by the task
and read in chunks (``only_content``). A reader decodes the content and never raises: whatever is wrong with it
(empty, truncated, corrupt, a decoder bug) becomes the error of that file's FILE record, and the file contributes no
counts at all, so a half-read file never skews the totals. Nothing here imports Django or Spark, so the tasks need
only ``binlog/`` and this package on the executors.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse
from zoneinfo import ZoneInfo

from relay.pipeline.tally import FileTally, changed_columns

BINLOG = "binlog"
LOG = "log"

# A change log file's name carries its day: relaylogs-YYYYMMDD.txt (text layout) or .jsonl (JSON lines).
LOG_NAME = re.compile(r"relaylogs-(?P<day>\d{8})\.(?P<ext>txt|jsonl)$")
# The head of a text layout line: HH:MM:SS;schema;table;I|U|D, then the column groups.
TEXT_HEAD = re.compile(rb"(\d\d):(\d\d):(\d\d);([^;\r\n]+);([^;\r\n]+);([IUD])(?:;|$)")
TEXT_KIND = {b"I": 1, b"U": 2, b"D": 4}
JSON_KIND = {"insert": 1, "update": 2, "delete": 4}


class InputError(Exception):
    """A file that cannot be counted; the message says where and why."""


def describe(exc: BaseException) -> str:
    """One line for a report: the exception's own message, with its class when that adds something."""
    text = str(exc).strip() or exc.__class__.__name__
    if isinstance(exc, InputError):
        return text
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return f"{exc.__class__.__name__}: {text}"


def run_file(source: str, path: str, read: Any, *args: Any) -> Iterator[tuple]:
    """Runs ``read(tally, path, *args)`` and yields the file's records, or its FILE record with the error."""
    started = time.perf_counter()
    tally = FileTally(source, path)
    try:
        read(tally, path, *args)
    except Exception as exc:  # noqa: BLE001 - any failure of one file is reported, the job goes on
        return tally.records(time.perf_counter() - started, describe(exc) or "unreadable")
    return tally.records(time.perf_counter() - started)


def local_path(uri: str) -> str | None:
    """The local path of a ``file:`` URI (as Hadoop lists local files), None for any other file system."""
    if not uri.startswith("file:"):
        return None
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.netloc in ("", "localhost") else None


@contextlib.contextmanager
def only_content(pairs: Iterable[tuple[str, bytes | None]]) -> Iterator[BinaryIO | bytes]:
    """The content of the one file a task was given, from (URI, bytes) pairs: the bytes Spark read, or (bytes None)
    the local file itself, open for reading in chunks while the ``with`` lasts."""
    contents = list(pairs)
    if len(contents) != 1:
        raise InputError(f"Spark handed the task {len(contents)} files instead of one")
    uri, content = contents[0]
    if content is not None:
        yield content
        return
    path = local_path(uri)
    if path is None:
        raise InputError(f"{uri}: not a local file and Spark read nothing of it")
    with open(path, "rb") as handle:
        yield handle


# -- binlog files -------------------------------------------------------------------------------------------------


def read_binlog(tally: FileTally, path: str, content: BinaryIO | bytes, snapshot: dict[str, Any] | None) -> None:
    """Decodes one archived binlog file's bytes with ``binlog/`` and counts its committed transactions."""
    from binlog import NOT_PRESENT
    from binlog.files import read_binlog_contents
    from relay.pipeline.snapshot import SnapshotProvider

    provider = SnapshotProvider(snapshot) if snapshot else None
    for tx in read_binlog_contents([(path, content)], schema_provider=provider):
        if not tx.changes:
            if tx.statements or tx.gtid:  # DDL or an empty transaction: counted per hour, not per table
                tally.add_transaction(tx.timestamp, ())
            continue
        touched = set()
        for change in tx.changes:
            touched.add(tally.add_row(change.schema, change.table, change.kind, change.timestamp))
            if change.kind == 2 and change.before is not None and change.after is not None:
                tally.add_column_changes(
                    change.schema,
                    change.table,
                    change.timestamp,
                    changed_columns(change.columns, change.before, change.after, NOT_PRESENT),
                )
        tally.add_transaction(tx.timestamp, touched)


# -- change log files ---------------------------------------------------------------------------------------------


def log_day(path: str) -> tuple[str, str]:
    """(YYYYMMDD, "txt" or "jsonl") from a change log file's name."""
    match = LOG_NAME.search(Path(path).name)
    if not match:
        raise InputError("not a change log file name (relaylogs-YYYYMMDD.txt or .jsonl)")
    return match["day"], match["ext"]


def read_log(
    tally: FileTally, path: str, content: BinaryIO | bytes, timezone: str, skip_binlogs: frozenset[str]
) -> None:
    """Counts one change log file's bytes; ``skip_binlogs`` names binlog files whose changes the run counts from
    the binlog files themselves."""
    day, ext = log_day(path)
    lines = io.BytesIO(content) if isinstance(content, bytes) else content
    if ext == "jsonl":
        count_json_lines(tally, lines, skip_binlogs)
    else:
        count_text_lines(tally, lines, day, ZoneInfo(timezone))


def _lines(handle: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """Numbered lines without their LF; a last line without LF means the file was cut short (or is being written)."""
    for number, line in enumerate(handle, 1):
        if not line.endswith(b"\n"):
            raise InputError(f"line {number}: truncated (no end of line)")
        yield number, line[:-1]


def count_json_lines(tally: FileTally, handle: Iterable[bytes], skip_binlogs: frozenset[str]) -> None:
    """JSON lines; transactions are counted by GTID (a line's GTID differs from the previous line's)."""
    current_gtid = ""
    current_time = 0
    touched: set[tuple[int, str, str]] = set()
    for number, line in _lines(handle):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            timestamp = int(record["time"])
            schema, table = str(record["schema"]), str(record["table"])
            kind = JSON_KIND[record["type"]]
            gtid = record.get("gtid") or ""
            binlog_file = record.get("file") or ""
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"line {number}: not a change log record ({describe(exc)})") from None
        if binlog_file in skip_binlogs:  # the same change is counted from the binlog file itself
            continue
        if gtid != current_gtid:
            if current_gtid:
                tally.add_transaction(current_time, touched)
            current_gtid, current_time, touched = gtid, timestamp, set()
        key = tally.add_row(schema, table, kind, timestamp)
        if gtid:
            touched.add(key)
        before, after = record.get("before"), record.get("after")
        if kind == 2 and isinstance(before, dict) and isinstance(after, dict):
            # A column missing from either image was not in the partial row image: neither changed nor compared.
            tally.add_column_changes(
                schema,
                table,
                timestamp,
                ((name, value != after[name]) for name, value in before.items() if name in after),
            )
    if current_gtid:
        tally.add_transaction(current_time, touched)


def count_text_lines(tally: FileTally, handle: Iterable[bytes], day: str, zone: ZoneInfo) -> None:
    """The original's layout. It has no transaction identity, so only rows are counted.

    A value may span lines in the original's files (newlines were not escaped): a line that does not start a record
    continues the previous one when that one ends inside an open quoted value; anywhere else it is corruption.
    """
    year, month, mday = int(day[:4]), int(day[4:6]), int(day[6:])
    clocks: dict[bytes, int] = {}  # HH:MM:SS -> unix time, on this file's day in the log's time zone
    pending: bytes | None = None  # a record whose last quoted value is still open
    pending_head: tuple[int, str, str, int] | None = None
    for number, line in _lines(handle):
        if pending is not None:
            pending += b"\n" + line
            if _open_quote(pending):
                continue
            _count_text_columns(tally, pending, *pending_head)  # type: ignore[misc]
            pending = pending_head = None
            continue
        match = TEXT_HEAD.match(line)
        if match is None:
            if not line.strip():
                continue
            raise InputError(f"line {number}: not a change log line: {line[:60]!r}")
        clock = line[:8]
        timestamp = clocks.get(clock)
        if timestamp is None:
            hour, minute, second = int(match[1]), int(match[2]), int(match[3])
            if hour > 23 or minute > 59 or second > 60:
                raise InputError(f"line {number}: bad time {clock.decode()}")
            moment = datetime(year, month, mday, hour, minute, min(second, 59), tzinfo=zone)
            timestamp = clocks[clock] = int(moment.timestamp())
        schema, table = match[4].decode("utf-8", "replace"), match[5].decode("utf-8", "replace")
        kind = TEXT_KIND[match[6]]
        tally.add_row(schema, table, kind, timestamp)
        if kind == 2:
            if _open_quote(line):
                pending, pending_head = line, (timestamp, schema, table, match.end())
            else:
                _count_text_columns(tally, line, timestamp, schema, table, match.end())
    if pending is not None:
        raise InputError("last line: a quoted value is never closed")


def split_text_fields(text: bytes) -> list[bytes]:
    """The ``;``-separated fields of a record's column part; a quoted field may hold ``;`` and escaped quotes."""
    fields: list[bytes] = []
    i, end = 0, len(text)
    while i <= end:
        if i < end and text[i : i + 1] == b'"':
            j = i + 1
            while j < end:
                ch = text[j : j + 1]
                if ch == b"\\":
                    j += 2
                    continue
                if ch == b'"' and (j + 1 == end or text[j + 1 : j + 2] == b";"):
                    break
                j += 1
            fields.append(text[i : j + 1])
            i = j + 2
        else:
            j = text.find(b";", i)
            if j < 0:
                j = end
            fields.append(text[i:j])
            i = j + 1
    return fields


def _open_quote(line: bytes) -> bool:
    """Whether the record's last quoted value is still open at the end of ``line``."""
    inside = False
    i, end = 0, len(line)
    while i < end:
        ch = line[i : i + 1]
        if inside and ch == b"\\":
            i += 2
            continue
        if ch == b'"' and (inside or i == 0 or line[i - 1 : i] == b";"):
            if not inside:
                inside = True
            elif i + 1 == end or line[i + 1 : i + 2] == b";":
                inside = False
        i += 1
    return inside


def _count_text_columns(tally: FileTally, line: bytes, timestamp: int, schema: str, table: str, start: int) -> None:
    """UPDATE groups are ``name;before;after``; a line that does not split into them adds no column counts."""
    if start >= len(line):
        return
    fields = split_text_fields(line[start:])
    if len(fields) % 3:
        return
    tally.add_column_changes(
        schema,
        table,
        timestamp,
        ((fields[i].decode("utf-8", "replace"), fields[i + 1] != fields[i + 2]) for i in range(0, len(fields), 3)),
    )
