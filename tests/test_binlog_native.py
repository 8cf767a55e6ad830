"""The compiled row decoder (binlog/_rows.c) against the generated Python decoders: the same values and lines, byte
for byte, or the same error, for random layouts of every type and random row images, well-formed and not.

These tests load the compiled module whatever RELAY_NATIVE says (the suite runs once with it on and once with the
Python decoders alone), so both paths are compared on every run; ``scripts/bootstrap`` builds it.
"""

from __future__ import annotations

import functools
import os
import random
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlog import native as binlog_native
from binlog import nativerows
from binlog import values as _values
from binlog.changes import NOT_PRESENT, RowChange
from binlog.cli import python_text_rows_decoder, text_rows_decoder
from binlog.constants import (
    KIND_DELETE,
    KIND_INSERT,
    KIND_UPDATE,
    MYSQL_TYPE_BIT,
    MYSQL_TYPE_BLOB,
    MYSQL_TYPE_DATE,
    MYSQL_TYPE_DATETIME,
    MYSQL_TYPE_DATETIME2,
    MYSQL_TYPE_DOUBLE,
    MYSQL_TYPE_ENUM,
    MYSQL_TYPE_FLOAT,
    MYSQL_TYPE_INT24,
    MYSQL_TYPE_LONG,
    MYSQL_TYPE_LONGLONG,
    MYSQL_TYPE_NEWDECIMAL,
    MYSQL_TYPE_SET,
    MYSQL_TYPE_SHORT,
    MYSQL_TYPE_STRING,
    MYSQL_TYPE_TIME,
    MYSQL_TYPE_TIME2,
    MYSQL_TYPE_TIMESTAMP,
    MYSQL_TYPE_TIMESTAMP2,
    MYSQL_TYPE_TINY,
    MYSQL_TYPE_VARCHAR,
    MYSQL_TYPE_YEAR,
)
from binlog.rowdecoder import build_python_rows_decoder, build_rows_decoder, fixed_size
from binlog.table import ColumnInfo, TableInfo

ROOT = Path(__file__).resolve().parent.parent
#: The errors of a row decoder that the parser reports as a malformed rows event (EventDecoder._rows).
MALFORMED = (IndexError, struct.error, ValueError, OverflowError, zlib.error)


@pytest.fixture(scope="module")
def native() -> Any:
    """The compiled module, loaded even where RELAY_NATIVE=0 keeps the relay on the Python decoders."""
    import importlib

    module = importlib.import_module("binlog._rows")  # built by scripts/bootstrap: its absence is a failure here
    module.configure(RowChange, NOT_PRESENT)
    return module


def _column(rng: random.Random, index: int) -> ColumnInfo:
    """A random column of a type the compiled decoder reads (directly or through the Python helpers)."""
    name = f"c{index}" if rng.random() < 0.9 else f"c{index} 'é\\%"
    nullable = rng.random() < 0.5
    pick = rng.randrange(22)
    t: int
    meta = 0
    unsigned = rng.random() < 0.5
    charset: str | None = None
    enum_values: tuple[str, ...] = ()
    set_values: tuple[str, ...] = ()
    if pick < 5:
        t = (MYSQL_TYPE_TINY, MYSQL_TYPE_SHORT, MYSQL_TYPE_INT24, MYSQL_TYPE_LONG, MYSQL_TYPE_LONGLONG)[pick]
    elif pick == 5:
        t = MYSQL_TYPE_NEWDECIMAL
        precision = rng.randint(1, 65)
        meta = precision << 8 | rng.randint(0, min(precision, 38))  # MariaDB allows 38 fraction digits
    elif pick == 6:
        t = MYSQL_TYPE_FLOAT
    elif pick == 7:
        t = MYSQL_TYPE_DOUBLE
    elif pick == 8:
        t = MYSQL_TYPE_DATE
    elif pick == 9:
        t, meta = MYSQL_TYPE_DATETIME2, rng.randint(0, 6)
    elif pick == 10:
        t, meta = MYSQL_TYPE_TIMESTAMP2, rng.choice((0, 0, rng.randint(1, 6)))
    elif pick == 11:
        t, meta = MYSQL_TYPE_TIME2, rng.choice((0, 0, rng.randint(1, 6)))
    elif pick == 12:
        t = MYSQL_TYPE_YEAR
    elif pick == 13:
        t = MYSQL_TYPE_ENUM
        enum_values = tuple(f"e{i}'" if i % 7 == 3 else f"e{i}" for i in range(rng.choice((3, 300))))
        meta = 1 if len(enum_values) < 256 else 2
    elif pick == 14:
        t = MYSQL_TYPE_SET
        set_values = tuple(f"s{i}" for i in range(rng.choice((3, 12, 20))))
        meta = (len(set_values) + 7) // 8
    elif pick == 15:
        t, meta = MYSQL_TYPE_BIT, rng.choice((1, 5 << 8 | 0, 2 << 8 | 3, 0 << 8 | 7))
    elif pick == 16:
        t, meta = MYSQL_TYPE_VARCHAR, rng.choice((20, 300))
        charset = rng.choice(("utf8mb4", "utf8mb4", "latin1", "binary", "ucs2", None))
    elif pick == 17:
        t, meta, charset = MYSQL_TYPE_STRING, rng.choice((4, 10)), rng.choice(("binary", "utf8mb4"))
    elif pick == 18:
        t, meta = MYSQL_TYPE_BLOB, rng.randint(1, 4)
        charset = rng.choice(("utf8mb4", "binary", "cp1251"))
    elif pick == 19:
        t, meta = MYSQL_TYPE_TIMESTAMP, rng.choice((0, rng.randint(1, 6)))
    elif pick == 20:
        t, meta = MYSQL_TYPE_DATETIME, rng.choice((0, rng.randint(1, 6)))
    else:
        t, meta = MYSQL_TYPE_TIME, rng.choice((0, rng.randint(1, 6)))
    return ColumnInfo(
        name, t, "random", unsigned=unsigned, charset=charset, nullable=nullable, meta=meta,
        enum_values=enum_values, set_values=set_values,
    )  # fmt: skip


