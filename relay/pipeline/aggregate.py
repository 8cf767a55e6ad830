"""From the tasks' partial counts to the run's outputs: usage per hour and day, busiest tables, column changes,
transactions per hour.

The tasks already fold every file into partial sums per (hour, table), (day, table, column) and hour, so what
comes back from the decode is about as big as the outputs themselves. It is collected with the decode's own action
and added up here on the driver, in plain Python; Spark only writes the result. Aggregating it in Spark instead
(the records cached, turned into DataFrames by Python workers, shuffled, windowed) cost more than the decode: one
Python pass over every file's partition per output, dozens of stages and a Parquet file per shuffle partition and
day. The driver holds the sums, the size of the hourly output, which loading the store iterates anyway.

Outputs (each partitioned by ``day``, yyyy-MM-dd in UTC):

* ``usage_hourly``   hour, schema_name, table_name, inserts, updates, deletes, rows, transactions
* ``usage_daily``    start, schema_name, table_name, inserts, updates, deletes, rows, transactions
* ``busiest_tables`` rank, schema_name, table_name, rows, inserts, updates, deletes, share (of the day's rows)
* ``column_changes`` schema_name, table_name, column_name, changed, compared, ratio: UPDATE rows in which the
  column's value really changed, out of those whose both images carried the column
* ``transactions_hourly`` hour, transactions, row_changes
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from relay.pipeline.coverage import Span
from relay.pipeline.tally import COLUMN, COUNTED, DAY, FILE, HOURLY, LEFT, USAGE

OUTPUTS = ("usage_hourly", "usage_daily", "busiest_tables", "column_changes", "transactions_hourly")


@dataclass
class Sums:
    """The run's counts, added up from every file's partial sums."""

    usage: dict[tuple[int, str, str], list[int]] = field(default_factory=dict)  # -> inserts, updates, deletes, txs
    columns: dict[tuple[int, str, str, str], list[int]] = field(default_factory=dict)  # -> changed, compared
    hours: dict[int, list[int]] = field(default_factory=dict)  # -> transactions, row changes
    files: list[tuple] = field(default_factory=list)  # the FILE records
    counted: dict[str, list[Span]] = field(default_factory=dict)  # binlog URI -> the transactions it counted
    left: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)  # log URI -> (binlog, lines, bytes)

    def add(self, records: Iterable[tuple]) -> Sums:
        usage, columns, hours = self.usage, self.columns, self.hours
        for record in records:
            tag = record[0]
            if tag == USAGE:
                _, hour, schema, table, ins, upd, dele, txs = record
                counts = usage.get((hour, schema, table))
                if counts is None:
                    usage[(hour, schema, table)] = [ins, upd, dele, txs]
                else:
                    counts[0] += ins
                    counts[1] += upd
                    counts[2] += dele
                    counts[3] += txs
            elif tag == COLUMN:
                _, day, schema, table, column, changed, compared = record
                counts = columns.get((day, schema, table, column))
                if counts is None:
                    columns[(day, schema, table, column)] = [changed, compared]
                else:
                    counts[0] += changed
                    counts[1] += compared
            elif tag == HOURLY:
                _, hour, txs, rows = record
                counts = hours.get(hour)
                if counts is None:
                    hours[hour] = [txs, rows]
                else:
                    counts[0] += txs
                    counts[1] += rows
            elif tag == FILE:
                self.files.append(record[1:])
            elif tag == COUNTED:
                self.counted.setdefault(record[1], []).append(record[2:])
            elif tag == LEFT:
                self.left.setdefault(record[1], []).append(record[2:])
        return self


def day_text(timestamp: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(timestamp))


def output_rows(sums: Sums) -> dict[str, list[tuple]]:
    """Each output's rows, in the column order of :func:`_schemas` (times as unix seconds)."""
    days: dict[int, str] = {}

    def day_of(timestamp: int) -> str:
        start = timestamp - timestamp % DAY
        text = days.get(start)
        if text is None:
            text = days[start] = day_text(start)
        return text

    hourly = []
    daily_sums: dict[tuple[int, str, str], list[int]] = {}
    for (hour, schema, table), (ins, upd, dele, txs) in sorted(sums.usage.items()):
        hourly.append((day_of(hour), hour, schema, table, ins, upd, dele, ins + upd + dele, txs))
        counts = daily_sums.setdefault((hour - hour % DAY, schema, table), [0, 0, 0, 0])
        counts[0] += ins
        counts[1] += upd
        counts[2] += dele
        counts[3] += txs
    daily = [
        (day_of(start), start, schema, table, ins, upd, dele, ins + upd + dele, txs)
        for (start, schema, table), (ins, upd, dele, txs) in sorted(daily_sums.items())
    ]
    by_day: dict[str, list[tuple]] = {}
    for row in daily:
        by_day.setdefault(row[0], []).append(row)
    busiest = []
    for day, rows in by_day.items():
        total = sum(r[7] for r in rows)
        ranked = sorted(rows, key=lambda r: (-r[7], r[2], r[3]))  # rows, then the name: no ties
        for rank, r in enumerate(ranked, 1):
            busiest.append((day, rank, r[2], r[3], r[7], r[4], r[5], r[6], r[7] / total if total else None))
    columns = [
        (day_of(day), schema, table, column, changed, compared, changed / compared if compared else None)
        for (day, schema, table, column), (changed, compared) in sorted(sums.columns.items())
    ]
    transactions = [(day_of(hour), hour, txs, rows) for hour, (txs, rows) in sorted(sums.hours.items())]
    return {
        "usage_hourly": hourly,
        "usage_daily": daily,
        "busiest_tables": busiest,
        "column_changes": columns,
        "transactions_hourly": transactions,
    }


