"""decode_json on bytes: no MySQL server runs here, so documents come from two sources.

* Bytes captured from real MySQL servers in public test suites, carried over as data (``REAL_*`` below).
* A small encoder (``tests/helpers/jsonb.py``) that lays documents out field by field as MySQL's ``json_binary.h``
  documents the format (type byte, element count, size, key entries, value entries, inlining rules), independently of
  the decoder.
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import struct

import pytest

from binlog.jsonb import decode_json, decode_json_diff, format_double
from tests.helpers.jsonb import (
    INT16,
    INT32,
    INT64,
    LARGE_ARRAY,
    LARGE_OBJECT,
    SMALL_ARRAY,
    UINT16,
    UINT32,
    UINT64,
    Opaque,
    Typed,
    container,
    decimal_bin,
    diff_entry,
    encode,
    expected_text,
    opaque_decimal,
    opaque_temporal,
    packed_datetime,
    packed_time,
)

# --------------------------------------------------------------------------------------------------------------------
# Bytes captured from real MySQL servers (go-mysql's replication test suite, row events from MySQL 5.7).

# INSERT ... VALUES ('{"key1": "value1", "key2": "value2"}'): the JSON column bytes after the 4-byte length.
REAL_SMALL_OBJECT = (
    b"\x00\x02\x00(\x00\x12\x00\x04\x00\x16\x00\x04\x00\x0c\x1a\x00\x0c!\x00key1key2\x06value1\x06value2"
)

# DECIMAL(p,s) column values (packed decimal, as in a row event) with what the server SELECTs for them; inside a
# JSON document the same packed bytes follow a precision byte and a scale byte.
REAL_DECIMALS = [
    ("75c8", 4, 2, "-10.55"),
    ("7ffff4", 5, 0, "-11"),
    ("7ff5fdd9", 7, 3, "-10.550"),
    ("7ffffff5c8", 10, 2, "-10.55"),
    ("7ffffff5fdd9", 10, 3, "-10.550"),
    ("7ffffffff5c8", 13, 2, "-10.55"),
    ("76c4653600fe7960", 15, 14, "-9.99999999999999"),
    ("7ffffffff5df37aa7fff", 20, 10, "-10.5500000000"),
    ("7ffffffffffffffffffffff5ff2927", 30, 5, "-10.55000"),
    ("7ffffffff5df37aa7fffffffffff", 30, 20, "-10.55000000000000000000"),
    ("7ffff5df37aa7fffffffffffffffff", 30, 25, "-10.5500000000000000000000000"),
    ("8001", 4, 2, "0.01"),
    ("800000", 5, 0, "0"),
    ("8000000c", 7, 3, "0.012"),
    ("8000bc614e01600b", 15, 14, "0.01234567890123"),
    ("800000000000bc614e35b7bf8759", 30, 20, "0.01234567890123456789"),
    ("80000000bc614e35b7bf870087fdd9", 30, 25, "0.0123456789012345678912345"),
    ("e363", 4, 2, "99.99"),
    ("803039", 5, 0, "12345"),
    ("a70f03e7", 7, 3, "9999.999"),
    ("8000303900", 10, 2, "12345.00"),
    ("893b9ac9ff01869f", 15, 14, "9.99999999999999"),
    ("800000000000000000003039000000", 30, 5, "12345.00000"),
    ("800000007b1ad2748000", 20, 10, "123.4500000000"),
    ("1c9c", 4, 2, "-99.99"),
    ("7fff84", 5, 0, "-123"),
    ("7f84fe3d", 7, 3, "-123.450"),
]


def test_real_server_object():
    assert decode_json(REAL_SMALL_OBJECT) == '{"key1":"value1","key2":"value2"}'
    assert encode({"key1": "value1", "key2": "value2"}) == REAL_SMALL_OBJECT  # our encoder agrees with the server


@pytest.mark.parametrize(("hexdata", "precision", "scale", "text"), REAL_DECIMALS)
def test_real_server_decimals(hexdata, precision, scale, text):
    raw = bytes.fromhex(hexdata)
    doc = encode([Opaque(246, bytes([precision, scale]) + raw)])
    assert decode_json(doc) == f"[{text}]"
    assert decimal_bin(text, precision, scale) == raw  # and our encoder writes what the server wrote


# --------------------------------------------------------------------------------------------------------------------
# Scalars


def test_empty_document_is_null():
    assert decode_json(b"") == "null"
    assert decode_json(memoryview(b"")) == "null"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-1, "-1"),
        (32767, "32767"),
        (-32768, "-32768"),
        (32768, "32768"),
        (2**31 - 1, "2147483647"),
        (-(2**31), "-2147483648"),
        (2**31, "2147483648"),
        (2**63 - 1, "9223372036854775807"),
        (-(2**63), "-9223372036854775808"),
        (2**64 - 1, "18446744073709551615"),
        (Typed(UINT16, 65535), "65535"),
        (Typed(UINT32, 4294967295), "4294967295"),
        (Typed(UINT64, 0), "0"),
        (Typed(INT64, 5), "5"),
        ("", '""'),
        ("hello", '"hello"'),
        (2.5, "2.5"),
    ],
)
def test_scalars_top_level_and_in_containers(value, text):
    assert decode_json(encode(value)) == text
    assert decode_json(encode([value, value])) == f"[{text},{text}]"
    assert decode_json(encode({"k": value})) == f'{{"k":{text}}}'
    assert decode_json(encode([value], force_large=True)) == f"[{text}]"
    assert decode_json(encode({"k": value}, force_large=True)) == f'{{"k":{text}}}'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (-3.0, "-3.0"),
        (2.5, "2.5"),
        (-2.5, "-2.5"),
        (0.1, "0.1"),
        (3.14, "3.14"),
        (1e6, "1000000.0"),
        (1e14, "100000000000000.0"),
        (1e15, "1e15"),
        (1e20, "1e20"),
        (-1e20, "-1e20"),
        (1.5e300, "1.5e300"),
        (1.7976931348623157e308, "1.7976931348623157e308"),
        (123456789012345.6, "123456789012345.6"),
        (1234567890123456.5, "1234567890123456.5"),
        (1234567890123456.0, "1.234567890123456e15"),
        (12345678901234567890.0, "1.2345678901234567e19"),
        (0.0001, "0.0001"),
        (0.00001, "0.00001"),
        (1e-10, "0.0000000001"),
        (1e-15, "0.000000000000001"),
        (1e-16, "1e-16"),
        (-2.5e-20, "-2.5e-20"),
        (5e-324, "5e-324"),
        (0.30000000000000004, "0.30000000000000004"),
        (1 / 3, "0.3333333333333333"),
    ],
)
def test_double_format(value, text):
    assert format_double(value) == text
    assert decode_json(encode(value)) == text
    assert decode_json(encode([value])) == f"[{text}]"


def test_double_round_trips():
    rng = random.Random(7)
    for _ in range(5000):
        value = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if value != value or value in (float("inf"), float("-inf")):
            continue
        text = format_double(value)
        assert float(text) == value, (value, text)
        assert "." in text or "e" in text


def test_nan_and_infinity_print_zero_like_mysql():
    assert decode_json(b"\x0b" + struct.pack("<d", float("nan"))) == "0.0"
    assert decode_json(b"\x0b" + struct.pack("<d", float("inf"))) == "0.0"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ('say "hi"', r'"say \"hi\""'),
        ("back\\slash", r'"back\\slash"'),
        ("a/b", '"a/b"'),
        ("line\nbreak\ttab\rcr\bbs\ffeed", r'"line\nbreak\ttab\rcr\bbs\ffeed"'),
        ("\x00\x01\x1f", r'"\u0000\u0001\u001f"'),
        ("\x7f", '"\x7f"'),
        ("é ü ñ 中文", '"é ü ñ 中文"'),
        ("😀 𝄞", '"😀 𝄞"'),
        ("\u2028\u2029", '"\u2028\u2029"'),
    ],
)
def test_string_escaping(value, text):
    assert decode_json(encode(value)) == text
    assert decode_json(encode({value: value})) == f"{{{text}:{text}}}"


def test_long_strings_use_multibyte_lengths():
    for n in (127, 128, 16383, 16384, 70000):
        s = "x" * n
        assert decode_json(encode(s)) == f'"{s}"'
        assert decode_json(encode([s, 1])) == f'["{s}",1]'


# --------------------------------------------------------------------------------------------------------------------
# Containers


def test_example_document():
    doc = {"a": 1, "b": [1, 2.5, "x"], "c": None, "d": True}
    assert decode_json(encode(doc)) == '{"a":1,"b":[1,2.5,"x"],"c":null,"d":true}'
    assert decode_json(encode(doc, force_large=True)) == '{"a":1,"b":[1,2.5,"x"],"c":null,"d":true}'


def test_empty_containers():
    assert decode_json(encode({})) == "{}"
    assert decode_json(encode([])) == "[]"
    assert decode_json(encode({}, force_large=True)) == "{}"
    assert decode_json(encode([[], {}, [[]], {"": {}}])) == '[[],{},[[]],{"":{}}]'


def test_inlined_and_offset_values():
    """Small containers inline literals and 16-bit ints only; large ones also 32-bit ints."""
    values = [None, True, False, -5, Typed(UINT16, 65000), -70000, Typed(UINT32, 3000000000), 2**40, 1.5, "s"]
    text = '[null,true,false,-5,65000,-70000,3000000000,1099511627776,1.5,"s"]'
    small = encode(values)
    large = encode(values, force_large=True)
    assert small[0] == SMALL_ARRAY and large[0] == LARGE_ARRAY
    assert decode_json(small) == text
    assert decode_json(large) == text
    # int32 at an offset in the small layout, inline in the large one: check the entries directly
    assert small[5 + 5 * 3] == INT32 and struct.unpack_from("<H", small, 5 + 5 * 3 + 1)[0] >= 4 + 3 * len(values)
    assert large[9 + 5 * 5] == INT32 and struct.unpack_from("<i", large, 9 + 5 * 5 + 1)[0] == -70000


def test_key_order_is_stored_order():
    # MySQL sorts keys by length then bytes; the decoder prints the stored order.
    doc = {"bb": 1, "a": 2, "ccc": 3, "b": 4, "é": 5}
    assert decode_json(encode(doc)) == '{"a":2,"b":4,"bb":1,"é":5,"ccc":3}'


def test_nested_mixed():
    doc = {
        "user": {"name": "Ann", "tags": ["x", "y", {"deep": [1, [2, [3, {"z": None}]]]}], "age": 41},
        "list": [[1, 2], [3, [4, 5]], {"k": [True, False]}],
        "n": -1,
    }
    assert decode_json(encode(doc)) == expected_text(doc)
    assert decode_json(encode(doc, force_large=True)) == expected_text(doc)


def test_large_documents_switch_to_large_layout():
    big_array = [f"item-{i}-" + "x" * 50 for i in range(2000)]  # > 64 KiB, forces the large layout
    doc = encode(big_array)
    assert doc[0] == LARGE_ARRAY
    assert decode_json(doc) == expected_text(big_array)
    big_object = {f"key{i:05d}": {"v": i, "s": "y" * 40} for i in range(3000)}
    doc = encode(big_object)
    assert doc[0] == LARGE_OBJECT
    assert decode_json(doc) == expected_text(big_object)
    # a small object holding a large array and a small one
    mixed = {"small": [1, 2], "big": big_array}
    doc = encode(mixed)
    assert decode_json(doc) == expected_text(mixed)


def deep_document(depth: int) -> bytes:
    """Alternating one-member large objects {"k": ...} and arrays [...] around [1], built from the inside out
    without recursion (the recursive encoder above would hit Python's limit first)."""
    inner = struct.pack("<II", 1, 13) + bytes([INT16]) + struct.pack("<hH", 1, 0)  # [1], 1 inlined
    child_type, child_len = LARGE_ARRAY, len(inner)
    prefixes = []
    for i in range(depth):
        if i % 2:
            prefixes.append(struct.pack("<II", 1, 13 + child_len) + bytes([child_type]) + struct.pack("<I", 13))
            child_type, child_len = LARGE_ARRAY, child_len + 13
        else:
            prefix = struct.pack("<II", 1, 20 + child_len) + struct.pack("<IH", 19, 1)
            prefixes.append(prefix + bytes([child_type]) + struct.pack("<I", 20) + b"k")
            child_type, child_len = LARGE_OBJECT, child_len + 20
    return bytes([child_type]) + b"".join(reversed(prefixes)) + inner


def test_deep_nesting_has_no_recursion_limit():
    depth = 20000
    text = decode_json(deep_document(depth))
    expected = "".join("[" if i % 2 else '{"k":' for i in reversed(range(depth))) + "[1]"
    expected += "".join("]" if i % 2 else "}" for i in range(depth))
    assert text == expected


def test_random_documents_match_reference():
    rng = random.Random(1234)

    def gen(depth: int) -> object:
        kind = rng.randrange(10 if depth < 5 else 6)
        if kind == 0:
            return None
        if kind == 1:
            return rng.choice([True, False])
        if kind == 2:
            return rng.choice([rng.randint(-40000, 40000), rng.randint(-(2**63), 2**64 - 1)])
        if kind == 3:
            return rng.choice([0.5, -2.25, 1234.125, 1e-3])
        if kind in (4, 5):
            return "".join(rng.choice('ab"\\\n\x01é中😀 ') for _ in range(rng.randrange(12)))
        if kind in (6, 7):
            return [gen(depth + 1) for _ in range(rng.randrange(6))]
        return {"".join(rng.choice("abcé") for _ in range(rng.randrange(1, 5))): gen(depth + 1) for _ in range(5)}

    for _ in range(300):
        doc = gen(0)
        expected = expected_text(doc)
        assert decode_json(encode(doc)) == expected
        assert decode_json(encode(doc, force_large=True)) == expected
        assert json.loads(expected) == json.loads(decode_json(encode(doc)))


def test_memoryview_and_bytearray_input():
    doc = encode({"a": [1, "two"]})
    assert decode_json(bytearray(doc)) == '{"a":[1,"two"]}'
    assert decode_json(memoryview(b"\xff\xff" + doc + b"\xee")[2:-1]) == '{"a":[1,"two"]}'


def test_unused_space_between_values_is_skipped():
    """MySQL's in-place partial updates can leave gaps; offsets, not positions, locate values."""
    body = bytearray(container(["abc", "de"], False, False))
    _count, size = struct.unpack_from("<HH", body)
    # move the second string 3 bytes further and leave garbage in the gap
    first_entry = 4
    second_off = struct.unpack_from("<H", body, first_entry + 3 + 1)[0]
    body[second_off:second_off] = b"\xee\xee\xee"
    struct.pack_into("<H", body, first_entry + 3 + 1, second_off + 3)
    struct.pack_into("<H", body, 2, size + 3)
    assert decode_json(bytes([SMALL_ARRAY]) + body) == '["abc","de"]'


# --------------------------------------------------------------------------------------------------------------------
# Opaque values


@pytest.mark.parametrize(
    ("text", "precision", "scale", "shown"),
    [
        ("0", 1, 0, "0"),
        ("0", 10, 2, "0.00"),
        ("1.5", 10, 2, "1.50"),
        ("-1.5", 10, 2, "-1.50"),
        ("123456789", 9, 0, "123456789"),
        ("-123456789.987654321", 18, 9, "-123456789.987654321"),
        ("0.000000001", 10, 10, "0.0000000010"),
        ("0.5", 1, 1, "0.5"),
        ("-0.5", 1, 1, "-0.5"),
        ("9" * 65, 65, 0, "9" * 65),
        ("-" + "9" * 35 + "." + "9" * 30, 65, 30, "-" + "9" * 35 + "." + "9" * 30),
        ("12345678901234567890.12345678901234567890", 40, 20, "12345678901234567890.12345678901234567890"),
        ("-0.01", 3, 2, "-0.01"),
        ("100", 5, 0, "100"),
    ],
)
def test_opaque_decimal(text, precision, scale, shown):
    assert decode_json(encode(opaque_decimal(text, precision, scale))) == shown
    assert decode_json(encode({"d": opaque_decimal(text, precision, scale)})) == f'{{"d":{shown}}}'


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (opaque_temporal(10, packed_datetime(2024, 2, 29)), '"2024-02-29"'),
        (opaque_temporal(10, packed_datetime(0, 0, 0)), '"0000-00-00"'),
        (opaque_temporal(10, packed_datetime(9999, 12, 31)), '"9999-12-31"'),
        (opaque_temporal(12, packed_datetime(2015, 1, 15, 23, 24, 25)), '"2015-01-15 23:24:25.000000"'),
        (opaque_temporal(12, packed_datetime(1000, 1, 1, 0, 0, 0, 1)), '"1000-01-01 00:00:00.000001"'),
        (opaque_temporal(7, packed_datetime(2038, 1, 19, 3, 14, 7, 999999)), '"2038-01-19 03:14:07.999999"'),
        (opaque_temporal(11, packed_time(10, 0, 0)), '"10:00:00.000000"'),
        (opaque_temporal(11, packed_time(838, 59, 59)), '"838:59:59.000000"'),
        (opaque_temporal(11, packed_time(1, 2, 3, 456000, negative=True)), '"-01:02:03.456000"'),
        (opaque_temporal(11, packed_time(0, 0, 0, 500000, negative=True)), '"-00:00:00.500000"'),
        (opaque_temporal(11, 0), '"00:00:00.000000"'),
    ],
)
def test_opaque_temporal(value, shown):
    assert decode_json(encode(value)) == shown
    assert decode_json(encode([value])) == f"[{shown}]"


