"""How row changes are kept in the store: every kind of value round-trips, NULL and missing stay distinct."""

from binlog import NOT_PRESENT
from relay import rowcodec
from relay.rowcodec import MISSING


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