def _decimal_bytes(rng: random.Random, precision: int, scale: int) -> bytes:
    """A DECIMAL as the server stores it, from random digits (sometimes negative)."""
    intg = precision - scale
    digits = "".join(rng.choice("0123456789") for _ in range(precision))
    if rng.random() < 0.15:
        digits = "0" * precision  # zero, which is never negative in text, whatever its sign bit
    out = bytearray()
    for part, count in ((digits[:intg], intg), (digits[intg:], scale)):
        groups: list[tuple[int, int]] = []
        full, rest = divmod(count, 9)
        if part is digits[:intg]:
            if rest:
                groups.append((int(part[:rest]), _values.DIG2BYTES[rest]))
            groups += [(int(part[rest + 9 * i : rest + 9 * i + 9]), 4) for i in range(full)]
        else:
            groups += [(int(part[9 * i : 9 * i + 9]), 4) for i in range(full)]
            if rest:
                groups.append((int(part[9 * full :]), _values.DIG2BYTES[rest]))
        for value, size in groups:
            out += value.to_bytes(size, "big")
    if not out:
        return bytes(out)
    out[0] ^= 0x80
    if rng.random() < 0.4:
        out = bytearray(b ^ 0xFF for b in out)
    return bytes(out)


def _value(rng: random.Random, column: ColumnInfo) -> bytes:
    """A value's bytes in a row image: mostly what a server writes, sometimes any bytes of the right size."""
    size = fixed_size(column)
    t = column.type_code
    if size is not None:
        if t == MYSQL_TYPE_NEWDECIMAL and rng.random() < 0.9:
            return _decimal_bytes(rng, column.meta >> 8, column.meta & 0xFF)
        if t == MYSQL_TYPE_FLOAT and rng.random() < 0.5:
            return struct.pack("<f", rng.choice((0.1, -2.5, 1e-7, 3.4e38, 123456.7, rng.uniform(-1e6, 1e6))))
        if t == MYSQL_TYPE_DOUBLE and rng.random() < 0.5:
            return struct.pack("<d", rng.choice((0.1, -0.0, 1e15, 1e-5, 2.5e300, rng.uniform(-1e9, 1e9))))
        if t == MYSQL_TYPE_TIME2 and column.meta == 0 and rng.random() < 0.7:
            seconds = rng.choice((rng.randint(0, 86399), rng.randint(86400, 838 * 3600), -rng.randint(1, 838 * 3600)))
            hours, rest = divmod(abs(seconds), 3600)
            packed = hours << 12 | (rest // 60) << 6 | rest % 60
            return ((-packed if seconds < 0 else packed) + 8388608).to_bytes(3, "big")
        if t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET) and rng.random() < 0.7:
            limit = len(column.enum_values) + 1 if t == MYSQL_TYPE_ENUM else 1 << len(column.set_values)
            return rng.randrange(limit).to_bytes(size, "little")
        return rng.randbytes(size)
    width = 1 if t in (MYSQL_TYPE_VARCHAR, MYSQL_TYPE_STRING) and column.meta < 256 else 2
    if t == MYSQL_TYPE_BLOB:
        width = column.meta
    kind = rng.random()
    if kind < 0.5:
        data = rng.choice(("plain", "it's", "back\\slash", "tab\there", "é ü ✓", "", "new\nline", "\x7f")).encode()
    elif kind < 0.8:
        data = rng.randbytes(rng.randint(0, 12))
    else:
        data = bytes(rng.choice((0, 39, 92, 0xC3, 0xA9, 0xFF, 65)) for _ in range(rng.randint(0, 6)))
    limit = (1 << (8 * width)) - 1
    data = data[:limit]
    return len(data).to_bytes(width, "little") + data


