"""The store: clients, filters, row changes and the queues that point at them, checkpoints, statistics, schema.

A client's queue is the contiguous range of sequence numbers ``(acked_seq, last_seq]``: entries only ever leave at the
head (POLL, ACK, the unqueue-oldest policy, a purge), so the queue size is a subtraction and the head is an index
lookup on ``(client, seq)``, whatever the number of entries in the store. ``last_seq`` belongs to the worker (it
appends) and lives in :class:`QueueState`; ``acked_seq`` and ``delivered_seq`` belong to the relay server (it
consumes) and live on :class:`Client`, so that the two processes never wait for each other's row locks.

The worker's write path (relay/worker/) appends changes, queue entries, counters and the checkpoint; everything else
writes through the store package (relay/store/), and nothing outside these two writes SQL against these tables.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from binlog.constants import (
    KIND_DELETE,
    KIND_INSERT,
    KIND_SNAPSHOT_END,
    KIND_SNAPSHOT_ROW,
    KIND_SNAPSHOT_START,
    KIND_UPDATE,
)
from clientproto import DiscardPolicy as WireDiscardPolicy


class EventKind(models.IntegerChoices):
    """Row change types, with the relay protocol's bit values (a filter's mask combines them)."""

    INSERT = KIND_INSERT, "insert"
    UPDATE = KIND_UPDATE, "update"
    DELETE = KIND_DELETE, "delete"
    SNAPSHOT_ROW = KIND_SNAPSHOT_ROW, "snapshot row"
    SNAPSHOT_START = KIND_SNAPSHOT_START, "snapshot start"
    SNAPSHOT_END = KIND_SNAPSHOT_END, "snapshot end"


class DiscardPolicy(models.IntegerChoices):
    NO_DISCARD = WireDiscardPolicy.NO_DISCARD.value, "no discard"
    UNQUEUE_OLDEST = WireDiscardPolicy.UNQUEUE_OLDEST.value, "unqueue oldest"
    IGNORE_NEWEST = WireDiscardPolicy.IGNORE_NEWEST.value, "ignore newest"


class RelayProcess(models.Model):
    """A running ``manage.py runrelay`` process. It reports every few seconds and moves ``expires`` ahead each time.

    A process whose ``expires`` has passed (killed, host lost, store unreachable) no longer holds its clients'
    sessions: they count as disconnected at once, and the next relay process to report marks them disconnected in
    the store and deletes the row. A process that stops cleanly deletes its own row.
    """

    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    addresses = models.CharField(max_length=500, blank=True, default="", help_text="listen addresses")
    instance_id = models.BigIntegerField(default=0, help_text="POLLV2 InstanceID: the process's start time")
    started = models.DateTimeField()
    heartbeat = models.DateTimeField(help_text="last report")
    expires = models.DateTimeField(db_index=True, help_text="presumed gone after this without a report")
    connections = models.IntegerField(default=0, help_text="open connections at the last report")

    class Meta:
        ordering = ["started", "id"]
        verbose_name_plural = "relay processes"

    def __str__(self) -> str:
        return f"relay pid {self.pid} on {self.hostname}"


class Client(models.Model):
    """A relay client, known by its name; its id is the protocol's ClientID, stable for ever."""

    # The protocol's ClientName: at most 1024 bytes, which AUTH's decoder holds it to (clientproto MAX_NAME).
    name = models.CharField(max_length=1024, unique=True)
    token = models.BigIntegerField(default=0, help_text="ClientToken of the current session")
    created = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    connected = models.BooleanField(default=False)
    relay_process = models.ForeignKey(
        RelayProcess,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="clients",
        help_text="the relay process holding the current session",
    )
    session_started = models.DateTimeField(null=True, blank=True)
    remote_address = models.CharField(max_length=100, blank=True, default="")
    served = models.BigIntegerField(default=0)
    acked_seq = models.BigIntegerField(default=0, help_text="every entry up to here has left the queue")
    delivered_seq = models.BigIntegerField(default=0, help_text="sent in this session, waiting for an ACK")

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} (#{self.id})"


class QueueState(models.Model):
    """The worker's side of a client's queue."""

    client = models.OneToOneField(Client, on_delete=models.CASCADE, primary_key=True, related_name="queue_state")
    last_seq = models.BigIntegerField(default=0, help_text="sequence number of the newest entry")
    discarded = models.BigIntegerField(default=0)
    max_queue = models.BigIntegerField(default=0, help_text="largest queue size seen")

    def __str__(self) -> str:
        return f"queue of client #{self.client_id}"


class Filter(models.Model):
    """What a client asked for: event types on schema.table (names exact, or with * and ? wildcards)."""

    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="filters")
    event_mask = models.PositiveSmallIntegerField(help_text="1 insert, 2 update, 4 delete, combined")
    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    queue_limit = models.IntegerField(default=0, help_text="<= 0: unlimited")
    discard_policy = models.PositiveSmallIntegerField(choices=DiscardPolicy.choices, default=DiscardPolicy.NO_DISCARD)
    created = models.DateTimeField(auto_now_add=True)
    discarded = models.BigIntegerField(default=0, help_text="entries this filter's limit and policy dropped")
    last_discard = models.DateTimeField(null=True, blank=True, help_text="when this filter last dropped an entry")

    class Meta:
        ordering = ["client_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "event_mask", "schema_name", "table_name"], name="filter_identity_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.schema_name}.{self.table_name} ({mask_letters(self.event_mask)})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A save of a filter that exists (the admin's forms and inlines) writes every column but the discard count
        and time: the worker adds to those in its batches, at any moment (relay/worker/ingest.py), and a save of the
        values read before would take back what it counted meanwhile, all of a large transaction's drops when the
        save waited for that transaction's commit."""
        written = kwargs.get("update_fields") is not None or kwargs.get("force_insert")
        if not self._state.adding and not args and not written:
            kwargs["update_fields"] = [
                field.name
                for field in self._meta.concrete_fields
                if not field.primary_key and field.name not in ("discarded", "last_discard")
            ]
        super().save(*args, **kwargs)


class FilterVersion(models.Model):
    """One row whose number grows with every filter write (add, edit, remove, a client's deletion), in the same
    transaction as the write. The worker reads it inside each batch's transaction and reloads its filters when it
    moved, so a change committed on the source after a filter write is routed by the new filters
    (relay/store/filters.py).
    """

    version = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"filter version {self.version}"


class FilterStamp(models.Model):
    """The filter version of a client's last filter write, written with it: the worker reloads the filters of the
    clients stamped past the version it loaded, not every client's (relay/store/filters.py). No foreign key: the stamp
    of a deleted client says its filters went."""

    client_id = models.BigIntegerField(unique=True)
    version = models.BigIntegerField(db_index=True)

    def __str__(self) -> str:
        return f"client {self.client_id}: filters written at version {self.version}"


class Snapshot(models.Model):
    """A client's request for the current rows of one table, and how far the worker has got.

    The worker reads the table in key order, a chunk at a time, each chunk in a short transaction of its own, and
    queues each chunk at the point of the stream the chunk was read at (relay/worker/snapshots.py). ``last_key`` is
    the key of the last row queued, written in the same store transaction as the chunk and the checkpoint, so a
    worker killed at any instant resumes after it.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        FAILED = "failed"

    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="snapshots")
    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    where = models.TextField(blank=True, default="", help_text="SQL condition the rows must meet; empty: all rows")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    key_columns = models.TextField(blank=True, default="", help_text="the columns chunks are ordered by, as JSON")
    last_key = models.TextField(blank=True, default="", help_text="key of the last row queued, as JSON; empty: none")
    rows_done = models.BigIntegerField(default=0)
    rows_total = models.BigIntegerField(null=True, blank=True, help_text="the table's estimated row count")
    chunks_done = models.IntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    updated = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    ACTIVE = (State.PENDING, State.RUNNING)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state"], name="snapshot_state")]

    def __str__(self) -> str:
        return f"snapshot #{self.id} of {self.schema_name}.{self.table_name} for client #{self.client_id}"

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE


def mask_letters(mask: int) -> str:
    return "".join(letter for bit, letter in ((1, "I"), (2, "U"), (4, "D")) if mask & bit)


class Change(models.Model):
    """One row change, stored once however many queues point at it."""

    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    kind = models.PositiveSmallIntegerField(choices=EventKind.choices)
    binlog_file = models.CharField(max_length=255)
    binlog_pos = models.BigIntegerField(help_text="end position of the rows event")
    row_index = models.IntegerField(help_text="index of the row within its rows event")
    timestamp = models.BigIntegerField(help_text="event time, unix seconds")
    gtid = models.CharField(max_length=255, blank=True, default="")
    data = models.TextField(help_text="columns with before/after values, see relay/store/rowcodec.py")

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.schema_name}.{self.table_name} @ {self.binlog_file}:{self.binlog_pos}"


MAX_RUN = 10_000


class QueueEntry(models.Model):
    """A run of a client's queue: ``count`` consecutive sequence numbers from ``seq``, pointing at as many
    consecutive changes from ``change``.

    A client that wants every change of a batch gets one row for the whole batch instead of one per change, which
    is most of what the worker writes when many clients subscribe broadly. Entry ``seq + i`` is change
    ``change_id + i``. A run never holds more than :data:`MAX_RUN` entries, so the run holding a given seq is found
    by a bounded index range scan.
    """

    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    seq = models.BigIntegerField(help_text="sequence number of the run's first entry")
    count = models.PositiveIntegerField(default=1, db_default=1, help_text="entries in the run")
    # No database constraint: changes are deleted only once no entry points at them (relay/store/queues.py), and the
    # constraint check would cost a lookup on every insert in the hot path.
    change = models.ForeignKey(
        Change, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )

    class Meta:
        # Only (client, seq): the garbage collector finds the changes still needed from each queue's head, so no
        # index on change is maintained for every entry the worker writes.
        constraints = [models.UniqueConstraint(fields=["client", "seq"], name="queue_entry_client_seq")]
        verbose_name_plural = "queue entries"

    def __str__(self) -> str:
        return f"client #{self.client_id} seq {self.seq}"


class ServedEvent(models.Model):
    """The last events served to a client (the original page's History column)."""

    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="history")
    seq = models.BigIntegerField()
    kind = models.PositiveSmallIntegerField(choices=EventKind.choices)
    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    served_at = models.DateTimeField()

    class Meta:
        ordering = ["-served_at", "-id"]
        indexes = [models.Index(fields=["client", "-id"], name="served_event_client")]


class Checkpoint(models.Model):
    """Where the worker resumes for one source: the position just after the last applied transaction."""

    source = models.CharField(max_length=255, unique=True)
    binlog_file = models.CharField(max_length=255)
    binlog_pos = models.BigIntegerField()
    gtid = models.TextField(blank=True, default="")
    #: When the source began binlog_file (its FORMAT_DESCRIPTION's timestamp, Unix seconds; 0: not known yet): a file
    #: of that name begun at another time is another file (RESET MASTER, a restored or another server), where
    #: binlog_pos means nothing.
    binlog_file_started = models.BigIntegerField(default=0)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.source} @ {self.binlog_file}:{self.binlog_pos}"


