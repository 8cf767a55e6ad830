"""What the dashboard shows about the server and its clients: read-only queries shared by the pages, the JSON API and
/metrics. Nothing here writes to the store.

The client columns follow the original relay's CLIENTS table (reference section 5): the status is CONNECTED while a
session is open, POLLING when the client was seen in the last 2 seconds, DISCONNECTED otherwise; the history lists
the last served events newest first, with the delay from now to the newest and then between consecutive ones.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from relay import store
from relay.models import (
    Change,
    Checkpoint,
    Client,
    DiscardPolicy,
    EventCount,
    EventKind,
    Filter,
    QueueState,
    RelayProcess,
    ServedEvent,
    UsageMinute,
    WorkerStatus,
    mask_letters,
)
from relay.store import relayprocess, rowcodec

PROTOCOL_VERSION = 0x00010020
POLLING_SECONDS = 2
HISTORY_LENGTH = 10

# The original page always lists these eight types, under these names (reference section 5).
CLASSIC_EVENT_NAMES = {
    0x02: "QUERY_EVENT",
    0x04: "ROTATE_EVENT",
    0x0F: "FORMAT_DESCRIPTION_EVENT",
    0x10: "XID_EVENT",
    0x13: "TABLE_MAP_EVENT",
    0x17: "WRITE_ROW_EVENT_V1",
    0x18: "UPDATE_ROW_EVENT_V1",
    0x19: "DELETE_ROW_EVENT_V1",
}

# Every other type by the name MySQL's and MariaDB's sources give it; anything unknown shows as the original did.
OTHER_EVENT_NAMES = {
    0x00: "UNKNOWN_EVENT",
    0x01: "START_EVENT_V3",
    0x03: "STOP_EVENT",
    0x05: "INTVAR_EVENT",
    0x06: "LOAD_EVENT",
    0x07: "SLAVE_EVENT",
    0x08: "CREATE_FILE_EVENT",
    0x09: "APPEND_BLOCK_EVENT",
    0x0A: "EXEC_LOAD_EVENT",
    0x0B: "DELETE_FILE_EVENT",
    0x0C: "NEW_LOAD_EVENT",
    0x0D: "RAND_EVENT",
    0x0E: "USER_VAR_EVENT",
    0x11: "BEGIN_LOAD_QUERY_EVENT",
    0x12: "EXECUTE_LOAD_QUERY_EVENT",
    0x14: "PRE_GA_WRITE_ROWS_EVENT",
    0x15: "PRE_GA_UPDATE_ROWS_EVENT",
    0x16: "PRE_GA_DELETE_ROWS_EVENT",
    0x1A: "INCIDENT_EVENT",
    0x1B: "HEARTBEAT_LOG_EVENT",
    0x1C: "IGNORABLE_LOG_EVENT",
    0x1D: "ROWS_QUERY_LOG_EVENT",
    0x1E: "WRITE_ROWS_EVENT_V2",
    0x1F: "UPDATE_ROWS_EVENT_V2",
    0x20: "DELETE_ROWS_EVENT_V2",
    0x21: "GTID_LOG_EVENT",
    0x22: "ANONYMOUS_GTID_LOG_EVENT",
    0x23: "PREVIOUS_GTIDS_LOG_EVENT",
    0x24: "TRANSACTION_CONTEXT_EVENT",
    0x25: "VIEW_CHANGE_EVENT",
    0x26: "XA_PREPARE_LOG_EVENT",
    0x27: "PARTIAL_UPDATE_ROWS_EVENT",
    0x28: "TRANSACTION_PAYLOAD_EVENT",
    0x29: "HEARTBEAT_LOG_EVENT_V2",
    0x2A: "GTID_TAGGED_LOG_EVENT",
    0xA0: "ANNOTATE_ROWS_EVENT",
    0xA1: "BINLOG_CHECKPOINT_EVENT",
    0xA2: "GTID_EVENT",
    0xA3: "GTID_LIST_EVENT",
    0xA4: "START_ENCRYPTION_EVENT",
    0xA5: "QUERY_COMPRESSED_EVENT",
    0xA6: "WRITE_ROWS_COMPRESSED_EVENT_V1",
    0xA7: "UPDATE_ROWS_COMPRESSED_EVENT_V1",
    0xA8: "DELETE_ROWS_COMPRESSED_EVENT_V1",
    0xA9: "WRITE_ROWS_COMPRESSED_EVENT",
    0xAA: "UPDATE_ROWS_COMPRESSED_EVENT",
    0xAB: "DELETE_ROWS_COMPRESSED_EVENT",
}


def event_type_name(event_type: int) -> str:
    return CLASSIC_EVENT_NAMES.get(event_type) or OTHER_EVENT_NAMES.get(event_type) or f"Event #{event_type:02X}"


# -- server -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventTypeCount:
    code: int
    name: str
    count: int

    @property
    def hex(self) -> str:
        return f"0x{self.code:02X}"


@dataclass
class SourceOverview:
    """One binlog source: its worker, its checkpoint and the events received from it."""

    source: str
    worker: WorkerStatus | None
    checkpoint: Checkpoint | None
    events: list[EventTypeCount]
    heartbeat_age: float | None

    @property
    def events_total(self) -> int:
        return sum(item.count for item in self.events)

    @property
    def up(self) -> bool:
        return self.worker is not None and self.worker.state == WorkerStatus.State.CONNECTED


@dataclass(frozen=True)
class RelayProcessRow:
    """A ``runrelay`` process as its last report shows it; ``alive`` is False once its reports stopped."""

    process: RelayProcess
    alive: bool
    report_age: float
    clients: int


@dataclass
class Overview:
    now: datetime
    started: datetime | None
    clients: int
    connected_clients: int
    served: int
    sources: list[SourceOverview]
    rows_hour: list[int]  # rows per minute, the last 60 minutes, oldest first
    rows_day: list[float]  # average rows per minute in 10-minute steps, the last 24 h, oldest first
    relay_processes: list[RelayProcessRow] = field(default_factory=list)

    protocol_version: int = PROTOCOL_VERSION

    @property
    def protocol_version_text(self) -> str:
        return f"{self.protocol_version:08X}"

    @property
    def rows_last_hour(self) -> int:
        return sum(self.rows_hour)


def event_counts(counts: dict[int, int]) -> list[EventTypeCount]:
    """The classic eight always, in the original's order, then any other type seen, by code."""
    listed = [EventTypeCount(code, name, counts.get(code, 0)) for code, name in CLASSIC_EVENT_NAMES.items()]
    others = sorted(code for code, count in counts.items() if code not in CLASSIC_EVENT_NAMES and count > 0)
    return listed + [EventTypeCount(code, event_type_name(code), counts[code]) for code in others]


