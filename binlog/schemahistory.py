"""A schema history: every table's column layout as of each binlog position, kept by following DDL in the stream.

``SchemaHistory`` is a ``SchemaProvider``: the decoder hands it each DDL statement (``statement``) with the position
the statement ends at, and asks it for a table's layout when a TABLE_MAP comes (``table_for_map``). The layout given
is the one in force at the decoder's position, checked against the TABLE_MAP's own column types; when they disagree,
or a DDL statement could not be read, the table is reported (logged once, counted) and its rows get positional names
(@1, @2...), never names that may be wrong, until a CREATE defines it again or it is re-read from information_schema
at a heartbeat that shows the decoder at the source's current position (``caught_up``).

Where the versions are kept is the caller's: ``HistoryStore`` is the small interface (the relay writes them in the
store transaction of the batch whose DDL made them; ``python -m binlog dump`` keeps them in memory). A history starts
from a baseline: the tables as ``information_schema`` shows them, and the position that baseline belongs to.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from binlog.ddl import Change, DdlError, apply_statement, has_undecoded_bytes, statement_start, tokenize
from binlog.ddltables import tables_named
from binlog.errors import BinlogError
from binlog.gtid import MariaGtidState, MysqlGtidSet, is_mysql_gtid_text
from binlog.position import Position
from binlog.schema import (
    COLUMN_TYPE_CHARSET_SQL,
    ORDINARY_HASH_ENGINES,
    SYSTEM_VERSIONED,
    SchemaTable,
    has_hidden_system_time,
    long_unique_hash_columns,
)
from binlog.schemamodel import (
    SYSTEM_TIME,
    Column,
    SchemaModel,
    TableDef,
    event_layout,
    hidden,
    labels_may_be_mangled,
    layout_mismatch,
)
from binlog.tablemap import TableMap

log = logging.getLogger("binlog.schemahistory")


def position_key(position: Position) -> tuple[str, int, int]:
    """An order on positions of one source: file name stem, file number, offset (binlog.000042:120)."""
    stem, _, number = position.file.rpartition(".")
    return (stem, int(number) if number.isdigit() else 0, position.pos)


@dataclass(frozen=True, slots=True)
class Version:
    """A table's layout from ``position`` on (``definition`` None: the table does not exist from there)."""

    schema: str
    table: str
    position: Position
    definition: TableDef | None
    statement: str = ""  # the DDL that made it; "" for a baseline
    baseline: bool = False
    # The table's doubt from here on (MARK_UNREADABLE, MARK_STALE, or none): kept with the versions, so that a worker
    # started again after the checkpoint passed it still gives the table's rows positional names until a re-read.
    mark: str = ""


# A DDL of the table could not be applied: its layout is unknown.
MARK_UNREADABLE = "unreadable"
# A TABLE_MAP disagreed with the layout: it waits to be re-read from information_schema.
MARK_STALE = "stale"


class HistoryStore(Protocol):
    """Where versions are kept. ``load`` gives all of them, oldest first; ``save`` adds versions (a version of a
    table replaces those of the same table at or after its position: a replay after a restart from an earlier
    position makes them again)."""

    def load(self) -> list[Version]: ...

    def save(self, versions: Sequence[Version]) -> None: ...


@runtime_checkable
class DdlListener(Protocol):
    """A schema provider that wants the DDL statements of the stream (``binlog.parser`` calls it)."""

    def statement(
        self,
        schema: str,
        query: str,
        position: Position,
        sql_mode: int = 0,
        *,
        session: int | None = None,
        error_code: int = 0,
    ) -> None: ...


@runtime_checkable
class LayoutChecking(Protocol):
    """A schema provider that checks a TABLE_MAP against what it knows, instead of a plain look-up by name."""

    def table_for_map(self, tm: TableMap) -> SchemaTable | None: ...


@runtime_checkable
class Rewindable(Protocol):
    """A schema provider whose state depends on the position: told where a (re)connected stream starts."""

    def rewind(self, position: Position) -> None: ...


class MemoryStore:
    """Versions in memory only (``python -m binlog dump``, tests)."""

    def __init__(self) -> None:
        self.versions: list[Version] = []

    def load(self) -> list[Version]:
        return list(self.versions)

    def save(self, versions: Sequence[Version]) -> None:
        for version in versions:
            start = position_key(version.position)
            self.versions = [
                v
                for v in self.versions
                if not (
                    (v.schema, v.table) == (version.schema, version.table)
                    and not v.baseline
                    and position_key(v.position) >= start
                )
            ]
            self.versions.append(version)