class PreparedTransaction(models.Model):
    """The rows of an XA transaction that the source prepared and has not yet committed or rolled back
    (binlog/xa.py): held here, written with the checkpoint that passes its XA PREPARE, until its XA COMMIT delivers them
    or its XA ROLLBACK drops them (relay/worker/xa.py)."""

    source = models.CharField(max_length=255)
    #: X'<gtrid hex>',X'<bqual hex>',<format id>, as the binlog writes it (each part at most 64 bytes).
    xid = models.CharField(max_length=300)
    gtid = models.CharField(max_length=255, blank=True, default="")
    binlog_file = models.CharField(max_length=255)
    binlog_pos = models.BigIntegerField()
    rows = models.IntegerField()
    #: The decoded changes, pickled: the worker alone writes and reads them, and the store is its own.
    changes = models.BinaryField()
    prepared_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "xid"], name="prepared_transaction_source_xid")]

    def __str__(self) -> str:
        return f"{self.source} XA {self.xid} ({self.rows} rows)"


class WorkerStatus(models.Model):
    """The binlog worker's state and counters, per source, for the dashboard and /metrics."""

    class State(models.TextChoices):
        STARTING = "starting"
        CONNECTED = "connected"
        STANDBY = "standby"
        RECONNECTING = "reconnecting"
        STOPPED = "stopped"
        FAILED = "failed"

    source = models.CharField(max_length=255, unique=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.STOPPED)
    pid = models.IntegerField(null=True, blank=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    session_label = models.CharField(
        max_length=63,
        blank=True,
        default="",
        help_text="the application name of the active worker's store sessions: the next active worker ends any it "
        "finds, so that nothing the previous one had in flight commits after it starts (PostgreSQL)",
    )
    started = models.DateTimeField(null=True, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True, help_text="last time the worker reported")
    rows = models.BigIntegerField(default=0)
    transactions = models.BigIntegerField(default=0)
    rows_since_start = models.BigIntegerField(default=0)
    reconnects = models.BigIntegerField(default=0)
    lag_seconds = models.FloatField(null=True, blank=True)
    source_timestamp = models.DateTimeField(
        null=True, blank=True, help_text="the source's time of the newest event applied (its binlog timestamp)"
    )
    caught_up = models.DateTimeField(
        null=True, blank=True, help_text="when the worker last applied a source heartbeat: it had all the source had"
    )
    clock_offset_seconds = models.FloatField(
        null=True,
        blank=True,
        help_text="the source's clock minus the worker host's, measured when it became active: binlog timestamps "
        "are the source's time, so the lag and queue ages subtract it",
    )
    heartbeat_seconds = models.FloatField(
        null=True, blank=True, help_text="the worker's HeartbeatSeconds: while connected it reports at least this often"
    )
    source_file = models.CharField(max_length=255, blank=True, default="")
    source_pos = models.BigIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_error_at = models.DateTimeField(null=True, blank=True)
    standby_pid = models.IntegerField(null=True, blank=True, help_text="a second worker waiting to take over")
    standby_hostname = models.CharField(max_length=255, blank=True, default="")
    standby_heartbeat = models.DateTimeField(null=True, blank=True)
    schema_problems = models.BigIntegerField(
        default=0,
        help_text="TABLE_MAPs that disagreed with the schema history and DDL it could not read (rows went out with "
        "positional names @1, @2...)",
    )
    last_schema_problem = models.TextField(blank=True, default="")
    last_schema_problem_at = models.DateTimeField(null=True, blank=True)
    unrelayed_statements = models.BigIntegerField(
        default=0,
        help_text="statements that changed rows and are in the binlog as statements, not row changes (TRUNCATE, or "
        "a session's binlog_format STATEMENT or MIXED): no client received their changes",
    )
    last_unrelayed_statement = models.TextField(blank=True, default="")
    last_unrelayed_statement_at = models.DateTimeField(null=True, blank=True)
    cascading_foreign_keys = models.TextField(
        blank=True,
        default="",
        help_text="the source's foreign keys with ON DELETE/UPDATE CASCADE, SET NULL or SET DEFAULT, one a line, as "
        "read at the worker's start: the changes they make are not in the binlog, and no client receives them",
    )
    change_log_lost = models.BigIntegerField(
        default=0,
        help_text="committed changes whose lines are not in the change log ([Logger] Path): its disk could not take "
        "their batch (full, read-only); the store and the clients' queues have them",
    )
    last_change_log_error = models.TextField(blank=True, default="")
    last_change_log_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "worker status"

    def __str__(self) -> str:
        return f"worker for {self.source}: {self.state}"


class QueueSample(models.Model):
    """A client's queue once a minute, written by the worker (relay/worker/samples.py): the dashboard's queue size
    over time, discards in the last hour and delivery rate come from the differences. Kept for a day."""

    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(db_index=True)
    queue = models.BigIntegerField(default=0)
    discarded = models.BigIntegerField(default=0, help_text="the client's discard total at that time")
    served = models.BigIntegerField(default=0, help_text="the client's served total at that time")
    filter_discards = models.JSONField(
        default=dict, help_text="the discard total of each of the client's filters that discarded, by filter id"
    )

    class Meta:
        indexes = [models.Index(fields=["client", "at"], name="queue_sample_client_at")]


class LagSample(models.Model):
    """A source's lag once a minute, as the worker measured it when it reported (relay/worker/samples.py)."""

    source = models.CharField(max_length=255)
    at = models.DateTimeField(db_index=True)
    lag = models.FloatField()


class EventCount(models.Model):
    """Binlog events received, by event type, per source."""

    source = models.CharField(max_length=255)
    event_type = models.PositiveSmallIntegerField()
    count = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["source", "event_type"]
        constraints = [models.UniqueConstraint(fields=["source", "event_type"], name="event_count_unique")]


class TableUsage(models.Model):
    """Rows inserted, updated and deleted per table: all time, and since the worker's start."""

    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    inserts = models.BigIntegerField(default=0)
    updates = models.BigIntegerField(default=0)
    deletes = models.BigIntegerField(default=0)
    start_inserts = models.BigIntegerField(default=0)
    start_updates = models.BigIntegerField(default=0)
    start_deletes = models.BigIntegerField(default=0)
    last_change = models.BigIntegerField(null=True, blank=True, help_text="unix time of the newest change")

    class Meta:
        ordering = ["schema_name", "table_name"]
        constraints = [models.UniqueConstraint(fields=["schema_name", "table_name"], name="table_usage_unique")]
        verbose_name_plural = "table usage"

    def __str__(self) -> str:
        return f"{self.schema_name}.{self.table_name}"


class UsageMinute(models.Model):
    """Rows per table per minute of event time: the rolling 24 h and 1 h windows sum these buckets."""

    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    minute = models.BigIntegerField(help_text="unix time of the minute's start")
    inserts = models.BigIntegerField(default=0)
    updates = models.BigIntegerField(default=0)
    deletes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["schema_name", "table_name", "minute"], name="usage_minute_unique")
        ]
        indexes = [models.Index(fields=["minute"], name="usage_minute_minute")]


