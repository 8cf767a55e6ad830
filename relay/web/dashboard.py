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
from typing import TypedDict

from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from binlog import constants
from relay import store
from relay.models import (
    Change,
    Checkpoint,
    Client,
    DiscardPolicy,
    EventCount,
    EventKind,
    Filter,
    LagSample,
    QueueSample,
    QueueState,
    RelayProcess,
    ServedEvent,
    Snapshot,
    UsageMinute,
    WorkerStatus,
    mask_letters,
)
from relay.store import relayprocess, rowcodec
from relay.store.snapshots import progress
from relay.web import health

PROTOCOL_VERSION = 0x00010020
POLLING_SECONDS = 2
HISTORY_LENGTH = 10

# The original page always lists these eight types, in this order (reference section 5).
CLASSIC_EVENT_TYPES = (
    constants.QUERY_EVENT,
    constants.ROTATE_EVENT,
    constants.FORMAT_DESCRIPTION_EVENT,
    constants.XID_EVENT,
    constants.TABLE_MAP_EVENT,
    constants.WRITE_ROWS_EVENT_V1,
    constants.UPDATE_ROWS_EVENT_V1,
    constants.DELETE_ROWS_EVENT_V1,
)

# The original page spells the three v1 row events in the singular; every other type shows under the name MySQL's
# and MariaDB's sources give it (binlog/constants.py), and anything unknown as the original did.
_ORIGINAL_SPELLINGS = {
    constants.WRITE_ROWS_EVENT_V1: "WRITE_ROW_EVENT_V1",
    constants.UPDATE_ROWS_EVENT_V1: "UPDATE_ROW_EVENT_V1",
    constants.DELETE_ROWS_EVENT_V1: "DELETE_ROW_EVENT_V1",
}


def event_type_name(event_type: int) -> str:
    return (
        _ORIGINAL_SPELLINGS.get(event_type) or constants.EVENT_TYPE_NAMES.get(event_type) or f"Event #{event_type:02X}"
    )


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
    report_age: float | None  # seconds since the worker last reported
    lag: float | None  # seconds behind the source, computed now (relay/web/health.py)
    reporting: bool  # the worker reported within its limit (3 heartbeat periods plus a margin)

    @property
    def events_total(self) -> int:
        return sum(item.count for item in self.events)

    @property
    def up(self) -> bool:
        """Connected by its own account, and still reporting: a stuck worker's stored state says nothing."""
        return self.worker is not None and self.worker.state == WorkerStatus.State.CONNECTED and self.reporting


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
    backlog: Backlog | None = None

    protocol_version: int = PROTOCOL_VERSION

    @property
    def protocol_version_text(self) -> str:
        return f"{self.protocol_version:08X}"

    @property
    def rows_last_hour(self) -> int:
        return sum(self.rows_hour)


def event_counts(counts: dict[int, int]) -> list[EventTypeCount]:
    """The classic eight always, in the original's order, then any other type seen, by code."""
    listed = [EventTypeCount(code, event_type_name(code), counts.get(code, 0)) for code in CLASSIC_EVENT_TYPES]
    others = sorted(code for code, count in counts.items() if code not in CLASSIC_EVENT_TYPES and count > 0)
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
    limits = health.thresholds()
    for name in names:
        worker = workers.get(name)
        reported = health.last_report(worker) if worker else None
        age = max(0.0, (now - reported).total_seconds()) if reported else None
        result.append(
            SourceOverview(
                name,
                worker,
                checkpoints.get(name),
                event_counts(counts.get(name, {})),
                age,
                health.lag(worker, now) if worker else None,
                worker is not None and age is not None and age <= health.report_limit(worker, limits),
            )
        )
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
        backlog=backlog(client_rows(now, with_history=False)),
    )


# -- clients ------------------------------------------------------------------------------------------------------


@dataclass
class FilterRow:
    schema_name: str
    table_name: str
    event_mask: int
    queue_limit: int
    discard_policy: int
    #: Entries this filter's limit and policy dropped, and when it last did (None: never).
    discarded: int = 0
    last_discard: datetime | None = None
    id: int = 0
    #: Of ``discarded``, those in the last hour (from the worker's samples; None before the first one).
    discards_last_hour: int | None = None

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
    oldest_timestamp: int | None = None  # source time (unix seconds) of the oldest queued entry
    oldest_age: float | None = None  # seconds from that time to now
    discards_last_hour: int | None = None  # None: no sample an hour old yet (relay/web/history.py)

    @property
    def delivery_rate(self) -> float | None:
        """Events per second over the served history (the last HISTORY_LENGTH events), None with fewer than two."""
        if len(self.history) < 2:
            return None
        span = (self.history[0].served_at - self.history[-1].served_at).total_seconds()
        return (len(self.history) - 1) / span if span > 0 else None


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


