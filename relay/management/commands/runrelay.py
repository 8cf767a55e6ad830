"""manage.py runrelay: the relay protocol server (see relay/server/).

Exit status: 0 after SIGTERM/SIGINT, 1 on a misconfiguration (one line: a bad key or option, an empty AuthSecret, a
DataDir that cannot be created, a store that cannot be reached or is not migrated).
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from relay.config import ConfigError, require_auth_secret
from relay.server import ServerOptions, serve
from relay.startup import check_store, command_config, fail
from relay.store import relayprocess

_DEFAULTS = ServerOptions()


class Command(BaseCommand):
    help = "Serve the clients' queues over the relay protocol ([Server] ListenAddress, ServerPort, AuthSecret)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", help="path of replicaterelay.conf (default: $RELAY_CONFIG or ./)")
        parser.add_argument("--address", help="listen address (default: [Server] ListenAddress)")
        parser.add_argument("--port", type=int, help="listen port (default: [Server] ServerPort)")
        parser.add_argument(
            "--max-connections",
            type=int,
            default=_DEFAULTS.max_connections,
            help="connections open at once; at the limit a new one replaces the oldest unauthenticated one",
        )
        parser.add_argument(
            "--max-connections-per-address",
            type=int,
            default=_DEFAULTS.max_connections_per_address,
            help="the same limit per remote address",
        )
        parser.add_argument(
            "--auth-timeout",
            type=float,
            default=_DEFAULTS.auth_timeout,
            help="seconds a connection may stay without a session (AUTH) before it is cut",
        )
        parser.add_argument(
            "--idle-timeout", type=float, default=_DEFAULTS.idle_timeout, help="seconds before an idle client is cut"
        )
        parser.add_argument(
            "--io-timeout",
            type=float,
            default=_DEFAULTS.io_timeout,
            help="seconds a client may take to send a request's payload or to read a reply",
        )
        parser.add_argument("--store-threads", type=int, default=_DEFAULTS.store_threads)
        parser.add_argument("--shutdown-grace", type=float, default=_DEFAULTS.shutdown_grace)
        parser.add_argument(
            "--heartbeat-seconds",
            type=float,
            default=_DEFAULTS.heartbeat_interval,
            help="how often this process reports that it is alive; its clients count as disconnected after "
            f"{relayprocess.MISSED_REPORTS} intervals without a report",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = command_config(options["config"])
        try:
            secret = require_auth_secret(config)
        except ConfigError as exc:
            raise fail(f"configuration error: {exc}") from None
        port = options["port"] if options["port"] is not None else config.server_port
        if not 0 <= port <= 65535:
            raise CommandError(f"--port {port}: not a TCP port")
        for name in ("max_connections", "max_connections_per_address", "store_threads"):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if not options["auth_timeout"] > 0:
            raise CommandError("--auth-timeout must be more than 0")
        if not options["heartbeat_seconds"] > 0:
            raise CommandError("--heartbeat-seconds must be more than 0")
        server_options = ServerOptions(
            address=options["address"] or config.listen_address,
            port=port,
            max_connections=options["max_connections"],
            max_connections_per_address=options["max_connections_per_address"],
            auth_timeout=options["auth_timeout"],
            idle_timeout=options["idle_timeout"],
            io_timeout=options["io_timeout"],
            store_threads=options["store_threads"],
            shutdown_grace=options["shutdown_grace"],
            heartbeat_interval=options["heartbeat_seconds"],
        )
        check_store()
        asyncio.run(serve(secret, server_options))
