"""Command line: ``python -m binlog dump|tail|check``."""

from __future__ import annotations

import argparse
import binascii
import contextlib
import json
import logging
import operator
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from binlog.changes import NOT_PRESENT, Row, RowChange, Transaction
from binlog.errors import BinlogError
from binlog.files import read_binlog_files
from binlog.position import Position
from binlog.schema import InformationSchemaProvider, SchemaProvider
from binlog.settings import SourceSettings

# The replica ids `tail` and `check` register with by default. A source keeps one dump per server id and drops the
# older one when a second replica registers with the same id, so these tools must never use the worker's id: the
# relay's configuration refuses a ReplicaServerID in this range, and each run takes its own id from the process id
# (two tails at once do not knock each other off either).
TOOL_SERVER_IDS = range(0xFE000000, 0xFF000000)


def tool_server_id(pid: int | None = None) -> int:
    """This process's replica id, in :data:`TOOL_SERVER_IDS`."""
    return TOOL_SERVER_IDS.start + (os.getpid() if pid is None else pid) % len(TOOL_SERVER_IDS)


_NoneType = type(None)
_NotPresentType = type(NOT_PRESENT)
_CACHE_LIMIT = 4096


def _text_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return repr(value)


def _base64(value: bytes) -> str:
    return binascii.b2a_base64(value, newline=False).decode("ascii")  # what base64.b64encode does, one call less


# The characters below 256 that a str's repr shows as they are, inside single quotes: repr(s) == f"'{s}'" for any s
# made of them alone (the repr escapes a backslash, a character that is not printable, and a single quote unless it
# takes double quotes instead).
_PLAIN_LATIN1 = bytes(c for c in range(256) if chr(c).isprintable() and chr(c) not in "'\\")
# The UTF-8 bytes of the characters JSON (ensure_ascii=False) shows as they are, inside double quotes: all but the
# controls below 32, the double quote and the backslash (a character from 128 up is all bytes from 128 up).
_PLAIN_UTF8 = bytes(c for c in range(256) if c >= 32 and chr(c) not in '"\\')


def _needs_repr_escapes(joined: str) -> bool:
    try:  # a str of code points below 256 encodes as is (a copy); its bytes left after the deletion need escapes
        return bool(joined.encode("latin-1").translate(None, _PLAIN_LATIN1))
    except UnicodeEncodeError:
        return "'" in joined or "\\" in joined or not joined.isprintable()


def _needs_json_escapes(joined: str) -> bool:
    try:
        return bool(joined.encode("utf-8").translate(None, _PLAIN_UTF8))
    except UnicodeEncodeError:  # a lone surrogate: the encoder's own path decides
        return True


# An image format renders the images of one shape (the types of their values) and answers None for another shape
# (or, for JSON, for a value type it leaves to the json module).
ImageFormat = Callable[[Row], str | None]


def _getter(indices: list[int]) -> Callable[[Row], tuple[Any, ...]]:
    """``lambda row: tuple(row[i] for i in indices)``, in C when it can be (itemgetter of one index is no tuple)."""
    if len(indices) >= 2:
        return operator.itemgetter(*indices)
    if indices:
        index = indices[0]
        return lambda row: (row[index],)
    return lambda row: ()


