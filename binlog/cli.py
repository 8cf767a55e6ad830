"""Command line: ``python -m binlog dump|tail|check``."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from binlog.changes import NOT_PRESENT, RowChange, Transaction
from binlog.check import preflight, summary
from binlog.constants import DEFAULT_SERVER_ID
from binlog.errors import BinlogError
from binlog.files import read_binlog_files
from binlog.position import Position
from binlog.schema import InformationSchemaProvider
from binlog.settings import SourceSettings


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _image(change: RowChange, image: tuple | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: _json_value(v) for name, v in zip(change.columns, image, strict=True) if v is not NOT_PRESENT}


def change_as_json(change: RowChange) -> str:
    return json.dumps(
        {
            "file": change.file,
            "pos": change.pos,
            "row": change.row,
            "timestamp": change.timestamp,
            "gtid": change.gtid,
            "schema": change.schema,
            "table": change.table,
            "type": change.kind_name,
            "before": _image(change, change.before),
            "after": _image(change, change.after),
        },
        ensure_ascii=False,
    )


def _text_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return repr(value)


def change_as_text(change: RowChange) -> str:
    parts = [f"{change.file}:{change.pos}#{change.row}", change.gtid or "-", change.kind_name,
             f"{change.schema}.{change.table}"]  # fmt: skip
    for label, image in (("before", change.before), ("after", change.after)):
        if image is not None:
            values = ", ".join(
                f"{name}={_text_value(v)}"
                for name, v in zip(change.columns, image, strict=True)
                if v is not NOT_PRESENT
            )
            parts.append(f"{label}: {values}")
    return " ".join(parts)


def print_changes(transactions: Iterable[Transaction], out: TextIO, as_json: bool) -> int:
    count = 0
    render = change_as_json if as_json else change_as_text
    for trx in transactions:
        for change in trx.changes:
            out.write(render(change) + "\n")
            count += 1
        if trx.changes:
            out.flush()
    return count


def _settings(args: argparse.Namespace) -> SourceSettings:
    return SourceSettings(
        host=args.host,
        port=args.port,
        user=args.user,
        password=args.password,
        server_id=args.server_id,
        heartbeat_seconds=args.heartbeat,
    )


def _add_connection_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--host", default="127.0.0.1" if not required else None, required=required)
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument("--server-id", type=int, default=DEFAULT_SERVER_ID, help="replica id to register with")
    parser.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat period in seconds")


def _cmd_dump(args: argparse.Namespace) -> int:
    provider = None
    if args.host:
        provider = InformationSchemaProvider(_settings(args).schema_connect_args())
    transactions = read_binlog_files(args.files, schema_provider=provider, start=args.start_position)
    print_changes(transactions, sys.stdout, args.json)
    return 0


def _stream(args: argparse.Namespace) -> Iterator[Transaction]:
    from binlog.stream import BinlogStream

    start = None
    if args.start_file or args.gtid:
        start = Position(args.start_file or "", args.start_position, args.gtid or "")
    stream = BinlogStream(_settings(args), start, blocking=not args.stop_at_end)
    try:
        for trx in stream:
            yield trx
            stream.confirm(trx.position)
    finally:
        stream.close()


def _cmd_tail(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        print_changes(_stream(args), sys.stdout, args.json)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    settings = _settings(args)
    problems = preflight(settings)
    for line in problems:
        print(line)
    if not problems:
        info = summary(settings)
        print("OK: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m binlog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dump = sub.add_parser("dump", help="print the row changes in binlog files")
    dump.add_argument("files", nargs="+", metavar="FILE")
    dump.add_argument("--json", action="store_true", help="one JSON object per row change")
    dump.add_argument("--start-position", type=int, default=4, help="start at this position of the first file")
    _add_connection_arguments(dump, required=False)
    dump.set_defaults(host=None, func=_cmd_dump)

    tail = sub.add_parser("tail", help="stream row changes from a server")
    _add_connection_arguments(tail, required=False)
    tail.add_argument("--json", action="store_true")
    tail.add_argument("--start-file", help="binlog file to start at (default: the current position)")
    tail.add_argument("--start-position", type=int, default=4)
    tail.add_argument("--gtid", help="GTID state to start after (MariaDB 0-1-42 / MySQL uuid:1-42)")
    tail.add_argument("--stop-at-end", action="store_true", help="stop at the end of the binlog instead of waiting")
    tail.set_defaults(func=_cmd_tail)

    check = sub.add_parser("check", help="preflight: what the source lacks, one line each")
    _add_connection_arguments(check, required=False)
    check.set_defaults(func=_cmd_check)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args.func(args)
    except BinlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
