"""Renderers of binlog column values into MySQL's text forms.

The row decoders (``binlog.rowdecoder``) inline the simple cases (integers, strings) and call these for the rest.
Every function takes the raw value (an int, or the bytes of the value) and returns the text ``SELECT`` would show.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

ZERO_DATE = "0000-00-00"
_unpack_f = struct.Struct("<f").unpack
_unpack_d = struct.Struct("<d").unpack
_pack_f = struct.Struct("<f").pack

# Bytes of a decimal digit group of 0..9 digits (MySQL's dig2bytes).
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _format_digits(negative: bool, digits: str, decpt: int) -> str:
    """MariaDB's my_gcvt() layout for shortest digits: fixed notation for exponents -15..14, else d.ddde±x."""
    exponent = decpt - 1
    sign = "-" if negative else ""
    if exponent < -15 or exponent >= 15:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{exponent}"
    if decpt <= 0:
        return f"{sign}0.{'0' * -decpt}{digits}"
    if decpt >= len(digits):
        return sign + digits + "0" * (decpt - len(digits))
    return f"{sign}{digits[:decpt]}.{digits[decpt:]}"


def _digits_of(text: str) -> tuple[bool, str, int]:
    """(negative, significant digits, decimal point position) of a float's repr-style text."""
    negative = text.startswith("-")
    if negative:
        text = text[1:]
    mantissa, _, exp = text.partition("e")
    exponent = int(exp) if exp else 0
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    leading_zeros = len(whole + frac) - len((whole + frac).lstrip("0"))
    decpt = len(whole) + exponent - leading_zeros
    digits = digits.rstrip("0")
    return negative, digits, decpt


def double_text(raw: bytes) -> str:
    """DOUBLE (its 8 stored bytes) as the shortest text that reads back to the same double, in MariaDB's notation."""
    value = _unpack_d(raw)[0]
    text = repr(value)
    if "e" not in text and -1e15 < value < 1e15:
        # repr already has the shortest digits in fixed notation (it uses it for 1e-4 <= |x| < 1e16).
        return text[:-2] if text.endswith(".0") else text
    if "n" in text:
        return text  # inf, nan: MySQL never stores them
    negative, digits, decpt = _digits_of(text)
    return _format_digits(negative, digits, decpt)


_LONGER_FLOAT_PATTERNS = ("%.7g", "%.8g", "%.9g")


def float_text(raw: bytes) -> str:
    """FLOAT (its 4 stored bytes) as the shortest text that reads back to the same single.

    Fewer than 7 digits never pin a single down ambiguously, so if 6 significant digits read back, ``%g`` (which drops
    trailing zeros) already gives the shortest text; otherwise 7, 8 or 9 digits do. ``%g`` uses fixed notation for
    exponents -4..precision-1, inside MariaDB's fixed range, so only its exponent form needs reformatting.
    """
    value = _unpack_f(raw)[0]
    if value == 0.0:
        return "0"
    text = "%.6g" % value  # noqa: UP031 - the fastest way to format a float
    if _pack_f(float(text)) != raw:
        for pattern in _LONGER_FLOAT_PATTERNS:
            text = pattern % value
            if _pack_f(float(text)) == raw:
                break
    if "e" not in text:
        return text  # also "inf" and "nan", which MySQL never stores
    negative, digits, decpt = _digits_of(text)
    return _format_digits(negative, digits, decpt)