def _image_format(columns: tuple[str, ...], shape: tuple[type, ...], as_json: bool = False) -> ImageFormat:
    """The function from an image whose values have the types ``shape`` to its text: ``name=value, ...`` (or, with
    ``as_json``, its JSON object as ``json.dumps(..., ensure_ascii=False)`` writes it).

    The names, the NULLs and the separators go into a %-template; the values left are str, bytes (``0x`` and their
    hex; in JSON, base64) or, in text only, anything else (:func:`_text_value`), taken from the image by one
    itemgetter. A column left out of the image (NOT_PRESENT) is left out of the text. The repr of a str is the str in
    single quotes unless it holds a quote, a backslash or a character that is not printable (and a JSON string the
    str in double quotes, unless it holds a double quote, a backslash or a control character); so when the values of
    a row hold none of those (one check over them all), one template renders the row without a repr (an escape) per
    value.

    It checks that an image has that shape as it goes (the NULLs and left-out columns where they were, the type of
    each bytes or other value, and str elsewhere, which the join checks), and returns None when one does not.
    """
    if len(shape) != len(columns):
        raise ValueError(f"{len(shape)} values for {len(columns)} columns")
    width = len(shape)
    quoted: list[str] = []  # the template for values that need no escaping
    escaped: list[str] = []  # and the one for any values
    indices: list[int] = []
    absent_indices: list[int] = []
    converted: list[tuple[int, type, Callable[[Any], str]]] = []  # (position in the arguments, type, conversion)
    for i, (name, kind) in enumerate(zip(columns, shape, strict=True)):
        label = (json.dumps(name, ensure_ascii=False) + ": " if as_json else name + "=").replace("%", "%%")
        if kind is _NotPresentType or kind is _NoneType:
            absent_indices.append(i)
            if kind is _NoneType:
                quoted.append(label + ("null" if as_json else "NULL"))
                escaped.append(quoted[-1])
            continue
        if as_json:
            if kind is not str and kind is not bytes:
                return lambda image: None  # left to the json module
            quoted.append(label + '"%s"')
            escaped.append(label + "%s")  # the value through encode_basestring
            if kind is bytes:
                converted.append((len(indices), kind, _base64))
        elif kind is str:
            quoted.append(label + "'%s'")
            escaped.append(label + "%r")
        else:
            prefix = "0x" if kind is bytes else ""
            quoted.append(f"{label}{prefix}%s")
            escaped.append(f"{label}{prefix}%s")
            converted.append((len(indices), kind, bytes.hex if kind is bytes else _text_value))
        indices.append(i)
    plain, general = ", ".join(quoted), ", ".join(escaped)
    if as_json:
        plain, general = "{" + plain + "}", "{" + general + "}"
    get_values = _getter(indices)
    get_absent = _getter(absent_indices) if absent_indices else None
    absent = tuple(None if shape[i] is _NoneType else NOT_PRESENT for i in absent_indices)
    needs_escapes = _needs_json_escapes if as_json else _needs_repr_escapes

    def render(image: Row) -> str | None:
        if len(image) != width or (get_absent is not None and get_absent(image) != absent):
            return None
        args = get_values(image)
        if converted:
            values = list(args)
            for position, kind, convert in converted:
                value = values[position]
                if type(value) is not kind:
                    return None
                values[position] = convert(value)
            args = tuple(values)
        try:
            joined = "".join(args)
        except TypeError:  # a value that is not a str where the shape has one
            return None
        if not needs_escapes(joined):
            return plain % args
        if as_json:
            return general % tuple(map(_encode_json_string, args))
        return general % args

    return render


# The format each table's last before (after) image had, by its column names (the tuple its rows share, checked by
# identity), tried first; then the formats by column names, value types and form. Both bounded: a table's shapes are
# at most 2 ** columns.
_LastFormats = dict[int, tuple[tuple[str, ...], ImageFormat]]
_last_before: _LastFormats = {}
_last_after: _LastFormats = {}
_last_json_before: _LastFormats = {}
_last_json_after: _LastFormats = {}
_image_formats: dict[tuple[tuple[str, ...], tuple[type, ...], bool], ImageFormat] = {}


def _format_image(
    columns: tuple[str, ...], image: Row, last_formats: _LastFormats, as_json: bool = False
) -> str | None:
    """The text (JSON) of an image; None for a JSON image with a value the json module must write."""
    last = last_formats.get(id(columns))
    if last is not None and last[0] is columns:
        text = last[1](image)
        if text is not None:
            return text
    key = (columns, tuple(map(type, image)), as_json)
    render = _image_formats.get(key)
    if render is None:
        if len(_image_formats) >= _CACHE_LIMIT:
            _image_formats.clear()
        render = _image_formats[key] = _image_format(*key)
    if len(last_formats) >= _CACHE_LIMIT:
        last_formats.clear()
    last_formats[id(columns)] = (columns, render)
    text = render(image)
    if text is None and not as_json:  # not expected: the format of this very shape
        return ", ".join(
            f"{name}={_text_value(v)}" for name, v in zip(columns, image, strict=True) if v is not NOT_PRESENT
        )
    return text


def change_as_text(change: RowChange) -> str:
    """``file:pos#row gtid kind schema.table [before: name=value, ...] [after: name=value, ...]``: a str in its
    repr, bytes in hex after ``0x``, NULL for None; a column left out of a partial image is left out."""
    line = f"{change.file}:{change.pos}#{change.row} {change.gtid or '-'} {change.kind_name} {change.schema}."
    line += change.table
    before = change.before
    if before is not None:
        line += " before: " + str(_format_image(change.columns, before, _last_before))
    after = change.after
    if after is not None:
        line += " after: " + str(_format_image(change.columns, after, _last_after))
    return line