class UsageHistory(models.Model):
    """Table usage per hour or day computed by the PySpark pipeline over archived binlogs and logs."""

    class Period(models.TextChoices):
        HOUR = "hour"
        DAY = "day"

    period = models.CharField(max_length=4, choices=Period.choices)
    start = models.DateTimeField()
    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    inserts = models.BigIntegerField(default=0)
    updates = models.BigIntegerField(default=0)
    deletes = models.BigIntegerField(default=0)
    transactions = models.BigIntegerField(default=0)
    run = models.CharField(max_length=64, blank=True, default="", help_text="pipeline run that computed it")

    class Meta:
        ordering = ["-start", "schema_name", "table_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "start", "schema_name", "table_name"], name="usage_history_unique"
            )
        ]
        verbose_name_plural = "usage history"


class ColumnChangeHistory(models.Model):
    """Per day and column, the UPDATE rows whose both images carried the column (compared) and how many of them
    really changed its value (changed), computed by the PySpark pipeline over archived binlogs and logs."""

    day = models.DateField(help_text="UTC day")
    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    column_name = models.CharField(max_length=255)
    changed = models.BigIntegerField(default=0, help_text="UPDATE rows that changed the column's value")
    compared = models.BigIntegerField(default=0, help_text="UPDATE rows with the column in both images")
    run = models.CharField(max_length=64, blank=True, default="", help_text="pipeline run that computed it")

    class Meta:
        ordering = ["-day", "schema_name", "table_name", "column_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "schema_name", "table_name", "column_name"], name="column_change_history_unique"
            )
        ]
        verbose_name_plural = "column change history"


