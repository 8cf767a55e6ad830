"""Collation ids (as TABLE_MAP metadata and information_schema give them) → Python codecs.

The id table is MariaDB's ``information_schema.COLLATIONS`` plus MySQL 8's utf8mb4_0900 range and MariaDB 11's
UCA-14.0 ranges, so files and streams decode without asking the source. MySQL's ``latin1`` is really cp1252 with the
five holes mapped straight through, so it gets its own error handler instead of Python's strict cp1252.

Three Japanese charsets have no Python codec that decodes them as the server does, so they get codecs of their own
(``mysql_sjis``, ``mysql_ujis``, ``mysql_eucjpms``, registered on import; tests/test_binlog_values.py compares them with
the server's ``CONVERT(... USING utf8mb4)`` over every valid code): MariaDB's ``sjis`` maps 0x815F to U+005C where
Python's shift_jis gives U+FF3C; ``ujis`` does the same for 0xA1C0 and maps the user-defined rows (0xF5-0xFE, in two and
three bytes) to the Private Use Area; ``eucjpms`` is cp932 (NEC row 13, the NEC-selected IBM extensions) in EUC form,
with JIS X 0212 in three bytes, the rest of the IBM extensions at 0x8FF3F3-0x8FF4FE and the same user-defined rows.
``cp932`` is Python's cp932 exactly.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer

BINARY_COLLATION = 63

# charset name → (python codec, max bytes per character)
CHARSETS: dict[str, tuple[str, int]] = {
    "armscii8": ("latin-1", 1),  # no Python codec; bytes kept 1:1
    "ascii": ("ascii", 1),
    "big5": ("big5", 2),
    "binary": ("", 1),
    "cp1250": ("cp1250", 1),
    "cp1251": ("cp1251", 1),
    "cp1256": ("cp1256", 1),
    "cp1257": ("cp1257", 1),
    "cp850": ("cp850", 1),
    "cp852": ("cp852", 1),
    "cp866": ("cp866", 1),
    "cp932": ("cp932", 2),
    "dec8": ("latin-1", 1),
    "eucjpms": ("mysql_eucjpms", 3),
    "euckr": ("euc_kr", 2),
    "gb18030": ("gb18030", 4),
    "gb2312": ("gb2312", 2),
    "gbk": ("gbk", 2),
    "geostd8": ("latin-1", 1),
    "greek": ("iso8859_7", 1),
    "hebrew": ("iso8859_8", 1),
    "hp8": ("latin-1", 1),
    "keybcs2": ("latin-1", 1),
    "koi8r": ("koi8_r", 1),
    "koi8u": ("koi8_u", 1),
    "latin1": ("cp1252", 1),
    "latin2": ("iso8859_2", 1),
    "latin5": ("iso8859_9", 1),
    "latin7": ("iso8859_13", 1),
    "macce": ("mac_latin2", 1),
    "macroman": ("mac_roman", 1),
    "sjis": ("mysql_sjis", 2),
    "swe7": ("latin-1", 1),
    "tis620": ("tis_620", 1),
    "ucs2": ("utf-16-be", 2),
    "ujis": ("mysql_ujis", 3),
    "utf16": ("utf-16-be", 4),
    "utf16le": ("utf-16-le", 4),
    "utf32": ("utf-32-be", 4),
    "utf8": ("utf-8", 3),
    "utf8mb3": ("utf-8", 3),
    "utf8mb4": ("utf-8", 4),
}

_IDS: dict[str, tuple[int, ...]] = {
    "armscii8": (32, 64, 1056, 1088),
    "ascii": (11, 65, 1035, 1089),
    "big5": (1, 84, 1025, 1108),
    "binary": (63,),
    "cp1250": (26, 34, 44, 66, 99, 1050, 1090),
    "cp1251": (14, 23, 50, 51, 52, 1074, 1075),
    "cp1256": (57, 67, 1081, 1091),
    "cp1257": (29, 58, 59, 1082, 1083),
    "cp850": (4, 80, 1028, 1104),
    "cp852": (40, 81, 1064, 1105),
    "cp866": (36, 68, 1060, 1092),
    "cp932": (95, 96, 1119, 1120),
    "dec8": (3, 69, 1027, 1093),
    "eucjpms": (97, 98, 1121, 1122),
    "euckr": (19, 85, 1043, 1109),
    "gb18030": (248, 249, 250),
    "gb2312": (24, 86, 1048, 1110),
    "gbk": (28, 87, 1052, 1111),
    "geostd8": (92, 93, 1116, 1117),
    "greek": (25, 70, 1049, 1094),
    "hebrew": (16, 71, 1040, 1095),
    "hp8": (6, 72, 1030, 1096),
    "keybcs2": (37, 73, 1061, 1097),
    "koi8r": (7, 74, 1031, 1098),
    "koi8u": (22, 75, 1046, 1099),
    "latin1": (5, 8, 15, 31, 47, 48, 49, 94, 1032, 1071),
    "latin2": (2, 9, 21, 27, 77, 1033, 1101),
    "latin5": (30, 78, 1054, 1102),
    "latin7": (20, 41, 42, 79, 1065, 1103),
    "macce": (38, 43, 1062, 1067),
    "macroman": (39, 53, 1063, 1077),
    "sjis": (13, 88, 1037, 1112),
    "swe7": (10, 82, 1034, 1106),
    "tis620": (18, 89, 1042, 1113),
    "ucs2": (35, 90, *range(128, 152), 159, 640, 641, 642, 1059, 1114, 1152, 1174),
    "ujis": (12, 91, 1036, 1115),
    "utf16": (54, 55, *range(101, 125), 672, 673, 674, 1078, 1079, 1125, 1147),
    "utf16le": (56, 62, 1080, 1086),
    "utf32": (60, 61, *range(160, 184), 736, 737, 738, 1084, 1085, 1184, 1206),
    "utf8mb3": (33, 76, 83, *range(192, 216), 223, 576, 577, 578, 1057, 1107, 1216, 1238, *range(2048, 2304)),
    "utf8mb4": (
        45,
        46,
        *range(224, 248),
        *range(255, 324),  # MySQL 8 utf8mb4_0900_* and friends
        608,
        609,
        610,
        1069,
        1070,
        1248,
        1270,
        *range(2304, 2560),  # MariaDB 11 utf8mb4_uca1400_*
    ),
}
_IDS["ucs2"] = (*_IDS["ucs2"], *range(2560, 2816))
_IDS["utf16"] = (*_IDS["utf16"], *range(2816, 3072))
_IDS["utf32"] = (*_IDS["utf32"], *range(3072, 3328))

COLLATION_CHARSET: dict[int, str] = {cid: name for name, ids in _IDS.items() for cid in ids}


def _mysql_latin1_errors(error: UnicodeError) -> tuple[str, int]:
    # MySQL's latin1 maps 0x81, 0x8D, 0x8F, 0x90, 0x9D (undefined in cp1252) to the same code points.
    assert isinstance(error, UnicodeDecodeError)
    return "".join(chr(b) for b in error.object[error.start : error.end]), error.end


codecs.register_error("mysql_latin1", _mysql_latin1_errors)


# -- the Japanese charsets as MariaDB decodes them --------------------------------------------------------------------

# One character of each charset: a lead byte with a byte that may follow it, or any single byte (ASCII, or one that is
# not a valid start, so that it is replaced alone and the next byte starts afresh, as the server's ismbchar() reads).
_SJIS_CHARACTER = re.compile(rb"[\x81-\x9f\xe0-\xfc][\x40-\x7e\x80-\xfc]|[\x00-\xff]")
_EUC_CHARACTER = re.compile(rb"\x8f[\xa1-\xfe][\xa1-\xfe]|\x8e[\xa1-\xdf]|[\xa1-\xfe][\xa1-\xfe]|[\x00-\xff]")

# eucjpms's three-byte codes 0x8FF3F3-0x8FF4FE: the IBM extensions that are in neither JIS X 0212 nor cp932's NEC
# rows, in code order (as MariaDB 10.11 converts them; code points, as CJK compatibility ideographs do not survive
# every editor's normalisation).
_EUCJPMS_IBM_CODE_POINTS = (
    "2170 2171 2172 2173 2174 2175 2176 2177 2178 2179 2160 2161 2162 2163 2164 2165 "
    "2166 2167 2168 2169 FF07 FF02 3231 2116 2121 70BB 4EFC 50F4 51EC 5307 5324 FA0E "
    "548A 5759 FA0F FA10 589E 5BEC 5CF5 5D53 FA11 5FB7 6085 6120 654E 663B 6665 FA12 "
    "F929 6801 FA13 FA14 6A6B 6AE2 6DF8 6DF2 7028 FA15 FA16 7501 7682 769E FA17 7930 "
    "FA18 FA19 FA1A FA1B 7AE7 FA1C FA1D 7DA0 7DD6 FA1E 8362 FA1F 85B0 FA20 FA21 8807 "
    "FA22 8B7F 8CF4 8D76 FA23 FA24 FA25 90DE FA26 9115 FA27 FA28 9592 F9DC FA29 973B "
    "974D 9751 FA2A FA2B FA2C 999E 9AD9 9B72 FA2D 9ED1"
)
_EUCJPMS_IBM = "".join(chr(int(code, 16)) for code in _EUCJPMS_IBM_CODE_POINTS.split(" "))


def _decoded(code: bytes, codec: str) -> str | None:
    try:
        return code.decode(codec)
    except UnicodeDecodeError:
        return None


def _user_defined(code: bytes) -> str | None:
    """ujis and eucjpms: the user-defined rows 0xF5-0xFE, two bytes from U+E000, three (after 0x8F) from U+E3AC."""
    if len(code) == 2 and 0xF5 <= code[0] <= 0xFE:
        return chr(0xE000 + (code[0] - 0xF5) * 94 + code[1] - 0xA1)
    if len(code) == 3 and 0xF5 <= code[1] <= 0xFE:
        return chr(0xE3AC + (code[1] - 0xF5) * 94 + code[2] - 0xA1)
    return None


def _sjis(code: bytes) -> str | None:
    return "\\" if code == b"\x81\x5f" else _decoded(code, "shift_jis")


def _ujis(code: bytes) -> str | None:
    if code == b"\xa1\xc0":
        return "\\"
    return _user_defined(code) or _decoded(code, "euc_jp")


def _euc_as_cp932(code: bytes) -> bytes:
    """A two-byte EUC code (JIS row and cell + 0x80) as the Shift_JIS code of the same row and cell."""
    row, cell = code[0] - 0x80, code[1] - 0x80
    lead = (row + 1) // 2 + (0x70 if row <= 0x5E else 0xB0)
    # Odd rows take the trail bytes 0x40-0x9E (skipping 0x7F), even rows 0x9F-0xFC.
    trail = cell + (0x1F if cell < 0x60 else 0x20) if row % 2 else cell + 0x7E
    return bytes((lead, trail))


def _eucjpms(code: bytes) -> str | None:
    user = _user_defined(code)
    if user is not None:
        return user
    if len(code) == 2 and code[0] != 0x8E:
        return _decoded(_euc_as_cp932(code), "cp932")
    if len(code) == 3:
        cell = (code[1] - 0xF3) * 94 + code[2] - 0xF3
        if 0 <= cell < len(_EUCJPMS_IBM) and (code[1], code[2]) >= (0xF3, 0xF3):
            return _EUCJPMS_IBM[cell]
        if code == b"\x8f\xa2\xb7":
            return "\uff5e"
        if code == b"\x8f\xa2\xc3":
            return "\uffe4"
    return _decoded(code, "euc_jp")


def _escaped(code: bytes) -> str:
    """An undecodable character as Python's surrogateescape keeps it: bytes from 0x80 as lone surrogates."""
    return "".join(chr(0xDC00 + b) if b >= 0x80 else chr(b) for b in code)


