"""Value renderers and objects that travel between processes (PySpark tasks pickle them)."""

from __future__ import annotations

import pickle
import struct

import pytest

from binlog import NOT_PRESENT, Position, RowChange, Transaction
from binlog.charsets import codec_for_charset
from binlog.table import ColumnInfo, TableInfo
from binlog.values import (
    DATE_TEXT,
    SECONDS_OF_DAY,
    clear_memos,
    date_of_unix_day,
    double_text,
    float_text,
    whole_time2_text,
)
from tests.helpers.mariadb import MariaDB


def test_double_text_is_mariadbs() -> None:
    # MariaDB prints DOUBLE in fixed notation for exponents -15..14, else d.ddde±x, shortest round-trip digits.
    cases = {
        0.1: "0.1",
        100.0: "100",
        1e14: "100000000000000",
        1e15: "1e15",
        1.2345678901234568e16: "1.2345678901234568e16",
        1e-15: "0.000000000000001",
        1e-16: "1e-16",
        -1.5e-20: "-1.5e-20",
        0.12345678901234568: "0.12345678901234568",
        123456.78901234567: "123456.78901234567",
        5e-324: "5e-324",
    }
    for value, text in cases.items():
        assert double_text(struct.pack("<d", value)) == text
        assert float(text) == value
    assert double_text(struct.pack("<d", -0.0)) == "-0"


def test_float_text_is_the_shortest_single_precision_round_trip() -> None:
    for literal, text in (("0.1", "0.1"), ("1.23456789", "1.2345679"), ("16777217", "16777216"), ("3.4e38", "3.4e38"),
                          ("1e-30", "1e-30"), ("-7e10", "-70000000000"), ("123.456", "123.456")):  # fmt: skip
        stored = struct.pack("<f", float(literal))
        assert float_text(stored) == text
        assert struct.pack("<f", float(text)) == stored


def test_clear_memos_forgets_rendered_values() -> None:
    assert DATE_TEXT[(1956 * 512 + 2 * 32 + 29).to_bytes(3, "little")] == "1956-02-29"  # year << 9 | month << 5 | day
    assert DATE_TEXT
    clear_memos()
    assert not DATE_TEXT


def test_generated_decoder_text_columns_replace_invalid_utf8() -> None:
    from binlog.constants import KIND_INSERT
    from binlog.rowdecoder import build_rows_decoder

    columns = (ColumnInfo("a", 15, "varchar(9)", charset="utf8mb4", meta=36), ColumnInfo("b", 15, "varchar(9)",
               charset="utf8mb4", meta=36))  # fmt: skip
    rows = b"\x00\x03a\xffb\x02\xc3\xa9" + b"\x00\x02ok\x01\xc3"
    decode = build_rows_decoder(columns, KIND_INSERT, 0b11)
    changes, end = decode(rows, 0, len(rows), "s", "t", ("a", "b"), "f", 9, 7, "g", None, 0)
    assert end == len(rows)
    assert [c.after for c in changes] == [("a\ufffdb", "é"), ("ok", "\ufffd")]


def test_calendar_and_clock_tables() -> None:
    assert date_of_unix_day(0) == "1970-01-01"
    assert date_of_unix_day(19782) == "2024-02-29"
    assert date_of_unix_day(24855) == "2038-01-19"
    assert SECONDS_OF_DAY[0] == "00:00:00" and SECONDS_OF_DAY[86399] == "23:59:59"
    assert whole_time2_text(-(838 << 12 | 59 << 6 | 59)) == "-838:59:59"
    assert whole_time2_text(23 << 12 | 59 << 6 | 58) == "23:59:58"
    assert whole_time2_text(100 << 12 | 0 << 6 | 1) == "100:00:01"


def test_changes_pickle_for_spark_tasks() -> None:
    info = TableInfo("s", "t", (ColumnInfo("id", 3, "int"), ColumnInfo("b", 252, "blob", charset="binary")), ("id",))
    change = RowChange("s", "t", 2, info.names, ("1", NOT_PRESENT), ("1", b"\x00"), "binlog.000001", 99, 0, 7, "", info)
    trx = Transaction([change], Position("binlog.000001", 120, "0-1-5"), 7, "0-1-5", (), {19: 1})
    copy = pickle.loads(pickle.dumps(trx))
    assert copy == trx
    assert copy.changes[0].before[1] is NOT_PRESENT
    assert copy.changes[0].table_info == info and copy.changes[0].as_dict("after") == {"id": "1", "b": b"\x00"}


def test_generated_decoders_fill_every_row_change_slot() -> None:
    from binlog.constants import KIND_UPDATE
    from binlog.rowdecoder import build_rows_decoder

    info = TableInfo("s", "t", (ColumnInfo("id", 3, "int", nullable=False), ColumnInfo("v", 15, "varchar(5)", meta=5)))
    row = b"\x00" + struct.pack("<i", 5) + b"\x02ab"
    decode = build_rows_decoder(info.columns, KIND_UPDATE, 0b11, 0b11)
    changes, end = decode(row + row, 0, 2 * len(row), "s", "t", info.names, "f", 9, 7, "g", info, 0)
    assert end == 2 * len(row)
    (change,) = changes
    for slot in RowChange.__slots__:
        getattr(change, slot)  # raises AttributeError if the generated code left a slot unset
    assert change == RowChange("s", "t", 2, ("id", "v"), ("5", "ab"), ("5", "ab"), "f", 9, 0, 7, "g", info)


