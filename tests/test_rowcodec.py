"""How row changes are kept in the store: every kind of value round-trips, NULL and missing stay distinct."""

from binlog import NOT_PRESENT
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
