"""manage.py runbinlog: the binlog worker (see relay/worker/runner.py).

Exit status: 0 after SIGTERM/SIGINT, 1 on a misconfiguration (one line: a bad key, a DataDir that cannot be created, a
store that cannot be reached or is not migrated, a source that refuses the user or lacks a privilege) or another fatal
error, 2 when the checkpoint's binlog has been purged from the source.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from binlog import Position
from relay.config import ConfigError, load_config, parse_position
from relay.startup import check_store, command_config, fail
from relay.worker.runner import Worker, WorkerOptions


def _at_least(flag: str, value: float, least: float) -> None:
    if not (math.isfinite(value) and value >= least):
        raise fail(f"{flag} {value}: must be a number of at least {least}")


class Command(BaseCommand):
    help = "Replicate from the source and write each wanted row change into its clients' queues."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", help="path of replicaterelay.conf (default: $RELAY_CONFIG or ./)")
        start = parser.add_mutually_exclusive_group()
        start.add_argument("--from", dest="start_from", metavar="FILE:POS", help="start here instead of the checkpoint")
        start.add_argument("--from-gtid", metavar="GTID", help="start at this GTID state instead of the checkpoint")
        parser.add_argument("--batch-rows", type=int, default=5000, help="rows per store transaction at most")
        parser.add_argument("--batch-ms", type=int, default=100, help="milliseconds a batch may wait at most")
        parser.add_argument("--max-runtime", type=float, help="stop cleanly after this many seconds")
        parser.add_argument(
            "--takeover-after",
            type=float,
            default=WorkerOptions.takeover_seconds,
            metavar="SECONDS",
            help="as a standby, take over from an active worker whose lock session has been idle this long (frozen,"
            " paused, cut off from the store); 0: only when it dies (default %(default)s; PostgreSQL only)",
        )
        parser.add_argument(
            "--new-source",
            action="store_true",
            help="a first start with other sources' checkpoints in the store: this is another source, start at its"
            " current position (without it the worker stops: it may be one of them under another address)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = command_config(options["config"])
        try:
            if not config.source.host or not config.source.user:
                load_config(config.config_path, require_source=True)  # raises, naming the missing key
            start = None
            if options["start_from"]:
                file, pos = parse_position("--from", options["start_from"])
                start = Position(file, pos)
            elif options["from_gtid"]:
                start = Position("", 4, options["from_gtid"])
        except ConfigError as exc:
            raise fail(f"configuration error: {exc}") from None
        # Numbers no run could mean: a batch of no rows, a negative wait, a takeover that never comes (nan).
        _at_least("--batch-rows", options["batch_rows"], 1)
        _at_least("--batch-ms", options["batch_ms"], 0)
        _at_least("--takeover-after", options["takeover_after"], 0)
        if options["max_runtime"] is not None and not options["max_runtime"] > 0:
            raise fail(f"--max-runtime {options['max_runtime']}: must be over 0 seconds")
        check_store()
        worker = Worker(
            config,
            WorkerOptions(
                batch_rows=options["batch_rows"],
                batch_ms=options["batch_ms"],
                start=start,
                max_runtime_seconds=options["max_runtime"],
                takeover_seconds=options["takeover_after"],
                new_source=options["new_source"],
            ),
        )
        worker.install_signal_handlers()
        sys.exit(worker.run())