def _sjis_codes() -> Iterator[bytes]:
    leads = (*range(0x81, 0xA0), *range(0xE0, 0xFD))
    trails = (*range(0x40, 0x7F), *range(0x80, 0xFD))
    yield from (bytes((lead, trail)) for lead in leads for trail in trails)


def _euc_codes() -> Iterator[bytes]:
    high = range(0xA1, 0xFF)
    yield from (bytes((0x8E, kana)) for kana in range(0xA1, 0xE0))
    yield from (bytes((lead, trail)) for lead in high for trail in high)
    yield from (bytes((0x8F, lead, trail)) for lead in high for trail in high)


class _TableCodec:
    """A decoder over a table of every character of a charset (made on first use), for charsets whose server mapping
    no Python codec has. Errors are handled as Python's: strict raises, surrogateescape keeps the bytes as lone
    surrogates, anything else puts U+FFFD for each undecodable character."""

    def __init__(
        self,
        name: str,
        character: re.Pattern[bytes],
        codes: Callable[[], Iterator[bytes]],
        mapping: Callable[[bytes], str | None],
    ) -> None:
        self.name = name
        self.character = character
        self.codes = codes
        self.mapping = mapping
        self._table: dict[bytes, str] | None = None

    def table(self) -> dict[bytes, str]:
        if self._table is None:
            table = {bytes((b,)): chr(b) for b in range(0x80)}
            for code in (*(bytes((b,)) for b in range(0x80, 0x100)), *self.codes()):
                text = self.mapping(code)
                if text is not None:
                    table[code] = text
            self._table = table
        return self._table

    def decode(self, data: Buffer, errors: str = "strict", /) -> tuple[str, int]:
        raw = bytes(data)  # PyUnicode_Decode (the compiled row decoder) hands a memoryview
        if raw.isascii():
            return raw.decode("ascii"), len(raw)
        table = self.table()
        out: list[str] = []
        at = 0
        for code in self.character.findall(raw):
            text = table.get(code)
            if text is None:
                if errors == "strict":
                    raise UnicodeDecodeError(self.name, raw, at, at + len(code), "not a character of the charset")
                text = _escaped(code) if errors == "surrogateescape" else "\ufffd"
            out.append(text)
            at += len(code)
        return "".join(out), len(raw)


