"""The table usage page's query: rows per table since start, all time, rolling 24 h and 1 h, sorted, searched and
paginated, with a 24 h sparkline per listed table.

Cost model (1,000 tables, 24 h of minute buckets = 1.44 M bucket rows): summing every table's last 60 minutes is
cheap (60 k rows) and is done on every render; summing every table's last 24 h means grouping all 1.44 M rows by
table, which takes a quarter of a second on PostgreSQL. So the 24 h figures and the sparklines are computed for the
listed page's tables only (an index range scan on (schema, table, minute) each), and only a sort by the 24 h column
needs every table's 24 h total: that ranking is cached for a minute, while the figures shown are always fresh.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from django.db.models import F, Max, Min, Q, QuerySet, Sum, Value
from django.db.models.expressions import OrderBy
from django.db.models.functions import Concat

from relay.models import ColumnChangeHistory, TableUsage, UsageHistory, UsageMinute
from relay.worker.usage import WindowCounts

DAY_MINUTES = 24 * 60
SPARK_BINS = 48  # half-hours over the last 24 h
SPARK_MINUTES = DAY_MINUTES // SPARK_BINS
RANKING_CACHE_SECONDS = 60
BUSIEST = 10
COLUMN_TABLES = 10  # tables whose column changes the page lists, the most changed values first

# sort key -> what it orders by; "-" in front of a key in the query means descending
SORT_KEYS = {
    "table": "schema.table",
    "total": "all time, all kinds",
    "inserts": "all time inserts",
    "updates": "all time updates",
    "deletes": "all time deletes",
    "start": "since start, all kinds",
    "day": "rolling 24 h",
    "hour": "rolling 1 h",
    "last": "last change",
}
DEFAULT_SORT = "-hour"


@dataclass
class UsageRow:
    schema_name: str
    table_name: str
    inserts: int
    updates: int
    deletes: int
    start_inserts: int
    start_updates: int
    start_deletes: int
    last_change: int | None
    day: WindowCounts = field(default_factory=WindowCounts)
    hour: WindowCounts = field(default_factory=WindowCounts)
    spark: list[int] = field(default_factory=list)  # rows per half-hour, the last 24 h, oldest first

    @property
    def name(self) -> str:
        return f"{self.schema_name}.{self.table_name}"

    @property
    def total(self) -> int:
        return self.inserts + self.updates + self.deletes

    @property
    def start_total(self) -> int:
        return self.start_inserts + self.start_updates + self.start_deletes


@dataclass
class UsagePage:
    rows: list[UsageRow]
    count: int  # tables matching the search
    page: int
    pages: int
    per_page: int
    sort: str
    query: str
    busiest: list[UsageRow]  # the top of the ranking, for the chart
    tables: int  # tables known, search or not


_FIELDS = (
    "schema_name",
    "table_name",
    "inserts",
    "updates",
    "deletes",
    "start_inserts",
    "start_updates",
    "start_deletes",
    "last_change",
)


def window_start(minutes: int, now: int) -> int:
    """The first minute bucket of a rolling window of ``minutes`` that includes the current minute."""
    return now - now % 60 - (minutes - 1) * 60


def searched(query: str) -> QuerySet[TableUsage]:
    tables = TableUsage.objects.all()
    if query:
        tables = tables.annotate(full=Concat("schema_name", Value("."), "table_name")).filter(full__icontains=query)
    return tables


def hour_window(now: int) -> dict[tuple[str, str], WindowCounts]:
    """Every table's rolling hour: 60 buckets per table at most."""
    rows = (
        UsageMinute.objects.filter(minute__gte=window_start(60, now))
        .values("schema_name", "table_name")
        .annotate(i=Sum("inserts"), u=Sum("updates"), d=Sum("deletes"))
    )
    return {(r["schema_name"], r["table_name"]): WindowCounts(r["i"] or 0, r["u"] or 0, r["d"] or 0) for r in rows}


def day_ranking(now: int) -> dict[tuple[str, str], int]:
    """Every table's rolling 24 h total, for sorting only; cached for a minute (see the module's docstring)."""
    key = f"relay:usage:day-ranking:{now // RANKING_CACHE_SECONDS}"
    ranking = cache.get(key)
    if ranking is None:
        rows = (
            UsageMinute.objects.filter(minute__gte=window_start(DAY_MINUTES, now))
            .values("schema_name", "table_name")
            .annotate(total=Sum(F("inserts") + F("updates") + F("deletes")))
            .values_list("schema_name", "table_name", "total")
        )
        ranking = {(schema, table): int(total or 0) for schema, table, total in rows}
        cache.set(key, ranking, RANKING_CACHE_SECONDS * 2)
    return ranking


