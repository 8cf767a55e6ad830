"""The original relay's configuration file, read as Free Pascal's TIniFile (fcl-base ``inifiles.pp``) reads it.

The original's clients and operators keep their ``replicaterelay.conf``, so a file must mean here what it meant to
the original, line by line:

* lines end at CR, LF or CRLF (no other character); each is trimmed of characters up to the space, and only those
  (a no-break space is kept); a UTF-8 byte order mark before the first is dropped;
* ``[Name]`` starts a section, named by all that is between the brackets (``[ Server ]`` is another section than
  ``[Server]``); names and keys compare case-insensitively;
* ``key=value`` splits at the first ``=``, and both sides are trimmed; everything after it is the value, a
  ``// note`` included (the original has no inline comments);
* a value enclosed in a pair of the same quote (``"..."`` or ``'...'``) loses that pair, as TIniFile's
  ``StripQuotes`` does;
* a line starting with ``;`` is a comment (``#`` too: TIniFile keeps such a line as a key no one can ask for);
* the first occurrence wins: a key given twice in a section keeps its first value, and a section given twice keeps
  its first block (TIniFile looks names up from the top and stops at the first);
* a line without ``=``, or a key before any section, is ignored.

Python's configparser differs on each of the last three (continuation lines, ``:`` as a separator, the last
occurrence winning, a line without ``=`` refused) and on the byte order mark, so it is not used. What the original
ignored silently is kept as :attr:`IniFile.notes`, one line each, for the relay to say at start-up.

This module imports nothing from Django.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_BOM = "\ufeff"
_QUOTES = ("'", '"')
_LINE_BREAK = re.compile("\r\n|\r|\n")


class IniError(ValueError):
    """The file cannot be read at all (missing, unreadable, a directory)."""


def trim(text: str) -> str:
    """Pascal's Trim: strips characters up to the space (control characters included), and nothing else."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _unquoted(value: str) -> str:
    if len(value) > 1 and value[0] in _QUOTES and value[-1] == value[0]:
        return value[1:-1]
    return value


@dataclass
class IniFile:
    """Sections by lower-cased name, each a map of lower-cased key to value (its first occurrence)."""

    path: Path | None = None
    sections: dict[str, dict[str, str]] = field(default_factory=dict)
    # Where each kept key was given: (section, key) -> (line number, the key as written), for messages.
    lines: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    section_names: dict[str, str] = field(default_factory=dict)  # lower-cased -> as written first
    notes: list[str] = field(default_factory=list)

    def get(self, section: str, key: str) -> str | None:
        return self.sections.get(section.lower(), {}).get(key.lower())

    def given(self) -> list[tuple[str, str]]:
        """Every (section, key) given, lower-cased, in the file's order."""
        return list(self.lines)


def parse_ini(text: str, path: Path | None = None) -> IniFile:
    ini = IniFile(path)
    where = f"{path}" if path else "the configuration"
    if text.startswith(_BOM):
        text = text[len(_BOM) :]
    section: str | None = None
    ignoring = False  # inside a second block of a section the file had already
    for number, raw in enumerate(_LINE_BREAK.split(text), start=1):
        line = trim(raw)
        if not line or line[0] in ";#":
            continue
        if line[0] == "[" and line[-1] == "]" and len(line) > 1:
            written = line[1:-1]
            section = written.lower()
            ignoring = section in ini.sections
            if ignoring:
                first = ini.section_names[section]
                ini.notes.append(
                    f"{where} line {number}: [{written}] again: its keys are ignored, as the original ignored them "
                    f"(it reads the first [{first}] only); merge the two blocks"
                )
            else:
                ini.sections[section] = {}
                ini.section_names[section] = written
            continue
        key, equals, value = line.partition("=")
        key = trim(key)
        if not equals or not key:
            ini.notes.append(f"{where} line {number}: {'no key' if equals else 'no ='} on this line: ignored")
            continue
        if section is None:
            ini.notes.append(f"{where} line {number}: {key} is before any [section]: ignored")
            continue
        if ignoring:
            continue
        values = ini.sections[section]
        lowered = key.lower()
        if lowered in values:
            first_line, _ = ini.lines[(section, lowered)]
            ini.notes.append(
                f"{where} line {number}: [{ini.section_names[section]}] {key} again: the value of line {first_line} "
                "is used, as the original used it"
            )
            continue
        values[lowered] = _unquoted(trim(value))
        ini.lines[(section, lowered)] = (number, key)
    return ini


def read_ini(path: Path) -> IniFile:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IniError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise IniError(f"config file {path}: cannot be read: {exc.strerror or exc}") from None
    # Not UTF-8 (a latin1 secret, say): the bytes are kept as they are, so a secret still hashes to the same key.
    return parse_ini(data.decode("utf-8", errors="surrogateescape"), path)
