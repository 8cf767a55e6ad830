"""manage.py usagepipeline: table usage over archived binlogs and change logs with PySpark (see relay/pipeline/)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from relay.pipeline import inputs, job, snapshot


class Command(BaseCommand):
    help = "Count row changes per table per hour and day over archived binlogs and change logs; load the history."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--binlogs", metavar="DIR_OR_GLOB", help="binlog files: directories, globs, files, URIs Spark reads (a,b)"
        )
        parser.add_argument(
            "--logs", metavar="DIR_OR_GLOB", help="change log files (relaylogs-YYYYMMDD.txt/.jsonl), same forms"
        )
        parser.add_argument("--out", required=True, metavar="PARQUET_DIR", help="where the Parquet outputs go")
        parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
        parser.add_argument(
            "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)"
        )
        names = parser.add_mutually_exclusive_group()
        names.add_argument("--schema-snapshot", metavar="FILE.json", help="column names for binlogs without metadata")
        names.add_argument("--schema-from-source", action="store_true", help="snapshot the [MySQL] information_schema")
        names.add_argument("--schema-from-store", action="store_true", help="snapshot the tables the worker has seen")
        parser.add_argument("--save-snapshot", metavar="FILE.json", help="also write the snapshot used to this file")
        parser.add_argument(
            "--log-timezone", default=settings.TIME_ZONE, help="time zone of the text change logs' clock times"
        )
        parser.add_argument("--no-load", action="store_true", help="write Parquet only; leave the store alone")
        parser.add_argument("--progress-interval", type=float, default=5.0, help="seconds between progress lines")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["binlogs"] and not options["logs"]:
            raise CommandError("give --binlogs, --logs or both")
        conf = {}
        for item in options["conf"]:
            key, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--conf {item!r}: expected KEY=VALUE")
            conf[key.strip()] = value.strip()
        schema = self._snapshot(options)
        from pyspark.sql import SparkSession

        # Inside a process that already runs Spark (a notebook, the tests) the session is reused and left running.
        own_session = SparkSession.getActiveSession() is None
        spark = job.build_session(options["master"], conf)
        try:
            # Listed through Spark's Hadoop file systems: hdfs://, s3a://... work as well as local paths.
            files = inputs.collect(spark, options["binlogs"], options["logs"])
            report, results = job.run(
                spark,
                files,
                options["out"],
                snapshot=schema,
                log_timezone=options["log_timezone"],
                write=self.stdout.write,
                progress_interval=options["progress_interval"],
            )
            if results is not None and not options["no_load"]:
                from relay.pipeline.load import load_results

                loaded = load_results(results, report.run)
                self.stdout.write(
                    f"loaded {loaded['hour']} hourly and {loaded['day']} daily usage rows and"
                    f" {loaded['columns']} daily column change rows into the store"
                )
        finally:
            if own_session:
                spark.stop()
        rate = report.rows / report.decode_seconds if report.decode_seconds else 0.0
        self.stdout.write(
            f"run {report.run}: {report.rows} row changes, {report.transactions} transactions from"
            f" {len(report.files) - len(report.failed)} files in {report.seconds:.1f}s"
            f" (decoding {rate:,.0f} row changes/s)"
        )
        for line in report.problems():
            self.stderr.write(f"not counted: {line}")
        if report.problems() and report.rows == 0 and not any(f.error is None for f in report.files):
            raise CommandError("no input could be read")

    def _snapshot(self, options: dict[str, Any]) -> dict[str, Any] | None:
        try:
            if options["schema_snapshot"]:
                result = snapshot.load_snapshot(options["schema_snapshot"])
            elif options["schema_from_source"]:
                cfg = settings.RELAY_CONFIG.schema
                if not cfg.host:
                    raise CommandError("--schema-from-source: [MySQL] host (or [Server] IPAddr) is not set")
                result = snapshot.snapshot_from_source(
                    {"host": cfg.host, "port": cfg.port, "user": cfg.user, "password": cfg.password}
                )
            elif options["schema_from_store"]:
                result = snapshot.snapshot_from_store()
            else:
                return None
        except (ValueError, OSError) as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a PyMySQL error: say it in one line
            raise CommandError(f"schema snapshot: {exc}") from None
        if options["save_snapshot"]:
            snapshot.save_snapshot(result, options["save_snapshot"])
        self.stdout.write(f"schema snapshot: {len(result['tables'])} tables")
        return result
