"""/metrics in the Prometheus text exposition format (version 0.0.4).

Open to a logged-in dashboard user, or to a scraper that sends ``Authorization: Bearer <RELAY_METRICS_TOKEN>`` when
that environment variable is set. Anonymous requests get 401, a wrong token 403.
"""

from __future__ import annotations

import hmac
import math
import os
from collections.abc import Iterable
from datetime import datetime

from django.db import OperationalError
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from binlog import native, nativerows
from clientproto import records
from relay.models import PreparedTransaction, TableUsage, WorkerStatus
from relay.web import dashboard, health
from relay.worker import bulk

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TOKEN_VARIABLE = "RELAY_METRICS_TOKEN"

Labels = dict[str, str]
Sample = tuple[Labels, float]


def escape_label(value: str) -> str:
    """A label value as the format requires: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(float(value))


class Exposition:
    """Builds the text: each metric family once, with its HELP and TYPE lines, then its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            if labels:
                text = ",".join(f'{key}="{escape_label(str(val))}"' for key, val in labels.items())
                self.lines.append(f"{name}{{{text}}} {_number(value)}")
            else:
                self.lines.append(f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render_metrics() -> str:
    """The exposition; its reads are bounded in time as the health check's are: a store that does not answer within
    ``RELAY_HEALTH_STORE_TIMEOUT`` gives ``relay_healthy 0`` with the reason, not a scrape that hangs."""
    now = timezone.now()
    verdict = health.check()  # bounded on its own
    try:
        with health.bounded_reads():
            return _exposition(now, verdict)
    except OperationalError as exc:
        return _exposition(now, health.Health(now, [health.store_too_slow(exc)]))


def _exposition(now: datetime, verdict: health.Health) -> str:
    out = Exposition()
    out.family(
        "relay_healthy",
        "gauge",
        "1 when the relay is healthy by the rule /healthz answers with (relay/web/health.py), else 0.",
        [({}, 1 if verdict.healthy else 0)],
    )
    out.family(
        "relay_health_reason",
        "gauge",
        "1 while the health rule gives this reason (level red: unhealthy; amber: degraded), else 0.",
        [
            ({"reason": code, "level": level}, 1 if verdict.failing(code) else 0)
            for code, level in health.REASONS.items()
        ],
    )
    out.family(
        "relay_compiled_path",
        "gauge",
        "1 when this process uses the compiled build of a hot path (row_decoder: binlog/_rows.c, event_reader: "
        "binlog/_events.c, record_encoder: clientproto/_records.c, copy_text: relay/worker/_copytext.c), 0 when it "
        "runs the Python code (not built, built from another version of its source, or RELAY_NATIVE=0). Processes "
        "started from the same installation and environment see the same.",
        [
            ({"path": "row_decoder"}, 1 if nativerows.native is not None else 0),
            ({"path": "event_reader"}, 1 if native.events is not None else 0),
            ({"path": "record_encoder"}, 1 if records.compiled_encoder() is not None else 0),
            ({"path": "copy_text"}, 1 if bulk.compiled_copy_text() is not None else 0),
        ],
    )
    if verdict.failing("store_unreachable"):
        return out.text()  # nothing else can be read
    sources = dashboard.source_overviews(now)
    workers = [(s.source, s.worker, s) for s in sources if s.worker is not None]

    out.family(
        "relay_worker_up",
        "gauge",
        "1 when the source's binlog worker is connected and still reporting within 3 heartbeat periods.",
        [({"source": name}, 1 if item.up else 0) for name, _, item in workers],
    )
    out.family(
        "relay_worker_state",
        "gauge",
        "The worker's state: 1 for the current one.",
        [
            ({"source": name, "state": state}, 1 if worker.state == state else 0)
            for name, worker, _ in workers
            for state in WorkerStatus.State.values
        ],
    )
    out.family(
        "relay_worker_standby_age_seconds",
        "gauge",
        "Seconds since the standby worker last reported (absent when no standby waits).",
        [
            ({"source": name}, (now - worker.standby_heartbeat).total_seconds())
            for name, worker, _ in workers
            if worker.standby_pid and worker.standby_heartbeat
        ],
    )
    out.family(
        "relay_lag_seconds",
        "gauge",
        "Seconds behind the source, computed at scrape time: now minus the source time of the newest event applied "
        "(or of the last source heartbeat applied), so it grows while the worker is stuck.",
        [({"source": name}, item.lag) for name, _, item in workers if item.lag is not None],
    )
    out.family(
        "relay_source_clock_offset_seconds",
        "gauge",
        "The source's clock minus the worker host's, measured when the worker became active; the lag and queue ages "
        "are corrected by it (absent until measured).",
        [
            ({"source": name}, worker.clock_offset_seconds)
            for name, worker, _ in workers
            if worker.clock_offset_seconds is not None
        ],
    )
    out.family(
        "relay_worker_heartbeat_age_seconds",
        "gauge",
        "Seconds since the worker last reported.",
        [({"source": name}, item.report_age) for name, _, item in workers if item.report_age is not None],
    )
    out.family(
        "relay_reconnects_total",
        "counter",
        "Reconnections to the source.",
        [({"source": name}, worker.reconnects) for name, worker, _ in workers],
    )
    out.family(
        "relay_schema_mismatches_total",
        "counter",
        "TABLE_MAPs that disagreed with the schema history, and DDL statements it could not read: that table's rows "
        "went out with positional names (@1, @2...) until the history knew it again.",
        [({"source": name}, worker.schema_problems) for name, worker, _ in workers],
    )
    out.family(
        "relay_unrelayed_statements_total",
        "counter",
        "Statements that changed rows and are in the binlog as statements, not as row changes (TRUNCATE, or a "
        "session's binlog_format STATEMENT or MIXED): no client received their changes.",
        [({"source": name}, worker.unrelayed_statements) for name, worker, _ in workers],
    )
    out.family(
        "relay_cascading_foreign_keys",
        "gauge",
        "The source's foreign keys with ON DELETE/UPDATE CASCADE, SET NULL or SET DEFAULT, as read at the worker's "
        "start: the changes they make are not in the binlog, and no client receives them.",
        [({"source": name}, _line_count(worker.cascading_foreign_keys)) for name, worker, _ in workers],
    )
    out.family(
        "relay_change_log_lost_total",
        "counter",
        "Committed changes whose lines are not in the change log ([Logger] Path): its disk could not take their "
        "batch (full, read-only). The store and the clients' queues have them.",
        [({"source": name}, worker.change_log_lost) for name, worker, _ in workers],
    )
    held = dict(PreparedTransaction.objects.values("source").annotate(n=Count("id")).values_list("source", "n"))
    out.family(
        "relay_xa_prepared_transactions",
        "gauge",
        "XA transactions the source prepared and has not yet committed or rolled back: their rows are held in the "
        "store, not queued, until the XA COMMIT (one that stays for long holds its rows, and the source's locks).",
        [({"source": name}, held.get(name, 0)) for name, _, _ in workers],
    )
    out.family(
        "relay_transactions_total",
        "counter",
        "Binlog transactions applied.",
        [({"source": name}, worker.transactions) for name, worker, _ in workers],
    )
    out.family(
        "relay_rows_received_total",
        "counter",
        "Row changes received from the source.",
        [({"source": name}, worker.rows) for name, worker, _ in workers],
    )
    out.family(
        "relay_binlog_position",
        "gauge",
        "The checkpoint's position in its binlog file.",
        [
            ({"source": s.source, "file": s.checkpoint.binlog_file}, s.checkpoint.binlog_pos)
            for s in sources
            if s.checkpoint is not None
        ],
    )
    out.family(
        "relay_events_total",
        "counter",
        "Binlog events received, by event type.",
        [
            ({"source": s.source, "type": event.name, "code": event.hex}, event.count)
            for s in sources
            for event in s.events
        ],
    )
    totals = TableUsage.objects.aggregate(i=Sum("inserts"), u=Sum("updates"), d=Sum("deletes"))
    out.family(
        "relay_rows_total",
        "counter",
        "Rows changed in the source, by change type, over all tables.",
        [
            ({"type": "insert"}, totals["i"] or 0),
            ({"type": "update"}, totals["u"] or 0),
            ({"type": "delete"}, totals["d"] or 0),
        ],
    )

    processes = dashboard.relay_process_rows(now)
    out.family(
        "relay_servers_up",
        "gauge",
        "runrelay processes reporting that they are alive.",
        [({}, sum(1 for row in processes if row.alive))],
    )
    out.family(
        "relay_server_report_age_seconds",
        "gauge",
        "Seconds since the runrelay process last reported (until another one removes it, once it stops reporting).",
        [
            (
                {"hostname": row.process.hostname, "pid": str(row.process.pid), "process_id": str(row.process.id)},
                row.report_age,
            )
            for row in processes
        ],
    )
    clients = dashboard.client_rows(now)
    out.family("relay_clients", "gauge", "Clients ever registered.", [({}, len(clients))])
    per_client = [({"client_id": str(c.id), "client": c.name}, c) for c in clients]
    for name, kind, help_text, attribute in (
        ("relay_client_connected", "gauge", "1 while the client has a session open.", None),
        ("relay_queue_size", "gauge", "Entries in the client's queue.", "queue"),
        ("relay_queue_max", "gauge", "Largest queue size seen.", "max_queue"),
        ("relay_pending_acks", "gauge", "Entries delivered and not yet acknowledged.", "pending_acks"),
        ("relay_served_total", "counter", "Events served to the client.", "served"),
        ("relay_discarded_total", "counter", "Entries dropped by the client's discard policy.", "discarded"),
        ("relay_queue_oldest_age_seconds", "gauge", "Age of the oldest queued entry (source time).", "oldest_age"),
    ):
        out.family(
            name,
            kind,
            help_text,
            [
                (labels, (1 if c.status == "CONNECTED" else 0) if attribute is None else getattr(c, attribute))
                for labels, c in per_client
                if attribute is None or getattr(c, attribute) is not None
            ],
        )
    _snapshot_families(out, now)
    return out.text()


def _snapshot_families(out: Exposition, now: datetime) -> None:
    """Each snapshot under way, labelled by client, table and id, and the number in each state."""
    under_way = [
        (
            {
                "client_id": str(row.client_id),
                "client": row.client_name,
                "schema": row.schema_name,
                "table": row.table_name,
                "snapshot_id": str(row.id),
            },
            row,
        )
        for row in dashboard.active_snapshots(now)
    ]
    out.family(
        "relay_snapshot_rows_done",
        "gauge",
        "Rows the snapshot has queued so far (pending and running snapshots).",
        [(labels, row.rows_done) for labels, row in under_way],
    )
    out.family(
        "relay_snapshot_rows_total",
        "gauge",
        "The table's estimated row count, when the worker has read it (an estimate: rows done may pass it).",
        [(labels, row.rows_total) for labels, row in under_way if row.rows_total is not None],
    )
    out.family(
        "relay_snapshot_rows_per_second",
        "gauge",
        "Rows queued per second since the snapshot started (absent until its first rows).",
        [(labels, row.rows_per_second) for labels, row in under_way if row.rows_per_second is not None],
    )
    out.family(
        "relay_snapshot_eta_seconds",
        "gauge",
        "Seconds the snapshot should still take at its rate so far (absent while the total or the rate is unknown).",
        [(labels, row.eta_seconds) for labels, row in under_way if row.eta_seconds is not None],
    )
    out.family(
        "relay_snapshots",
        "gauge",
        "Snapshots in each state, now. A gauge: pending and running go down as snapshots finish; the finished states "
        "only grow, until their client is deleted.",
        [({"state": state}, count) for state, count in dashboard.snapshot_counts().items()],
    )


def _authorised(request: HttpRequest) -> int:
    """200 if allowed, else the status to answer: 401 without credentials, 403 with wrong ones."""
    if request.user.is_authenticated:
        return 200
    header = request.headers.get("Authorization", "")
    if not header:
        return 401
    token = os.environ.get(TOKEN_VARIABLE, "")
    scheme, _, given = header.partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return 200
    return 403


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    status = _authorised(request)
    if status != 200:
        response = HttpResponse("authentication required\n" if status == 401 else "forbidden\n", status=status)
        response["Content-Type"] = "text/plain; charset=utf-8"
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="relay"'
        return response
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE)


def _line_count(text: str) -> int:
    return len(text.splitlines())
