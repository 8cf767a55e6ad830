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
        parser.add_argument(
            "--out", required=True, metavar="DIR_OR_URI", help="where the Parquet outputs and the run report go"
        )
        parser.add_argument(
            "--master", default="local[*]", help="Spark master (default local[*], whose driver binds to 127.0.0.1)"
        )
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
        parser.add_argument(
            "--last-binlog",
            choices=inputs.LAST_BINLOG,
            default=inputs.ARCHIVED,
            help="archived (default): every binlog file must end as a closed one does, or it is reported partial;"
            " live: the last file of each server's series may be its live binlog, whose open end is expected",
        )
        parser.add_argument("--verbose", action="store_true", help="pass on Spark's log and show the trace of an error")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._handle(options)
        except CommandError:
            raise
        except Exception as exc:  # one line of cause, the trace only when asked for
            if options["verbose"]:
                raise
            from relay.pipeline.inputs import java_message

            raise CommandError(java_message(exc)) from None

    def _handle(self, options: dict[str, Any]) -> None:
        from relay.pipeline.preflight import PreflightError, check_inputs, check_master, check_output
        from relay.pipeline.session import MasterError, parse_master

        if not options["binlogs"] and not options["logs"]:
            raise CommandError("give --binlogs, --logs or both")
        conf = {}
        for item in options["conf"]:
            key, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--conf {item!r}: expected KEY=VALUE")
            conf[key.strip()] = value.strip()
        try:
            master = parse_master(options["master"])
            check_master(master)  # before the JVM: Spark would retry an absent master for a minute
        except (MasterError, PreflightError) as exc:
            raise CommandError(str(exc)) from None
        schema = self._snapshot(options)
        from pyspark.sql import SparkSession

        # Inside a process that already runs Spark (a notebook, the tests) the session is reused and left running.
        own_session = SparkSession.getActiveSession() is None
        spark = job.build_session(master.url, conf, verbose=options["verbose"])
        try:
            # All before any decoding: an output that cannot be written, or a name that lists nothing, fails now.
            try:
                location = check_output(spark, options["out"])
                # Listed through Spark's Hadoop file systems: hdfs://, s3a://... work as well as local paths.
                files = inputs.collect(spark, options["binlogs"], options["logs"])
                check_inputs(files)
            except PreflightError as exc:
                raise CommandError(str(exc)) from None
            report, results = job.run(
                spark,
                files,
                location.uri,
                snapshot=schema,
                log_timezone=options["log_timezone"],
                write=self.stdout.write,
                progress_interval=options["progress_interval"],
                last_binlog=options["last_binlog"],
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
            f"run {report.run}: {report.rows} row changes, {report.transactions} transactions of complete"
            f" transactions in {report.seconds:.1f}s (decode {report.decode_seconds:.1f}s, {rate:,.0f} row changes/s;"
            f" aggregate and write {report.aggregate_seconds:.1f}s); {report.summary()}"
        )
        problems = report.problems()
        for line in problems:
            self.stderr.write(f"not counted: {line}")
        if problems:
            counted = len(report.files) - len(report.failed)
            listed = len(report.files) + len(report.not_read)  # a file of a directory that was not read counts too
            raise CommandError(
                f"{len(problems)} input(s) not counted in full ({counted} of {listed} files counted);"
                f" the report is {location.child(f'run-{report.run}.json')}",
                returncode=2,
            )

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
