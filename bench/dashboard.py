"""How long the table usage page takes to render with 1,000 tables and 24 h of minute buckets in PostgreSQL.

    .venv/bin/python bench/dashboard.py                      # a throw-away test database (Django's test runner DB)
    .venv/bin/python bench/dashboard.py --database-url postgres://user@host/db   # an existing, migrated database
    .venv/bin/python bench/dashboard.py --tables 2000 --runs 15

It fills the store with one bucket per table per minute for the last ``--hours`` hours (every table busy every
minute: the worst case for the rolling windows), then renders the page through Django's full request path (URL
routing, session login, middleware, template) ``--runs`` times per variant and prints the median. With
--database-url the filled rows are deleted again at the end; the tables must be empty of usage data to start with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = [
    ("usage, default (busiest in the last hour)", "/usage/"),
    ("usage, sorted by rolling 24 h (ranking cached a minute)", "/usage/?sort=-day"),
    ("usage, sorted by name, 100 per page (the most allowed)", "/usage/?sort=table&per_page=100"),
    ("usage, sorted by all time, searched", "/usage/?sort=-total&q=shop1"),
    ("usage, JSON API", "/api/usage"),
    ("overview (rows per minute charts)", "/"),
]


def fill(tables: int, hours: int, now: int) -> None:
    """Generated in SQL: 1.44 M bucket rows take seconds this way, minutes through the ORM.

    Minute by minute, as the worker writes them: a table's buckets are spread over the whole heap, not side by side.
    """
    from django.db import connection

    from relay.models import TableUsage, UsageMinute

    usage = connection.ops.quote_name(TableUsage._meta.db_table)
    minute = connection.ops.quote_name(UsageMinute._meta.db_table)
    first = now - now % 60 - (hours * 60 - 1) * 60
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {minute} (schema_name, table_name, minute, inserts, updates, deletes)"
            " SELECT 'shop' || (t %% 20), 'table_' || t, %s + m * 60, (t * 7 + m) %% 13, (t + m * 3) %% 5, m %% 3"
            " FROM generate_series(0, %s) m, generate_series(1, %s) t ORDER BY m, t",
            [first, hours * 60 - 1, tables],
        )
        cursor.execute(
            f"INSERT INTO {usage} (schema_name, table_name, inserts, updates, deletes, start_inserts,"
            " start_updates, start_deletes, last_change)"
            f" SELECT schema_name, table_name, SUM(inserts) * 10, SUM(updates) * 10, SUM(deletes) * 10,"
            f" SUM(inserts), SUM(updates), SUM(deletes), MAX(minute) FROM {minute} GROUP BY schema_name, table_name"
        )
        cursor.execute(f"ANALYZE {minute}")
        cursor.execute(f"ANALYZE {usage}")


def clear() -> None:
    from relay.models import TableUsage, UsageMinute

    UsageMinute.objects.all().delete()
    TableUsage.objects.all().delete()


def measure(runs: int) -> list[tuple[str, float, float]]:
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="bench-dashboard", defaults={"is_staff": True})
    client = Client()
    client.force_login(user)
    results = []
    for label, url in VARIANTS:
        response = client.get(url)  # warm-up: connection, template loading, the 24 h ranking's cache
        assert response.status_code == 200, (url, response.status_code)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        results.append((label, statistics.median(times), max(times)))
    user.delete()
    return results


def query_times(url: str) -> list[tuple[float, str]]:
    """Each SQL statement of one render of ``url``, with its time: where the milliseconds go."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    user, _ = User.objects.get_or_create(username="bench-dashboard-queries")
    client = Client()
    client.force_login(user)
    client.get(url)
    timings: list[tuple[float, str]] = []

    def timed(execute, sql, params, many, context):  # Django's execute_wrapper signature
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            timings.append(((time.perf_counter() - started) * 1000, " ".join(sql.split())[:150]))

    with connection.execute_wrapper(timed):
        started = time.perf_counter()
        client.get(url)
        total = (time.perf_counter() - started) * 1000
    user.delete()
    return [(total, "whole request"), *timings]


def cold_day_sort() -> float:
    """A sort by the 24 h column when its ranking is not cached: the one full aggregation the page can need."""
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.test import Client

    user, _ = User.objects.get_or_create(username="bench-dashboard-cold")
    client = Client()
    client.force_login(user)
    times = []
    for _ in range(3):
        cache.clear()
        started = time.perf_counter()
        client.get("/usage/?sort=-day")
        times.append((time.perf_counter() - started) * 1000)
    user.delete()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help="an existing, migrated PostgreSQL database (default: a test database)")
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--queries", action="store_true", help="also list the SQL of one default render, timed")
    args = parser.parse_args()

    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "relayproject.settings")
    else:
        os.environ["RELAY_TEST_STORE"] = "postgres"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("RELAY_DATA_DIR", str(ROOT / "var"))

    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    if connection.vendor != "postgresql":
        raise SystemExit("bench/dashboard.py measures PostgreSQL: give a postgres:// --database-url")
    setup_test_environment()  # ALLOWED_HOSTS for the test client's "testserver"
    test_db = None
    if not args.database_url:
        test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        from relay.models import UsageMinute

        if UsageMinute.objects.exists():
            raise SystemExit("the database already holds minute buckets: use an empty store")
        started = time.perf_counter()
        fill(args.tables, args.hours, int(time.time()))
        print(
            f"filled {args.tables} tables x {args.hours * 60} minutes = {UsageMinute.objects.count():,} buckets "
            f"in {time.perf_counter() - started:.1f} s (PostgreSQL {connection.pg_version // 10000})"
        )
        for label, median, worst in measure(args.runs):
            print(f"{label:58} median {median:7.1f} ms   max {worst:7.1f} ms")
        print(f"{'usage, sorted by rolling 24 h, ranking not cached':58} median {cold_day_sort():7.1f} ms")
        if args.queries:
            for elapsed, sql in query_times("/usage/"):
                print(f"{elapsed:8.1f} ms  {sql}")
    finally:
        if test_db:
            connection.creation.destroy_test_db(test_db, verbosity=0)
        else:
            clear()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