def fill_day(rows: list[UsageRow], now: int) -> None:
    """The rolling 24 h counts and the sparkline of the given tables, from their own buckets only."""
    if not rows:
        return
    since = window_start(DAY_MINUTES, now)
    wanted = Q()
    for row in rows:
        wanted |= Q(schema_name=row.schema_name, table_name=row.table_name)
    bins = (
        UsageMinute.objects.filter(wanted, minute__gte=since)
        .annotate(bin=(F("minute") - since) / (60 * SPARK_MINUTES))
        .values("schema_name", "table_name", "bin")
        .annotate(i=Sum("inserts"), u=Sum("updates"), d=Sum("deletes"))
        .values_list("schema_name", "table_name", "bin", "i", "u", "d")
    )
    # The same table may come as several row objects (the listed page and the chart's top): fill each.
    by_table: dict[tuple[str, str], list[UsageRow]] = {}
    for row in rows:
        by_table.setdefault((row.schema_name, row.table_name), []).append(row)
    sums = {key: [0, 0, 0] for key in by_table}
    sparks = {key: [0] * SPARK_BINS for key in by_table}
    for schema, table, index, i, u, d in bins:
        key = (schema, table)
        if key not in by_table or not 0 <= index < SPARK_BINS:
            continue
        i, u, d = int(i or 0), int(u or 0), int(d or 0)
        counts = sums[key]
        counts[0] += i
        counts[1] += u
        counts[2] += d
        sparks[key][int(index)] += i + u + d
    for key, listed in by_table.items():
        for row in listed:
            row.day = WindowCounts(*sums[key])
            row.spark = list(sparks[key])


_ORDERING = {
    "table": ("schema_name", "table_name"),
    "inserts": ("inserts",),
    "updates": ("updates",),
    "deletes": ("deletes",),
    "last": ("last_change",),
}


def _sorted_rows(
    tables: QuerySet[TableUsage], sort: str, hour: dict[tuple[str, str], WindowCounts], now: int
) -> list[UsageRow] | QuerySet[TableUsage]:
    """The matching tables in order: a queryset when SQL can order them, else a sorted list."""
    key = sort.lstrip("-")
    descending = sort.startswith("-")
    if key in _ORDERING:
        fields = _ORDERING[key]
        order: list[str | OrderBy] = [f"-{name}" if descending else name for name in fields]
        if key != "table":  # ties (often zero) in table order
            order += ["schema_name", "table_name"]
        if key == "last":
            order[0] = F("last_change").desc(nulls_last=True) if descending else F("last_change").asc(nulls_first=True)
        return tables.order_by(*order)
    if key in ("total", "start"):
        columns = (
            ("inserts", "updates", "deletes") if key == "total" else ("start_inserts", "start_updates", "start_deletes")
        )
        expression = F(columns[0]) + F(columns[1]) + F(columns[2])
        return tables.annotate(sort_value=expression).order_by(
            "-sort_value" if descending else "sort_value", "schema_name", "table_name"
        )
    # Rolling windows: the ranking is a dict; ordering up to a few thousand rows here costs a few milliseconds.
    values = {name: counts.total for name, counts in hour.items()} if key == "hour" else day_ranking(now)
    rows = [UsageRow(**row) for row in tables.values(*_FIELDS)]
    rows.sort(key=lambda r: (r.schema_name, r.table_name))
    rows.sort(key=lambda r: values.get((r.schema_name, r.table_name), 0), reverse=descending)
    return rows


