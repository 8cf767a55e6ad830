"""The JSON API (/api/...): the dashboard's data for scripts. A session login is required; anonymous callers get 401
(and no redirect, which a script would follow to an HTML login form). Bad parameters give 400 with the reason."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from relay.store import rowcodec
from relay.web import dashboard, forms, health, schemalist, tableusage
from relay.worker.usage import WindowCounts

View = Callable[..., HttpResponse]


class SafeJsonResponse(JsonResponse):
    """JSON with <, > and & written as \\u escapes: the same data, but no client name or column value can ever be
    read as markup, even by a browser that sniffs the content type."""

    def __init__(self, data: Any, status: int = 200) -> None:
        super().__init__(data, status=status, json_dumps_params={"ensure_ascii": False})
        self.content = self.content.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


def api_login_required(view: View) -> View:
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            response = SafeJsonResponse({"error": "authentication required"}, status=401)
            response["WWW-Authenticate"] = 'Session realm="relay"'
            return response
        if not request.user.is_active:  # pragma: no cover - Django does not log inactive users in
            return SafeJsonResponse({"error": "forbidden"}, status=403)
        return view(request, *args, **kwargs)

    return wrapper


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _counts(counts: WindowCounts) -> dict[str, int]:
    return {"inserts": counts.inserts, "updates": counts.updates, "deletes": counts.deletes}


def _bad(request: HttpRequest, message: str) -> SafeJsonResponse:
    return SafeJsonResponse({"error": message}, status=400)


def overview_data(data: dashboard.Overview) -> dict[str, Any]:
    sources = []
    for source in data.sources:
        worker = source.worker
        checkpoint = source.checkpoint
        sources.append(
            {
                "source": source.source,
                "worker": None
                if worker is None
                else {
                    "state": worker.state,
                    "up": source.up,
                    "pid": worker.pid,
                    "hostname": worker.hostname,
                    "started": _time(worker.started),
                    "heartbeat": _time(worker.heartbeat),
                    "report_age_seconds": source.report_age,
                    "reporting": source.reporting,
                    "rows": worker.rows,
                    "rows_since_start": worker.rows_since_start,
                    "transactions": worker.transactions,
                    "reconnects": worker.reconnects,
                    "lag_seconds": source.lag,
                    "lag_at_last_report_seconds": worker.lag_seconds,
                    "source_timestamp": _time(worker.source_timestamp),
                    "caught_up": _time(worker.caught_up),
                    "heartbeat_seconds": worker.heartbeat_seconds,
                    "source_file": worker.source_file,
                    "source_pos": worker.source_pos,
                    "last_error": worker.last_error,
                    "last_error_at": _time(worker.last_error_at),
                },
                "checkpoint": None
                if checkpoint is None
                else {
                    "file": checkpoint.binlog_file,
                    "position": checkpoint.binlog_pos,
                    "gtid": checkpoint.gtid,
                    "updated": _time(checkpoint.updated),
                },
                "events": [{"type": e.code, "name": e.name, "count": e.count} for e in source.events],
                "events_total": source.events_total,
            }
        )
    backlog = data.backlog
    return {
        "now": _time(data.now),
        "health": health.of_overview(data).as_json(),
        "backlog": None
        if backlog is None
        else {
            "total": backlog.total,
            "by_size": [_backlog_client(row) for row in backlog.by_size],
            "by_oldest_entry_age": [_backlog_client(row) for row in backlog.by_age],
            "disconnected_with_backlog": [_backlog_client(row) for row in backlog.disconnected],
            "disconnected_with_backlog_total": backlog.disconnected_total,
            "discarding_last_hour": [_backlog_client(row) for row in backlog.discarding],
            "discarding_last_hour_total": backlog.discarding_total,
            "discards_last_hour": backlog.discards_last_hour,
        },
        "started": _time(data.started),
        "protocol_version": data.protocol_version_text,
        "clients": data.clients,
        "connected_clients": data.connected_clients,
        "relay_processes": [
            {
                "hostname": row.process.hostname,
                "pid": row.process.pid,
                "addresses": row.process.addresses,
                "started": _time(row.process.started),
                "last_report": _time(row.process.heartbeat),
                "alive": row.alive,
                "connections": row.process.connections,
                "clients": row.clients,
            }
            for row in data.relay_processes
        ],
        "events_served": data.served,
        "sources": sources,
        "rows_per_minute_last_hour": data.rows_hour,
        "rows_per_minute_last_day_10min": data.rows_day,
    }


def _backlog_client(row: dashboard.ClientRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "status": row.status,
        "queue": row.queue,
        "oldest_entry_age_seconds": row.oldest_age,
        "discards_last_hour": row.discards_last_hour,
    }


def client_data(row: dashboard.ClientRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "status": row.status,
        "created": _time(row.created),
        "session_started": _time(row.session_started),
        "last_seen": _time(row.last_seen),
        "inactive_seconds": row.inactive_seconds,
        "remote_address": row.remote_address,
        "queue": row.queue,
        "max_queue": row.max_queue,
        "served": row.served,
        "discarded": row.discarded,
        "pending_acks": row.pending_acks,
        "acked_seq": row.acked_seq,
        "delivered_seq": row.delivered_seq,
        "last_seq": row.last_seq,
        "oldest_entry_timestamp": row.oldest_timestamp,
        "oldest_entry_age_seconds": row.oldest_age,
        "discards_last_hour": row.discards_last_hour,
        "delivery_rate_per_second": row.delivery_rate,
        "filters": [
            {
                "schema": f.schema_name,
                "table": f.table_name,
                "event_mask": f.event_mask,
                "events": f.letters,
                "queue_limit": f.queue_limit,
                "discard_policy": f.discard_policy,
                "discard_policy_name": f.policy,
                "discarded": f.discarded,
                "last_discard": f.last_discard.isoformat() if f.last_discard else None,
            }
            for f in row.filters
        ],
        "history": [
            {
                "seq": h.seq,
                "kind": h.kind,
                "schema": h.schema_name,
                "table": h.table_name,
                "served_at": _time(h.served_at),
                "delay_ms": h.delay_ms,
            }
            for h in row.history
        ],
    }


def snapshot_data(row: dashboard.SnapshotRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "schema": row.schema_name,
        "table": row.table_name,
        "where": row.where,
        "state": row.state,
        "rows_done": row.rows_done,
        "rows_total_estimate": row.rows_total,
        "chunks_done": row.chunks_done,
        "fraction": row.fraction,
        "rows_per_second": row.rows_per_second,
        "eta_seconds": row.eta_seconds,
        "created": _time(row.created),
        "started": _time(row.started),
        "updated": _time(row.updated),
        "finished": _time(row.finished),
        "error": row.error,
    }


# The API's own limits on one column value: far above the page's (which cuts for display), so a script gets whole
# values in all but extreme cases, and is told when it did not ("truncated" lists the sides that were cut).
API_MAX_TEXT = 65_536  # characters
API_MAX_BYTES = 32_768  # bytes, sent as 0x-prefixed hex


def column_data(column: dashboard.HeadColumn) -> dict[str, Any]:
    """A column's values from the decoded data: absent sides left out, SQL NULL as null, binary as 0x hex."""
    data: dict[str, Any] = {"name": column.name}
    truncated = []
    binary = []
    for side, value in (("before", column.raw_before), ("after", column.raw_after)):
        if value is rowcodec.MISSING:
            continue
        if value is None:
            data[side] = None
        elif isinstance(value, bytes):
            data[side] = "0x" + value[:API_MAX_BYTES].hex()
            binary.append(side)
            if len(value) > API_MAX_BYTES:
                truncated.append(side)
        else:
            text = str(value)
            data[side] = text[:API_MAX_TEXT]
            if len(text) > API_MAX_TEXT:
                truncated.append(side)
    if binary:
        data["binary"] = binary
    if truncated:
        data["truncated"] = truncated
    return data