class QueueCounts(TypedDict):
    """A client's QueueState counters, as the client list reads them."""

    last_seq: int
    max_queue: int
    discarded: int


def _client_row(client: Client, state: QueueCounts | None, now: datetime) -> ClientRow:
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


def _oldest_entries(rows: dict[int, ClientRow], now: datetime, client_id: int | None) -> None:
    """Each backlog's head entry and its source time, in one statement for all the clients."""
    heads = store.queue_heads(client_id)
    # Changes carry the source's time: its measured skew from this host's clock is taken off their age.
    worker = WorkerStatus.objects.exclude(clock_offset_seconds=None).order_by("-heartbeat").first()
    offset = worker.clock_offset_seconds if worker is not None and worker.clock_offset_seconds else 0.0
    for cid, (_change_id, timestamp) in heads.items():
        if cid in rows:
            rows[cid].oldest_timestamp = timestamp
            rows[cid].oldest_age = max(0.0, now.timestamp() - (timestamp - offset))


def client_rows(
    now: datetime | None = None, client_id: int | None = None, *, with_history: bool = True
) -> list[ClientRow]:
    """Every client (or one), with its filters, served history and the age of its oldest queued entry: a few
    queries, whatever the number of clients."""
    now = now or timezone.now()
    selected = Client.objects.select_related("relay_process")
    if client_id is not None:
        selected = selected.filter(id=client_id)
    clients = list(selected)
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
            FilterRow(
                spec.schema_name,
                spec.table_name,
                spec.event_mask,
                spec.queue_limit,
                spec.discard_policy,
                spec.discarded,
                spec.last_discard,
                spec.id,
            )
        )
    served: dict[int, list[ServedEvent]] = defaultdict(list)
    if with_history:
        for event in ServedEvent.objects.filter(client_id__in=ids).order_by("client_id", "-served_at", "-id"):
            served[event.client_id].append(event)
    for cid, events in served.items():
        rows[cid].history = history_items(events, now)
    _oldest_entries(rows, now, client_id)
    _discards_last_hour(rows, now)
    return [rows[cid] for cid in ids]


def _discards_last_hour(rows: dict[int, ClientRow], now: datetime) -> None:
    """Discards since the newest sample at least an hour old. When no sample is that old yet: every discard of a
    client made within the hour (its first sample may come after its first discards); for an older client, those since
    its oldest sample (a lower bound, still true of the last hour). None for an older client without any sample
    (relay/worker/samples.py writes them)."""
    hour_ago = now - timedelta(hours=1)
    baseline: dict[int, tuple[int, dict[str, int]]] = {}
    hour_old: set[int] = set()
    samples = (
        QueueSample.objects.filter(client_id__in=list(rows), at__gte=hour_ago - timedelta(minutes=5))
        .order_by("client_id", "at")
        .values_list("client_id", "at", "discarded", "filter_discards")
    )
    for cid, at, discarded, by_filter in samples:
        if cid not in baseline or at <= hour_ago:
            baseline[cid] = (discarded, by_filter or {})
            if at <= hour_ago:
                hour_old.add(cid)
    for cid, row in rows.items():
        if cid not in hour_old and row.created >= hour_ago:
            row.discards_last_hour = row.discarded
            for spec in row.filters:
                spec.discards_last_hour = spec.discarded
        elif cid in baseline:
            discarded, by_filter = baseline[cid]
            row.discards_last_hour = max(0, row.discarded - discarded)
            for spec in row.filters:
                spec.discards_last_hour = max(0, spec.discarded - by_filter.get(str(spec.id), 0))


@dataclass(frozen=True)
class Series:
    """Evenly spaced values from the samples, oldest first; a bin without a sample is 0 and counted in ``missing``."""

    values: list[float]
    start: float  # unix time of the first bin's start
    step: int  # seconds per bin
    missing: int


