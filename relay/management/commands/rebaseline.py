"""manage.py rebaseline: take the schema history's baseline again from the source's information_schema.

After an incident (a DDL the history could not read, a change made with sql_log_bin=0, a restored backup) the history
may no longer describe the source; the worker then delivers that table's rows with positional names (@1, @2...).
Without --table the whole history of the source is replaced by the schema as it is now; with --table only those
tables get a new version from the source's current position on. The work is relay/store/schemahistory.py's.

A running worker keeps the history it loaded: restart it afterwards. Exit status 0, or 1 with one line on stderr.
"""

from __future__ import annotations

from typing import Any

import pymysql
from django.core.management.base import BaseCommand, CommandParser

from relay.config import ConfigError, load_config
from relay.models import WorkerStatus
from relay.startup import check_store, command_config, fail
from relay.store.schemahistory import rebaseline, rebaseline_tables
from relay.worker.runner import source_key, source_settings


def _table(text: str) -> tuple[str, str]:
    schema, dot, table = text.partition(".")
    if not dot or not schema or not table:
        raise fail(f"--table {text}: expected SCHEMA.TABLE")
    return schema.strip("`"), table.strip("`")


class Command(BaseCommand):
    help = "Re-read the source's schema from information_schema into the schema history (whole, or some tables)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", help="path of replicaterelay.conf (default: $RELAY_CONFIG or ./)")
        parser.add_argument(
            "--table",
            action="append",
            default=[],
            metavar="SCHEMA.TABLE",
            help="only this table (repeat for several); its earlier versions stay for replays of older events",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = command_config(options["config"])
        try:
            if not config.source.host or not config.source.user:
                load_config(config.config_path, require_source=True)  # raises, naming the missing key
        except ConfigError as exc:
            raise fail(f"configuration error: {exc}") from None
        tables = [_table(text) for text in options["table"]]
        check_store()
        source = source_key(config)
        connect_args = source_settings(config).schema_connect_args()
        try:
            if tables:
                versions = rebaseline_tables(source, connect_args, tables)
                for version in versions:
                    layout = version.definition.layout() if version.definition is not None else "no such table"
                    self.stdout.write(f"{version.schema}.{version.table} from {version.position}: {layout}")
            else:
                history = rebaseline(source, connect_args)
                self.stdout.write(
                    f"schema history of {source}: baseline of {len(history.model.tables)} tables "
                    f"at {history.baseline_position}"
                )
        except (LookupError, RuntimeError) as exc:
            raise fail(f"rebaseline: {exc}") from None
        except (pymysql.err.MySQLError, OSError) as exc:
            raise fail(f"rebaseline: cannot read the source's schema: {exc}") from None
        if WorkerStatus.objects.filter(
            source=source,
            state__in=[WorkerStatus.State.STARTING, WorkerStatus.State.CONNECTED, WorkerStatus.State.RECONNECTING],
        ).exists():
            self.stdout.write("the worker is running with the history it loaded: restart it to use this one")