def test_opaque_other_types_are_base64():
    assert decode_json(encode(Opaque(16, b"\x01"))) == '"base64:type16:AQ=="'  # BIT(1) b'1'
    assert decode_json(encode(Opaque(252, b"hello"))) == '"base64:type252:aGVsbG8="'
    assert decode_json(encode(Opaque(254, b""))) == '"base64:type254:"'
    assert decode_json(encode([Opaque(15, b"\xff\x00")])) == '["base64:type15:/wA="]'
    data = bytes(range(256)) * 2
    encoded = base64.b64encode(data).decode()
    lines = [encoded[i : i + 76] for i in range(0, len(encoded), 76)]
    assert decode_json(encode(Opaque(252, data))) == '"base64:type252:' + "\\n".join(lines) + '"'
    assert decode_json(encode(Opaque(252, b"x" * 57))) == f'"base64:type252:{base64.b64encode(b"x" * 57).decode()}"'


def test_opaque_var_string_is_a_plain_string():
    assert decode_json(encode(Opaque(253, b'a"b'))) == r'"a\"b"'


# --------------------------------------------------------------------------------------------------------------------
# Malformed input


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x0e", r"unknown JSON value type 0x0e at offset 0"),
        (b"\x10\x00", r"unknown JSON value type 0x10"),
        (b"\x04", r"truncated JSON literal at offset 1"),
        (b"\x04\x03", r"bad JSON literal value 0x03 at offset 1"),
        (b"\x05\x01", r"truncated JSON int16 \(type 0x05\) at offset 1"),
        (b"\x09" + b"\x00" * 7, r"truncated JSON int64"),
        (b"\x0b\x00\x00", r"truncated JSON double"),
        (b"\x0c", r"truncated length of JSON string at offset 1"),
        (b"\x0c\x05abc", r"JSON string at offset 1 has length 5 but only 3 bytes remain"),
        (b"\x0c\x80\x80\x80\x80\x80\x01", r"longer than 5 bytes"),
        (b"\x0c\x02\xc3\x28", r"JSON string at offset 1 is not valid UTF-8"),
        (b"\x00\x01", r"truncated JSON small object header at offset 1"),
        (b"\x03\x01\x00\x00", r"truncated JSON large array header at offset 1"),
        (b"\x02\x01\x00\x20\x00", r"JSON small array at offset 1 claims 32 bytes but only 4 remain"),
        (b"\x02\x05\x00\x04\x00", r"5 elements do not fit in its size of 4 bytes"),
        (b"\x02\x01\x00\x08\x00\x0e\x07\x00\x00", r"unknown JSON value type 0x0e at value entry at offset 5"),
        (b"\x02\x01\x00\x07\x00\x04\x07\x00", r"bad JSON literal value 0x07 at offset 6"),
        (b"\x02\x01\x00\x07\x00\x0c\x09\x00", r"points to offset 10, outside its container at 1..8"),
        (b"\x02\x01\x00\x07\x00\x0c\x02\x00", r"points to offset 3, outside its container"),
        (b"\x02\x01\x00\x08\x00\x0c\x07\x00\x05", r"JSON string at offset 8 has length 5 but only 0 bytes remain"),
        (b"\x00\x01\x00\x0b\x00\x0b\x00\x05\x00\x04\x00\x00", r"key entry at offset 5 points outside its object"),
        (b"\x02\x01\x00\x0b\x00\x02\x07\x00\x01\x00\x10\x00", r"claims 16 bytes but only 4 remain"),
        (b"\x0f\xf6", r"truncated length of JSON opaque at offset 2"),
        (b"\x0f\xf6\x01\x05", r"JSON opaque DECIMAL at offset 1 is too short \(1 bytes\)"),
        (b"\x0f\xf6\x03\x05\x00\x80", r"DECIMAL\(5,0\) at offset 1 needs 3 bytes, has 1"),
        (b"\x0f\xf6\x02\x00\x00", r"bad precision/scale 0,0"),
        (b"\x0f\xf6\x04\x02\x03\xff\xff", r"bad precision/scale 2,3"),
        (b"\x0f\xf6\x04\x02\x01\xe4\x00", r"bad leading digit group 100"),
        (b"\x0f\x0c\x04\x00\x00\x00\x00", r"has 4 bytes, not 8"),
        (b"\x0f\x0c\x08" + struct.pack("<q", 999_999_999), r"bad microseconds"),
        (b"\x0f\x0c\x08" + struct.pack("<q", -packed_datetime(2020, 1, 1)), r"is negative"),
    ],
)
def test_malformed_input_raises_value_error(data, message):
    with pytest.raises(ValueError, match=message):
        decode_json(data)


