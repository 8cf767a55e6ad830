"""The JSON API (/api/...): the dashboard's data for scripts. A session login is required; anonymous callers get 401
(and no redirect, which a script would follow to an HTML login form). Bad parameters give 400 with the reason."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from relay.web import dashboard, forms, schemalist, tableusage
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


def _bad(message: str) -> SafeJsonResponse:
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
                    "heartbeat_age_seconds": source.heartbeat_age,
                    "rows": worker.rows,
                    "rows_since_start": worker.rows_since_start,
                    "transactions": worker.transactions,
                    "reconnects": worker.reconnects,
                    "lag_seconds": worker.lag_seconds,
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
    return {
        "now": _time(data.now),
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
        "filters": [
            {
                "schema": f.schema_name,
                "table": f.table_name,
                "event_mask": f.event_mask,
                "events": f.letters,
                "queue_limit": f.queue_limit,
                "discard_policy": f.discard_policy,
                "discard_policy_name": f.policy,
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


def _value(value: dashboard.ShownValue) -> str | None:
    if value.css == "null":
        return None
    return value.text


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
        "columns": [
            {
                "name": column.name,
                **({} if column.before.css == "missing" else {"before": _value(column.before)}),
                **({} if column.after.css == "missing" else {"after": _value(column.after)}),
            }
            for column in entry.columns
        ],
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
def client_detail(request: HttpRequest, client_id: int) -> SafeJsonResponse:
    try:
        head_size = forms.client_params(request.GET)
    except forms.QueryError as exc:
        return _bad(str(exc))
    rows = dashboard.client_rows(client_id=client_id)
    if not rows:
        return SafeJsonResponse({"error": f"no client with id {client_id}"}, status=404)
    row = rows[0]
    return SafeJsonResponse(
        {
            **client_data(row),
            "head": [head_data(entry) for entry in dashboard.queue_head(row, head_size)],
            "buildup": [{"timestamp": t, "queued": n} for t, n in dashboard.queue_buildup(row)],
        }
    )


@require_GET
@api_login_required
def usage(request: HttpRequest) -> SafeJsonResponse:
    try:
        params = forms.usage_params(request.GET)
    except forms.QueryError as exc:
        return _bad(str(exc))
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
def schema(request: HttpRequest) -> SafeJsonResponse:
    try:
        params = forms.schema_params(request.GET)
    except forms.QueryError as exc:
        return _bad(str(exc))
    page = schemalist.schema_page(**params)
    return SafeJsonResponse(
        {
            "count": page.count,
            "page": page.page,
            "pages": page.pages,
            "tables": [schemalist.table_info(table) for table in page.tables],
        }
    )
