"""Example consumer: print the relay's events as JSON lines.

    python -m clientproto.example --host 127.0.0.1 --port 6002 --secret S --name N \\
        --filter 'I,shop.orders' --filter 'IUD,shop.*' --manual-ack

A filter is ``TYPES,schema.table`` with TYPES letters among I (insert), U (update), D (delete); schema and table may
use ``*`` and ``?``. Optional ``,LIMIT,POLICY`` set the queue limit and discard policy (0, 1 or 2).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .client import RelayClient
from .constants import type_mask
from .errors import RelayError


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
    printed = 0
    try:
        client.connect()
        for mask, schema, table, limit, policy in args.filters:
            client.add_filter(mask, schema, table, limit, policy)
        for event in client.events(
            args.batch, args.wait_ms, manual_ack=args.manual_ack, stop_when_idle=args.until_idle
        ):
            sys.stdout.write(event.to_json() + "\n")
            sys.stdout.flush()
            printed += 1
            if args.count and printed >= args.count:
                # Acknowledge what was printed: the iterator only does it when asked for the next event.
                if args.manual_ack:
                    client.ack(event.seq)
                break
    except KeyboardInterrupt:
        pass
    except (RelayError, OSError) as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
