"""How row changes are kept in the store: every kind of value round-trips, NULL and missing stay distinct."""

import random

import pytest

from binlog import NOT_PRESENT
from clientproto import ABSENT
from relay.store import rowcodec
from relay.store.rowcodec import MISSING


def test_values_round_trip() -> None:
    columns = ("id", "name", "blob", "gone", "nothing", "odd")
    before = ("1", "Zoë 中文 😀", b"\x00\xff\n\\", NOT_PRESENT, None, "bad \udcff surrogate")
    after = ("1", 'quote " and \\ backslash', b"", "now here", "NULL", "tab\tnew\nline")
    data = rowcodec.encode(columns, before, after)
    assert data.isascii()  # any text survives PostgreSQL's text type, lone surrogates included
    decoded = rowcodec.decode(data)
    assert [c.name for c in decoded] == list(columns)
    assert [c.before for c in decoded] == ["1", "Zoë 中文 😀", b"\x00\xff\n\\", MISSING, None, "bad \udcff surrogate"]
    assert [c.after for c in decoded] == list(after)


def test_insert_and_delete_have_no_other_image() -> None:
    insert = rowcodec.decode(rowcodec.encode(["a"], None, ["x"]))
    delete = rowcodec.decode(rowcodec.encode(["a"], [None], None))
    assert (insert[0].before, insert[0].after) == (MISSING, "x")
    assert (delete[0].before, delete[0].after) == (None, MISSING)


def test_legacy_text_forms() -> None:
    assert rowcodec.text_of(None) == "NULL"
    assert rowcodec.text_of(MISSING) == ""
    assert rowcodec.text_of(b"caf\xc3\xa9") == "café"
    assert rowcodec.text_of("x") == "x"


def test_record_form_holds_the_fetch_columns_and_keeps_text_and_binary_apart() -> None:
    from clientproto import ABSENT, encode_columns

    columns = ("id", "text", "bytes", "gone", "nothing")
    before = ("1", "abc", b"abc", NOT_PRESENT, None)
    after = ("2", "Zoë 😀", b"\x00\xff", "here", "NULL")
    data = rowcodec.encode(columns, before, after)
    assert data.startswith(rowcodec.RECORD_FORM) and data.isascii()
    wire = [("id", b"1", b"2"), ("text", b"abc", "Zoë 😀".encode()), ("bytes", b"abc", b"\x00\xff")]
    wire += [("gone", ABSENT, b"here"), ("nothing", None, b"NULL")]
    assert rowcodec.record_columns(data) == encode_columns(wire)
    decoded = rowcodec.decode(data)
    assert [c.before for c in decoded] == ["1", "abc", b"abc", MISSING, None]  # the same bytes, text or binary
    assert [c.after for c in decoded] == list(after)
    insert = rowcodec.decode(rowcodec.encode(["a", "b"], None, [b"\x01", "x"]))
    assert [(c.before, c.after) for c in insert] == [(MISSING, b"\x01"), (MISSING, "x")]


def test_both_forms_decode_to_the_same_columns() -> None:
    """Stores written before the record form hold the JSON form; either reads back the same."""
    cases = [
        (["a", "b", "c"], ["1", None, b"\x00"], ["2", "x", b""]),
        (["a"], None, ["only after"]),
        (["a", "b"], [NOT_PRESENT, "before"], None),
    ]
    for columns, before, after in cases:
        record, json_form = rowcodec.encode(columns, before, after), rowcodec.encode_json(columns, before, after)
        assert record.startswith(rowcodec.RECORD_FORM) and json_form.startswith("{")
        assert rowcodec.record_columns(json_form) is None
        assert rowcodec.decode(record) == rowcodec.decode(json_form)


def test_text_that_is_not_utf8_falls_back_to_the_json_form() -> None:
    data = rowcodec.encode(["a"], None, ["lone \udcff"])
    assert data.startswith("{") and rowcodec.decode(data)[0].after == "lone \udcff"


def test_the_compiled_record_form_is_the_python_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """clientproto/_records.c's record_text (loaded here whatever RELAY_NATIVE says; scripts/bootstrap builds it)
    gives the record form of images of text and NULLs, and hands every other image back: the same text as the
    Python code for random images of every kind of value."""
    import importlib

    from clientproto import records

    compiled = importlib.import_module("clientproto._records")
    compiled.configure(ABSENT, records._BEFORE_NULL, records._AFTER_NULL, records._BEFORE_ABSENT, records._AFTER_ABSENT)
    rng = random.Random(11)
    values = ["", "x", "Zoë 中文 😀", "tab\tnul\x00\n", "lone \udc80", _Text("sub"), b"\x00\xff", None, NOT_PRESENT,
              MISSING, 7, "=" * 5]  # fmt: skip
    taken = 0
    for _ in range(3000):
        width = rng.randrange(0, 9)
        names = tuple(rng.choice(["id", "naïve", "a", "b", f"c{width}"]) for _ in range(width))
        images = [[rng.choice(values) for _ in range(rng.randrange(0, width + 2))] for _side in range(2)]
        before, after = (None if rng.random() < 0.3 else image for image in images)
        if rng.random() < 0.5:  # mostly plain images, as the worker meets them
            before, after = ([v for v in image if v is None or type(v) is str] if image is not None else None
                             for image in (before, after))  # fmt: skip
        monkeypatch.setattr(records, "_compiled", None)
        expected = rowcodec.encode(names, before, after)
        monkeypatch.setattr(records, "_compiled", compiled)
        taken += compiled.record_text(rowcodec.RECORD_FORM, records._layout(names).names, before, after) is not None
        assert rowcodec.encode(names, before, after) == expected, (names, before, after)
    assert taken > 1000


class _Text(str):
    """A str subclass: its value is text, but not of the type the compiled path takes as it is."""