_TABLE_CODECS = {
    codec.name: codec
    for codec in (
        _TableCodec("mysql_sjis", _SJIS_CHARACTER, _sjis_codes, _sjis),
        _TableCodec("mysql_ujis", _EUC_CHARACTER, _euc_codes, _ujis),
        _TableCodec("mysql_eucjpms", _EUC_CHARACTER, _euc_codes, _eucjpms),
    )
}
_ENCODERS = {"mysql_sjis": "shift_jis", "mysql_ujis": "euc_jp", "mysql_eucjpms": "euc_jp"}


def _search(name: str) -> codecs.CodecInfo | None:
    codec = _TABLE_CODECS.get(name)
    if codec is None:
        return None
    # Encoding is never the relay's business; the nearest Python codec serves anyone who asks.
    return codecs.CodecInfo(codecs.lookup(_ENCODERS[name]).encode, codec.decode, name=name)


codecs.register(_search)


def codec_for_charset(charset: str | None) -> tuple[str, str]:
    """(codec, errors) for a charset name; ("", "") means binary (keep bytes)."""
    if charset is None or charset == "binary":
        return "", ""
    codec = CHARSETS.get(charset.lower(), ("utf-8", 4))[0]
    if codec == "cp1252":
        return codec, "mysql_latin1"
    return codec, "replace"