# -- DECIMAL ----------------------------------------------------------------------------------------------------------


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + DIG2BYTES[intg % 9] + (scale // 9) * 4 + DIG2BYTES[scale % 9]


# -- dates and times --------------------------------------------------------------------------------------------------


_Key = TypeVar("_Key")


class Memo(dict[_Key, str]):
    """A dict that fills itself from a function: ``memo[key]`` costs one lookup once the key was seen.

    Dates, times of day and ENUM/SET texts repeat a lot across rows; rendering each once saves most of their cost.
    The memo forgets everything when it grows past ``limit`` entries, so odd data cannot make it grow forever.
    """

    __slots__ = ("function", "limit")

    def __init__(self, function: Callable[[_Key], str], limit: int = 200_000) -> None:
        super().__init__()
        self.function = function
        self.limit = limit

    def __missing__(self, key: _Key) -> str:
        if len(self) >= self.limit:
            self.clear()
        value = self[key] = self.function(key)
        return value


def fraction_text(usec: int, fsp: int) -> str:
    return "." + f"{usec:06d}"[:fsp] if fsp else ""


@functools.lru_cache(maxsize=8192)
def date_of_unix_day(day: int) -> str:
    """'YYYY-MM-DD' of a day number since 1970-01-01 (proleptic Gregorian, UTC)."""
    # Howard Hinnant's days-to-civil algorithm: exact for every day a TIMESTAMP can hold.
    z = day + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return f"{y + (m <= 2):04d}-{m:02d}-{d:02d}"


def timestamp_text(seconds: int, usec: int, fsp: int) -> str:
    """TIMESTAMP (seconds since the epoch, shown in UTC); 0 is the zero timestamp."""
    if seconds == 0 and usec == 0:
        return "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
    day, rem = divmod(seconds, 86400)
    hour, rem = divmod(rem, 3600)
    text = f"{date_of_unix_day(day)} {hour:02d}:{rem // 60:02d}:{rem % 60:02d}"
    return text + fraction_text(usec, fsp) if fsp else text


def datetime2_text(packed: int, usec: int, fsp: int) -> str:
    """DATETIME2: the 40-bit integer part (sign bit already removed) and microseconds."""
    ymd = packed >> 17
    ym = ymd >> 5
    hms = packed & 0x1FFFF
    text = f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 31:02d} {hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
    return text + fraction_text(usec, fsp) if fsp else text


def datetime_old_text(value: int) -> str:
    """Pre-5.6 DATETIME: the decimal number YYYYMMDDhhmmss in 8 bytes."""
    date, time = divmod(value, 1000000)
    year, month, day = date // 10000, date // 100 % 100, date % 100
    return f"{year:04d}-{month:02d}-{day:02d} {time // 10000:02d}:{time // 100 % 100:02d}:{time % 100:02d}"


def date_text(value: int) -> str:
    """DATE: 3 bytes little-endian, day in bits 0-4, month in 5-8, year above."""
    return f"{value >> 9:04d}-{(value >> 5) & 15:02d}-{value & 31:02d}"


def time_old_text(value: int) -> str:
    """Pre-5.6 TIME: the signed decimal number (h)hhmmss in 3 bytes."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    return f"{sign}{value // 10000:02d}:{value // 100 % 100:02d}:{value % 100:02d}"


def time2_text(buf: bytes, pos: int, fsp: int) -> str:
    """TIME2 (MySQL 5.6+): 3 bytes of hours/minutes/seconds and 0-3 bytes of fraction, offset-binary, big-endian."""
    if fsp >= 5:
        packed = int.from_bytes(buf[pos : pos + 6], "big") - 0x800000000000
    else:
        intpart = int.from_bytes(buf[pos : pos + 3], "big") - 0x800000
        if fsp == 0:
            packed = intpart << 24
        elif fsp <= 2:
            frac = buf[pos + 3]
            if frac >= 0x80:
                frac -= 0x100
            if intpart < 0 and frac:
                intpart += 1
            packed = (intpart << 24) + frac * 10000
        else:
            frac = int.from_bytes(buf[pos + 3 : pos + 5], "big", signed=True)
            if intpart < 0 and frac:
                intpart += 1
            packed = (intpart << 24) + frac * 100
    sign = ""
    if packed < 0:
        sign, packed = "-", -packed
    hms = packed >> 24
    usec = packed & 0xFFFFFF
    text = f"{sign}{(hms >> 12) & 0x3FF:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
    return text + fraction_text(usec, fsp) if fsp else text


def time2_size(fsp: int) -> int:
    return 3 + (fsp + 1) // 2


def frac_usec(buf: bytes, pos: int, fsp: int) -> int:
    """Microseconds of the fractional part (DATETIME2/TIMESTAMP2) stored in (fsp+1)//2 big-endian bytes."""
    if fsp <= 2:
        return buf[pos] * 10000
    if fsp <= 4:
        return int.from_bytes(buf[pos : pos + 2], "big") * 100
    return int.from_bytes(buf[pos : pos + 3], "big")


# -- ENUM / SET / BIT -------------------------------------------------------------------------------------------------


def enum_text(index: int, labels: tuple[str, ...]) -> str:
    if 0 < index <= len(labels):
        return labels[index - 1]
    return "" if index == 0 or labels else str(index)


def set_text(bits: int, labels: tuple[str, ...]) -> str:
    if not labels:
        return str(bits)
    return ",".join(label for i, label in enumerate(labels) if bits >> i & 1)


def text_or_bytes(data: bytes) -> str | bytes:
    """A string column whose charset is unknown (no metadata, no schema): UTF-8 text if it is valid UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _ymd_text(ymd: int) -> str:
    """DATETIME2's date part, (year * 13 + month) << 5 | day, as 'YYYY-MM-DD '."""
    ym = ymd >> 5
    return f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 31:02d} "