def test_bad_decimal_digit_group():
    raw = bytearray(decimal_bin("1.5", 18, 9))
    raw[4:8] = (1_000_000_000).to_bytes(4, "big")  # the fraction group
    with pytest.raises(ValueError, match="bad digit group 1000000000"):
        decode_json(encode(Opaque(246, bytes([18, 9]) + bytes(raw))))


def test_self_referencing_container_is_rejected():
    # an array whose only element points back at the array's own header: must not loop
    doc = b"\x02\x01\x00\x07\x00\x02\x00\x00"
    with pytest.raises(ValueError, match="outside its container"):
        decode_json(doc)


def test_corrupted_documents_raise_only_value_error():
    rng = random.Random(99)
    docs = [
        encode({"a": [1, 2.5, "x", None, {"b": opaque_decimal("-1.25", 5, 2)}], "t": opaque_temporal(11, 5 << 24)}),
        encode([Opaque(252, b"blob"), "string", 2**40, {"k": [True]}], force_large=True),
    ]
    for doc in docs:
        for _ in range(3000):
            corrupted = bytearray(doc)
            for _ in range(rng.randint(1, 4)):
                corrupted[rng.randrange(len(corrupted))] = rng.randrange(256)
            cut = rng.randint(1, len(corrupted))
            for candidate in (bytes(corrupted), bytes(corrupted[:cut])):
                with contextlib.suppress(ValueError):
                    decode_json(candidate)


