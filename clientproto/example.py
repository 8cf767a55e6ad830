"""Example consumer: print the relay's events as JSON lines.

    python -m clientproto.example --host 127.0.0.1 --port 6002 --secret S --name N \\
        --filter 'I,shop.orders' --filter 'IUD,shop.*' --manual-ack

A filter is ``TYPES,schema.table`` with TYPES letters among I (insert), U (update), D (delete); schema and table may
use ``*`` and ``?``. Optional ``,LIMIT,POLICY`` set the queue limit and discard policy (0, 1 or 2).

``--snapshot schema.table`` (repeatable) asks for the table's current rows once the filters are in place (one of
them must cover the table's inserts) and rebuilds the table from the events (:class:`clientproto.TableMirror`, rows
keyed by the ``--key`` columns, ``id`` by default); when the consumer stops, it prints one line per such table,
``{"table": "schema.table", "rows": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from .client import RelayClient, table_name
from .constants import type_mask
from .errors import RelayError
from .mirror import TableMirror
from .records import json_value


def parse_filter(text: str) -> tuple[int, str, str, int, int]:
    """``"IU,shop.orders[,limit[,policy]]"`` -> (mask, schema, table, limit, policy)."""
    parts = text.split(",")
    if len(parts) < 2 or len(parts) > 4:
        raise argparse.ArgumentTypeError(f"filter {text!r}: expected TYPES,schema.table[,limit[,policy]]")
    try:
        mask = type_mask(parts[0].strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"filter {text!r}: {exc}") from None
    if not mask:
        raise argparse.ArgumentTypeError(f"filter {text!r}: no event type letter (I, U, D)")
    schema, dot, table = parts[1].strip().partition(".")
    if not dot or not schema or not table:
        raise argparse.ArgumentTypeError(f"filter {text!r}: expected schema.table after the types")
    try:
        limit = int(parts[2]) if len(parts) > 2 else 0
        policy = int(parts[3]) if len(parts) > 3 else 0
    except ValueError:
        raise argparse.ArgumentTypeError(f"filter {text!r}: limit and policy must be integers") from None
    if policy not in (0, 1, 2):
        raise argparse.ArgumentTypeError(f"filter {text!r}: policy must be 0, 1 or 2")
    return mask, schema, table, limit, policy


def parse_table(text: str) -> tuple[str, str]:
    try:
        return table_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clientproto.example", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6002)
    parser.add_argument("--secret", required=True, help="the relay's AuthSecret")
    parser.add_argument("--name", required=True, help="client name: the same name resumes the same queue")
    parser.add_argument(
        "--filter",
        dest="filters",
        type=parse_filter,
        action="append",
        default=[],
        metavar="TYPES,SCHEMA.TABLE[,LIMIT[,POLICY]]",
        help="e.g. 'I,shop.orders' or 'IUD,shop.*' (repeatable; filters are remembered by the relay)",
    )
    parser.add_argument(
        "--snapshot",
        dest="snapshots",
        type=parse_table,
        action="append",
        default=[],
        metavar="SCHEMA.TABLE",
        help="ask for the table's current rows and print the rebuilt table at the end (repeatable)",
    )
    parser.add_argument(
        "--key",
        dest="key",
        action="append",
        default=[],
        metavar="COLUMN",
        help="the columns identifying a row of the --snapshot tables (repeatable; default: id)",
    )
    parser.add_argument("--manual-ack", action="store_true", help="acknowledge after printing (at-least-once)")
    parser.add_argument("--batch", type=int, default=500, help="events per FETCH")
    parser.add_argument("--wait-ms", type=int, default=1000, help="long-poll wait per FETCH")
    parser.add_argument("--timeout", type=float, default=30.0, help="socket timeout, seconds")
    parser.add_argument("--count", type=int, default=0, help="stop after this many events (0: never)")
    parser.add_argument("--until-idle", action="store_true", help="stop when the queue is empty")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr)
    client = RelayClient(args.host, args.port, args.secret, args.name, timeout=args.timeout)
    mirror = TableMirror(key=args.key or ("id",))
    printed = 0
    try:
        client.connect()
        for mask, schema, table, limit, policy in args.filters:
            client.add_filter(mask, schema, table, limit, policy)
        if args.snapshots:
            for (schema, table), item in zip(args.snapshots, client.snapshot(args.snapshots), strict=True):
                print(f"snapshot #{item.snapshot_id} of {schema}.{table}: {item.state_name}", file=sys.stderr)
        for event in client.events(
            args.batch, args.wait_ms, manual_ack=args.manual_ack, stop_when_idle=args.until_idle, limit=args.count
        ):
            sys.stdout.write(event.to_json() + "\n")
            sys.stdout.flush()
            if args.snapshots:
                mirror.apply(event)
            printed += 1
            if args.count and printed >= args.count:
                # Acknowledge what was printed: the iterator only does it when asked for the next event.
                if args.manual_ack:
                    client.ack(event.seq)
                break
    except KeyboardInterrupt:
        pass
    except (RelayError, OSError, ValueError) as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    for schema, table in args.snapshots:
        rows = mirror.rows(schema, table).values()
        text = [{name: json_value(value) for name, value in row.items()} for row in rows]
        line = {"table": f"{schema}.{table}", "rows": text}
        sys.stdout.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