# json.dumps(..., ensure_ascii=False) builds a new encoder on each call; one encoder of the same settings serves all
# (without the check for circular references, which only changes the error a circular object would raise: a row
# change has none).
_json_encode = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
_encode_json_string: Callable[[str], str] = json.encoder.encode_basestring  # what that encoder does to a str
_JSON_HEAD = '{"file": "%s", "pos": %s, "row": %s, "timestamp": %s, "gtid": "%s", "schema": "%s", "table": "%s", '


def _json_image(change: RowChange, image: Row | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: _base64(v) if isinstance(v, bytes) else v for name, v in zip(change.columns, image, strict=True)
            if v is not NOT_PRESENT}  # fmt: skip


def _change_as_json_object(change: RowChange) -> str:
    return _json_encode(
        {
            "file": change.file,
            "pos": change.pos,
            "row": change.row,
            "timestamp": change.timestamp,
            "gtid": change.gtid,
            "schema": change.schema,
            "table": change.table,
            "type": change.kind_name,
            "before": _json_image(change, change.before),
            "after": _json_image(change, change.after),
        }
    )


def change_as_json(change: RowChange) -> str:
    """The change as one JSON object, as ``json.dumps(..., ensure_ascii=False)`` writes it (bytes in base64)."""
    file, gtid, schema, table = change.file, change.gtid, change.schema, change.table
    pos, row, timestamp = change.pos, change.row, change.timestamp
    if type(pos) is not int or type(row) is not int or type(timestamp) is not int:
        return _change_as_json_object(change)
    try:
        if _needs_json_escapes(file + gtid + schema + table):
            return _change_as_json_object(change)
    except TypeError:  # a str field that is not a str
        return _change_as_json_object(change)
    before, after = change.before, change.after
    before_text = "null" if before is None else _format_image(change.columns, before, _last_json_before, True)
    after_text = "null" if after is None else _format_image(change.columns, after, _last_json_after, True)
    if before_text is None or after_text is None:
        return _change_as_json_object(change)
    head = _JSON_HEAD % (file, pos, row, timestamp, gtid, schema, table)
    return f'{head}"type": "{change.kind_name}", "before": {before_text}, "after": {after_text}}}'


def print_changes(transactions: Iterable[Transaction], out: TextIO, as_json: bool, flush: bool = True) -> int:
    """Write each row change as a line, one write per transaction; with ``flush``, flushed after each transaction
    (``tail`` shows each as it commits; ``dump`` of files leaves the buffering to the stream)."""
    count = 0
    render = change_as_json if as_json else change_as_text
    for trx in transactions:
        changes = trx.changes
        if changes:
            out.write("\n".join(map(render, changes)) + "\n")
            if flush:
                out.flush()
            count += len(changes)
    return count


def _settings(args: argparse.Namespace) -> SourceSettings:
    return SourceSettings(
        host=args.host,
        port=args.port,
        user=args.user,
        password=args.password,
        server_id=args.server_id if args.server_id is not None else tool_server_id(),
        heartbeat_seconds=args.heartbeat,
    )


def _add_connection_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--host", default="127.0.0.1" if not required else None, required=required)
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument(
        "--server-id",
        type=int,
        default=None,
        help=f"replica id to register with (default: {TOOL_SERVER_IDS.start:#x} + the process id, an id the relay "
        "worker never uses)",
    )
    parser.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat period in seconds")


def _cmd_dump(args: argparse.Namespace) -> int:
    provider: SchemaProvider | None = None
    if args.host and args.follow_ddl:
        # The schema read now stands for the start of the first file; each DDL in the files is applied to it.
        from binlog.schemahistory import SchemaHistory, pymysql_query, read_model

        query, close = pymysql_query(_settings(args).schema_connect_args())
        try:
            model = read_model(query)
        finally:
            close()
        history = SchemaHistory()
        history.set_baseline(model, Position(os.path.basename(args.files[0]), args.start_position))
        provider = history
    elif args.host:
        provider = InformationSchemaProvider(_settings(args).schema_connect_args())
    transactions = read_binlog_files(args.files, schema_provider=provider, start=args.start_position)
    print_changes(transactions, sys.stdout, args.json, flush=False)
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
    from binlog.check import preflight, summary  # on use: it brings in pymysql and ssl, which dump never needs

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
    dump.add_argument(
        "--follow-ddl",
        action="store_true",
        help="with --host: read the schema once, take it as the schema at the start of the first file, and apply "
        "each DDL statement in the files to it (column names of their own time; @1, @2... where a TABLE_MAP "
        "disagrees)",
    )
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
    command: Callable[[argparse.Namespace], int] = args.func
    try:
        return command(args)
    except BinlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
