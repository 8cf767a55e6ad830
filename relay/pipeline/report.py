"""A run's report: what became of every input file and byte, kept next to the outputs as ``run-<id>.json``.

Every listed file ends up in exactly one state (``tally.STATUSES``): complete, partial (counted up to its last
complete transaction), live (a server's live binlog, counted the same way, its open end expected) or unreadable
(counted not at all). Names that listed nothing are ``missing``; files left out because their changes count anyway
or they hold none are ``skipped`` (a copy of another input, the binlog index); files of an input directory left out
although they may hold changes are ``not_read`` (a compressed binlog, an unknown name), a problem like a partial file.
A change log's lines whose changes a binlog of the run counted are left to that binlog (``left_to_binlogs``): its
counted bytes are the rest.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from relay.pipeline.tally import COMPLETE, LIVE, PARTIAL, STATUSES, UNREADABLE


@dataclass(frozen=True)
class FileReport:
    source: str
    path: str
    status: str
    counted_bytes: int  # bytes the counts account for: the whole file when complete, 0 when unreadable
    rows: int  # row changes of complete transactions
    transactions: int
    seconds: float
    note: str | None  # why a file is not complete
    size: int = 0  # bytes, as listed before the run
    # a change log's lines whose changes a binlog of the run counted: (binlog URI, lines, bytes), not in counted_bytes
    left_to_binlogs: tuple[tuple[str, int, int], ...] = ()

    @property
    def error(self) -> str | None:
        return self.note if self.status == UNREADABLE else None

    def line(self) -> str:
        """One line for the console and the log: the file, what became of it, and the bytes that count."""
        if self.status == UNREADABLE:
            return f"{self.path}: unreadable: {self.note} (not counted)"
        counted = f"{self.counted_bytes:,} of {self.size:,} bytes counted ({self.rows:,} row changes)"
        if self.status == PARTIAL:
            return f"{self.path}: partial: {self.note}; {counted}, {self.size - self.counted_bytes:,} bytes not"
        if self.status == LIVE:
            return f"{self.path}: live binlog: {self.note}; {counted}, the rest is still being written"
        left = "".join(
            f"; {lines:,} lines ({left_bytes:,} bytes) left to {binlog}, which counted their changes"
            for binlog, lines, left_bytes in self.left_to_binlogs
        )
        return f"{self.path}: complete; {counted}{left}"


@dataclass
class RunReport:
    run: str
    out: str
    files: list[FileReport] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    not_read: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    decode_seconds: float = 0.0
    aggregate_seconds: float = 0.0  # aggregating and writing the outputs

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files if f.status != UNREADABLE)

    @property
    def transactions(self) -> int:
        return sum(f.transactions for f in self.files if f.status != UNREADABLE)

    @property
    def failed(self) -> list[FileReport]:
        """The unreadable files: they count for nothing."""
        return [f for f in self.files if f.status == UNREADABLE]

    @property
    def partial(self) -> list[FileReport]:
        return [f for f in self.files if f.status == PARTIAL]

    @property
    def live(self) -> list[FileReport]:
        return [f for f in self.files if f.status == LIVE]

    def totals(self) -> dict[str, dict[str, int]]:
        """Per state: files, their bytes, and the bytes their counts account for."""
        totals = {status: {"files": 0, "bytes": 0, "counted_bytes": 0} for status in STATUSES}
        for f in self.files:
            entry = totals[f.status]
            entry["files"] += 1
            entry["bytes"] += f.size
            entry["counted_bytes"] += f.counted_bytes
        return totals

    def summary(self) -> str:
        """One line: files and bytes complete, partial, live, unreadable, and the names that listed nothing."""
        parts = []
        for status, entry in self.totals().items():
            if status in (COMPLETE, UNREADABLE) or entry["files"]:
                counted = (
                    f", {entry['counted_bytes']:,} counted" if status in (PARTIAL, LIVE) and entry["files"] else ""
                )
                parts.append(f"{entry['files']} {status} ({entry['bytes']:,} bytes{counted})")
        if self.missing:
            parts.append(f"{len(self.missing)} missing")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        if self.not_read:
            parts.append(f"{len(self.not_read)} not read")
        left = [entry for f in self.files for entry in f.left_to_binlogs]
        if left:
            lines, left_bytes = sum(entry[1] for entry in left), sum(entry[2] for entry in left)
            parts.append(f"{lines:,} change log lines ({left_bytes:,} bytes) left to the binlogs that counted them")
        return "files: " + ", ".join(parts)

    def problems(self) -> list[str]:
        """One line per input that was not counted in full: missing, not read, unreadable or partial, and why."""
        lines = [f"{what}: {why}" for what, why in self.missing]
        lines += [f"{what}: not read: {why}" for what, why in self.not_read]
        lines += [f.line() for f in self.files if f.status in (UNREADABLE, PARTIAL)]
        return lines

    def as_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        data["rows"], data["transactions"], data["totals"] = self.rows, self.transactions, self.totals()
        return json.dumps(data, indent=1)
