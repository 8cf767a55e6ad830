"""The change log ([Logger]): per-day files of every row change of the configured schemas.

Two layouts, chosen by ``[Logger] Format``:

* ``text``: the original relay's lines, ``HH:MM:SS;schema;table;I|U|D`` followed by ``;name;after`` (insert),
  ``;name;before;after`` (update) or ``;name;before`` (delete) per column, in ``relaylogs-YYYYMMDD.txt``. As in the
  original, BLOB and TEXT columns are left out, numbers are written bare (NULL as ``NULL``), and every other value is
  quoted (NULL as empty, the zero datetime as ``0``). Unlike the original, a backslash, a quote, a newline or a
  carriage return inside a quoted value is escaped (``\\\\``, ``\\"``, ``\\n``, ``\\r``), so a line is always one row.
* ``json``: one JSON object per row change in ``relaylogs-YYYYMMDD.jsonl`` (values as strings, NULL as null,
  binary as base64, columns missing from a partial row image left out).

Each committed row change is in the log once, whatever happens to the worker: a batch's lines are spooled to
unnamed temporary files beside the log and put in it as the last step of the batch's store transaction, behind a
marker that says how to take them back (:class:`ChangeSpool`); a batch that rolls back (or whose worker was killed
before its commit) has them taken back, one applied in parts as much as any. Files are kept open until the day
changes. Times are the events' own times in the relay's local time zone (the original used the time of processing).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from binlog import NOT_PRESENT, Position, RowChange, Transaction
from binlog.constants import KIND_LETTERS, KIND_NAMES
from relay.config import LoggerConfig

log = logging.getLogger("relay.worker.changelog")

#: The marker of a batch whose lines are in the log but whose store transaction may not have committed (the usage
#: pipeline skips it by this name: relay/pipeline/inputs.py CHANGE_LOG_MARKER).
PENDING = ".relaylogs-pending.json"

# MYSQL_TYPE_DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, LONGLONG, INT24: written without quotes.
BARE_TYPES = frozenset({0, 1, 2, 3, 4, 5, 8, 9})
# MYSQL_TYPE_TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB: every BLOB and TEXT column, left out of the text layout.
BLOB_TYPES = frozenset({249, 250, 251, 252})
_QUOTED_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def format_value(value: Any, type_code: int) -> str:
    if type_code in BARE_TYPES:
        return "NULL" if value is None else _text(value)
    if value is None:
        return ""
    text = _text(value)
    if text == "0000-00-00 00:00:00":
        return "0"
    return '"' + text.translate(_QUOTED_ESCAPES) + '"'


def text_line(change: Any, clock: str) -> str:
    parts = [clock, change.schema, change.table, KIND_LETTERS[change.kind]]
    columns = change.table_info.columns
    before, after = change.before, change.after
    for index, name in enumerate(change.columns):
        type_code = columns[index].type_code if index < len(columns) else 254
        if type_code in BLOB_TYPES:
            continue
        parts.append(name)
        if before is not None:
            parts.append(format_value(before[index], type_code))
        if after is not None:
            parts.append(format_value(after[index], type_code))
    return ";".join(parts) + "\n"


def json_value(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def json_image(columns: Sequence[str], values: Sequence[Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    return {name: json_value(value) for name, value in zip(columns, values, strict=False) if value is not NOT_PRESENT}


def json_line(change: Any) -> str:
    record = {
        "time": change.timestamp,
        "file": change.file,
        "pos": change.pos,
        "row": change.row,
        "gtid": change.gtid,
        "schema": change.schema,
        "table": change.table,
        "type": KIND_NAMES[change.kind],
        "before": json_image(change.columns, change.before),
        "after": json_image(change.columns, change.after),
    }
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"


def _sizes(sizes: Any) -> dict[str, int]:
    return {str(path): int(size) for path, size in sizes.items()}


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1)


class ChangeLog:
    def __init__(self, config: LoggerConfig) -> None:
        self.config = config
        self._open: dict[str, tuple[str, TextIO]] = {}  # layout -> (day, file)
        #: Changes of committed batches whose lines could not go in (a full or unwritable disk: replication goes
        #: on, the store has them), and the last error: the worker reports them (/metrics, dashboard) and clears them.
        self.lost = 0
        self.last_error = ""

    def write(self, transactions: Iterable[Transaction]) -> int:
        """Writes the lines of transactions already committed (all of a spool's steps at once); how many changes."""
        spool = self.spool()
        written = spool.write(transactions)
        spool.publish(Position("", 0))
        spool.finish()
        return written

    def spool(self) -> ChangeSpool:
        """A batch's lines, put in the log as the last step of its store transaction (:class:`ChangeSpool`)."""
        return ChangeSpool(self)

    def _logged(self, transactions: Iterable[Transaction]) -> Iterator[RowChange]:
        """The changes of ``transactions`` the log takes (its schemas, less its excluded tables)."""
        if not self.config.enabled:
            return
        schemas = set(self.config.schemas)
        excludes = self.config.excludes
        for tx in transactions:
            for change in tx.changes:
                if change.schema in schemas and change.table not in excludes:
                    yield change

    def failed(self, error: OSError, changes: int) -> None:
        """A batch's lines of ``changes`` changes could not go in: said in the log, and counted."""
        log.error("change log %s: %s; the lines of %d changes are not in it", self.config.path, error, changes)
        self.lost += changes
        self.last_error = f"{self.config.path}: {error}"

    def _write(self, transactions: Iterable[Transaction], file_for: Callable[[str, str], TextIO]) -> int:
        """Writes the lines; how many changes. OSError when a file cannot take them."""
        written = 0
        for change in self._logged(transactions):
            moment = time.localtime(change.timestamp)
            day = time.strftime("%Y%m%d", moment)
            if "text" in self.config.formats:
                file_for("text", day).write(text_line(change, time.strftime("%H:%M:%S", moment)))
            if "json" in self.config.formats:
                file_for("json", day).write(json_line(change))
            written += 1
        return written

    def _file(self, layout: str, day: str) -> TextIO:
        current = self._open.get(layout)
        path = self._path(layout, day)
        if current is not None and current[0] == day:
            try:  # still the file of that name (not deleted, moved or replaced meanwhile)
                if os.path.samestat(os.fstat(current[1].fileno()), os.stat(path)):
                    return current[1]
            except FileNotFoundError:
                pass
            log.warning("change log %s: %s was removed or replaced; writing to a new one", self.config.path, path)
        if current is not None:
            with contextlib.suppress(OSError):
                current[1].close()
            del self._open[layout]
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a", encoding="utf-8", errors="surrogateescape")  # noqa: SIM115 - kept open per day
        if handle.tell() and _last_byte(path) != b"\n":  # cut inside a line: the next line starts on its own
            log.warning("change log %s: %s ends inside a line; that line stays cut", self.config.path, path)
            handle.write("\n")
        self._open[layout] = (day, handle)
        return handle

    def _path(self, layout: str, day: str) -> Path:
        return Path(self.config.path) / f"relaylogs-{day}.{'txt' if layout == 'text' else 'jsonl'}"

    def close(self) -> None:
        for _, handle in self._open.values():
            with contextlib.suppress(OSError):  # what a failed append left buffered is taken back anyway
                handle.close()
        self._open.clear()

    def pending_path(self) -> Path:
        return Path(self.config.path) / PENDING

    def recover(self, checkpoint: Position | None) -> None:
        """At a worker's start: the lines of a batch published before a kill stay if the store's checkpoint shows
        the batch committed (it is at the batch's end), and go otherwise."""
        try:
            marker = json.loads(self.pending_path().read_text(encoding="utf-8"))
            marker = {"file": str(marker["file"]), "pos": int(marker["pos"]), "sizes": _sizes(marker["sizes"])}
        except FileNotFoundError:
            return
        except (OSError, ValueError, LookupError, TypeError, AttributeError) as exc:
            log.error("change log %s: its marker %s cannot be read (%s); left as it is", self.config.path, PENDING, exc)
            return
        committed = checkpoint is not None and (checkpoint.file, checkpoint.pos) == (marker["file"], marker["pos"])
        if committed:
            with contextlib.suppress(FileNotFoundError):
                self.pending_path().unlink()
        else:
            self.take_back(marker["sizes"])
            log.warning(
                "change log %s: the lines of a batch that did not commit (ending at %s:%s) were taken back",
                self.config.path,
                marker["file"],
                marker["pos"],
            )

    def take_back(self, sizes: dict[str, int] | None = None) -> None:
        """Cuts the log files back to the sizes the marker recorded, then removes the marker."""
        try:
            if sizes is None:
                sizes = json.loads(self.pending_path().read_text(encoding="utf-8"))["sizes"]
            self.close()  # reopened at their new ends
            for path, size in sizes.items():
                with contextlib.suppress(FileNotFoundError):
                    if os.path.getsize(path) > size:  # never longer: os.truncate pads with NUL bytes
                        os.truncate(path, size)
            self.pending_path().unlink()
        except (OSError, ValueError) as exc:
            log.error("change log %s: cannot take back a batch's lines: %s", self.config.path, exc)


class ChangeSpool:
    """A batch's lines, held in unnamed temporary files beside the log until its store transaction is about to
    commit, and then put in the log so that they are there exactly once whatever happens to the process:

    * :meth:`publish`, the last step inside the store transaction: writes a marker (``PENDING``: the batch's end
      position and the size of each log file it appends to), then appends the lines;
    * :meth:`finish`, after the commit: removes the marker;
    * :meth:`revert`, when the transaction rolled back: cuts the files back to their sizes and removes the marker;
    * :meth:`ChangeLog.recover`, when a worker starts: a marker left by a killed process is finished when the store's
      checkpoint is at its position (the batch committed) and reverted otherwise.
    """

    def __init__(self, log: ChangeLog) -> None:
        self._log = log
        self._files: dict[tuple[str, str], TextIO] = {}  # (layout, day) -> spool
        self._changes = 0  # the batch's changes the log takes
        self._error: OSError | None = None  # the spool could not hold them: none of the batch's lines go in
        self._published = False

    def write(self, transactions: Iterable[Transaction]) -> int:
        """Spools the lines of ``transactions``; how many changes they are."""
        transactions = list(transactions)
        if self._error is None:
            try:
                written = self._log._write(transactions, self._file)
                self._changes += written
                return written
            except OSError as exc:  # a full disk must not stop replication: the store has the changes
                self._error = exc
        changes = sum(1 for _ in self._log._logged(transactions))  # their lines are lost: counted, not written
        self._changes += changes
        return changes

    def _file(self, layout: str, day: str) -> TextIO:
        spool = self._files.get((layout, day))
        if spool is None:
            folder = Path(self._log.config.path)
            folder.mkdir(parents=True, exist_ok=True)
            spool = tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogateescape", dir=folder)  # noqa: SIM115 - kept until commit or discard
            self._files[(layout, day)] = spool
        return spool

    def publish(self, position: Position) -> None:
        """Puts the lines in the log, with a marker of how to take them back (call inside the store transaction,
        last)."""
        if self._error is not None:
            self._log.failed(self._error, self._changes)
            return
        if not self._files:
            return
        try:
            for spool in self._files.values():
                spool.flush()  # the spool's own buffer: a full disk fails here, before anything goes in the log
            for _, handle in self._log._open.values():
                handle.flush()
            paths = {key: self._log._path(*key) for key in self._files}
            sizes = {str(path): path.stat().st_size if path.exists() else 0 for path in paths.values()}
            self._log.pending_path().write_text(
                json.dumps({"file": position.file, "pos": position.pos, "sizes": sizes}), encoding="utf-8"
            )
            self._published = True
            for key in sorted(self._files, key=lambda key: key[1]):  # day by day: a new day closes the day before
                spool = self._files[key]
                spool.seek(0)
                target = self._log._file(*key)
                shutil.copyfileobj(spool, target)
                target.flush()
        except OSError as exc:  # as for any batch: a full disk must not stop replication
            if self._published:  # none of the batch's lines rather than a line cut in half
                self._log.take_back()
                self._published = False
            self._log.failed(exc, self._changes)

    def finish(self) -> None:
        """The store transaction committed: the lines stay."""
        if self._published:
            with contextlib.suppress(FileNotFoundError):
                self._log.pending_path().unlink()
        self.discard()

    def revert(self) -> None:
        """The store transaction rolled back: the lines published go again."""
        if self._published:
            self._log.take_back()
        self.discard()

    def discard(self) -> None:
        for spool in self._files.values():
            spool.close()
        self._files.clear()
        self._published = False
