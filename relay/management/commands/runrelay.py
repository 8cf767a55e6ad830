"""manage.py runrelay: the relay protocol server (see relay/server/).

Exit status: 0 after SIGTERM/SIGINT, 1 on a misconfiguration (one line: a bad key or option, an empty AuthSecret, a
DataDir that cannot be created, a store that cannot be reached or is not migrated).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from relay.config import ConfigError, require_auth_secret
from relay.gcpolicy import space_out_collections
from relay.server import ServerOptions, serve
from relay.startup import check_store, command_config, fail
from relay.store import relayprocess

_DEFAULTS = ServerOptions()
_AT_LEAST_1 = "at least 1"
_POSITIVE = "more than 0"
_NOT_NEGATIVE = "0 or more"
#: The server's tunables: (option, the ServerOptions field it sets and takes its default from, type, the check its
#: value must pass or None, help).
_TUNABLES: tuple[tuple[str, str, type[int] | type[float], str | None, str | None], ...] = (
    (
        "max-connections",
        "max_connections",
        int,
        _AT_LEAST_1,
        "connections open at once; at the limit a new one replaces the oldest unauthenticated one",
    ),
    (
        "max-connections-per-address",
        "max_connections_per_address",
        int,
        _AT_LEAST_1,
        "the same limit per remote address",
    ),
    (
        "auth-timeout",
        "auth_timeout",
        float,
        _POSITIVE,
        "seconds a connection may stay without a session (AUTH) before it is cut",
    ),
    ("idle-timeout", "idle_timeout", float, _POSITIVE, "seconds before an idle client is cut"),
    (
        "io-timeout",
        "io_timeout",
        float,
        _POSITIVE,
        "seconds a client may take to send a request's payload or to read a reply",
    ),
    ("store-threads", "store_threads", int, _AT_LEAST_1, None),
    ("shutdown-grace", "shutdown_grace", float, _NOT_NEGATIVE, None),
    (
        "heartbeat-seconds",
        "heartbeat_interval",
        float,
        _POSITIVE,
        "how often this process reports that it is alive; its clients count as disconnected after "
        f"{relayprocess.MISSED_REPORTS} intervals without a report",
    ),
)


class Command(BaseCommand):
    help = "Serve the clients' queues over the relay protocol ([Server] ListenAddress, ServerPort, AuthSecret)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", help="path of replicaterelay.conf (default: $RELAY_CONFIG or ./)")
        parser.add_argument("--address", help="listen address (default: [Server] ListenAddress)")
        parser.add_argument("--port", type=int, help="listen port (default: [Server] ServerPort)")
        for option, field, kind, _check, help_text in _TUNABLES:
            parser.add_argument(f"--{option}", dest=field, type=kind, default=getattr(_DEFAULTS, field), help=help_text)

    def handle(self, *args: Any, **options: Any) -> None:
        config = command_config(options["config"])
        try:
            secret = require_auth_secret(config)
        except ConfigError as exc:
            raise fail(f"configuration error: {exc}") from None
        port = options["port"] if options["port"] is not None else config.server_port
        if not 0 <= port <= 65535:
            raise CommandError(f"--port {port}: not a TCP port")
        for option, field, _kind, check, _help in _TUNABLES:
            if check == _AT_LEAST_1 and options[field] < 1:
                raise CommandError(f"--{option} must be at least 1")
            if check == _POSITIVE and not options[field] > 0:
                raise CommandError(f"--{option} must be more than 0")
            if check == _NOT_NEGATIVE and not options[field] >= 0:
                raise CommandError(f"--{option} must be 0 or more")
        server_options = ServerOptions(
            address=options["address"] or config.listen_address,
            port=port,
            **{field: options[field] for _option, field, *_ in _TUNABLES},
        )
        check_store()
        space_out_collections()
        serve(secret, server_options)