def _image(rng: random.Random, columns: tuple[ColumnInfo, ...], present: int) -> bytes:
    indexes = [i for i in range(len(columns)) if present >> i & 1]
    nulls = 0
    body = b""
    for bit, index in enumerate(indexes):
        if columns[index].nullable and rng.random() < 0.2:
            nulls |= 1 << bit
        elif rng.random() < 0.01:
            nulls |= 1 << bit  # a NULL bit on a column declared NOT NULL: its value follows all the same
            body += _value(rng, columns[index])
        else:
            body += _value(rng, columns[index])
    return nulls.to_bytes((len(indexes) + 7) // 8, "little") + body


def _outcome(decode: Callable[..., tuple[list[Any], int]], info: TableInfo, buf: bytes, end: int) -> Any:
    try:
        rows, p = decode(buf, 0, end, "s", "t", info.names, "bin.000001", 1234, 1700000000, "0-1-5", info, 7)
    except MALFORMED:
        # What the parser reports as a malformed rows event. Where an image has two faults (a value out of range,
        # then an end cut short) the paths may meet them in another order: the Python decoder reads a run of
        # fixed-size columns in one struct call before turning them into text, the compiled one column by column.
        return ("malformed",)
    except Exception as exc:  # noqa: BLE001 - the two paths must fail alike, whatever the error
        return ("error", type(exc))
    return ("rows", [_comparable(row) for row in rows], p)


def _comparable(row: Any) -> Any:
    if isinstance(row, RowChange):
        return (row.schema, row.table, row.kind, row.columns, row.before, row.after, row.file, row.pos, row.row,
                row.timestamp, row.gtid, type(row.table_info))  # fmt: skip
    return row


def _random_case(rng: random.Random) -> tuple[TableInfo, int, int, int, bytes]:
    columns = tuple(_column(rng, i) for i in range(rng.randint(1, 12)))
    info = TableInfo("s", "t", columns)
    everything = (1 << len(columns)) - 1
    kind = rng.choice((KIND_INSERT, KIND_UPDATE, KIND_DELETE))
    present = everything if rng.random() < 0.7 else rng.randint(0, everything)
    present_after = (everything if rng.random() < 0.7 else rng.randint(0, everything)) if kind == KIND_UPDATE else 0
    buf = b""
    for _ in range(rng.randint(1, 4)):
        buf += _image(rng, columns, present)
        if kind == KIND_UPDATE:
            buf += _image(rng, columns, present_after)
    return info, kind, present, present_after, buf


def _read_by_compiled_code(
    native: Any, info: TableInfo, kind: int, present: int, present_after: int, buf: bytes
) -> bool:
    """Whether the compiled module reads the event itself, without handing it to the Python decoder."""
    first = native.compile_image(len(info.columns), nativerows.image_operations(info.columns, present))
    second = None
    if kind == KIND_UPDATE:
        second = native.compile_image(len(info.columns), nativerows.image_operations(info.columns, present_after))
    args = (buf, 0, len(buf), "s", "t", info.names, "bin.000001", 1234, 1700000000, "0-1-5", info, 7)
    handed_back: list[tuple[Any, ...]] = []
    native.decode_rows(first, second, kind, lambda *event: handed_back.append(event) or ([], 0), *args)
    assert handed_back in ([], [args])
    return not handed_back


@pytest.mark.parametrize("seed", range(6))
def test_compiled_and_python_decoders_agree_on_random_rows(
    native: Any, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nativerows, "native", native)  # on in this test whatever RELAY_NATIVE says
    rng = random.Random(seed)
    compared = compiled_events = python_events = 0
    for _ in range(400):
        info, kind, present, present_after, buf = _random_case(rng)
        python = build_python_rows_decoder(info.columns, kind, present, present_after)
        python_text = python_text_rows_decoder(info, kind, present, present_after)
        layout = (info.columns, kind, present, present_after)
        compiled = nativerows.compiled_decoder(*layout, functools.partial(build_python_rows_decoder, *layout))
        compiled_text = nativerows.compiled_decoder(
            *layout, functools.partial(python_text_rows_decoder, info, kind, present, present_after), text=True
        )
        assert compiled is not None and compiled_text is not None
        expected_whole = _outcome(python, info, buf, len(buf))
        # The whole event, then cut short (a truncated or lying event), and with bytes after its end.
        for end in {len(buf), rng.randint(0, len(buf)), max(0, len(buf) - 1)}:
            event = buf[:end] if rng.random() < 0.7 else buf[:end] + b"\0\0\0\0"
            assert _outcome(compiled, info, event, end) == _outcome(python, info, event, end), (info, kind, event)
            assert _outcome(compiled_text, info, event, end) == _outcome(python_text, info, event, end), (info, event)
            compared += 1
        # The compiled path reads most well-formed events itself (without handing them back to Python).
        if expected_whole[0] == "rows":
            compiled_events += _read_by_compiled_code(native, info, kind, present, present_after, buf)
            python_events += 1
    assert compared >= 400
    assert compiled_events > 0.8 * python_events, (compiled_events, python_events)


def test_row_decoders_of_the_relay_take_the_compiled_path_when_built(native: Any) -> None:
    columns = (ColumnInfo("id", MYSQL_TYPE_LONG, "int", nullable=False), ColumnInfo("v", MYSQL_TYPE_VARCHAR, "varchar",
               charset="utf8mb4", meta=40))  # fmt: skip
    info = TableInfo("s", "t", columns)
    decoder = build_rows_decoder(columns, KIND_INSERT, 3)
    text = text_rows_decoder(info, KIND_INSERT, 3)
    buf = b"\0" + (5).to_bytes(4, "little") + b"\x02h\xc3"  # the text ends inside a character: decoded with U+FFFD
    rows, p = decoder(buf, 0, len(buf), "s", "t", info.names, "f", 4, 0, "", info, 0)
    assert (rows[0].after, p) == (("5", "h\ufffd"), len(buf))
    lines, _ = text(buf, 0, len(buf), "s", "t", info.names, "f", 4, 0, "", info, 0)
    assert lines == ["f:4#0 - insert s.t after: id='5', v='h\ufffd'"]
    compiled = nativerows.native is not None
    assert compiled == (os.environ.get("RELAY_NATIVE", "1") != "0")
    assert hasattr(decoder, "source") != compiled  # the generated Python decoders keep their source


def test_the_environment_turns_the_compiled_path_off() -> None:
    probe = "from binlog import nativerows; print(nativerows.native is None)"
    for setting, off in (("0", "True"), ("1", "False")):
        env = {**os.environ, "RELAY_NATIVE": setting}
        out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
        assert (out.returncode, out.stdout.strip()) == (0, off), out.stderr


def test_a_layout_the_compiled_decoder_does_not_read_takes_the_python_decoder(native: Any) -> None:
    from binlog.constants import MYSQL_TYPE_VARCHAR_COMPRESSED

    columns = (ColumnInfo("z", MYSQL_TYPE_VARCHAR_COMPRESSED, "varchar", charset="utf8mb4", meta=100),)
    assert nativerows.compiled_decoder(columns, KIND_INSERT, 1, 0, lambda: pytest.fail("not called")) is None
    with pytest.raises(ValueError, match="operation 0 is malformed"):
        native.compile_image(1, [(5, False, 1, 4, 0, 0, None, None)])  # a column index past the layout


def test_a_build_from_another_version_of_its_source_is_not_used(
    native: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = ROOT / "binlog" / "_rows.c"
    assert binlog_native.built_from_source(native, source)  # scripts/bootstrap built it from the source as it is
    changed = tmp_path / "_rows.c"
    changed.write_bytes(source.read_bytes() + b"/* changed */\n")
    assert not binlog_native.built_from_source(native, changed)
    assert "built from another version of _rows.c" in caplog.text
    assert "the Python code runs instead" in caplog.text