def whole_time2_text(value: int) -> str:
    """TIME2 without fraction: the 3-byte value with its offset removed (negative for negative times): "hh:mm:ss"
    (more hours than 24 print as they are), "" for a time of day whose minute or second is out of range (as
    ``DATETIME2_TIME`` has it). Not memoised: longer or negative durations seldom repeat."""
    if value >= 0:
        if value < 24 << 12 and (value & 63 >= 60 or value >> 6 & 63 >= 60):
            return ""
        return "%02d:%s" % (value >> 12 & 0x3FF, MINUTES_SECONDS[value & 0xFFF])  # noqa: UP031 - the fastest
    value = -value
    return "-%02d:%s" % (value >> 12 & 0x3FF, MINUTES_SECONDS[value & 0xFFF])  # noqa: UP031


class Table(dict[int, str]):
    """Texts by a small integer, built whole on first use: ``table[i]`` costs one lookup, and a process that never
    reads the table (``python -m binlog dump``, whose text decoders have clock tables of their own, or a binlog
    without such columns) never pays for building it (tens of milliseconds for the time-of-day tables).

    The row decoders take the table object when they are generated, so it has to exist from the start; a dict that
    fills itself on its first miss reads nearly as fast as a tuple. An index out of range raises IndexError, as a
    tuple's would.
    """

    __slots__ = ("build",)

    def __init__(self, build: Callable[[], Iterable[str]]) -> None:
        super().__init__()
        self.build = build

    def __missing__(self, key: int) -> str:
        if not self:
            self.update(enumerate(self.build()))
            if key in self:
                return self[key]
        raise IndexError(key)


# Two digits by number, 0..63: the fields of clock texts (out-of-range minutes and seconds print as they are).
_TWO_DIGITS = tuple(f"{i:02d}" for i in range(64))
# "mm:ss" by minute << 6 | second, the low 12 bits of a TIME2 value.
MINUTES_SECONDS = tuple([minute + ":" + second for minute in _TWO_DIGITS for second in _TWO_DIGITS])
# "hh:mm:" by hour << 6 | minute, the high bits of a DATETIME2 time of day.
_HOURS_MINUTES = tuple([hour + ":" + minute + ":" for hour in _TWO_DIGITS[:24] for minute in _TWO_DIGITS])
DATE_TEXT: Memo[bytes] = Memo(lambda raw: date_text(raw[0] | raw[1] << 8 | raw[2] << 16))  # by the 3 stored bytes
DATETIME2_DATE = Memo(_ymd_text)

DAY_TEXT: Memo[int] = Memo(lambda day: date_of_unix_day(day) + " ")


def _seconds_of_day() -> list[str]:
    """Every "hh:mm:ss" of a day, by second of the day (joined from the clock fields: formatting each of them would
    take ten times as long)."""
    seconds = _TWO_DIGITS[:60]
    return [start + second for index, start in enumerate(_HOURS_MINUTES) if index & 63 < 60 for second in seconds]


def _datetime2_times() -> list[str]:
    """hour << 12 | minute << 6 | second → "hh:mm:ss", "" where the minute or the second is 60 or more."""
    seconds, holes = _TWO_DIGITS[:60], [""] * 4
    texts: list[str] = []
    for index, start in enumerate(_HOURS_MINUTES):
        if index & 63 < 60:
            texts += [start + second for second in seconds]
            texts += holes
        else:
            texts += [""] * 64
    return texts


# Every time of day, by second of the day: TIMESTAMP values rarely repeat to the second, so a memo would miss.
SECONDS_OF_DAY = Table(_seconds_of_day)
# The same texts by DATETIME2's and TIME2's hour << 12 | minute << 6 | second, "" in the holes.
DATETIME2_TIME = Table(_datetime2_times)


# ".d", ".dd", ".ddd" by microseconds // 10 ** (6 - fsp): at most 1,000 texts each.
_SHORT_FRACTIONS = {fsp: tuple("." + f"{i:0{fsp}d}" for i in range(10**fsp)) for fsp in (1, 2, 3)}