def source_overviews(now: datetime | None = None) -> list[SourceOverview]:
    now = now or timezone.now()
    workers = {w.source: w for w in WorkerStatus.objects.all()}
    checkpoints = {c.source: c for c in Checkpoint.objects.all()}
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    for source, event_type, count in EventCount.objects.values_list("source", "event_type", "count"):
        counts[source][event_type] = count
    names = sorted(set(workers) | set(checkpoints) | set(counts))
    result = []
    for name in names:
        worker = workers.get(name)
        age = (now - worker.heartbeat).total_seconds() if worker and worker.heartbeat else None
        result.append(SourceOverview(name, worker, checkpoints.get(name), event_counts(counts.get(name, {})), age))
    return result


def rows_per_minute(minutes: int, step: int = 1, now: float | None = None) -> list[float]:
    """Rows of all tables per minute over the last ``minutes`` minutes (the current one included), oldest first.

    With ``step`` > 1 each point is the average over ``step`` minutes, so a day fits a chart; the sum runs in SQL
    grouped by step, never row by row here.
    """
    now = int(now if now is not None else time.time())
    since = now - now % 60 - (minutes - 1) * 60
    bins = (
        UsageMinute.objects.filter(minute__gte=since)
        .annotate(bin=(F("minute") - since) / (60 * step))
        .values("bin")
        .annotate(rows=Sum(F("inserts") + F("updates") + F("deletes")))
        .values_list("bin", "rows")
    )
    series = [0.0] * ((minutes + step - 1) // step)
    for index, rows in bins:
        if 0 <= index < len(series):
            series[int(index)] += float(rows or 0)
    if step > 1:
        series = [value / step for value in series]
    return series


def relay_process_rows(now: datetime) -> list[RelayProcessRow]:
    processes = RelayProcess.objects.annotate(
        open_sessions=Count("clients", filter=Q(clients__connected=True))
    ).order_by("started", "id")
    return [
        RelayProcessRow(p, p.expires >= now, max(0.0, (now - p.heartbeat).total_seconds()), p.open_sessions)
        for p in processes
    ]


def overview(now: datetime | None = None) -> Overview:
    now = now or timezone.now()
    sources = source_overviews(now)
    started = min((s.worker.started for s in sources if s.worker and s.worker.started), default=None)
    clients = Client.objects.aggregate(total=Sum("served"))
    return Overview(
        now=now,
        started=started,
        clients=Client.objects.count(),
        connected_clients=Client.objects.filter(relayprocess.live_sessions(now)).count(),
        relay_processes=relay_process_rows(now),
        served=int(clients["total"] or 0),
        sources=sources,
        rows_hour=[int(value) for value in rows_per_minute(60, now=now.timestamp())],
        rows_day=rows_per_minute(24 * 60, step=10, now=now.timestamp()),
    )


# -- clients ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterRow:
    schema_name: str
    table_name: str
    event_mask: int
    queue_limit: int
    discard_policy: int

    @property
    def letters(self) -> str:
        return mask_letters(self.event_mask)

    @property
    def policy(self) -> str:
        return DiscardPolicy(self.discard_policy).label if self.discard_policy in DiscardPolicy.values else "?"

    @property
    def limit(self) -> str:
        return "unlimited" if self.queue_limit <= 0 else str(self.queue_limit)


@dataclass(frozen=True)
class HistoryItem:
    seq: int
    kind: str
    schema_name: str
    table_name: str
    served_at: datetime
    delay_ms: int  # newest: from now; then from the next newer one


@dataclass
class ClientRow:
    id: int
    name: str
    status: str
    created: datetime
    session_started: datetime | None
    last_seen: datetime | None
    inactive_seconds: int | None
    remote_address: str
    queue: int
    max_queue: int
    served: int
    discarded: int
    pending_acks: int
    acked_seq: int
    delivered_seq: int
    last_seq: int
    filters: list[FilterRow] = field(default_factory=list)
    history: list[HistoryItem] = field(default_factory=list)


def client_status(connected: bool, last_seen: datetime | None, now: datetime) -> str:
    if connected:
        return "CONNECTED"
    if last_seen is not None and now - last_seen < timedelta(seconds=POLLING_SECONDS):
        return "POLLING"
    return "DISCONNECTED"


def history_items(events: list[ServedEvent], now: datetime) -> list[HistoryItem]:
    """Newest first; the delay of the newest is from now, then the gap to the next newer event."""
    items = []
    newer = now
    for event in events[:HISTORY_LENGTH]:
        delay = max(0, int((newer - event.served_at).total_seconds() * 1000))
        kind = EventKind(event.kind).label if event.kind in EventKind.values else str(event.kind)
        items.append(HistoryItem(event.seq, kind, event.schema_name, event.table_name, event.served_at, delay))
        newer = event.served_at
    return items


def _client_row(client: Client, state: dict[str, int] | None, now: datetime) -> ClientRow:
    last_seq = state["last_seq"] if state else 0
    return ClientRow(
        id=client.id,
        name=client.name,
        status=client_status(relayprocess.session_is_live(client, now), client.last_seen, now),
        created=client.created,
        session_started=client.session_started,
        last_seen=client.last_seen,
        inactive_seconds=int((now - client.last_seen).total_seconds()) if client.last_seen else None,
        remote_address=client.remote_address,
        queue=max(0, last_seq - client.acked_seq),
        max_queue=state["max_queue"] if state else 0,
        served=client.served,
        discarded=state["discarded"] if state else 0,
        pending_acks=max(0, client.delivered_seq - client.acked_seq),
        acked_seq=client.acked_seq,
        delivered_seq=client.delivered_seq,
        last_seq=last_seq,
    )


def client_rows(now: datetime | None = None, client_id: int | None = None) -> list[ClientRow]:
    """Every client (or one), with its filters and served history: four queries whatever the number of clients."""
    now = now or timezone.now()
    clients = Client.objects.select_related("relay_process")
    if client_id is not None:
        clients = clients.filter(id=client_id)
    clients = list(clients)
    ids = [client.id for client in clients]
    states = {
        row["client_id"]: row
        for row in QueueState.objects.filter(client_id__in=ids).values(
            "client_id", "last_seq", "max_queue", "discarded"
        )
    }
    rows = {client.id: _client_row(client, states.get(client.id), now) for client in clients}
    for spec in Filter.objects.filter(client_id__in=ids).order_by("client_id", "id"):
        rows[spec.client_id].filters.append(
            FilterRow(spec.schema_name, spec.table_name, spec.event_mask, spec.queue_limit, spec.discard_policy)
        )
    served: dict[int, list[ServedEvent]] = defaultdict(list)
    for event in ServedEvent.objects.filter(client_id__in=ids).order_by("client_id", "-served_at", "-id"):
        served[event.client_id].append(event)
    for cid, events in served.items():
        rows[cid].history = history_items(events, now)
    return [rows[cid] for cid in ids]


@dataclass(frozen=True)
class ShownValue:
    """A column value as the page shows it: text and a CSS class saying what kind of value it is."""

    text: str
    css: str  # "null", "missing", "binary", "" (fixed names)


MAX_TEXT = 300
MAX_BYTES = 64


def shown_value(value: rowcodec.Value | object) -> ShownValue:
    if value is rowcodec.MISSING:
        return ShownValue("", "missing")
    if value is None:
        return ShownValue("NULL", "null")
    if isinstance(value, bytes):
        text = "0x" + value[:MAX_BYTES].hex()
        return ShownValue(text + ("…" if len(value) > MAX_BYTES else ""), "binary")
    text = str(value)
    return ShownValue(text[:MAX_TEXT] + ("…" if len(text) > MAX_TEXT else ""), "")


@dataclass(frozen=True)
class HeadColumn:
    name: str
    before: ShownValue
    after: ShownValue


@dataclass(frozen=True)
class HeadEntry:
    seq: int
    change: Change
    columns: list[HeadColumn]
    delivered: bool  # sent in the current session, waiting for an ACK

    @property
    def kind(self) -> str:
        return self.change.get_kind_display()


def queue_head(row: ClientRow, limit: int) -> list[HeadEntry]:
    """The first ``limit`` entries of a client's queue, decoded: an index range scan on (client, seq)."""
    entries = [
        (seq, change_id)
        for seq, change_id in store.entry_change_ids(row.id, row.acked_seq, limit)
        if seq <= row.last_seq
    ]
    changes = Change.objects.in_bulk([change_id for _, change_id in entries])
    head = []
    for seq, change_id in entries:
        change = changes.get(change_id)
        if change is None:  # collected under us: the entry was consumed meanwhile
            continue
        try:
            columns = [
                HeadColumn(column.name, shown_value(column.before), shown_value(column.after))
                for column in rowcodec.decode(change.data)
            ]
        except (ValueError, KeyError, TypeError, IndexError):
            columns = [HeadColumn("(undecodable)", ShownValue(change.data[:MAX_TEXT], ""), shown_value(None))]
        head.append(HeadEntry(seq, change, columns, seq <= row.delivered_seq))
    return head


def queue_buildup(row: ClientRow, samples: int = 60) -> list[tuple[int, int]]:
    """How the current queue built up: (event time, entries queued up to that event), oldest first.

    There is no stored history of queue sizes; but a queue is the contiguous seq range (acked, last], so sampling
    ``samples`` evenly spaced entries and reading their changes' event times gives the queue's growth curve with
    as many index lookups, whatever the queue's length.
    """
    size = row.last_seq - row.acked_seq
    if size <= 0:
        return []
    step = max(1, size // samples)
    wanted = list(range(row.acked_seq + 1, row.last_seq + 1, step))
    if wanted[-1] != row.last_seq:
        wanted.append(row.last_seq)
    pairs = store.change_ids_at(row.id, wanted)
    times = dict(Change.objects.filter(id__in=list(pairs.values())).values_list("id", "timestamp"))
    return [(times[pairs[seq]], seq - row.acked_seq) for seq in wanted if seq in pairs and pairs[seq] in times]