def _binned(
    points: list[tuple[datetime, float]], now: datetime, seconds: int, step: int, *, add: bool = False
) -> Series:
    """The largest value of each ``step``-second bin over the last ``seconds`` (peaks survive the binning), or with
    ``add`` their sum (counts of events per bin)."""
    stamp = now.timestamp()
    end = stamp - stamp % step + step  # bins on whole steps, the current one last, so tick labels fall on them
    start = end - seconds
    bins: list[float | None] = [None] * (seconds // step)
    for at, value in points:
        index = int((at.timestamp() - start) // step)
        if 0 <= index < len(bins):
            current = bins[index]
            bins[index] = value if current is None else (current + value if add else max(current, value))
    return Series([value or 0.0 for value in bins], start, step, sum(1 for value in bins if value is None))


def queue_history(client_id: int, now: datetime, seconds: int = 24 * 3600, step: int = 600) -> Series:
    """The client's queue size over time, from the worker's samples (the largest of each bin)."""
    points = list(
        QueueSample.objects.filter(client_id=client_id, at__gte=now - timedelta(seconds=seconds)).values_list(
            "at", "queue"
        )
    )
    return _binned([(at, float(queue)) for at, queue in points], now, seconds, step)


def filter_discard_history(
    client_id: int, filter_id: int, now: datetime, seconds: int = 24 * 3600, step: int = 600
) -> Series:
    """Entries one filter dropped in each bin, from the growth of its total between the worker's samples."""
    samples = (
        QueueSample.objects.filter(client_id=client_id, at__gte=now - timedelta(seconds=seconds + step))
        .order_by("at")
        .values_list("at", "filter_discards")
    )
    key = str(filter_id)
    points: list[tuple[datetime, float]] = []
    previous: int | None = None
    for at, by_filter in samples:
        total = int((by_filter or {}).get(key, 0))
        if previous is not None:
            points.append((at, float(max(0, total - previous))))
        previous = total
    return _binned(points, now, seconds, step, add=True)


def lag_history(source: str, now: datetime, seconds: int, step: int) -> Series:
    points = list(
        LagSample.objects.filter(source=source, at__gte=now - timedelta(seconds=seconds)).values_list("at", "lag")
    )
    return _binned(points, now, seconds, step)


BACKLOG_WORST = 5  # clients listed in each of the overview's "worst" lists


@dataclass
class Backlog:
    """What is behind: the overview's backlog summary, and the input of the health rule's amber reasons."""

    total: int  # entries queued over all clients
    by_size: list[ClientRow]  # the largest queues, largest first
    by_age: list[ClientRow]  # the queues with the oldest head entry, oldest first
    disconnected: list[ClientRow]  # disconnected clients that still hold a backlog, largest first (the worst)
    discarding: list[ClientRow]  # clients that discarded entries in the last hour, most first (the worst)
    discards_last_hour: int | None  # over all clients; None when no client has an hour-old sample yet
    disconnected_total: int = 0  # clients of each list in all, the listed ones included
    discarding_total: int = 0


def backlog(rows: list[ClientRow]) -> Backlog:
    queued = [row for row in rows if row.queue > 0]
    by_size = sorted(queued, key=lambda row: (-row.queue, row.id))
    aged = [row for row in queued if row.oldest_age is not None]
    known = [row.discards_last_hour for row in rows if row.discards_last_hour is not None]
    disconnected = [row for row in by_size if row.status == "DISCONNECTED"]
    discarding = sorted(
        (row for row in rows if row.discards_last_hour), key=lambda row: (-(row.discards_last_hour or 0), row.id)
    )
    return Backlog(
        total=sum(row.queue for row in rows),
        by_size=by_size[:BACKLOG_WORST],
        by_age=sorted(aged, key=lambda row: (-(row.oldest_age or 0.0), row.id))[:BACKLOG_WORST],
        disconnected=disconnected[:BACKLOG_WORST],
        discarding=discarding[:BACKLOG_WORST],
        discards_last_hour=sum(known) if known else None,
        disconnected_total=len(disconnected),
        discarding_total=len(discarding),
    )


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
    # The decoded values themselves (MISSING for an insert's before or a delete's after), for the JSON API, which
    # builds its answer from data and never from the page's display text.
    raw_before: rowcodec.Value | object = rowcodec.MISSING
    raw_after: rowcodec.Value | object = rowcodec.MISSING


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
                HeadColumn(
                    column.name, shown_value(column.before), shown_value(column.after), column.before, column.after
                )
                for column in rowcodec.decode(change.data)
            ]
        except (ValueError, KeyError, TypeError, IndexError):
            columns = [
                HeadColumn(
                    "(undecodable)", ShownValue(change.data[:MAX_TEXT], ""), shown_value(None), change.data, None
                )
            ]
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


# -- snapshots ----------------------------------------------------------------------------------------------------

FINISHED_SNAPSHOTS = 5  # finished snapshots a client's page lists after those under way
_SNAPSHOT_ORDER: dict[str, int] = {Snapshot.State.RUNNING: 0, Snapshot.State.PENDING: 1}
_SNAPSHOT_CSS: dict[str, str] = {
    Snapshot.State.PENDING: "state-standby",
    Snapshot.State.RUNNING: "state-starting",
    Snapshot.State.DONE: "state-connected",
    Snapshot.State.CANCELLED: "state-stopped",
    Snapshot.State.FAILED: "state-failed",
}


@dataclass(frozen=True)
class SnapshotRow:
    """A snapshot as the client's page, the API and /metrics show it; the numbers are relay.store.snapshots's
    :func:`progress`, the one every way of watching a snapshot reads (``manage.py snapshot`` too)."""

    id: int
    client_id: int
    client_name: str
    schema_name: str
    table_name: str
    where: str
    state: str
    rows_done: int
    rows_total: int | None  # the table's estimated row count: rows_done may pass it
    chunks_done: int
    fraction: float | None
    rows_per_second: float | None
    eta_seconds: float | None
    created: datetime
    started: datetime | None
    updated: datetime | None
    finished: datetime | None
    error: str

    @property
    def active(self) -> bool:
        return self.state in Snapshot.ACTIVE

    @property
    def percent(self) -> int | None:
        return None if self.fraction is None else int(self.fraction * 100)

    @property
    def css(self) -> str:
        return _SNAPSHOT_CSS.get(self.state, "")


# Failed or cancelled: nothing left to wait for, whatever the rate so far would say.
_ENDED_EARLY = (Snapshot.State.FAILED, Snapshot.State.CANCELLED)


def snapshot_row(snapshot: Snapshot, now: datetime) -> SnapshotRow:
    shown = progress(snapshot, now)
    return SnapshotRow(
        id=snapshot.id,
        client_id=snapshot.client_id,
        client_name=snapshot.client.name,
        schema_name=snapshot.schema_name,
        table_name=snapshot.table_name,
        where=snapshot.where,
        state=snapshot.state,
        rows_done=snapshot.rows_done,
        rows_total=shown.rows_total,
        chunks_done=snapshot.chunks_done,
        fraction=shown.fraction,
        rows_per_second=shown.rows_per_second,
        eta_seconds=None if snapshot.state in _ENDED_EARLY else shown.eta_seconds,
        created=snapshot.created,
        started=snapshot.started,
        updated=snapshot.updated,
        finished=snapshot.finished,
        error=snapshot.error,
    )


def _active_first(rows: list[SnapshotRow]) -> list[SnapshotRow]:
    return sorted(rows, key=lambda row: (_SNAPSHOT_ORDER.get(row.state, 2), row.id))


def client_snapshots(
    client_id: int, now: datetime | None = None, finished: int = FINISHED_SNAPSHOTS
) -> list[SnapshotRow]:
    """The client's snapshots under way (running ones first, then pending, oldest first), then its last
    ``finished`` finished ones, newest first: two queries on the client's rows."""
    now = now or timezone.now()
    mine = Snapshot.objects.filter(client_id=client_id).select_related("client")
    active = [snapshot_row(s, now) for s in mine.filter(state__in=Snapshot.ACTIVE)]
    ended = mine.exclude(state__in=Snapshot.ACTIVE).order_by(F("finished").desc(nulls_last=True), "-id")[:finished]
    return _active_first(active) + [snapshot_row(s, now) for s in ended]


def active_snapshots(now: datetime | None = None) -> list[SnapshotRow]:
    """Every client's snapshots under way, running ones first (for /metrics)."""
    now = now or timezone.now()
    selected = Snapshot.objects.filter(state__in=Snapshot.ACTIVE).select_related("client")
    return _active_first([snapshot_row(s, now) for s in selected])


def snapshot_counts() -> dict[str, int]:
    """Snapshots in each state, every state listed (0 included)."""
    counts = dict(Snapshot.objects.order_by().values("state").annotate(n=Count("id")).values_list("state", "n"))
    return {state: int(counts.get(state, 0)) for state in Snapshot.State.values}