def _datetime2_from_bytes(raw: bytes, fsp: int) -> str:
    """A whole DATETIME2 from its stored bytes, from the date memo and the clock tables (each value that misses
    ``DATETIME2_BYTES`` goes through here, and with fractions most values miss)."""
    packed = int.from_bytes(raw[:5], "big") - 0x8000000000
    hms = packed & 0x1FFFF
    usec = frac_usec(raw, 5, fsp) if fsp else 0
    if packed < 0 or hms >= 24 << 12 or hms & 63 >= 60 or hms >> 6 & 63 >= 60:
        return datetime2_text(packed, usec, fsp)  # fields out of range (never written by a server): as they are
    text = DATETIME2_DATE[packed >> 17] + _HOURS_MINUTES[hms >> 6] + _TWO_DIGITS[hms & 63]
    if not fsp:
        return text
    if fsp <= 3:
        unit: int = 10 ** (6 - fsp)  # typed, as int ** int is Any to a type checker (a negative power is a float)
        return text + _SHORT_FRACTIONS[fsp][usec // unit]
    return text + fraction_text(usec, fsp)


# Whole DATETIME2 values by their stored bytes (one memo per precision: equal lengths, different layouts).
DATETIME2_BYTES: dict[int, Memo[bytes]] = {
    fsp: Memo(functools.partial(_datetime2_from_bytes, fsp=fsp)) for fsp in range(7)
}


_SHARED_MEMOS: tuple[Memo[Any], ...] = (
    DATE_TEXT,
    DATETIME2_DATE,
    DAY_TEXT,
    *DATETIME2_BYTES.values(),
)


def clear_memos() -> None:
    """Forget every value rendered so far, as in a new process (a benchmark's runs each start with it)."""
    for memo in _SHARED_MEMOS:
        memo.clear()
    date_of_unix_day.cache_clear()


def timestamp_fast(seconds: int) -> str:
    """TIMESTAMP without fraction (the common case), through the day and time-of-day memos."""
    if not seconds:
        return "0000-00-00 00:00:00"
    day, rem = divmod(seconds, 86400)
    return DAY_TEXT[day] + SECONDS_OF_DAY[rem]


def enum_table(labels: tuple[str, ...]) -> tuple[str, ...]:
    """Texts of a 1-byte ENUM by raw index byte."""
    return tuple(enum_text(i, labels) for i in range(256))


def set_memo(labels: tuple[str, ...]) -> Memo[int]:
    return Memo(lambda bits: set_text(bits, labels), 65536)


SIGNED_BYTE = tuple(str(i - 256 if i > 127 else i) for i in range(256))
UNSIGNED_BYTE = tuple(str(i) for i in range(256))
YEAR_TEXT = tuple("0000" if i == 0 else str(1900 + i) for i in range(256))


# -- MariaDB's pre-10.3 "hires" temporal formats ----------------------------------------------------------------------
# Tables created with mysql56_temporal_format=OFF keep DATETIME/TIMESTAMP/TIME with fractional seconds in MariaDB's
# own layouts. The TABLE_MAP gives no precision for them (it comes from information_schema), only the old type codes.

DATETIME_HIRES_BYTES = (8, 6, 6, 7, 7, 7, 8)  # index 0 unused: DATETIME(0) is the old 8-byte decimal form
TIME_HIRES_BYTES = (3, 4, 4, 5, 5, 5, 6)
SEC_PART_BYTES = (0, 1, 1, 2, 2, 3, 3)
_SHIFT = (1000000, 100000, 10000, 1000, 100, 10, 1)


def datetime_hires_text(buf: bytes, pos: int, fsp: int) -> str:
    """Big-endian ((((year*13+month)*32+day)*24+hour)*60+minute)*60+second)*10^6+usec, divided by 10^(6-fsp)."""
    packed = int.from_bytes(buf[pos : pos + DATETIME_HIRES_BYTES[fsp]], "big") * _SHIFT[fsp]
    t, usec = divmod(packed, 1000000)
    t, second = divmod(t, 60)
    t, minute = divmod(t, 60)
    t, hour = divmod(t, 24)
    t, day = divmod(t, 32)
    year, month = divmod(t, 13)
    text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
    return text + fraction_text(usec, fsp)


def time_hires_text(buf: bytes, pos: int, fsp: int) -> str:
    """Big-endian ((hour*60+minute)*60+second)*10^6+usec divided by 10^(6-fsp), offset by the (shifted) zero point
    of 839 hours so that negative times sort first."""
    size = TIME_HIRES_BYTES[fsp]
    zero = (839 * 3600 * 1000000) // _SHIFT[fsp]
    packed = (int.from_bytes(buf[pos : pos + size], "big") - zero) * _SHIFT[fsp]
    sign = ""
    if packed < 0:
        sign, packed = "-", -packed
    t, usec = divmod(packed, 1000000)
    t, second = divmod(t, 60)
    hour, minute = divmod(t, 60)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}" + fraction_text(usec, fsp)


def timestamp_hires_text(buf: bytes, pos: int, fsp: int) -> str:
    """4 big-endian bytes of seconds, then the fraction (scaled to fsp digits) in SEC_PART_BYTES[fsp] bytes."""
    seconds = int.from_bytes(buf[pos : pos + 4], "big")
    fraction = int.from_bytes(buf[pos + 4 : pos + 4 + SEC_PART_BYTES[fsp]], "big") * _SHIFT[fsp]
    return timestamp_text(seconds, fraction, fsp)
