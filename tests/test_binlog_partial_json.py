"""MySQL's partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``) on bytes: no MySQL server runs here.

``apply_json_diff`` is checked against an oracle independent of it: the same operations applied to Python values,
then laid out by the test encoder of ``tests/helpers/jsonb.py`` (written from MySQL's documented binary layout)
and rendered. PARTIAL_UPDATE_ROWS events are built field by field after MySQL's row layout (``pack_row``): before
image, packed value-options, partial-JSON bits (one per JSON column of the table), after image whose partially
updated JSON columns hold a diff vector where the document would be.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from binlog import BinlogError
from binlog.constants import (
    FORMAT_DESCRIPTION_EVENT,
    PARTIAL_UPDATE_ROWS_EVENT,
    QUERY_EVENT,
    TABLE_MAP_EVENT,
    XID_EVENT,
)
from binlog.jsonb import ArrayCell, apply_json_diff, parse_json_path
from tests.helpers.binlog_events import CAPTURED, T10, FixedSchema, query_body
from tests.helpers.jsonb import diff_entry, encode, expected_text
from tests.helpers.mysql_payload import Binlog, mysql8_fde_body, packed, rows_v2, t10_row

REPLACE, INSERT, REMOVE = 0, 1, 2

# -- the oracle: the same operations on Python values ------------------------------------------------------------------


def _cell(index: int | str, length: int) -> int:
    """An array leg's position: an int from the start, ``"last"`` / ``"last-N"`` from the end."""
    if isinstance(index, int):
        return index
    back = int(index[5:]) if index.startswith("last-") else 0
    return length - 1 - back


def apply_python(document: Any, op: int, path: list[Any], value: Any = None) -> None:
    """What the diff does, on the Python document (containers changed in place)."""
    *parents, last = path
    holder = document
    for leg in parents:
        holder = holder[_cell(leg, len(holder))] if isinstance(holder, list) else holder[leg]
    if isinstance(holder, dict):
        if op == REMOVE:
            del holder[last]
        else:
            holder[last] = value
        return
    index = _cell(last, len(holder))
    if op == REPLACE:
        holder[index] = value
    elif op == INSERT:
        holder.insert(min(index, len(holder)), value)
    else:
        del holder[index]


def path_text(path: list[Any]) -> str:
    """A path as MySQL's Json_path::to_string writes it: quoted member names unless they are identifiers."""
    out = "$"
    for leg in path:
        if isinstance(leg, int) or leg.startswith("last"):
            out += f"[{leg}]"
        elif leg.isidentifier():
            out += f".{leg}"
        else:
            out += '."' + leg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return out


# -- apply_json_diff ---------------------------------------------------------------------------------------------------


def test_each_operation_matches_the_python_oracle() -> None:
    before = {"a": 1, "list": [10, 20, 30, 40], "nested": {"deep": {"x": "y"}, "keep": [True, None]}, "b c": "s"}
    cases: list[tuple[int, list[Any], Any]] = [
        (REPLACE, ["a"], {"now": "an object"}),
        (REPLACE, ["list", 2], "thirty"),
        (REPLACE, ["list", "last"], 4.5),
        (REPLACE, ["nested", "deep", "x"], [1, 2]),
        (REPLACE, ["b c"], None),
        (INSERT, ["zz"], "new member, sorted by length then bytes"),
        (INSERT, ["aaaaaaaaaa"], 7),
        (INSERT, ["list", 0], "first"),
        (INSERT, ["list", 2], "middle"),
        (INSERT, ["list", 99], "appended past the end"),
        (INSERT, ["list", "last-1"], "before the one before last"),
        (INSERT, ["nested", "deep", "é"], False),
        (REMOVE, ["a"], None),
        (REMOVE, ["list", 0], None),
        (REMOVE, ["list", "last"], None),
        (REMOVE, ["nested", "keep", 1], None),
    ]
    for op, path, value in cases:
        expected = _copy(before)
        apply_python(expected, op, path, value)
        diff = diff_entry(op, path_text(path), value)
        assert apply_json_diff(encode(before), diff) == expected_text(expected), (op, path)


def test_a_vector_applies_in_order_and_leaves_untouched_parts_as_stored() -> None:
    big = {"k": "v" * 70000, "n": list(range(50)), "o": {"p": 1}}  # large layout (over 64 KiB)
    diff = (
        diff_entry(REPLACE, "$.o.p", 2)
        + diff_entry(INSERT, "$.o.q", [1])
        + diff_entry(INSERT, "$.o.q[1]", {"r": "s"})
        + diff_entry(REPLACE, '$.o.q[1]."r"', "t")
        + diff_entry(REMOVE, "$.n[0]")
    )
    expected = _copy(big)
    expected["o"] = {"p": 2, "q": [1, {"r": "t"}]}
    expected["n"] = list(range(1, 50))
    assert apply_json_diff(encode(big, force_large=True), diff) == expected_text(expected)
    assert apply_json_diff(encode(big), b"") == expected_text(big)  # no diff: the document as stored


