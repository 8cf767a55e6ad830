"""Collation ids (as TABLE_MAP metadata and information_schema give them) → Python codecs.

The id table is MariaDB's ``information_schema.COLLATIONS`` plus MySQL 8's utf8mb4_0900 range and MariaDB 11's
UCA-14.0 ranges, so files and streams decode without asking the source. MySQL's ``latin1`` is really cp1252 with the
five holes mapped straight through, so it gets its own error handler instead of Python's strict cp1252.
"""

from __future__ import annotations

import codecs

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
    "eucjpms": ("euc_jp", 3),
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
    "sjis": ("shift_jis", 2),
    "swe7": ("latin-1", 1),
    "tis620": ("tis_620", 1),
    "ucs2": ("utf-16-be", 2),
    "ujis": ("euc_jp", 3),
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


def codec_for_charset(charset: str | None) -> tuple[str, str]:
    """(codec, errors) for a charset name; ("", "") means binary (keep bytes)."""
    if charset is None or charset == "binary":
        return "", ""
    codec = CHARSETS.get(charset.lower(), ("utf-8", 4))[0]
    if codec == "cp1252":
        return codec, "mysql_latin1"
    return codec, "replace"


def charset_of_collation(collation_id: int) -> str:
    """The charset of a collation id; unknown ids are taken as utf8mb4 (the modern default)."""
    return COLLATION_CHARSET.get(collation_id, "utf8mb4")


def max_bytes_per_char(charset: str | None) -> int:
    if not charset:
        return 1
    return CHARSETS.get(charset.lower(), ("", 1))[1]