class SchemaTable(models.Model):
    """A table seen in the stream, with the layout of its latest TABLE_MAP."""

    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    primary_key = models.CharField(max_length=1000, blank=True, default="")
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["schema_name", "table_name"]
        constraints = [models.UniqueConstraint(fields=["schema_name", "table_name"], name="schema_table_unique")]

    def __str__(self) -> str:
        return f"{self.schema_name}.{self.table_name}"


class SchemaColumn(models.Model):
    table = models.ForeignKey(SchemaTable, on_delete=models.CASCADE, related_name="columns")
    ordinal = models.PositiveIntegerField()
    name = models.CharField(max_length=255)
    type_name = models.CharField(max_length=255, blank=True, default="")
    type_code = models.PositiveSmallIntegerField()
    unsigned = models.BooleanField(default=False)
    nullable = models.BooleanField(default=True)
    charset = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["table_id", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["table", "ordinal"], name="schema_column_unique")]

    def __str__(self) -> str:
        return f"{self.table}.{self.name}"


class SchemaVersion(models.Model):
    """One version of a table's layout in the schema history (binlog.schemahistory), valid from its position on.

    Written in the store transaction of the batch whose DDL made it, so history and checkpoint always agree. A
    baseline version was read from information_schema; ``exists`` False marks a table dropped or renamed away.
    """

    source = models.CharField(max_length=255)
    schema_name = models.CharField(max_length=255)
    table_name = models.CharField(max_length=255)
    binlog_file = models.CharField(max_length=255)
    binlog_pos = models.BigIntegerField()
    gtid = models.TextField(blank=True, default="", help_text="the GTID of the DDL that made this version")
    exists = models.BooleanField(default=True)
    columns = models.JSONField(
        default=list,
        help_text="[name, data_type, column_type, charset, nullable] per column, and a sixth item, true, when its "
        "ENUM/SET labels were read from information_schema, which may have mangled them",
    )
    primary_key = models.JSONField(default=list)
    charset = models.CharField(max_length=64, blank=True, default="")
    statement = models.TextField(blank=True, default="")
    baseline = models.BooleanField(default=False)
    mark = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="the table's doubt from here on: 'unreadable' (a DDL of it could not be applied) or 'stale' (a "
        "TABLE_MAP disagreed); its rows get positional names until it is re-read or created again",
    )
    recorded = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["source", "binlog_file", "binlog_pos", "id"]
        indexes = [models.Index(fields=["source", "schema_name", "table_name"], name="schema_version_table")]

    def __str__(self) -> str:
        return f"{self.schema_name}.{self.table_name} from {self.binlog_file}:{self.binlog_pos}"


class SchemaBaseline(models.Model):
    """Where a source's schema history starts: the information_schema read and the position it belongs to."""

    source = models.CharField(max_length=255, unique=True)
    binlog_file = models.CharField(max_length=255)
    binlog_pos = models.BigIntegerField()
    gtid = models.TextField(blank=True, default="")
    taken = models.DateTimeField(auto_now=True)
    lower_case_table_names = models.PositiveSmallIntegerField(default=0)
    server_charset = models.CharField(max_length=64, default="utf8mb4")
    databases = models.JSONField(default=dict, help_text="database name -> default charset")

    def __str__(self) -> str:
        return f"{self.source} from {self.binlog_file}:{self.binlog_pos}"