def test_random_vectors_match_the_oracle() -> None:
    rng = random.Random(2026)

    def value(depth: int) -> Any:
        kind = rng.randrange(8 if depth < 3 else 5)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.choice([rng.randint(-40000, 40000), rng.randint(-(2**40), 2**40), 0.25])
        if kind in (2, 3, 4):
            return "".join(rng.choice('ab"\\é中 ') for _ in range(rng.randrange(6)))
        if kind in (5, 6):
            return [value(depth + 1) for _ in range(rng.randrange(1, 5))]
        return {"".join(rng.choice("abé ") for _ in range(rng.randrange(1, 4))): value(depth + 1) for _ in range(4)}

    def random_path(document: Any) -> list[Any]:
        path: list[Any] = []
        node = document
        while isinstance(node, dict | list) and node and rng.random() < 0.8:
            if isinstance(node, dict):
                leg = rng.choice(list(node))
                path.append(leg)
                node = node[leg]
            else:
                index = rng.randrange(len(node))
                path.append(rng.choice([index, "last" if index == len(node) - 1 else index]))
                node = node[index]
        return path

    applied = 0
    for _ in range(400):
        document = {"root": value(0), "other": [value(1), value(1)]}
        stored = encode(document)
        diff = b""
        expected = _copy(document)
        for _ in range(rng.randrange(1, 4)):
            path = random_path(expected)
            if not path:
                continue
            parent = expected
            for leg in path[:-1]:
                parent = parent[_cell(leg, len(parent))] if isinstance(parent, list) else parent[leg]
            op = rng.choice([REPLACE, REMOVE, INSERT])
            new = value(2)
            if op == INSERT and isinstance(parent, dict):
                path[-1] = path[-1] + "+"  # a member that is not there yet
                if path[-1] in parent:
                    continue
            apply_python(expected, op, path, new)
            diff += diff_entry(op, path_text(path), new)
            applied += 1
        assert apply_json_diff(stored, diff) == expected_text(expected)
    assert applied > 600