def test_two_set_columns_keep_their_own_labels() -> None:
    from binlog.constants import KIND_INSERT, MYSQL_TYPE_SET
    from binlog.rowdecoder import build_rows_decoder

    # Both SET memos are empty (so equal) when the decoder is generated; each must still render its own labels.
    columns = tuple(
        ColumnInfo(name, MYSQL_TYPE_SET, "set", meta=meta, set_values=labels, nullable=False)
        for name, meta, labels in (("a", 1, ("x", "y")), ("b", 1, ("p", "q")), ("c", 2, tuple("abcdefghij")))
    )
    rows = bytes([0, 0b01, 0b10]) + (0b11 << 8 | 1).to_bytes(2, "little")
    decode = build_rows_decoder(columns, KIND_INSERT, 0b111)
    changes, end = decode(rows, 0, len(rows), "s", "t", ("a", "b", "c"), "f", 9, 7, "g", None, 0)
    assert end == len(rows)
    assert changes[0].after == ("x", "q", "a,i,j")


def test_datetime2_texts_from_stored_bytes() -> None:
    from binlog.values import DATETIME2_BYTES

    def stored(year: int, month: int, day: int, hour: int, minute: int, second: int, fraction: bytes = b"") -> bytes:
        ymd = (year * 13 + month) << 5 | day
        return ((ymd << 17 | hour << 12 | minute << 6 | second) + 0x8000000000).to_bytes(5, "big") + fraction

    clear_memos()
    assert DATETIME2_BYTES[0][stored(2024, 2, 29, 23, 59, 58)] == "2024-02-29 23:59:58"
    assert DATETIME2_BYTES[0][stored(0, 0, 0, 0, 0, 0)] == "0000-00-00 00:00:00"
    assert DATETIME2_BYTES[1][stored(2024, 1, 2, 3, 4, 5, bytes([50]))] == "2024-01-02 03:04:05.5"
    assert DATETIME2_BYTES[3][stored(2024, 1, 2, 3, 4, 5, (1230).to_bytes(2, "big"))] == "2024-01-02 03:04:05.123"
    assert DATETIME2_BYTES[6][stored(2024, 1, 2, 3, 4, 5, (7).to_bytes(3, "big"))] == "2024-01-02 03:04:05.000007"
    # Fields no server writes are printed as they are rather than raising.
    assert DATETIME2_BYTES[0][stored(2024, 1, 2, 25, 61, 0)] == "2024-01-02 25:61:00"


def _codes(charset: str) -> list[bytes]:
    """Every character code of a Japanese charset: ASCII (and sjis's half-width katakana), and each lead byte with each
    byte that may follow it."""
    singles = [bytes((b,)) for b in range(0x80)]
    if charset in ("sjis", "cp932"):
        leads = (*range(0x81, 0xA0), *range(0xE0, 0xFD))
        trails = (*range(0x40, 0x7F), *range(0x80, 0xFD))
        kana = [bytes((b,)) for b in range(0xA1, 0xE0)]
        return singles + kana + [bytes((lead, trail)) for lead in leads for trail in trails]
    high = range(0xA1, 0xFF)
    return [
        *singles,
        *(bytes((0x8E, kana)) for kana in range(0xA1, 0xE0)),
        *(bytes((lead, trail)) for lead in high for trail in high),
        *(bytes((0x8F, lead, trail)) for lead in high for trail in high),
    ]


@pytest.mark.parametrize("charset", ["sjis", "cp932", "ujis", "eucjpms"])
def test_japanese_charsets_decode_as_the_server_converts(mariadb: MariaDB, charset: str) -> None:
    """Every code the server reads as a character of the charset decodes to the character the server converts it to
    (sjis, ujis and eucjpms differ from any Python codec; cp932 is Python's)."""
    codec, errors = codec_for_charset(charset)
    codes = _codes(charset)
    characters: list[tuple[bytes, str]] = []
    with mariadb.connect() as conn, conn.cursor() as cur:
        for start in range(0, len(codes), 500):
            chunk = codes[start : start + 500]
            cur.execute(
                "SELECT " + ", ".join(f"HEX(CONVERT(_{charset} X'{code.hex()}' USING utf8mb4))" for code in chunk)
            )
            for code, converted in zip(chunk, cur.fetchone(), strict=True):
                text = bytes.fromhex(converted).decode("utf-8")
                if text != "?" or code == b"?":  # "?": not a character of the charset, the server has no text for it
                    characters.append((code, text))
    assert len(characters) > 7000
    assert [(code, code.decode(codec, errors)) for code, _ in characters] == characters
    # And in one string: each character is read from where the previous one ends.
    assert b"".join(code for code, _ in characters).decode(codec, errors) == "".join(text for _, text in characters)