def usage_page(
    *, query: str = "", sort: str = DEFAULT_SORT, page: int = 1, per_page: int = 50, now: float | None = None
) -> UsagePage:
    now = int(now if now is not None else time.time())
    tables = searched(query)
    hour = hour_window(now)
    ordered = _sorted_rows(tables, sort, hour, now)
    count = len(ordered) if isinstance(ordered, list) else ordered.count()
    pages = max(1, -(-count // per_page))
    page = min(page, pages)
    start = (page - 1) * per_page
    if isinstance(ordered, list):
        rows = ordered[start : start + per_page]
        top = ordered[:BUSIEST]
    else:
        rows = [UsageRow(**row) for row in ordered.values(*_FIELDS)[start : start + per_page]]
        top = rows[:BUSIEST] if page == 1 else [UsageRow(**row) for row in ordered.values(*_FIELDS)[:BUSIEST]]
    if sort.lstrip("-") == "table" or not sort.startswith("-"):
        # A chart of the "busiest" by name or in ascending order would show the quietest: use the last hour then.
        ranked = sorted(hour.items(), key=lambda item: (-item[1].total, item[0]))[:BUSIEST]
        names = {name for name, counts in ranked if counts.total}
        top = [UsageRow(**row) for row in _by_names(names).values(*_FIELDS)] if names else []
        top.sort(key=lambda r: (-hour[(r.schema_name, r.table_name)].total, r.name))
    shown = list({id(r): r for r in [*rows, *top]}.values())
    for row in shown:
        row.hour = hour.get((row.schema_name, row.table_name), WindowCounts())
    fill_day(shown, now)
    return UsagePage(
        rows=rows,
        count=count,
        page=page,
        pages=pages,
        per_page=per_page,
        sort=sort,
        query=query,
        busiest=top,
        tables=TableUsage.objects.count() if query else count,
    )


def _by_names(names: set[tuple[str, str]]) -> QuerySet[TableUsage]:
    wanted = Q()
    for schema, table in names:
        wanted |= Q(schema_name=schema, table_name=table)
    return TableUsage.objects.filter(wanted)


# -- the pipeline's history ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryPoint:
    start: object  # datetime
    inserts: int
    updates: int
    deletes: int
    transactions: int

    @property
    def total(self) -> int:
        return self.inserts + self.updates + self.deletes


def _search_history(history: QuerySet[Any], query: str) -> QuerySet[Any]:
    """The history rows of the tables whose schema.table contains ``query`` (any case)."""
    if query:
        history = history.annotate(full=Concat("schema_name", Value("."), "table_name")).filter(full__icontains=query)
    return history


def pipeline_history(period: str, limit: int, query: str = "") -> list[HistoryPoint]:
    """The pipeline's totals per hour or day over all (or the searched) tables, oldest first; [] if it never ran."""
    history = _search_history(UsageHistory.objects.filter(period=period), query)
    rows = (
        history.values("start")
        .annotate(i=Sum("inserts"), u=Sum("updates"), d=Sum("deletes"), t=Sum("transactions"))
        .order_by("-start")[:limit]
    )
    points = [
        HistoryPoint(r["start"], int(r["i"] or 0), int(r["u"] or 0), int(r["d"] or 0), int(r["t"] or 0)) for r in rows
    ]
    points.reverse()
    return points


def last_pipeline_run() -> str:
    return UsageHistory.objects.exclude(run="").order_by("-id").values_list("run", flat=True).first() or ""


@dataclass(frozen=True)
class ColumnChanges:
    column_name: str
    changed: int  # UPDATE rows that changed the column's value
    compared: int  # UPDATE rows whose both images carried the column

    @property
    def share(self) -> float | None:
        """Percent of the compared UPDATE rows that changed the column."""
        return 100 * self.changed / self.compared if self.compared else None


@dataclass
class TableColumnChanges:
    schema_name: str
    table_name: str
    first_day: object  # date
    last_day: object
    columns: list[ColumnChanges] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.schema_name}.{self.table_name}"


@dataclass
class ColumnChangePage:
    tables: list[TableColumnChanges]
    count: int  # tables with column changes matching the search


def column_changes(query: str = "", limit: int = COLUMN_TABLES) -> ColumnChangePage:
    """Which columns really change on UPDATE, over every day the pipeline loaded: per table (the searched ones, at
    most ``limit``, those with the most changed values first), each column's changed and compared UPDATE rows.

    Two grouped queries, whatever the history's length: the tables' ranking, then the listed tables' columns.
    """
    history = _search_history(ColumnChangeHistory.objects.all(), query)
    ranking = (
        history.values("schema_name", "table_name")
        .annotate(total=Sum("changed"), first=Min("day"), last=Max("day"))
        .order_by("-total", "schema_name", "table_name")
    )
    count = ranking.count()
    tables = [TableColumnChanges(r["schema_name"], r["table_name"], r["first"], r["last"]) for r in ranking[:limit]]
    if not tables:
        return ColumnChangePage([], count)
    wanted = Q()
    for table in tables:
        wanted |= Q(schema_name=table.schema_name, table_name=table.table_name)
    rows = (
        history.filter(wanted)
        .values("schema_name", "table_name", "column_name")
        .annotate(changed=Sum("changed"), compared=Sum("compared"))
        .order_by("-changed", "column_name")
    )
    by_name = {(t.schema_name, t.table_name): t for t in tables}
    for row in rows:
        by_name[(row["schema_name"], row["table_name"])].columns.append(
            ColumnChanges(row["column_name"], int(row["changed"] or 0), int(row["compared"] or 0))
        )
    return ColumnChangePage(tables, count)