# Charsets whose codec above is a stand-in (bytes kept 1:1): right for ASCII only.
_STAND_INS = frozenset({"armscii8", "dec8", "geostd8", "hp8", "keybcs2", "swe7"})
# Charsets that are not supersets of ASCII (the server refuses them as a client charset anyway).
_NOT_ASCII_BASED = frozenset({"ucs2", "utf16", "utf16le", "utf32", "binary"})


def statement_codec(collation_id: int | None) -> tuple[str, str]:
    """(codec, errors) that decode a statement sent in the charset of ``collation_id`` (a QUERY event's
    character_set_client) exactly, keeping what they cannot decode as lone surrogates; ASCII, with every other byte
    kept so, when the id is unknown or its charset has no exact codec here."""
    charset = COLLATION_CHARSET.get(collation_id) if collation_id is not None else None
    if charset is None or charset in _STAND_INS or charset in _NOT_ASCII_BASED:
        return "ascii", "surrogateescape"
    codec = CHARSETS[charset][0]
    if codec == "cp1252":
        return codec, "mysql_latin1"  # every byte is a character: nothing is left undecoded
    return codec, "surrogateescape"


def charset_of_collation(collation_id: int) -> str:
    """The charset of a collation id; unknown ids are taken as utf8mb4 (the modern default)."""
    return COLLATION_CHARSET.get(collation_id, "utf8mb4")


def max_bytes_per_char(charset: str | None) -> int:
    if not charset:
        return 1
    return CHARSETS.get(charset.lower(), ("", 1))[1]