# --------------------------------------------------------------------------------------------------------------------
# Partial JSON diff vectors


def test_json_diff_vector():
    data = (
        diff_entry(0, "$.a", 5)
        + diff_entry(1, "$.b[1]", {"x": [1, "y"]}, long_lengths=True)
        + diff_entry(2, '$."key with space"')
        + diff_entry(0, "$.s", "z" * 300)
    )
    assert decode_json_diff(data) == [
        ("REPLACE", "$.a", "5"),
        ("INSERT", "$.b[1]", '{"x":[1,"y"]}'),
        ("REMOVE", '$."key with space"', None),
        ("REPLACE", "$.s", '"' + "z" * 300 + '"'),
    ]
    assert decode_json_diff(b"") == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x03\x01$", "bad JSON diff operation 3 at offset 0"),
        (b"\x00", "truncated JSON diff path length at offset 1"),
        (b"\x00\x05$.a", "JSON diff path at offset 2 has length 5 but only 3 bytes remain"),
        (b"\x00\x03$.a", "truncated JSON diff value length at offset 5"),
        (b"\x00\x03$.a\x01\x0c", "truncated length of JSON string"),
        (b"\x00\xfb", "NULL JSON diff path length"),
        (b"\x00\xfc\x01", "truncated JSON diff path length at offset 1"),
        (b"\x00\x02\xff\xfe", "not valid UTF-8"),
    ],
)
def test_json_diff_malformed(data, message):
    with pytest.raises(ValueError, match=message):
        decode_json_diff(data)
