"""Readers that run inside Spark tasks: one input file's content in, its :class:`FileTally` records out.

Spark reads a file of a distributed file system and hands its task the bytes; a local file is opened by the task
and read in chunks (``only_content``). A reader decodes the content and never raises: whatever is wrong with it
(empty, corrupt, not a binlog, a decoder bug) makes the file UNREADABLE, the error its FILE record's note, and the
file contributes no counts at all. A binlog that merely ends early (cut in an event, inside a transaction, or before
the event a closed binlog ends with) is PARTIAL: its complete transactions count, the rest does not, and the FILE
record says how many bytes the counts account for. Nothing here imports Django or Spark, so the tasks need only
``binlog/`` and this package on the executors.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO
from zoneinfo import ZoneInfo

from binlog.constants import KIND_LETTERS, KIND_NAMES
from relay.pipeline.coverage import Coverage
from relay.pipeline.tally import COMPLETE, LIVE, PARTIAL, FileTally, changed_columns

BINLOG = "binlog"
LOG = "log"

# A change log file's name carries its day: relaylogs-YYYYMMDD.txt (text layout) or .jsonl (JSON lines).
LOG_NAME = re.compile(r"relaylogs-(?P<day>\d{8})\.(?P<ext>txt|jsonl)$")
# The head of a text layout line: HH:MM:SS;schema;table;I|U|D, then the column groups.
TEXT_HEAD = re.compile(rb"(\d\d):(\d\d):(\d\d);([^;\r\n]+);([^;\r\n]+);([IUD])(?:;|$)")
TEXT_KIND = {letter.encode(): kind for kind, letter in KIND_LETTERS.items()}  # the change log's text lines
JSON_KIND = {name: kind for kind, name in KIND_NAMES.items()}  # its JSON lines


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
    """Runs ``read(tally, path, *args)`` and yields the file's records, or its FILE record with the error (the
    partial counts of a reader that raised are dropped: a corrupt file counts nothing)."""
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
    # Hadoop's Path.toString() writes the path as it is, neither escaped nor percent-encoded: not a URL to parse (a
    # folder "archive #2" or "archive%41" is itself).
    rest = uri[len("file:") :]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        return slash + path if host in ("", "localhost") else None
    return rest


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


def read_binlog(
    tally: FileTally,
    path: str,
    content: BinaryIO | bytes,
    snapshot: dict[str, Any] | None,
    *,
    live: bool = False,
    beacon: Callable[[int, int], None] | None = None,
) -> None:
    """Decodes one binlog file's bytes with ``binlog/`` and counts its committed transactions.

    Only committed transactions are ever counted. How the file ends is checked against how a closed binlog ends (a
    ROTATE or STOP event after its last transaction): a file cut in the middle of an event, inside a transaction, or
    after a transaction but before that last event is PARTIAL, with the bytes its complete transactions account for.
    ``live`` says the file may be its server's live binlog, whose end is open: the same end is then LIVE, not PARTIAL.
    """
    from binlog import NOT_PRESENT
    from binlog.constants import (
        ANONYMOUS_GTID_LOG_EVENT,
        FORMAT_DESCRIPTION_EVENT,
        GTID_EVENT,
        GTID_LOG_EVENT,
        LOG_EVENT_BINLOG_IN_USE_F,
        ROTATE_EVENT,
        STOP_EVENT,
    )
    from binlog.errors import TruncatedEventError
    from binlog.files import iter_events
    from binlog.parser import EventDecoder
    from relay.pipeline.snapshot import SnapshotProvider

    decoder = EventDecoder(SnapshotProvider(snapshot) if snapshot else None)
    decoder.file = path.rstrip("/").rpartition("/")[2]
    decoder.pos = 4
    transaction_starts = (GTID_EVENT, GTID_LOG_EVENT, ANONYMOUS_GTID_LOG_EVENT)
    events = iter_events(content, name=path)
    position = 4  # where the next event starts: the bytes read so far are whole events
    clean = 4  # the end of the last event after which no transaction was open: what the counts account for
    opened_at: int | None = None  # where the transaction open at ``position`` began
    last_type: int | None = None
    in_use = False
    dropped: list[int] = []  # positions of transactions that another one followed before their commit
    cut: str | None = None
    while True:
        try:
            event = next(events)
        except StopIteration:
            break
        except TruncatedEventError as exc:  # the file ends before the event its last bytes begin
            cut = str(exc)
            break
        event_type = event[4]
        if last_type is None:
            if event_type != FORMAT_DESCRIPTION_EVENT:
                raise InputError(f"not a binlog file: its first event (type {event_type}) is no format description")
            in_use = bool(int.from_bytes(event[17:19], "little") & LOG_EVENT_BINLOG_IN_USE_F)
        if opened_at is not None and event_type in transaction_starts:
            dropped.append(opened_at)  # the decoder drops that transaction's rows when this event starts the next
            tally.counted_spans.interrupt()
        trx = decoder.feed(event)
        start, position, last_type = position, position + len(event), event_type
        if trx is not None and not trx.partial:
            _count_transaction(tally, trx, NOT_PRESENT)
            if trx.changes or trx.prepared:  # the change log has lines for it: they are counted here
                tally.counted_spans.add(trx.gtid, start if opened_at is None else opened_at, position)
        if decoder.transaction_open:
            if opened_at is None:
                opened_at = start
        else:
            clean, opened_at = position, None
        if beacon is not None:
            beacon(position, tally.rows)
    if last_type is None:
        raise InputError(f"not a binlog file: {cut}" if cut else "not a binlog file: nothing after its magic number")

    reasons = []
    if dropped:
        where = ", ".join(str(p) for p in dropped[:3]) + (" ..." if len(dropped) > 3 else "")
        reasons.append(f"{len(dropped)} transaction(s) without a commit before the next one (at {where}), not counted")
    if cut is not None:
        inside = f", inside the transaction begun at position {opened_at}" if opened_at is not None else ""
        reasons.append(f"cut in the middle of the event at position {position}{inside}")
    elif opened_at is not None:
        reasons.append(f"ends inside the transaction begun at position {opened_at}, before its commit")
    elif last_type not in (ROTATE_EVENT, STOP_EVENT):
        reasons.append(f"ends at position {position} without the ROTATE or STOP event a closed binlog ends with")
    if not reasons:
        tally.end(COMPLETE, None, clean)
    elif live and not dropped:
        tally.end(LIVE, reasons[0], clean)
    else:
        if in_use and not dropped:
            reasons.append("its server still had it open (a live binlog?)")
        tally.end(PARTIAL, "; ".join(reasons), clean)


def _count_transaction(tally: FileTally, tx: Any, absent: Any) -> None:
    # An XA transaction's rows count where the binlog has them, at its XA PREPARE (its XA COMMIT may lie in another
    # file, read by another task).
    changes = tx.changes or tx.prepared
    if not changes:
        if tx.xa in ("commit", "rollback"):  # the end of an XA transaction: counted (or not) at its XA PREPARE
            return
        if tx.statements or tx.gtid:  # DDL or an empty transaction: counted per hour, not per table
            tally.add_transaction(tx.timestamp, ())
        return
    touched = set()
    for change in changes:
        touched.add(tally.add_row(change.schema, change.table, change.kind, change.timestamp))
        if change.kind == 2 and change.before is not None and change.after is not None:
            tally.add_column_changes(
                change.schema,
                change.table,
                change.timestamp,
                changed_columns(change.columns, change.before, change.after, absent),
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
    tally: FileTally,
    path: str,
    content: BinaryIO | bytes,
    timezone: str,
    coverage: Coverage | None,
    *,
    beacon: Callable[[int, int], None] | None = None,
) -> None:
    """Counts one change log file's bytes; ``coverage`` says which of its lines' changes the run's binlogs counted
    (None: no binlog counted any). A change log has no closing record: a file that reads to its end is complete."""
    day, ext = log_day(path)
    lines: Iterable[bytes] = io.BytesIO(content) if isinstance(content, bytes) else content
    if beacon is not None:
        lines = _reporting(lines, tally, beacon)
    if ext == "jsonl":
        count_json_lines(tally, lines, coverage)
    else:
        count_text_lines(tally, lines, day, ZoneInfo(timezone))


def _reporting(lines: Iterable[bytes], tally: FileTally, beacon: Callable[[int, int], None]) -> Iterator[bytes]:
    position = 0
    for line in lines:
        position += len(line)
        beacon(position, tally.rows)
        yield line


def _lines(handle: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """Numbered lines without their LF; a last line without LF means the file was cut short (or is being written)."""
    for number, line in enumerate(handle, 1):
        if not line.endswith(b"\n"):
            raise InputError(f"line {number}: truncated (no end of line)")
        yield number, line[:-1]


def count_json_lines(tally: FileTally, handle: Iterable[bytes], coverage: Coverage | None) -> None:
    """JSON lines; transactions are counted by GTID (a line's GTID differs from the previous line's).

    A line whose change a binlog of the run counted (``coverage``) is left to that binlog: neither its change nor
    its bytes count here, and the file's record says how many lines and bytes each binlog took."""
    current_gtid = ""
    current_time = 0
    touched: set[tuple[int, str, str]] = set()
    read_bytes = left_bytes = 0
    for number, line in _lines(handle):
        read_bytes += len(line) + 1  # with its LF
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            timestamp = int(record["time"])
            schema, table = str(record["schema"]), str(record["table"])
            kind = JSON_KIND[record["type"]]
            gtid = record.get("gtid") or ""
            binlog_file = record.get("file") or ""
            position = record.get("pos")
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"line {number}: not a change log record ({describe(exc)})") from None
        binlog = None
        if coverage is not None and isinstance(position, int):
            binlog = coverage.owner(str(binlog_file), str(gtid), position)
        if binlog is not None:  # the same change, counted from the binlog file itself
            tally.leave_to_binlog(binlog, len(line) + 1)
            left_bytes += len(line) + 1
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
    if left_bytes:
        tally.end(COMPLETE, None, read_bytes - left_bytes)


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
