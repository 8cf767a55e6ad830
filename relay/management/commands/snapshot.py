"""manage.py snapshot: ask for the current rows of tables in a client's queue, and watch the binlog worker read them.

    manage.py snapshot --client NAME SCHEMA.TABLE [SCHEMA.TABLE ...] [--where COND] [--no-wait] [--timeout S]
    manage.py snapshot --client NAME SCHEMA.TABLE [...] --cancel

The request goes through relay/store/snapshots.py (the admin's client action and the protocol's SNAPSHOT command ask
the same way, so all refuse the same things with the same words). The worker (``manage.py runbinlog``) does the
reading; this command only asks and watches. Asking again for a table under way for the client attaches to that
snapshot, so an interrupted watch is resumed by running the same command again.

While it waits it shows one line per table: a bar rewritten in place when stdout is a terminal, plain lines now and
then otherwise (for logs and CI). When the worker is not reporting, by the health rule of relay/web/health.py, it
says so once rather than waiting in silence.

Exit status: 0 when every snapshot is done (with --no-wait: once asked for; with --cancel: once cancelled); 1 for a
request that cannot be carried out (unknown client, a refusal, whose message says why) and when any snapshot failed
(its error printed) or was cancelled; 2 when --timeout passed first; 130 on Ctrl-C. Neither a timeout nor Ctrl-C
stops the snapshot: the worker goes on with it.
"""

from __future__ import annotations

import sys
import time
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from relay.management.snapshotwatch import (
    CONTINUES,
    EXIT_DONE,
    EXIT_INTERRUPTED,
    KNOWN_CLIENTS_SHOWN,
    Display,
    Watch,
    printable,
    table_name,
    watch_command,
)
from relay.models import Client, Snapshot
from relay.startup import check_store, command_config, fail
from relay.store.snapshots import SnapshotRefused, cancel_snapshots, parse_table, request_snapshots
from relay.templatetags.relay_tags import num


class Command(BaseCommand):
    help = (
        "Queue the current rows of tables into a client's queue, read by the binlog worker in key order, in order "
        "with the stream; wait and show the progress (or --no-wait), or --cancel."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        usage_error = parser.error

        def error(message: str) -> NoReturn:
            # A usage error exits 1 like every other refusal: 2 means "--timeout passed, the snapshot goes on".
            if not parser.called_from_command_line:
                usage_error(message)
            parser.print_usage(sys.stderr)
            raise SystemExit(f"{parser.prog}: error: {message}")

        parser.error = error  # type: ignore[method-assign]
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", help="path of replicaterelay.conf (default: $RELAY_CONFIG or ./)")
        parser.add_argument("--client", required=True, help="the client's name, as it registers over the protocol")
        parser.add_argument(
            "tables",
            nargs="+",
            metavar="SCHEMA.TABLE",
            help="the tables (the client needs a filter that covers inserts on each)",
        )
        parser.add_argument("--where", default="", metavar="COND", help="only the rows meeting this SQL condition")
        parser.add_argument("--no-wait", action="store_true", help="ask, and return without watching")
        parser.add_argument(
            "--cancel", action="store_true", help="cancel the client's snapshots of these tables under way instead"
        )
        parser.add_argument(
            "--poll-seconds", type=float, default=0.5, metavar="S", help="how often to read the progress (0.5)"
        )
        parser.add_argument(
            "--timeout",
            type=float,
            metavar="S",
            help="stop watching after this many seconds, with exit status 2 (the snapshot goes on)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        command_config(options["config"])
        if not options["poll_seconds"] > 0:
            raise fail("--poll-seconds must be more than 0")
        if options["timeout"] is not None and not options["timeout"] > 0:
            raise fail("--timeout must be more than 0")
        if options["cancel"] and options["where"]:
            raise fail("--cancel takes no --where: it cancels the client's snapshots of those tables, whatever rows")
        try:
            tables = list(dict.fromkeys(parse_table(name) for name in options["tables"]))
        except SnapshotRefused as exc:
            raise fail(f"snapshot: {exc}") from None
        check_store()
        client = self._client(options["client"])
        if options["cancel"]:
            self._cancel(client, tables)
            return
        under_way = set(client.snapshots.filter(state__in=Snapshot.ACTIVE).values_list("id", flat=True))
        try:
            snapshots = request_snapshots(client, tables, options["where"])
        except SnapshotRefused as exc:
            raise fail(f"snapshot refused: {exc}") from None
        for snapshot in snapshots:
            if snapshot.id in under_way:
                done = f", {num(snapshot.rows_done)} rows so far" if snapshot.rows_done else ""
                what = f"already under way ({snapshot.state}{done})" + ("" if options["no_wait"] else ": watching it")
            else:
                what = "asked for"
            condition = f" where {snapshot.where}" if snapshot.where else ""
            self.stdout.write(
                f"snapshot #{snapshot.id} of {table_name(snapshot)}{condition} for client {client.name}: {what}"
            )
        if options["no_wait"]:
            self.stdout.write(f"watch it with: {watch_command(client.name, tables, options['where'])}")
            return
        display = Display(self.stdout, self.stdout.isatty(), [table_name(s) for s in snapshots], time.monotonic)
        watch = Watch([s.id for s in snapshots], display, self.stderr, options["poll_seconds"], options["timeout"])
        try:
            status = watch.run()
        except KeyboardInterrupt:
            display.close()
            self.stderr.write(f"interrupted: {CONTINUES}")
            raise SystemExit(EXIT_INTERRUPTED) from None
        if status != EXIT_DONE:
            raise SystemExit(status)

    def _client(self, name: str) -> Client:
        client = Client.objects.filter(name=name).first()
        if client is not None:
            return client
        known = list(Client.objects.order_by("name").values_list("name", flat=True)[: KNOWN_CLIENTS_SHOWN + 1])
        listed = ", ".join(printable(name) for name in known[:KNOWN_CLIENTS_SHOWN]) + (
            ", ..." if len(known) > KNOWN_CLIENTS_SHOWN else ""
        )
        hint = f" (clients: {listed})" if known else " (no client has registered yet)"
        raise fail(
            f"snapshot: no client named {name!r}{hint}; a client registers by connecting over the relay protocol"
        )

    def _cancel(self, client: Client, tables: list[tuple[str, str]]) -> None:
        for schema, table in tables:
            active = list(client.snapshots.filter(schema_name=schema, table_name=table, state__in=Snapshot.ACTIVE))
            if not active or not cancel_snapshots(active):
                self.stdout.write(
                    f"{schema}.{table}: no snapshot under way for client {client.name}, nothing to cancel"
                )
                continue
            for snapshot in Snapshot.objects.filter(id__in=[s.id for s in active]):
                self.stdout.write(
                    f"snapshot #{snapshot.id} of {table_name(snapshot)} for client {client.name}: {snapshot.state} "
                    f"after {num(snapshot.rows_done)} rows (those stay queued)"
                )