@pytest.mark.parametrize(
    ("document", "diff", "message"),
    [
        ({"a": 1}, diff_entry(REPLACE, "$.b", 1), r"REPLACE \$\.b: no value there in the before image"),
        ([1, 2], diff_entry(REPLACE, "$[2]", 1), r"REPLACE \$\[2\]: no value there"),
        ({"a": 1}, diff_entry(INSERT, "$.a", 2), "the member already exists"),
        ({"a": 1}, diff_entry(INSERT, "$.a.b", 2), "no object or array to insert into"),
        ({"a": 1}, diff_entry(REMOVE, "$.b"), r"REMOVE \$\.b: no value there"),
        ([], diff_entry(REMOVE, "$[last]"), r"REMOVE \$\[last\]: no value there"),
        ({"a": 1}, diff_entry(REPLACE, "$", 2), "cannot change the whole document"),
        ({"a": 1}, diff_entry(REPLACE, "$.*", 2), "names one member"),
        ([1], diff_entry(REMOVE, "$[*]"), "names one array cell"),
        ([1], diff_entry(REMOVE, "$[0 to 1]"), "names one array cell"),
        ({"a": 1}, diff_entry(REPLACE, 'a."b"', 2), "does not start with"),
        ({"a": 1}, diff_entry(REPLACE, '$."a', 2), "unterminated quoted member name"),
        ({"a": 1}, b"\x00\x03$.a\x05", "JSON diff value at offset 6 has length 5 but only 0 bytes remain"),
    ],
)
def test_diffs_mysql_would_reject_raise_value_error(document: Any, diff: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_json_diff(encode(document), diff)


def test_paths_as_mysql_writes_them() -> None:
    assert parse_json_path('$.a[3]."b c"[last][last-2].ünï') == [
        "a",
        ArrayCell(3),
        "b c",
        ArrayCell(0, from_end=True),
        ArrayCell(2, from_end=True),
        "ünï",
    ]
    assert parse_json_path(' $ . a [ 1 ] ."\\"q\\u00e9"') == ["a", ArrayCell(1), '"qé']
    assert parse_json_path("$") == []


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# -- PARTIAL_UPDATE_ROWS events ----------------------------------------------------------------------------------------

PARTIAL_JSON_UPDATES = 1
TABLE_MAP = CAPTURED["mysql_table_map_t10_json_decimal"]


def partial_after(diff: bytes, number: int) -> bytes:
    """A t10 after image whose JSON column holds a diff vector: null bitmap, u32 length + vector, DECIMAL(10,0)."""
    return bytes([0xFC]) + struct.pack("<I", len(diff)) + diff + bytes([0x80]) + number.to_bytes(4, "big")


def partial_row(before: Any, after_image: bytes, *, partial: bool, number: int = 7, bits: bytes = b"\x01") -> bytes:
    """before image, value-options, the partial bits (t10 has one JSON column: one byte) when set, after image."""
    options = packed(PARTIAL_JSON_UPDATES if partial else 0)
    bits = bits if partial else b""
    return t10_row(before, number) + options + bits + after_image


def partial_binlog(rows: bytes, present_before: bytes = b"\xff", present_after: bytes = b"\xff") -> Binlog:
    log = Binlog("mysql-bin.000007")
    log.add(FORMAT_DESCRIPTION_EVENT, mysql8_fde_body())
    log.add(QUERY_EVENT, query_body("BEGIN"))
    log.add(TABLE_MAP_EVENT, TABLE_MAP)
    log.add(PARTIAL_UPDATE_ROWS_EVENT, rows_v2(TABLE_MAP, 2, present_before + present_after, rows))
    log.add(XID_EVENT, struct.pack("<Q", 5))
    return log


def test_partial_update_rows_render_the_after_document() -> None:
    document = {"name": "old", "tags": ["a", "b"], "n": 1}
    diff = diff_entry(REPLACE, "$.name", "new") + diff_entry(INSERT, "$.tags[last]", "x") + diff_entry(REMOVE, "$.n")
    rows = (
        partial_row(document, partial_after(diff, 8), partial=True)
        # value-options 0: a full after document, as in any UPDATE
        + partial_row({"whole": 1}, t10_row({"whole": 2}, 9), partial=False)
        # value-options set, the column's bit clear: a full document
        + partial_row({"bit": 0}, t10_row({"bit": 1}, 11), partial=True, bits=b"\x00")
        # the bit set and an empty vector: the document unchanged
        + partial_row([1, 2], partial_after(b"", 10), partial=True)
    )
    (trx,) = partial_binlog(rows).feed(FixedSchema({("test", "t10"): T10}))
    assert [(c.kind, c.columns, c.before, c.after, c.row) for c in trx.changes] == [
        (2, ("c1", "c2"), (expected_text(document), "7"), ('{"name":"new","tags":["a","x","b"]}', "8"), 0),
        (2, ("c1", "c2"), ('{"whole":1}', "7"), ('{"whole":2}', "9"), 1),
        (2, ("c1", "c2"), ('{"bit":0}', "7"), ('{"bit":1}', "11"), 2),
        (2, ("c1", "c2"), ("[1,2]", "7"), ("[1,2]", "10"), 3),
    ]


def test_partial_update_of_a_column_left_out_of_the_before_image_names_the_problem() -> None:
    # MINIMAL before image: c2 only (no JSON value to apply the diff to). Its null bitmap covers one column.
    before_c2_only = bytes([0xFE]) + bytes([0x80]) + (7).to_bytes(4, "big")
    row = before_c2_only + packed(PARTIAL_JSON_UPDATES) + b"\x01" + partial_after(diff_entry(REPLACE, "$.a", 1), 8)
    log = partial_binlog(row, present_before=b"\x02")
    with pytest.raises(
        BinlogError,
        match=r"partial JSON update at mysql-bin.000007:\d+ \(test.t10 column 'c1'\).*"
        r"binlog_row_image=FULL",
    ):
        log.feed(FixedSchema({("test", "t10"): T10}))


def test_partial_update_of_null_or_with_a_bad_path_raises_binlog_error() -> None:
    null_before = partial_row(None, partial_after(diff_entry(REPLACE, "$.a", 1), 8), partial=True)
    with pytest.raises(BinlogError, match="the column is NULL before the update"):
        partial_binlog(null_before).feed(FixedSchema({("test", "t10"): T10}))
    missing_member = partial_row({"b": 1}, partial_after(diff_entry(REPLACE, "$.a", 1), 8), partial=True)
    with pytest.raises(BinlogError, match=r"test.t10 column 'c1'\): JSON diff REPLACE \$.a: no value there"):
        partial_binlog(missing_member).feed(FixedSchema({("test", "t10"): T10}))
