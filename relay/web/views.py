"""The dashboard's pages. Each view validates its parameters, asks a query module, and hands the result to a plain
template; the charts' coordinates come from relay/web/charts.py."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from relay.web import charts, dashboard, forms, health, schemalist, tableusage


def healthz(request: HttpRequest) -> JsonResponse:
    """For load balancers and probes, without login: 200 when healthy, 503 with the reasons otherwise (the rule is
    relay/web/health.py). Amber reasons are listed but keep 200. ``?max_lag=``, ``?max_queue_age=`` and
    ``?max_backlog=`` tighten or loosen the thresholds for this request."""
    try:
        limits = health.thresholds(request.GET)
    except ValueError as exc:
        return JsonResponse({"status": "error", "error": str(exc)}, status=400)
    verdict = health.check(limits=limits)
    return JsonResponse(verdict.as_json(), status=200 if verdict.healthy else 503)


def bad_request(request: HttpRequest, message: str) -> HttpResponse:
    return render(request, "relay/bad_request.html", {"message": message}, status=400)


def _clock(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%H:%M UTC")


def _series_chart(series: dashboard.Series, title: str) -> charts.LineChart:
    end = series.start + series.step * len(series.values)
    if series.missing == len(series.values):
        note = " (no samples yet: the worker writes one a minute)"
    elif series.missing:
        note = f" ({series.missing} of {len(series.values)} intervals without a sample, drawn as 0)"
    else:
        note = ""
    return charts.line_chart(
        series.values,
        title=title + note,
        x_ticks=charts.time_ticks(series.start, end, dates=end - series.start > 6 * 3600),
    )


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    data = dashboard.overview()
    now = data.now.timestamp()
    minute_end = now - now % 60 + 60  # the current minute is the last point
    hour_chart = charts.line_chart(
        data.rows_hour,
        title="Rows per minute, last hour",
        x_ticks=charts.time_ticks(minute_end - 60 * 60, minute_end),
    )
    day_chart = charts.line_chart(
        data.rows_day,
        title="Rows per minute (10-minute average), last 24 hours",
        x_ticks=charts.time_ticks(minute_end - 24 * 3600, minute_end, dates=True),
    )
    lag_charts = [
        (
            source.source,
            _series_chart(dashboard.lag_history(source.source, data.now, 3600, 60), "Lag, last hour (seconds)"),
            _series_chart(
                dashboard.lag_history(source.source, data.now, 24 * 3600, 600), "Lag, last 24 hours (seconds)"
            ),
        )
        for source in data.sources
        if source.worker is not None
    ]
    return render(
        request,
        "relay/overview.html",
        {
            "overview": data,
            "health": health.of_overview(data),
            "hour_chart": hour_chart,
            "day_chart": day_chart,
            "lag_charts": lag_charts,
            "section": "overview",
        },
    )


@login_required
def clients(request: HttpRequest) -> HttpResponse:
    rows = dashboard.client_rows()
    return render(request, "relay/clients.html", {"clients": rows, "section": "clients", "now": timezone.now()})


@login_required
@forms.with_params(forms.client_params, bad_request)
def client_detail(request: HttpRequest, head_size: int, client_id: int) -> HttpResponse:
    rows = dashboard.client_rows(client_id=client_id)
    if not rows:
        raise Http404("no such client")
    row = rows[0]
    now = timezone.now()
    chart = _series_chart(
        dashboard.queue_history(row.id, now), "Queue size, last 24 hours (largest in each 10 minutes)"
    )
    hour_chart = _series_chart(dashboard.queue_history(row.id, now, 3600, 60), "Queue size, last hour")
    discard_charts = [
        _series_chart(
            dashboard.filter_discard_history(row.id, spec.id, now),
            f"Discarded by {spec.schema_name}.{spec.table_name} ({spec.letters}), per 10 minutes, last 24 hours",
        )
        for spec in row.filters
        if spec.discarded
    ]
    return render(
        request,
        "relay/client_detail.html",
        {
            "client": row,
            "head": dashboard.queue_head(row, head_size),
            "head_size": head_size,
            "queue_chart": chart,
            "queue_hour_chart": hour_chart,
            "discard_charts": discard_charts,
            "snapshots": dashboard.client_snapshots(row.id, now),
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
@forms.with_params(forms.usage_params, bad_request)
def usage(request: HttpRequest, params: forms.UsageParams) -> HttpResponse:
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
@forms.with_params(forms.schema_params, bad_request)
def schema(request: HttpRequest, params: forms.SchemaParams) -> HttpResponse:
    return render(request, "relay/schema.html", {"page": schemalist.schema_page(**params), "section": "schema"})