def head_data(entry: dashboard.HeadEntry) -> dict[str, Any]:
    change = entry.change
    return {
        "seq": entry.seq,
        "delivered": entry.delivered,
        "kind": entry.kind,
        "schema": change.schema_name,
        "table": change.table_name,
        "file": change.binlog_file,
        "position": change.binlog_pos,
        "row": change.row_index,
        "timestamp": change.timestamp,
        "gtid": change.gtid,
        "columns": [column_data(column) for column in entry.columns],
    }


@require_GET
@api_login_required
def overview(request: HttpRequest) -> SafeJsonResponse:
    return SafeJsonResponse(overview_data(dashboard.overview()))


@require_GET
@api_login_required
def clients(request: HttpRequest) -> SafeJsonResponse:
    return SafeJsonResponse({"clients": [client_data(row) for row in dashboard.client_rows()]})


@require_GET
@api_login_required
@forms.with_params(forms.client_params, _bad)
def client_detail(request: HttpRequest, head_size: int, client_id: int) -> SafeJsonResponse:
    rows = dashboard.client_rows(client_id=client_id)
    if not rows:
        return SafeJsonResponse({"error": f"no client with id {client_id}"}, status=404)
    row = rows[0]
    return SafeJsonResponse(
        {
            **client_data(row),
            "head": [head_data(entry) for entry in dashboard.queue_head(row, head_size)],
            "buildup": [{"timestamp": t, "queued": n} for t, n in dashboard.queue_buildup(row)],
            # Under way first (running, then pending), then the last few finished, newest first.
            "snapshots": [snapshot_data(item) for item in dashboard.client_snapshots(row.id)],
        }
    )


@require_GET
@api_login_required
@forms.with_params(forms.usage_params, _bad)
def usage(request: HttpRequest, params: forms.UsageParams) -> SafeJsonResponse:
    page = tableusage.usage_page(**params)
    return SafeJsonResponse(
        {
            "count": page.count,
            "page": page.page,
            "pages": page.pages,
            "per_page": page.per_page,
            "sort": page.sort,
            "q": page.query,
            "tables": [
                {
                    "schema": row.schema_name,
                    "table": row.table_name,
                    "all_time": {"inserts": row.inserts, "updates": row.updates, "deletes": row.deletes},
                    "since_start": {
                        "inserts": row.start_inserts,
                        "updates": row.start_updates,
                        "deletes": row.start_deletes,
                    },
                    "day": _counts(row.day),
                    "hour": _counts(row.hour),
                    "last_change": row.last_change,
                    "day_half_hours": row.spark,
                }
                for row in page.rows
            ],
        }
    )


@require_GET
@api_login_required
@forms.with_params(forms.schema_params, _bad)
def schema(request: HttpRequest, params: forms.SchemaParams) -> SafeJsonResponse:
    page = schemalist.schema_page(**params)
    return SafeJsonResponse(
        {
            "count": page.count,
            "page": page.page,
            "pages": page.pages,
            "tables": [schemalist.table_info(table, versions) for table, versions in page.with_versions],
        }
    )