@runtime_checkable
class CatchingUp(Protocol):
    """A schema provider that wants to know when the decoder has read all the source had (a heartbeat outside a
    transaction); True when it changed a layout, so the decoder forgets the layouts it cached."""

    def caught_up(self, position: Position) -> bool: ...


# Reads the given schemas from information_schema at a position the source provably stood at during the read (the
# position before and after the read are the same); None when it moved meanwhile.
Reread = Callable[[Sequence[str]], tuple[SchemaModel, Position] | None]

REREAD_STATEMENT = "-- re-read from information_schema"
STALE_STATEMENT = "-- a TABLE_MAP disagreed: to be re-read from information_schema"


class SchemaHistory:
    """The model in force at the decoder's position, its versions, and the check of each TABLE_MAP against it.

    ``on_problem`` is called once per (table, position) with a description whenever a TABLE_MAP disagrees with the
    history or a DDL statement cannot be applied (the relay counts them). ``reread``, when given, lets the history
    take such a table from information_schema again, at a heartbeat that shows the decoder at the source's current
    position (``caught_up``).
    """

    def __init__(
        self,
        versions: Iterable[Version] = (),
        *,
        lower_case_table_names: int = 0,
        server_charset: str = "utf8mb4",
        databases: dict[str, str] | None = None,
        on_problem: Callable[[str], None] | None = None,
        reread: Reread | None = None,
    ) -> None:
        self.versions: list[Version] = sorted(versions, key=lambda v: position_key(v.position))
        self.lower_case_table_names = lower_case_table_names
        self.server_charset = server_charset
        self.initial_databases = dict(databases or {})
        self.on_problem = on_problem
        self.pending: list[Version] = []  # made since the last take_pending()
        self.unreadable: set[tuple[str, str]] = set()  # tables whose last DDL we could not apply
        self.problems = 0
        self.reread = reread
        # Tables reported since (mismatch, unreadable DDL, unknown): re-read at the next provably current heartbeat.
        self.stale: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (schema, table) as named
        self._reported: set[tuple[str, str, str]] = set()
        # Each session's temporary tables (by the QUERY events' thread id), from CREATE TEMPORARY TABLE to its DROP
        # (logged for each one left when the session ends, too): a MIXED or STATEMENT session logs its DDL on one
        # as if on the table of that name, which the temporary hides from it. Layout None: not known.
        self.temporary: dict[int | None, dict[tuple[str, str], TableDef | None]] = {}
        self._lock = threading.Lock()
        self.position: Position | None = None
        self.model = self._model_at(None)
        self._marks_at(None)

    # -- state ------------------------------------------------------------------------------------------------------

    @property
    def baseline_position(self) -> Position | None:
        positions = [v.position for v in self.versions if v.baseline]
        return max(positions, key=position_key) if positions else None

    def _model_at(self, position: Position | None) -> SchemaModel:
        """The model from the versions at or before ``position`` (all of them for None); baselines always count."""
        model = SchemaModel(
            lower_case_table_names=self.lower_case_table_names,
            server_charset=self.server_charset,
            databases=dict(self.initial_databases),
        )
        limit = position_key(position) if position is not None else None
        for version in self.versions:
            if limit is not None and not version.baseline and position_key(version.position) > limit:
                continue
            if version.definition is None:
                model.remove(version.schema, version.table)
            else:
                model.put(version.schema, version.table, version.definition)
                if not model.has_database(version.schema):
                    model.set_database(version.schema, None)
        return model

    def _marks_at(self, position: Position | None) -> None:
        """The marks (``unreadable``, ``stale``) as the versions at or before ``position`` leave them: each version
        carries its table's mark from there on."""
        limit = position_key(position) if position is not None else None
        self.unreadable.clear()
        self.stale.clear()
        for version in self.versions:
            if limit is not None and not version.baseline and position_key(version.position) > limit:
                continue
            key = self._fold((version.schema, version.table))
            self._unmark(key)
            if version.mark == MARK_UNREADABLE:
                self.unreadable.add(key)
            if version.mark and self.reread is not None:
                self.stale[key] = (version.schema, version.table)

    def rewind(self, position: Position) -> None:
        """The decoder starts (again) at ``position``: the layouts in force there, without later versions."""
        if not position.file:
            if position.gtid:
                self._rewind_to_gtid(position.gtid)
            return
        with self._lock:
            limit = position_key(position)
            later = [v for v in self.versions if not v.baseline and position_key(v.position) > limit]
            self._forget(later, str(position))
            self.model = self._model_at(position)
            self._marks_at(position)
            self.position = position
            baseline = self.baseline_position
            if baseline is not None and position_key(position) < position_key(baseline):
                self._warn_before_baseline(str(position), baseline)

    def _rewind_to_gtid(self, state: str) -> None:
        """A start by GTID alone (the file comes with the first event): the versions whose DDL the GTID state
        already contains stay, the others are made again as their DDL passes."""
        with self._lock:
            later = [v for v in self.versions if not v.baseline and gtid_within(v.position.gtid, state) is False]
            self._forget(later, f"GTID {state}")
            self.model = self._model_at(None)
            self._marks_at(None)
            self.position = None
            baseline = self.baseline_position
            if baseline is not None and gtid_within(baseline.gtid, state) is False:
                self._warn_before_baseline(f"GTID {state}", baseline)

    def _forget(self, later: list[Version], where: str) -> None:
        if later:
            log.info(
                "schema history rewound to %s: %d later versions will be made again as their DDL passes",
                where,
                len(later),
            )
            self.versions = [v for v in self.versions if v not in later]
            self.pending = [v for v in self.pending if v not in later]

    @staticmethod
    def _warn_before_baseline(where: str, baseline: Position) -> None:
        log.warning(
            "starting at %s, before the schema baseline (%s): column names of rows before the first DDL seen "
            "are taken from the schema as it was at %s",
            where,
            baseline,
            baseline,
        )

    def take_pending(self, upto: Position | None = None) -> list[Version]:
        """The versions made since the last call (up to ``upto``), for the caller to store with its checkpoint."""
        with self._lock:
            if upto is None:
                taken, self.pending = self.pending, []
            else:
                limit = position_key(upto)
                taken = [v for v in self.pending if position_key(v.position) <= limit]
                self.pending = [v for v in self.pending if position_key(v.position) > limit]
            return taken

    def _record(self, version: Version) -> None:
        self.versions.append(version)
        self.pending.append(version)

    # -- the decoder's side -------------------------------------------------------------------------------------------

    def statement(
        self,
        schema: str,
        query: str,
        position: Position,
        sql_mode: int = 0,
        *,
        session: int | None = None,
        error_code: int = 0,
    ) -> None:
        """A DDL statement (or any statement the decoder thinks may be one) at ``position`` (its end), run under the
        session's ``sql_mode`` (ANSI_QUOTES and NO_BACKSLASH_ESCAPES change how its text reads) by the connection
        ``session`` (its thread id: its temporary tables are its own). ``error_code``: the error it failed with on
        the source, after changing part of what it says (0: it succeeded)."""
        with self._lock:
            baseline = self.baseline_position
            # The baseline was read after it: it shows its effect already (but not on temporary tables).
            before_baseline = baseline is not None and position_key(position) <= position_key(baseline)
            if error_code:
                # Its effect is not what it says (a failed CREATE OR REPLACE TABLE dropped the table and made none):
                # the tables it names are in doubt until a CREATE defines them or they are re-read.
                if not before_baseline:
                    self.position = position
                    reason = f"it failed on the source (error {error_code}) after changing part of what it says"
                    self._report_unreadable(schema, query, position, reason, sql_mode)
                return
            if self._session_statement(schema, query, position, sql_mode, session, before_baseline):
                return
            if before_baseline:
                return
            self.position = position
            try:
                changes = apply_statement(self.model, schema, query, sql_mode)
            except DdlError as exc:
                self._report_unreadable(schema, query, position, str(exc), sql_mode)
                return
            self._record_changes(changes, query, position, sql_mode)

    def _record_changes(self, changes: list[Change], query: str, position: Position, sql_mode: int) -> None:
        """Records the versions ``changes`` (applied to the model) make, with their tables' marks."""
        # Only a CREATE (or a drop) says all there is to know about a table; an ALTER of a table the history
        # has lost leaves it lost, and its rows keep positional names until it is re-read.
        tokens = tokenize(query, sql_mode)
        first = tokens[statement_start(tokens) :][:1]  # past SET STATEMENT ... FOR
        redefines = bool(first) and first[0].is_word("CREATE")
        # A layout taken from another table (RENAME, CREATE ... LIKE) is as doubtful as it was there: the marks
        # go with it. A renamed table's marks are kept here as its old name goes, for the new name that follows.
        gone: dict[tuple[str, str], tuple[bool, bool]] = {}
        for change in changes:
            key = self._fold((change.schema, change.table))
            if change.definition is None:
                gone[key] = (key in self.unreadable, key in self.stale)
                self._unmark(key)
            elif change.source is not None:
                source = self._fold(change.source)
                unreadable, stale = gone.get(source, (source in self.unreadable, source in self.stale))
                self._unmark(key)
                if unreadable:
                    self.unreadable.add(key)
                if stale:
                    self.stale[key] = (change.schema, change.table)
            elif redefines:
                self._unmark(key)
            mark = self._mark_of(key) if change.definition is not None else ""
            self._record(Version(change.schema, change.table, position, change.definition, query[:2000], mark=mark))

    def _session_statement(
        self, schema: str, query: str, position: Position, sql_mode: int, session: int | None, before_baseline: bool
    ) -> bool:
        """Follows the temporary tables of ``session``: a CREATE or DROP of one, and any DDL naming one (which the
        statement changes, not the table of that name). True when the statement was handled here."""
        try:
            tokens = tokenize(query, sql_mode)
        except DdlError:
            return False
        head = tokens[statement_start(tokens) :][:4]
        creates = bool(head) and head[0].is_word("CREATE")
        creates_temporary = creates and any(t.is_word("TEMPORARY") for t in head[1:])  # CREATE [OR REPLACE] TEMPORARY
        drops_temporary = len(head) > 1 and head[0].is_word("DROP") and head[1].is_word("TEMPORARY")
        temporaries = self.temporary.get(session, {})
        named = tables_named(query, schema, sql_mode) or []
        if not (creates_temporary or drops_temporary or any(self._fold(key) in temporaries for key in named)):
            return False
        # The session's view: its temporary tables in place of the tables of their names.
        seen = self.model.copy()
        for key, definition in temporaries.items():
            seen.remove(*key)
            if definition is not None:
                seen.put(*key, definition)
        if creates_temporary and named and self._fold(named[0]) not in temporaries:
            seen.remove(*named[0])  # a table of that name does not keep the temporary one from being made
        try:
            changes = apply_statement(seen, schema, query, sql_mode, temporary=True)
        except DdlError as exc:
            if creates_temporary or drops_temporary:
                changes = [Change(*key, None) for key in named] if drops_temporary else []
                if creates_temporary and named:
                    temporaries[self._fold(named[0])] = None  # its layout is not known: a LIKE of it cannot be read
            else:
                # A CREATE ... LIKE a temporary table of unknown layout, or DDL on one that cannot be read: the
                # temporary tables it names are unknown from here on, the other tables it names unreadable.
                for key in named:
                    if self._fold(key) in temporaries:
                        temporaries[self._fold(key)] = None
                real = [key for key in named if self._fold(key) not in temporaries]
                if real and not before_baseline:
                    self.position = position
                    self._report_unreadable(schema, query, position, str(exc), sql_mode, named=real)
                changes = []
        was_temporary = set(temporaries)  # a RENAME drops the old name before it makes the new one
        real_changes: list[Change] = []
        for change in changes:
            key = self._fold((change.schema, change.table))
            from_temporary = change.source is not None and self._fold(change.source) in was_temporary
            if creates_temporary or drops_temporary or key in was_temporary or (from_temporary and not creates):
                if change.definition is None:
                    temporaries.pop(key, None)
                else:
                    temporaries[key] = change.definition
            else:
                # A real table: CREATE TABLE ... LIKE a temporary one takes its layout, and no mark of the table
                # the temporary one hides.
                real_changes.append(replace(change, source=None) if from_temporary else change)
        if temporaries:
            self.temporary[session] = temporaries
        else:
            self.temporary.pop(session, None)  # ended (or never had one): a later session of its id starts afresh
        if real_changes and not before_baseline:
            self.position = position
            for change in real_changes:
                if change.definition is None:
                    self.model.remove(change.schema, change.table)
                else:
                    self.model.put(change.schema, change.table, change.definition)
            self._record_changes(real_changes, query, position, sql_mode)
        return True

    def _unmark(self, key: tuple[str, str]) -> None:
        self.unreadable.discard(key)
        self.stale.pop(key, None)

    def _mark_of(self, key: tuple[str, str]) -> str:
        return MARK_UNREADABLE if key in self.unreadable else MARK_STALE if key in self.stale else ""

    def _record_mark(self, key: tuple[str, str], position: Position, statement: str) -> None:
        """Records a table's new mark as a version of its unchanged layout. A table the history does not have needs
        none: its rows get positional names anyway."""
        definition = self.model.get(*key)
        if definition is None:
            return
        schema, table = self.model.stored_name(*key)
        mark = self._mark_of(self._fold(key))
        latest = next((v for v in reversed(self.versions) if (v.schema, v.table) == (schema, table)), None)
        if latest is not None and latest.position == position and not latest.baseline:
            # A stored version replaces the same table's versions at its position: keep the DDL that made this one.
            self._record(replace(latest, mark=mark))
            return
        self._record(Version(schema, table, position, definition, statement[:2000], mark=mark))

    def _report_unreadable(
        self,
        schema: str,
        query: str,
        position: Position,
        reason: str,
        sql_mode: int,
        named: list[tuple[str, str]] | None = None,
    ) -> None:
        """Marks the tables ``query`` names (``named`` when given: those of them it may have changed), or every
        table when it names none that can be told, and reports the statement."""
        if named is None:
            named = tables_named(query, schema, sql_mode)
        if named is None:
            # No table can be told from it: any may have changed, so none keeps names that may be wrong.
            tables = [self.model.stored_name(*key) for key in sorted(self.model.tables)]
            which = "every table (it names none that could be read)"
        else:
            tables = self._known_tables(named)
            which = ", ".join(_printable(".".join(k)) for k in tables)
        for key in tables:
            self.unreadable.add(self._fold(key))
            if self.reread is not None:
                self.stale[self._fold(key)] = key
            self._record_mark(key, position, query)
        message = (
            f"schema history: cannot apply the DDL at {position} (default database {_printable(schema)!r}): "
            f"{reason}; rows of {which} get positional names until a later DDL defines them or they are re-read. "
            f"Statement: {_printable(query[:500])}"
        )
        self._problem(("", "", f"{position}"), message)

    def _known_tables(self, named: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The tables a statement names. A name with bytes its charset could not decode stands for every table of the
        history it may be (each undecoded run may be any characters), so that none keeps names that may be wrong."""
        found: list[tuple[str, str]] = []
        for key in named:
            if not has_undecoded_bytes(key[0] + key[1]):
                found.append(key)
                continue
            flags = re.IGNORECASE if self.lower_case_table_names else 0
            schema_pattern, table_pattern = (re.compile(_undecoded_as_wildcard(part), flags) for part in key)
            found += [
                stored
                for stored in (self.model.stored_name(*k) for k in self.model.tables)
                if schema_pattern.fullmatch(stored[0]) and table_pattern.fullmatch(stored[1])
            ]
        return found

    def _problem(self, key: tuple[str, str, str], message: str) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        self.problems += 1
        log.warning("%s", message)
        if self.on_problem is not None:
            self.on_problem(message)

    def table(self, schema: str, table: str) -> SchemaTable | None:
        with self._lock:
            found = self.model.get(schema, table)
            return found.as_schema_table() if found is not None else None

    def invalidate(self, schema: str | None = None, table: str | None = None) -> None:
        """Nothing to forget: the history is not a cache (the decoder calls this on every DDL)."""

    def table_for_map(self, tm: TableMap) -> SchemaTable | None:
        with self._lock:
            key = self._fold((tm.schema, tm.table))
            where = str(self.position) if self.position is not None else "the start"
            mark_stale = True
            if key in self.unreadable:
                tag, why = f"unreadable {where}", ": its last DDL could not be read"
            elif key in self.stale:  # it disagreed earlier and no CREATE or re-read defined it since
                tag = f"stale {where}"
                why = " disagreed with the history earlier and waits to be re-read from information_schema"
                mark_stale = False
            else:
                found = self.model.get(tm.schema, tm.table)
                tag = where
                if found is None:
                    why = " is not in the history"
                else:
                    reason = layout_mismatch(found, tm)
                    if reason is None:
                        self._report_uncertain_labels(found, tm)
                        return found.as_schema_table()
                    why = f" does not match the history ({reason}); history layout: {found.layout()}"
            if mark_stale:
                self._stale(key, tm)
            self._problem(
                (*key, tag),
                f"schema history: {tm.schema}.{tm.table} after {where}{why}; event layout: {event_layout(tm)}; "
                "using positional names",
            )
            return None

    def _report_uncertain_labels(self, found: TableDef, tm: TableMap) -> None:
        """Says once per layout which columns' values come as label numbers: their labels were read from
        information_schema, which may have shown characters it cannot convert as "?" (``labels_may_be_mangled``).
        A TABLE_MAP with row metadata carries the labels itself: nothing to say for those."""
        carried = set(tm.optional.enum_values) | set(tm.optional.set_values) if tm.optional is not None else set()
        uncertain = [found.columns[i] for i in found.uncertain_labels() if i not in carried]
        if not uncertain:
            return
        described = ", ".join(f"{c.name} {c.column_type}" for c in uncertain)
        self._problem(
            (*self._fold((tm.schema, tm.table)), f"labels {described}"),
            f"schema history: {tm.schema}.{tm.table}: the ENUM/SET labels of {described} were read from "
            "information_schema, which shows as '?' each character it cannot convert (4-byte characters): they may "
            "not be the real labels, so these columns' values are given as label numbers (ENUM: the label's "
            "position from 1; SET: the number whose bits are the labels), not as labels. binlog_row_metadata=FULL "
            "on the source gives the labels.",
        )

    def _fold(self, key: tuple[str, str]) -> tuple[str, str]:
        return (key[0].lower(), key[1].lower()) if self.lower_case_table_names else key

    def _stale(self, key: tuple[str, str], tm: TableMap) -> None:
        if self.reread is not None:
            self.stale[key] = (tm.schema, tm.table)
            # Kept from the last position the history knows, at or before this TABLE_MAP: a start between the two
            # gives the table positional names a little early, never names that may be wrong.
            if self.position is not None:
                self._record_mark((tm.schema, tm.table), self.position, STALE_STATEMENT)

    # -- re-reading a table the history lost -------------------------------------------------------------------------

    def caught_up(self, position: Position) -> bool:
        """The decoder has read everything the source sent, up to ``position`` (a heartbeat outside a transaction).

        Tables reported since are re-read from information_schema when that provably shows them as they are at
        ``position``: the source's position before and after the read is ``position`` itself, so no statement
        (and so no DDL on them) lies between the decoder and the read. A DDL holds its table's metadata lock until
        it is in the binlog, so a read that sees its effect also sees the position move. Otherwise they stay
        reported (positional names), and the next heartbeat tries again. True when a layout changed.
        """
        if not self.stale or self.reread is None or not position.file:
            return False
        with self._lock:
            wanted = dict(self.stale)
        read = self.reread(sorted({schema for schema, _ in wanted.values()}))
        if read is None:
            return False
        model, at = read
        if (at.file, at.pos) != (position.file, position.pos):
            return False  # the source moved on (or the decoder is behind it): not provably current
        changed = False
        with self._lock:
            for key, (schema, table) in wanted.items():
                if self.stale.pop(key, None) is None:
                    continue  # a DDL defined it meanwhile
                self.unreadable.discard(key)
                definition = model.get(schema, table)
                if definition is None and self.model.get(schema, table) is None:
                    continue  # not a table the source has (a system table): nothing to record
                stored = model.stored_name(schema, table) if definition is not None else (schema, table)
                version = Version(*stored, position, definition, REREAD_STATEMENT)
                if definition is None:
                    self.model.remove(schema, table)
                else:
                    self.model.put(schema, table, definition)
                self._record(version)
                changed = True
                log.info(
                    "schema history: %s.%s re-read from information_schema at %s: %s",
                    schema,
                    table,
                    position,
                    definition.layout() if definition is not None else "(no such table)",
                )
            if changed:
                self.position = position  # later mismatches of the same table are reported again
        return changed

    # -- baselines --------------------------------------------------------------------------------------------------

    def set_baseline(self, model: SchemaModel, position: Position) -> list[Version]:
        """Replaces everything with ``model`` as of ``position``; returns the baseline versions (to store)."""
        with self._lock:
            made = [
                Version(*model.stored_name(*key), position, definition, "", baseline=True)
                for key, definition in sorted(model.tables.items())
            ]
            self.versions = list(made)
            self.pending = []
            self.unreadable.clear()
            self.stale.clear()
            self.lower_case_table_names = model.lower_case_table_names
            self.server_charset = model.server_charset
            self.initial_databases = dict(model.databases)
            self.model = model.copy()
            self.position = position
            return made

    def tables(self) -> dict[tuple[str, str], list[Version]]:
        """Every table's versions, oldest first (for pages and tests)."""
        out: dict[tuple[str, str], list[Version]] = {}
        for version in self.versions:
            out.setdefault((version.schema, version.table), []).append(version)
        return out


def _undecoded_as_wildcard(name: str) -> str:
    """A pattern for a name read with undecoded bytes (lone surrogates): each run of them is one or more characters."""
    return ".+".join(re.escape(part) for part in re.split("[\udc80-\udcff]+", name))


def _printable(text: str) -> str:
    """Text for a message: undecoded bytes as \\xNN escapes (a lone surrogate cannot be written as UTF-8)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# -- reading the server ----------------------------------------------------------------------------------------------

Query = Callable[..., Sequence[Sequence[Any]]]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)


def read_model(query: Query, schemas: Iterable[str] | None = None) -> SchemaModel:
    """The tables (not views, not system schemas) and databases as ``information_schema`` shows them now.

    ``query(sql, *params)`` runs a statement on the source and returns its rows.
    """
    lctn = int(_text(query("SELECT @@lower_case_table_names")[0][0]))
    server_charset = _text(query("SELECT @@character_set_server")[0][0])
    model = SchemaModel(lower_case_table_names=lctn, server_charset=server_charset)
    wanted = set(schemas) if schemas is not None else None
    system = ("information_schema", "performance_schema", "mysql", "sys")
    for name, charset in query("SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA"):
        if _text(name) in system or (wanted is not None and _text(name) not in wanted):
            continue
        model.databases[_text(name).lower() if lctn else _text(name)] = _text(charset)
    table_charsets: dict[tuple[str, str], str] = {}
    versioned: set[tuple[str, str]] = set()
    ordinary_hashes: set[tuple[str, str]] = set()  # tables whose HASH indexes are ordinary ones (MEMORY)
    for schema, table, collation, kind, engine in query(
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION, TABLE_TYPE, ENGINE FROM information_schema.TABLES "
        f"WHERE TABLE_TYPE IN ('BASE TABLE', '{SYSTEM_VERSIONED}', 'SEQUENCE')"
    ):
        if _text(schema) not in system and (wanted is None or _text(schema) in wanted):
            table_charsets[(_text(schema), _text(table))] = _charset(_text(collation or "binary"))
            if _text(kind) == SYSTEM_VERSIONED:
                versioned.add((_text(schema), _text(table)))
            if _text(engine or "").upper() in ORDINARY_HASH_ENGINES:
                ordinary_hashes.add((_text(schema), _text(table)))
    generations: dict[tuple[str, str], list[str | None]] = {key: [] for key in versioned}
    shown_in = _column_type_charset(query)
    columns: dict[tuple[str, str], list[Column]] = {key: [] for key in table_charsets}
    # One schema at a time and without a join: MariaDB's information_schema joins need temporary files we can spare.
    for db in sorted({key[0] for key in table_charsets}):
        for table, name, data_type, column_type, charset, nullable, _ordinal, generation in sorted(
            query(
                "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE, "
                "ORDINAL_POSITION, GENERATION_EXPRESSION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s",
                db,
            ),
            key=lambda row: (_text(row[0]), int(row[6])),
        ):
            key = (db, _text(table))
            if key in generations:
                generations[key].append(_text(generation) if generation is not None else None)
            if key in columns:
                column = Column(
                    _text(name),
                    _text(data_type).lower(),
                    _column_type(_text(data_type).lower(), _text(column_type)),
                    _text(charset) if charset is not None else None,
                    _text(nullable) == "YES",
                )
                if labels_may_be_mangled(column, shown_in):
                    column = replace(column, labels_uncertain=True)
                columns[key].append(column)
    # The primary keys and the long UNIQUE keys (binlog.schema.long_unique_hash_columns), in one read of the indexes.
    keys: dict[tuple[str, str], list[str]] = {}
    long_unique: dict[tuple[str, str], set[str]] = {}
    for schema, table, index, name, _seq, non_unique, index_type in sorted(
        query(
            "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME, SEQ_IN_INDEX, NON_UNIQUE, INDEX_TYPE"
            " FROM information_schema.STATISTICS WHERE INDEX_NAME = 'PRIMARY' OR INDEX_TYPE = 'HASH'"
        ),
        key=lambda row: (_text(row[0]), _text(row[1]), _text(row[2]), int(row[4])),
    ):
        key = (_text(schema), _text(table))
        if _text(index) == "PRIMARY":
            keys.setdefault(key, []).append(_text(name))
        elif int(non_unique) == 0 and _text(index_type) == "HASH" and key not in ordinary_hashes:
            long_unique.setdefault(key, set()).add(_text(index))
    for key, expressions in generations.items():
        if has_hidden_system_time(SYSTEM_VERSIONED, expressions):
            columns[key] += SYSTEM_TIME
    for key in columns:
        if key in long_unique:
            columns[key] += hidden(long_unique_hash_columns(len(long_unique[key])))
    for key, cols in columns.items():
        charset = table_charsets.get(key, model.database_charset(key[0]))
        model.put(key[0], key[1], TableDef(tuple(cols), tuple(keys.get(key, ())), charset))
    return model


def _column_type(data_type: str, column_type: str) -> str:
    """COLUMN_TYPE in lower case, as ``binlog.ddl`` writes it, but for the labels of an ENUM or SET: those are case
    sensitive in what a row holds."""
    if data_type in ("enum", "set"):
        start = column_type.find("(")
        return column_type[:start].lower() + column_type[start:] if start >= 0 else column_type.lower()
    return column_type.lower()


def _column_type_charset(query: Query) -> str:
    """The charset information_schema shows COLUMN_TYPE in (utf8mb3 on MariaDB 10.x; assumed when it does not say)."""
    rows = query(COLUMN_TYPE_CHARSET_SQL)
    return _text(rows[0][0]).lower() if rows and rows[0][0] is not None else "utf8mb3"


def _charset(collation: str) -> str:
    from binlog.ddl import charset_of_collation

    return charset_of_collation(collation)


def pymysql_query(connect_args: dict[str, Any]) -> tuple[Query, Callable[[], None]]:
    """A ``query`` function over a new PyMySQL connection, and the function that closes it."""
    import pymysql

    args = dict(connect_args)
    args.pop("database", None)
    conn = pymysql.connect(**args)

    def query(sql: str, *params: Any) -> Sequence[Sequence[Any]]:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    return query, conn.close


def baseline_from_server(query: Query) -> tuple[SchemaModel, Position]:
    """The schema now and the source position it belongs to (read before and after it: retried until they agree,
    so no DDL slipped in between)."""
    for _ in range(5):
        read = read_current(query)
        if read is not None:
            return read
    return read_model(query), _master_position(query)


def read_current(query: Query, schemas: Iterable[str] | None = None) -> tuple[SchemaModel, Position] | None:
    """The schemas now and the source position they provably belong to: the same before and after the read (None
    when the source wrote anything meanwhile)."""
    before = _master_position(query)
    model = read_model(query, schemas)
    return (model, before) if _master_position(query) == before else None


def server_reread(connect_args: dict[str, Any]) -> Reread:
    """A ``SchemaHistory.reread`` over a new connection for each re-read (they are rare: after a reported table)."""

    import pymysql

    failed = False

    def reread(schemas: Sequence[str]) -> tuple[SchemaModel, Position] | None:
        nonlocal failed
        try:
            query, close = pymysql_query(connect_args)
            try:
                read = read_current(query, schemas)
            finally:
                close()
        except (pymysql.err.MySQLError, OSError) as exc:
            # The stream goes on: the tables keep positional names and the next heartbeat tries again (said once).
            if not failed:
                log.warning("schema history: cannot re-read tables from information_schema: %s", exc)
            failed = True
            return None
        failed = False
        return read

    return reread


def _master_position(query: Query) -> Position:
    """The source's current position, with its GTID state (so a start by GTID alone can be placed before or after
    a baseline)."""
    import pymysql

    try:
        rows = query("SHOW MASTER STATUS")
    except pymysql.err.MySQLError:  # MySQL 8.2+ renamed it
        rows = query("SHOW BINARY LOG STATUS")
    if not rows:
        return Position("", 0)
    row = rows[0]
    if len(row) >= 5:  # MySQL: Executed_Gtid_Set
        gtid = _text(row[4] or "").replace("\n", "")
    else:
        gtid = _text(query("SELECT @@gtid_binlog_pos")[0][0] or "")
    return Position(_text(row[0]), int(_text(row[1])), gtid)


def gtid_within(gtid: str, state: str) -> bool | None:
    """Whether every transaction of ``gtid`` (one GTID, or a GTID state or set) is contained in ``state``; None when
    that cannot be told (either is empty, or they are of different flavours)."""
    if not gtid or not state:
        return None
    if is_mysql_gtid_text(gtid) != is_mysql_gtid_text(state):
        return None
    try:
        if is_mysql_gtid_text(state):
            outer = MysqlGtidSet(state).sets
            for sid, intervals in MysqlGtidSet(gtid).sets.items():
                covering = outer.get(sid, [])
                if not all(any(lo >= a and hi <= b for a, b in covering) for lo, hi in intervals):
                    return False
            return True
        # MariaDB: a domain's sequence numbers grow; a domain the state lacks starts from its beginning.
        domains = MariaGtidState(state).domains
        return all(
            domain in domains and seq <= domains[domain][1] for domain, (_, seq) in MariaGtidState(gtid).domains.items()
        )
    except BinlogError:
        return None


def changes_as_versions(changes: Iterable[Change], position: Position, statement: str) -> list[Version]:
    return [Version(c.schema, c.table, position, c.definition, statement) for c in changes]