def _schemas() -> dict[str, Any]:
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    def struct(*fields: tuple[str, Any, bool]) -> StructType:
        return StructType([StructField(name, kind(), nullable) for name, kind, nullable in fields])

    day, schema, table = (
        ("day", StringType, False),
        ("schema_name", StringType, False),
        ("table_name", StringType, False),
    )
    counts = [(name, LongType, False) for name in ("inserts", "updates", "deletes", "rows", "transactions")]
    return {
        "usage_hourly": struct(day, ("hour_ts", LongType, False), schema, table, *counts),
        "usage_daily": struct(day, ("start_ts", LongType, False), schema, table, *counts),
        "busiest_tables": struct(
            day,
            ("rank", IntegerType, False),
            schema,
            table,
            *((name, LongType, False) for name in ("rows", "inserts", "updates", "deletes")),
            ("share", DoubleType, True),
        ),
        "column_changes": struct(
            day,
            schema,
            table,
            ("column_name", StringType, False),
            ("changed", LongType, False),
            ("compared", LongType, False),
            ("ratio", DoubleType, True),
        ),
        "transactions_hourly": struct(
            day, ("hour_ts", LongType, False), ("transactions", LongType, False), ("row_changes", LongType, False)
        ),
    }


@dataclass
class Results:
    """The run's DataFrames: what is written and what ``load`` puts into the store."""

    usage_hourly: Any
    usage_daily: Any
    busiest_tables: Any
    column_changes: Any
    transactions_hourly: Any

    def frames(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in OUTPUTS}


def local_frame(spark: Any, rows: list[tuple], schema: Any) -> Any:
    """A DataFrame of one partition over rows held by the driver, converted by the JVM alone.

    ``createDataFrame`` would re-pickle the rows through a Python worker on every action that reads the frame (its
    batches are pickled one way and read the other), which made each output's write cost as much as half a second of
    Python worker start-up and scheduling for a few thousand rows. The pickled batches of ``parallelize`` are what the
    JVM's own unpickler reads, so the rows go to the JVM once and no Python worker is involved.
    """
    from pyspark.sql import DataFrame

    sc = spark.sparkContext
    pickled = sc.parallelize([schema.toInternal(row) for row in rows], 1)._jrdd
    objects = sc._jvm.SerDeUtil.toJavaArray(sc._jvm.SerDeUtil.pythonToJava(pickled, True))
    return DataFrame(spark._jsparkSession.applySchemaToPythonRDD(objects.rdd(), schema.json()), spark)


def frames(spark: Any, sums: Sums) -> Results:
    """The outputs as DataFrames over the driver's rows, one partition each: a day's rows go into one file."""
    from pyspark.sql import functions as F

    schemas = _schemas()
    rows = output_rows(sums)

    def frame(name: str) -> Any:
        return local_frame(spark, rows[name], schemas[name])

    counts = ("inserts", "updates", "deletes", "rows", "transactions")
    hourly = frame("usage_hourly").select(
        "day", F.timestamp_seconds("hour_ts").alias("hour"), "schema_name", "table_name", *counts
    )
    daily = frame("usage_daily").select(
        "day", F.timestamp_seconds("start_ts").alias("start"), "schema_name", "table_name", *counts
    )
    transactions = frame("transactions_hourly").select(
        "day", F.timestamp_seconds("hour_ts").alias("hour"), "transactions", "row_changes"
    )
    return Results(hourly, daily, frame("busiest_tables"), frame("column_changes"), transactions)
