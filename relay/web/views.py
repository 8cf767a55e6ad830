"""The dashboard's pages. Each view validates its parameters, asks a query module, and hands the result to a plain
template; the charts' coordinates come from relay/web/charts.py."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from relay.web import charts, dashboard, forms, schemalist, tableusage


def healthz(request: HttpRequest) -> JsonResponse:
    """For load balancers: no login; says whether the store answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return JsonResponse({"status": "ok"})
    except Exception as exc:  # noqa: BLE001 - any store failure means unhealthy
        return JsonResponse({"status": "error", "error": str(exc)}, status=503)


def bad_request(request: HttpRequest, message: str) -> HttpResponse:
    return render(request, "relay/bad_request.html", {"message": message}, status=400)


def _clock(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%H:%M")


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    data = dashboard.overview()
    now = data.now.timestamp()
    hour_chart = charts.line_chart(
        data.rows_hour, labels=(_clock(now - 59 * 60), _clock(now)), title="Rows per minute, last hour"
    )
    day_chart = charts.line_chart(
        data.rows_day, labels=(_clock(now - 24 * 3600), _clock(now)), title="Rows per minute, last 24 hours"
    )
    return render(
        request,
        "relay/overview.html",
        {"overview": data, "hour_chart": hour_chart, "day_chart": day_chart, "section": "overview"},
    )


@login_required
def clients(request: HttpRequest) -> HttpResponse:
    rows = dashboard.client_rows()
    return render(request, "relay/clients.html", {"clients": rows, "section": "clients", "now": timezone.now()})


@login_required
def client_detail(request: HttpRequest, client_id: int) -> HttpResponse:
    try:
        head_size = forms.client_params(request.GET)
    except forms.QueryError as exc:
        return bad_request(request, str(exc))
    rows = dashboard.client_rows(client_id=client_id)
    if not rows:
        raise Http404("no such client")
    row = rows[0]
    buildup = dashboard.queue_buildup(row)
    chart = charts.line_chart(
        [size for _, size in buildup],
        labels=(_clock(buildup[0][0]), _clock(buildup[-1][0])) if buildup else ("", ""),
        title="Queue build-up: entries queued up to each event, oldest to newest (event times)",
    )
    return render(
        request,
        "relay/client_detail.html",
        {
            "client": row,
            "head": dashboard.queue_head(row, head_size),
            "head_size": head_size,
            "queue_chart": chart,
            "section": "clients",
        },
    )


def _usage_items(rows: list[tableusage.UsageRow], window: str) -> list[tuple[str, tuple[int, int, int]]]:
    items = []
    for row in rows:
        if window == "hour":
            counts = (row.hour.inserts, row.hour.updates, row.hour.deletes)
        elif window == "day":
            counts = (row.day.inserts, row.day.updates, row.day.deletes)
        elif window == "start":
            counts = (row.start_inserts, row.start_updates, row.start_deletes)
        else:
            counts = (row.inserts, row.updates, row.deletes)
        items.append((row.name, counts))
    return items


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    try:
        params = forms.usage_params(request.GET)
    except forms.QueryError as exc:
        return bad_request(request, str(exc))
    page = tableusage.usage_page(**params)
    # The chart's window follows a descending numeric sort (its top is the busiest); any other sort shows the hour.
    key = page.sort.lstrip("-")
    windows = {
        "day": "day",
        "start": "start",
        "total": "total",
        "inserts": "total",
        "updates": "total",
        "deletes": "total",
    }
    window = windows.get(key, "hour") if page.sort.startswith("-") else "hour"
    window_names = {"hour": "rolling 1 h", "day": "rolling 24 h", "start": "since start", "total": "all time"}
    items = [item for item in _usage_items(page.busiest, window) if sum(item[1])]
    busiest = charts.stacked_bars(items, title=f"Busiest tables, rows {window_names[window]}")
    sparks = {id(row): charts.line_chart(row.spark, width=120, height=24, pad=2) for row in page.rows}
    hourly = tableusage.pipeline_history("hour", 48, page.query)
    daily = tableusage.pipeline_history("day", 60, page.query)
    return render(
        request,
        "relay/usage.html",
        {
            "page": page,
            "rows": [(row, sparks[id(row)]) for row in page.rows],
            "busiest_chart": busiest,
            "hourly": hourly,
            "daily": daily,
            "hourly_chart": _history_chart(hourly, "%Y-%m-%d %H:00", "Rows per hour (pipeline)"),
            "daily_chart": _history_chart(daily, "%Y-%m-%d", "Rows per day (pipeline)"),
            "pipeline_run": tableusage.last_pipeline_run() if (hourly or daily) else "",
            "column_changes": tableusage.column_changes(page.query),
            "per_page_choices": (10, 25, 50, 100),
            "section": "usage",
        },
    )


def _history_chart(points: list[tableusage.HistoryPoint], fmt: str, title: str) -> charts.ColumnChart | None:
    if not points:
        return None
    items = [(f"{point.start:{fmt}}: {point.total}", point.total) for point in points]
    labels = (f"{points[0].start:{fmt}}", f"{points[-1].start:{fmt}}")
    return charts.column_chart(items, labels=labels, title=title)


@login_required
def schema(request: HttpRequest) -> HttpResponse:
    try:
        params = forms.schema_params(request.GET)
    except forms.QueryError as exc:
        return bad_request(request, str(exc))
    return render(request, "relay/schema.html", {"page": schemalist.schema_page(**params), "section": "schema"})
