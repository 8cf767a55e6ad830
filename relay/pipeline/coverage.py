"""Which change log lines the run's binlogs have counted already, so that a change given both ways counts once.

The worker's JSON change log names, for each row change, the binlog file and the end position of the rows event it
came from, and its transaction's GTID. Such a line is a change that a binlog of the run counted when that binlog
counted the line's transaction: a file of the line's name (or a byte-identical copy of it, see ``identity``) counted
a transaction of the same GTID source (MariaDB's domain-server, MySQL's server UUID) and sequence number, spanning
the line's position. A name alone says nothing: another server writes a binlog.000003 too, and a binlog cut short
(partial) or unreadable counts some or none of its transactions, so the log's lines of the rest are the only count.

Each binlog's task records the transactions it counted as *spans*: per GTID source, a run of consecutive sequence
numbers and the bytes from the first one's start to the last one's end. A closed binlog of one server is one span
per source; a transaction it could not count (committed nowhere before the next began) ends the spans, so none
reaches over it. Lines without a GTID (MySQL without ``gtid_mode``) can be matched by file name and position only.

Nothing here imports Django or Spark: the spans are built inside binlog tasks and matched inside change log tasks.
"""

from __future__ import annotations

from bisect import bisect_right

# (GTID source, first sequence number, last one, where the first transaction starts, where the last one ends)
Span = tuple[str, int, int, int, int]


def gtid_parts(gtid: str) -> tuple[str, int]:
    """(source, sequence number) of a GTID: MariaDB's ``0-1-42`` is ("0-1", 42), MySQL's ``uuid:42`` (or
    ``uuid:tag:42``) is ("uuid", 42); no GTID is ("", 0). A GTID of neither form is a source of its own."""
    source, _, number = gtid.rpartition(":" if ":" in gtid else "-")
    if not number.isdigit():
        return gtid, 0
    return source, int(number)


class CountedSpans:
    """Inside a binlog's task: the spans of the transactions it counted, in the order of the file."""

    __slots__ = ("_open", "spans")

    def __init__(self) -> None:
        self.spans: list[list] = []  # of Span, as lists while they grow
        self._open: dict[str, list] = {}  # GTID source -> its span that the next transaction may extend

    def add(self, gtid: str, start: int, end: int) -> None:
        """A counted transaction of ``gtid`` (empty when it has none) from byte ``start`` to ``end``."""
        source, number = gtid_parts(gtid)
        span = self._open.get(source)
        # Without a GTID there is no sequence to follow: only an interruption ends the span.
        if span is not None and (source == "" or number == span[2] + 1):
            span[2], span[4] = number, end
            return
        span = [source, number, number, start, end]
        self.spans.append(span)
        self._open[source] = span

    def interrupt(self) -> None:
        """A transaction of the file was not counted: no span may reach over it."""
        self._open.clear()


class Coverage:
    """On the driver, then inside change log tasks: which binlog of the run counted a change log line, if any."""

    def __init__(self, counted: dict[str, list[Span]], names: dict[str, set[str]]) -> None:
        """``counted``: binlog URI -> the spans its task counted; ``names``: binlog URI -> the file names it answers
        to in a change log (its own, and its copies')."""
        # file name -> GTID source -> spans sorted by where they start, each with the URI of the binlog that counted it
        self._spans: dict[str, dict[str, list[tuple[int, int, int, int, str]]]] = {}
        for uri, counted_spans in counted.items():
            for name in names.get(uri, ()):
                by_source = self._spans.setdefault(name, {})
                for source, first, last, start, end in counted_spans:
                    by_source.setdefault(source, []).append((start, end, first, last, uri))
        for by_source in self._spans.values():
            for spans in by_source.values():
                spans.sort()
        self._starts = {
            name: {source: [span[0] for span in spans] for source, spans in by_source.items()}
            for name, by_source in self._spans.items()
        }

    def owner(self, file: str, gtid: str, position: int) -> str | None:
        """The URI of the binlog that counted the change a line names (its binlog file, GTID and position)."""
        by_source = self._spans.get(file)
        if by_source is None:
            return None
        source, number = gtid_parts(gtid)
        spans = by_source.get(source)
        if spans is None:
            return None
        # The last span starting at or before the position is the one, unless two binlogs of the same name and
        # GTID source (two servers that share a server id) have overlapping spans: then an earlier one may be.
        for index in range(bisect_right(self._starts[file][source], position) - 1, -1, -1):
            _start, end, first, last, uri = spans[index]
            if position <= end and (source == "" or first <= number <= last):
                return uri
        return None
