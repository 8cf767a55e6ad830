"""DDL statements of the binlog applied to a ``SchemaModel``.

Only what changes a table's columns, their order, types, charsets, labels or its primary key matters here: CREATE
TABLE (columns, LIKE; ... SELECT only where the statement lists every column, as row-based binlogs write it), ALTER
TABLE (ADD/DROP/MODIFY/CHANGE/RENAME COLUMN with FIRST/AFTER, ADD/DROP PRIMARY KEY, CONVERT TO CHARACTER SET, default
charset, RENAME TO; several clauses at once; other clauses such as ALGORITHM, LOCK, indexes are passed over),
RENAME TABLE (IF EXISTS too), DROP TABLE, CREATE/ALTER/DROP DATABASE. Temporary tables, views and everything else
change nothing.

The parser is our own, small and tested against MariaDB (tests/test_binlog_ddl.py). sqlglot's MySQL dialect was
measured first; it drops the text of executable comments (``/*! ... */``), falls back to an opaque command for
RENAME TABLE, ALTER ... CONVERT TO CHARACTER SET and ADD COLUMN (a, b), cannot read POINT/POLYGON/INET6/NATIONAL
CHAR/LONG VARCHAR, and reads MariaDB's INT8, REAL and LONG as TINYINT, FLOAT and BIGINT: silently wrong types are
worse than an error for a model that decides column names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from binlog.charsets import max_bytes_per_char
from binlog.schema import long_unique_hash_columns
from binlog.schemamodel import (
    GEOMETRY_TYPES,
    SYSTEM_TIME,
    Column,
    SchemaModel,
    TableDef,
    fold_name,
    hidden,
    may_fold_alike,
)
from binlog.table import STRING_ESCAPES


class DdlError(Exception):
    """A statement the parser cannot read, or one that does not fit the model (an unknown table, say)."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "word" (unquoted), "name" (backquoted), "str", "num", "op"
    text: str

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


def _executable_comment(sql: str, i: int) -> int | None:
    """Where the content of a ``/*!NNNNN`` or ``/*M!NNNNNN`` comment starting at ``i`` begins (None if not one)."""
    if sql.startswith("/*!", i):
        j = i + 3
    elif sql.startswith("/*M!", i):
        j = i + 4
    else:
        return None
    while j < len(sql) and sql[j].isdigit():
        j += 1
    return j


#: The sql_mode bits that change how a statement's text reads (QUERY events carry the session's sql_mode).
MODE_ANSI_QUOTES = 0x4  # "..." quotes a name, not a string (also set by the ANSI and ORACLE modes)
MODE_NO_BACKSLASH_ESCAPES = 0x100000  # a backslash in a string is itself


def tokenize(sql: str, sql_mode: int = 0) -> list[Token]:
    """Tokens of a statement, read as the server read it under ``sql_mode``. Comments are dropped, except executable
    ones, whose text the server runs."""
    backslash = not sql_mode & MODE_NO_BACKSLASH_ESCAPES
    name_quotes = '`"' if sql_mode & MODE_ANSI_QUOTES else "`"
    tokens: list[Token] = []
    i, n = 0, len(sql)
    open_exec = 0  # executable comments we are inside: their closing */ is dropped
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
        elif sql.startswith("/*", i):
            start = _executable_comment(sql, i)
            if start is not None:
                open_exec += 1
                i = start
            else:
                end = sql.find("*/", i + 2)
                i = n if end < 0 else end + 2
        elif sql.startswith("*/", i) and open_exec:
            open_exec -= 1
            i += 2
        elif ch == "#" or (sql.startswith("--", i) and (i + 2 >= n or sql[i + 2].isspace())):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif ch in name_quotes:
            text, i = _quoted(sql, i, ch, backslash=False)
            tokens.append(Token("name", text))
        elif ch in "'\"":
            text, i = _quoted(sql, i, ch, backslash=backslash)
            tokens.append(Token("str", text))
        elif ch.isdigit():
            j = i
            while j < n and sql[j].isdigit():
                j += 1
            # As the server reads them: digits and a "." begin a number (1.5, 1.5e3); digits and a letter begin a
            # name, which a "." ends (1db.t is the table t of the database 1db).
            number = j < n and sql[j] == "."
            while j < n and (sql[j].isalnum() or sql[j] in "_$" or (sql[j] == "." if number else ord(sql[j]) > 127)):
                j += 1
            text = sql[i:j]
            tokens.append(Token("num" if text.replace(".", "").isdigit() else "word", text))
            i = j
        elif ch.isalpha() or ch in "_$" or ord(ch) > 127:
            j = i
            while j < n and (sql[j].isalnum() or sql[j] in "_$" or ord(sql[j]) > 127):
                j += 1
            word = sql[i:j]
            if j < n and sql[j] == "'" and word.startswith("_"):  # a charset introducer: _utf8mb4'text'
                i = j
                continue
            tokens.append(Token("word", word))
            i = j
        else:
            tokens.append(Token("op", ch))
            i += 1
    return tokens


def statement_start(tokens: list[Token]) -> int:
    """Where the statement proper begins: past MariaDB's ``SET STATEMENT var = value [, ...] FOR`` prefix, which
    runs the statement with those variables set for it alone (the binlog keeps the prefix); 0 without one."""
    if len(tokens) > 2 and tokens[0].is_word("SET") and tokens[1].is_word("STATEMENT"):
        depth = 0
        for i in range(2, len(tokens)):
            token = tokens[i]
            if token.kind == "op" and token.text in "()":
                depth += 1 if token.text == "(" else -1
            elif depth == 0 and token.is_word("FOR"):
                return i + 1
    return 0


def reading_modes(sql: str, sql_mode: int) -> list[int]:
    """The sql_modes the server may have read a statement under: the event's own, but for a statement behind ``SET
    STATEMENT sql_mode = ... FOR``. The server reads that one under the session's sql_mode, which the event does not
    carry (it carries the one the prefix sets, in force while the statement ran): any of the bits that change how
    a text reads may then have been either way."""
    try:
        tokens = tokenize(sql, sql_mode)
    except DdlError:
        return [sql_mode]
    start = statement_start(tokens)
    if not any(token.kind == "word" and token.text.lower() == "sql_mode" for token in tokens[:start]):
        return [sql_mode]
    reading = MODE_ANSI_QUOTES | MODE_NO_BACKSLASH_ESCAPES
    others = [bits for bits in (0, MODE_ANSI_QUOTES, MODE_NO_BACKSLASH_ESCAPES, reading) if bits != sql_mode & reading]
    return [sql_mode] + [sql_mode & ~reading | bits for bits in others]


def _quoted(sql: str, i: int, quote: str, *, backslash: bool) -> tuple[str, int]:
    out: list[str] = []
    j = i + 1
    while j < len(sql):
        ch = sql[j]
        if ch == quote:
            if j + 1 < len(sql) and sql[j + 1] == quote:
                out.append(quote)
                j += 2
                continue
            return "".join(out), j + 1
        if backslash and ch == "\\" and j + 1 < len(sql):
            out.append(STRING_ESCAPES.get(sql[j + 1], sql[j + 1]))
            j += 2
            continue
        out.append(ch)
        j += 1
    raise DdlError("unterminated quoted text")


# -- column types --------------------------------------------------------------------------------------------------

_INT_WIDTHS = {
    "tinyint": (4, 3),
    "smallint": (6, 5),
    "mediumint": (9, 8),
    "int": (11, 10),
    "bigint": (20, 20),
}
_TYPE_ALIASES = {
    "integer": "int",
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "middleint": "mediumint",
    "int4": "int",
    "int8": "bigint",
    "dec": "decimal",
    "numeric": "decimal",
    "fixed": "decimal",
    "real": "double",
    "float4": "float",
    "float8": "double",
    "character": "char",
    "nchar": "char",
    "nvarchar": "varchar",
    "bool": "bool",
    "boolean": "bool",
}
_CHAR_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"})
_TEXT_SIZES = (("tiny", 255), ("", 65535), ("medium", 16777215), ("long", 4294967295))
_SIMPLE = frozenset(
    {
        "date",
        "tinytext",
        "mediumtext",
        "longtext",
        "tinyblob",
        "mediumblob",
        "longblob",
        *GEOMETRY_TYPES,
        "inet4",
        "inet6",
        "uuid",
    }
)


def _charset_alias(name: str) -> str:
    lowered = name.lower()
    return "utf8mb3" if lowered == "utf8" else lowered


def charset_of_collation(collation: str) -> str:
    lowered = collation.lower()
    if lowered == "binary":
        return "binary"
    return _charset_alias(lowered.split("_", 1)[0])


@dataclass(slots=True)
class _ColumnSpec:
    """A column definition as written, before the table's defaults are applied."""

    name: str
    base: str  # normalised type word: "int", "varchar", "text", "enum"...
    args: list[str]  # parenthesised arguments (numbers, or labels for ENUM/SET)
    unsigned: bool = False
    zerofill: bool = False
    charset: str | None = None  # explicit CHARACTER SET (or the charset of an explicit COLLATE)
    national: bool = False
    binary_attr: bool = False  # CHAR BYTE / the BINARY attribute (a _bin collation: charset unchanged)
    not_null: bool = False
    primary: bool = False
    serial: bool = False
    unique: bool = False  # UNIQUE [KEY] on the column
    row_period: str = ""  # "start" or "end": GENERATED ALWAYS AS ROW START/END, a system-versioned table's own
    versioning: bool = False  # WITH SYSTEM VERSIONING on the column: the table is system-versioned


# How the server writes an ENUM/SET label in COLUMN_TYPE and SHOW CREATE TABLE (append_unescaped() in sql_string.cc):
# these five escaped, every other character as it is. ``binlog.table.parse_enum_labels`` reads them back.
_LABEL_ESCAPES = str.maketrans({"\\": "\\\\", "'": "''", "\0": "\\0", "\n": "\\n", "\r": "\\r"})


def _quote_label(label: str) -> str:
    # The server drops a label's trailing spaces when it makes the column (and keeps any other trailing character).
    return "'" + label.rstrip(" ").translate(_LABEL_ESCAPES) + "'"


def _text_type(kind: str, length_bytes: int) -> str:
    for prefix, limit in _TEXT_SIZES:
        if length_bytes <= limit:
            return prefix + kind
    return "long" + kind


@dataclass(frozen=True)
class _UniqueKey:
    """A UNIQUE key as written: its columns with their prefix lengths, and whether it says USING HASH."""

    parts: tuple[tuple[str, int | None], ...]
    using_hash: bool


_WHOLE_VALUE_TYPES = frozenset(
    ("tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob", "json")
)
#: The longest key any engine keeps in a B-tree (InnoDB's; MyISAM's is 1,000 bytes, Aria's 2,300): a UNIQUE key
#: longer is kept by a hidden hash column whatever the engine.
_HASH_COLUMN = "DB_ROW_HASH_"
_LONGEST_BTREE_KEY = 3072
_SHORTEST_BTREE_KEY = 1000


def _engine(options: list[Token]) -> str:
    """The ENGINE a CREATE TABLE's table options name ("" when they name none)."""
    for i, token in enumerate(options):
        if token.is_word("ENGINE") and i + 1 < len(options):
            following = options[i + 2] if options[i + 1].text == "=" and i + 2 < len(options) else options[i + 1]
            return following.text.upper()
    return ""


def _refuse_unsure_name(name: str, names: Iterable[str]) -> None:
    """Raises DdlError when ``name``, which ``fold_name`` finds among none of ``names``, may be one of them to the
    server (``may_fold_alike``): whether the statement found that column, only the server's case table tells."""
    for other in names:
        if may_fold_alike(name, other):
            raise DdlError(
                f"{name} may name the column {other}: they differ in the case of letters outside ASCII, which the "
                "server folds by a table of its own"
            )


def _hashed(key: _UniqueKey, columns: list[Column], engine: str) -> bool:
    """Whether the server keeps a UNIQUE key of a new table by a hidden hash column (a "long unique"): over a BLOB or
    TEXT column's whole value, said USING HASH, or longer than any engine's B-tree key. DdlError when that depends
    on the engine's own limit: the table is then read from information_schema instead."""
    if engine in ("MEMORY", "HEAP"):
        return False  # its HASH indexes are ordinary ones
    if key.using_hash:
        return True
    by_name = {fold_name(column.name): column for column in columns}
    length = 0
    for name, prefix in key.parts:
        column = by_name.get(fold_name(name))
        if column is None:
            _refuse_unsure_name(name, [column.name for column in columns])
            return False  # a key over a column the statement does not define: the server refuses it
        if column.data_type in _WHOLE_VALUE_TYPES:
            if not prefix:
                return True
            length += prefix * max_bytes_per_char(column.charset)
            continue
        declared = re.search(r"\((\d+)", column.column_type)
        chars = prefix or (int(declared.group(1)) if declared else 8)
        length += chars * (max_bytes_per_char(column.charset) if column.charset else 1)
    if length > _LONGEST_BTREE_KEY:
        return True
    if length > _SHORTEST_BTREE_KEY:
        raise DdlError(
            f"a UNIQUE key of up to {length} bytes: whether the server keeps it by a hidden hash column depends on "
            "the engine's key length"
        )
    return False


def build_column(spec: _ColumnSpec, table_charset: str) -> Column:
    """The column as information_schema shows it, from its definition and the table's default charset."""
    base = spec.base
    args = spec.args
    nums = [int(a) for a in args if a.isdigit()]
    charset: str | None = None
    if base in _CHAR_TYPES or base in ("json",):
        charset = "utf8mb3" if spec.national else spec.charset or table_charset
    unsigned = spec.unsigned or spec.zerofill
    suffix = (" unsigned" if unsigned else "") + (" zerofill" if spec.zerofill else "")
    nullable = not (spec.not_null or spec.primary or spec.serial)
    if spec.serial:
        return Column(spec.name, "bigint", "bigint(20) unsigned", None, False)
    if base == "bool":
        return Column(spec.name, "tinyint", "tinyint(1)" + suffix, None, nullable)
    if base in _INT_WIDTHS:
        width = nums[0] if nums else _INT_WIDTHS[base][1 if unsigned else 0]
        return Column(spec.name, base, f"{base}({width}){suffix}", None, nullable)
    if base == "decimal":
        precision = nums[0] if nums else 10
        scale = nums[1] if len(nums) > 1 else 0
        return Column(spec.name, "decimal", f"decimal({precision},{scale}){suffix}", None, nullable)
    if base in ("float", "double"):
        kind = base
        if base == "float" and len(nums) == 1:
            kind = "float" if nums[0] <= 24 else "double"
            return Column(spec.name, kind, kind + suffix, None, nullable)
        shape = f"({nums[0]},{nums[1]})" if len(nums) == 2 else ""
        return Column(spec.name, kind, f"{kind}{shape}{suffix}", None, nullable)
    if base == "bit":
        return Column(spec.name, "bit", f"bit({nums[0] if nums else 1})", None, nullable)
    if base == "year":
        return Column(spec.name, "year", "year(4)", None, nullable)
    if base in ("time", "datetime", "timestamp"):
        shape = f"({nums[0]})" if nums and nums[0] else ""
        return Column(spec.name, base, base + shape, None, nullable)
    if base in ("char", "varchar"):
        length = nums[0] if nums else (1 if base == "char" else 0)
        if charset == "binary":
            kind = "binary" if base == "char" else "varbinary"
            return Column(spec.name, kind, f"{kind}({length})", None, nullable)
        return Column(spec.name, base, f"{base}({length})", charset, nullable)
    if base in ("binary", "varbinary"):
        length = nums[0] if nums else 1
        return Column(spec.name, base, f"{base}({length})", None, nullable)
    if base in ("text", "blob"):
        kind = "text" if base == "text" and charset != "binary" else "blob"
        if nums:
            per_char = max_bytes_per_char(charset) if kind == "text" else 1
            name = _text_type(kind, nums[0] * per_char)
        else:
            name = kind
        return Column(spec.name, name, name, charset if kind == "text" else None, nullable)
    if base in ("tinytext", "mediumtext", "longtext"):
        if charset == "binary":
            blob = base.replace("text", "blob")
            return Column(spec.name, blob, blob, None, nullable)
        return Column(spec.name, base, base, charset, nullable)
    if base in ("enum", "set"):
        labels = ",".join(_quote_label(a) for a in args)
        return Column(spec.name, base, f"{base}({labels})", charset, nullable)
    if base == "json":
        # MariaDB's JSON is LONGTEXT (with a json_valid CHECK), always utf8mb4 with a binary collation.
        return Column(spec.name, "longtext", "longtext", "utf8mb4", nullable)
    if base in _SIMPLE:
        return Column(spec.name, base, base, None, nullable)
    raise DdlError(f"unknown column type {base!r}")


# -- the parser ----------------------------------------------------------------------------------------------------

#: A SEQUENCE is a table of one row, which NEXTVAL, SETVAL and ALTER SEQUENCE rewrite: its row changes are in the
#: binlog like any table's, in these columns (MariaDB 10.3 on; information_schema.COLUMNS shows them so).
SEQUENCE_COLUMNS = tuple(
    Column(name, column_type.split("(")[0], column_type, None, False)
    for name, column_type in (
        ("next_not_cached_value", "bigint(21)"),
        ("minimum_value", "bigint(21)"),
        ("maximum_value", "bigint(21)"),
        ("start_value", "bigint(21)"),
        ("increment", "bigint(21)"),
        ("cache_size", "bigint(21) unsigned"),
        ("cycle_option", "tinyint(1) unsigned"),
        ("cycle_count", "bigint(21)"),
    )
)

_TABLE_CONSTRAINT_WORDS = ("PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "CONSTRAINT", "FOREIGN")
_ALTER_SKIP_AFTER_ADD = ("INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "PARTITION")


def _clause_of_words(p: _Parser) -> bool:
    """PERIOD FOR ... and SYSTEM VERSIONING: clauses, where a lone ``period`` or ``system`` is a column's name
    (neither word is reserved)."""
    token, following = p.peek(), p.peek(1)
    return (
        token is not None
        and following is not None
        and (
            (token.is_word("PERIOD") and following.is_word("FOR"))
            or (token.is_word("SYSTEM") and following.is_word("VERSIONING"))
        )
    )


#: Words that begin a run of table options in an ALTER TABLE (as do an engine's own options: any word followed by "=").
_TABLE_OPTION_WORDS = (
    "DEFAULT",
    "CHARACTER",
    "CHARSET",
    "COLLATE",
    "ENGINE",
    "TYPE",
    "COMMENT",
    "AUTO_INCREMENT",
    "AVG_ROW_LENGTH",
    "CHECKSUM",
    "TABLE_CHECKSUM",
    "PAGE_CHECKSUM",
    "CONNECTION",
    "DATA",
    "DELAY_KEY_WRITE",
    "ENCRYPTED",
    "ENCRYPTION_KEY_ID",
    "IETF_QUOTES",
    "INSERT_METHOD",
    "KEY_BLOCK_SIZE",
    "MAX_ROWS",
    "MIN_ROWS",
    "PACK_KEYS",
    "PAGE_COMPRESSED",
    "PAGE_COMPRESSION_LEVEL",
    "PASSWORD",
    "ROW_FORMAT",
    "SEQUENCE",
    "STATS_AUTO_RECALC",
    "STATS_PERSISTENT",
    "STATS_SAMPLE_PAGES",
    "TRANSACTIONAL",
    "UNION",
)


def _starts_table_options(p: _Parser) -> bool:
    """Whether an ALTER TABLE clause is a run of table options ("ENGINE=InnoDB DEFAULT CHARSET=latin1")."""
    token, following = p.peek(), p.peek(1)
    if token is None or token.kind != "word":
        return False
    return token.is_word(*_TABLE_OPTION_WORDS) or (following is not None and following.text == "=")


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def at_end(self) -> bool:
        token = self.peek()
        return token is None or (token.kind == "op" and token.text == ";")

    def accept(self, *words: str) -> bool:
        token = self.peek()
        if token is not None and token.is_word(*words):
            self.i += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        for k, word in enumerate(words):
            token = self.peek(k)
            if token is None or not token.is_word(word):
                return False
        self.i += len(words)
        return True

    def accept_op(self, op: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "op" and token.text == op:
            self.i += 1
            return True
        return False

    def expect_op(self, op: str) -> None:
        if not self.accept_op(op):
            raise DdlError(f"expected {op!r} near {self._here()}")

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise DdlError(f"expected {' or '.join(words)} near {self._here()}")

    def _here(self) -> str:
        return " ".join(t.text for t in self.tokens[self.i : self.i + 6]) or "the end"

    def identifier(self) -> str:
        token = self.peek()
        if token is None or token.kind not in ("word", "name", "str"):
            raise DdlError(f"expected a name near {self._here()}")
        self.i += 1
        return token.text

    def qualified(self) -> tuple[str | None, str]:
        first = self.identifier()
        if self.accept_op("."):
            return first, self.identifier()
        return None, first

    def if_exists(self) -> bool:
        return self.accept_seq("IF", "EXISTS")

    def if_not_exists(self) -> bool:
        return self.accept_seq("IF", "NOT", "EXISTS")

    def lock_wait(self) -> None:
        """Past ``WAIT n`` or ``NOWAIT`` after a table's name: the statement's lock timeout, which changes nothing it
        does. WAIT's number must go with it, or it would be taken for the start of the first clause."""
        if self.accept("WAIT"):
            token = self.peek()
            if token is None or token.kind != "num":
                raise DdlError(f"expected a number after WAIT near {self._here()}")
            self.i += 1
        else:
            self.accept("NOWAIT")

    def skip_group(self) -> None:
        """Past a parenthesised group (the opening parenthesis is the current token)."""
        depth = 0
        while (token := self.peek()) is not None:
            self.i += 1
            if token.kind == "op" and token.text == "(":
                depth += 1
            elif token.kind == "op" and token.text == ")":
                depth -= 1
                if depth == 0:
                    return
        raise DdlError("unbalanced parentheses")

    def skip_clause(self) -> None:
        """Past everything up to the next comma or closing parenthesis at this level."""
        while (token := self.peek()) is not None:
            if (token.kind == "op" and token.text in ",)") or self.at_end():
                return
            if token.kind == "op" and token.text == "(":
                self.skip_group()
            else:
                self.i += 1

    def name_list(self) -> list[str]:
        """``(a, b(10) DESC, ...)``: the column names of a key."""
        self.expect_op("(")
        names: list[str] = []
        while True:
            names.append(self.identifier())
            self.skip_clause()
            if self.accept_op(")"):
                return names
            self.expect_op(",")

    def key_parts(self) -> list[tuple[str, int | None]]:
        """``(a, b(10) DESC, ...)``: the columns of a key, each with its prefix length (None for the whole column)."""
        self.expect_op("(")
        parts: list[tuple[str, int | None]] = []
        while True:
            name = self.identifier()
            prefix = None
            if self.accept_op("("):
                token = self.peek()
                prefix = int(token.text) if token is not None and token.kind == "num" and token.text.isdigit() else 0
                self.skip_clause()
                self.expect_op(")")
            parts.append((name, prefix))
            self.skip_clause()
            if self.accept_op(")"):
                return parts
            self.expect_op(",")

    def charset_name(self) -> str:
        self.accept_op("=")
        return self.identifier()

    # -- column definitions ---------------------------------------------------------------------------------------

    def column_spec(self, name: str) -> _ColumnSpec:
        spec = self.data_type(name)
        while not self.at_end():
            token = self.peek()
            assert token is not None
            if token.kind == "op" and token.text in ",)":
                break
            if self.accept_seq("NOT", "NULL"):
                spec.not_null = True
            elif self.accept("NULL"):
                spec.not_null = False
            elif self.accept("DEFAULT"):
                self.skip_value()
            elif self.accept("UNIQUE"):
                self.accept("KEY")  # UNIQUE KEY is a unique key; KEY alone, the primary key
                spec.unique = True
            elif self.accept_seq("PRIMARY", "KEY") or self.accept("KEY"):
                spec.primary = True
            elif self.accept_seq("CHARACTER", "SET") or self.accept("CHARSET"):
                spec.charset = _charset_alias(self.charset_name())
            elif self.accept("COLLATE"):
                collation = self.charset_name()
                if spec.charset is None:
                    spec.charset = charset_of_collation(collation)
            elif self.accept_seq("AS", "ROW"):
                if self.accept("START", "END"):
                    spec.row_period = self.tokens[self.i - 1].text.lower()
                    spec.not_null = True
            elif self.accept_seq("WITH", "SYSTEM", "VERSIONING"):
                spec.versioning = True
            elif self.accept("FIRST", "AFTER"):
                self.i -= 1  # the position is the caller's
                break
            elif token.kind == "op" and token.text == "(":
                self.skip_group()
            else:
                self.i += 1
        return spec

    def skip_value(self) -> None:
        """Past a DEFAULT value: a literal, a signed number, a function call or a parenthesised expression."""
        token = self.peek()
        if token is None:
            return
        if token.kind == "op" and token.text == "(":
            self.skip_group()
            return
        if token.kind == "op" and token.text in "+-":
            self.i += 1
        self.i += 1
        nxt = self.peek()
        if nxt is not None and nxt.kind == "op" and nxt.text == "(":
            self.skip_group()

    def data_type(self, name: str) -> _ColumnSpec:
        word = self.identifier().lower()
        national = False
        if word == "national":
            national = True
            word = self.identifier().lower()
        if word in ("nchar", "nvarchar"):
            national = True
        if word == "double":
            self.accept("PRECISION")
        if word == "long":
            if self.accept("VARCHAR", "VARCHAR2"):
                word = "mediumtext"
            elif self.accept("VARBINARY"):
                word = "mediumblob"
            else:
                word = "mediumtext"
        if word in ("char", "character", "nchar") and self.accept("VARYING"):
            word = "varchar"
        base = _TYPE_ALIASES.get(word, word)
        if base == "serial":
            return _ColumnSpec(name, "bigint", [], unsigned=True, serial=True)
        args: list[str] = []
        if self.accept_op("("):
            while not self.accept_op(")"):
                token = self.peek()
                if token is None:
                    raise DdlError("unterminated type arguments")
                self.i += 1
                if token.kind in ("str", "num", "word", "name"):
                    args.append(token.text)
        spec = _ColumnSpec(name, base, args, national=national)
        while True:
            if self.accept("UNSIGNED"):
                spec.unsigned = True
            elif self.accept("SIGNED"):
                pass
            elif self.accept("ZEROFILL"):
                spec.zerofill = True
            elif self.accept("BYTE"):
                spec.charset = "binary"
            elif self.accept("BINARY"):
                spec.binary_attr = True
            elif self.accept("ASCII"):
                spec.charset = "latin1"
            elif self.accept("UNICODE"):
                spec.charset = "ucs2"
            else:
                return spec

    def position(self) -> tuple[str, str | None] | None:
        """FIRST or AFTER name after a column definition."""
        if self.accept("FIRST"):
            return ("first", None)
        if self.accept("AFTER"):
            return ("after", self.identifier())
        return None


# -- applying statements -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One table a statement changed: its new definition, or None when it is gone. ``source``: the table (its stored
    names) whose layout the definition was taken from, when another one's (RENAME, CREATE ... LIKE): what the history
    knew of that one's layout, or did not know, holds for this one too."""

    schema: str
    table: str
    definition: TableDef | None
    source: tuple[str, str] | None = None


@dataclass(eq=False)
class _Slot:
    """A column of a table an ALTER is changing, with ``origin``, its name (``fold_name``) in the table as it was
    before the statement ("" for a column the statement adds), and ``spec``, its definition when the statement
    gives one (ADD, CHANGE, MODIFY): such a column takes the table's default charset as the statement leaves it."""

    column: Column
    origin: str
    spec: _ColumnSpec | None = None


def _original(slots: list[_Slot], name: str) -> int:
    """The index of the column the table had as ``name`` before the statement; -1 if none (or dropped since)."""
    folded = fold_name(name)
    for i, slot in enumerate(slots):
        if slot.origin == folded:
            return i
    return -1


def _added(slots: list[_Slot], name: str) -> int:
    """The index of a column this statement added as ``name`` (a later clause may change it); -1 if none."""
    folded = fold_name(name)
    for i, slot in enumerate(slots):
        if not slot.origin and fold_name(slot.column.name) == folded:
            return i
    return -1


def _put(slots: list[_Slot], slot: _Slot, where: tuple[str, str | None] | None) -> None:
    """Places a column FIRST, AFTER a column (named as the statement leaves it), or last (``where`` None)."""
    if where is None:
        # Last, but before a system-versioned table's hidden columns, which stay last.
        hidden = next((i for i, existing in enumerate(slots) if existing.column.hidden), len(slots))
        slots.insert(hidden, slot)
    elif where[0] == "first":
        slots.insert(0, slot)
    else:
        target = fold_name(where[1] or "")
        for i, existing in enumerate(slots):
            if fold_name(existing.column.name) == target:
                slots.insert(i + 1, slot)
                return
        raise DdlError(f"AFTER names an unknown column {where[1]}")


@dataclass(eq=False)
class _Placement:
    """A column an ALTER places once its clauses without a position are done: ``where`` (FIRST, AFTER a name, or
    None: last). ``replaces``: the name of a column the statement adds, which a CHANGE or MODIFY of it takes out
    (the server finds that one by the name the CHANGE gives, not the one it changes)."""

    slot: _Slot
    where: tuple[str, str | None] | None
    replaces: str | None = None


def _added_name(placements: list[_Placement], name: str) -> bool:
    """Whether an earlier clause of the statement adds a column ``name`` (as a later CHANGE of it leaves it)."""
    folded = fold_name(name)
    names: list[str] = []
    for placement in placements:
        if placement.slot.origin:
            continue  # a column of the table, moved
        if placement.replaces is not None:
            names = [n for n in names if n != fold_name(placement.replaces)]
        names.append(fold_name(placement.slot.column.name))
    return folded in names


def _place(slots: list[_Slot], placements: list[_Placement], key: tuple[_Slot | str, ...]) -> tuple[_Slot | str, ...]:
    """The second pass of an ALTER: each column placed, in clause order, among those the list has by then."""
    for placement in placements:
        if placement.replaces is not None:
            index = _added(slots, placement.replaces)
            if index < 0:
                raise DdlError(f"CHANGE or MODIFY of a column {placement.replaces} the statement has not added")
            replaced = slots.pop(index)
            key = tuple(placement.slot if k is replaced else k for k in key)
        elif placement.slot in slots:  # a column of the table a CHANGE or MODIFY moves
            slots.remove(placement.slot)
        name = placement.slot.column.name
        if any(fold_name(slot.column.name) == fold_name(name) for slot in slots):
            raise DdlError(f"ADD of an existing column {name}")  # the server refuses a table with two
        _put(slots, placement.slot, placement.where)
    return key


def _names(slots: list[_Slot]) -> list[str]:
    """Every name a clause may find a column by: the table's before the statement, and those the statement gives."""
    return [slot.origin for slot in slots if slot.origin] + [slot.column.name for slot in slots]


def _with_pk(columns: list[Column], pk: tuple[str, ...]) -> list[Column]:
    """Primary key columns are NOT NULL."""
    folded = {fold_name(name) for name in pk}
    for name in pk:
        if fold_name(name) not in {fold_name(column.name) for column in columns}:
            _refuse_unsure_name(name, [column.name for column in columns])
    return [replace(c, nullable=False) if fold_name(c.name) in folded and c.nullable else c for c in columns]


_UNDECODED = re.compile("[\udc80-\udcff]")


def has_undecoded_bytes(sql: str) -> bool:
    """Whether a statement's text keeps bytes its decoding could not read (lone surrogates, surrogateescape)."""
    return _UNDECODED.search(sql) is not None


def _changes_tables(tokens: list[Token]) -> bool:
    """Whether a statement is one ``DdlApplier`` applies: CREATE/ALTER/DROP of a table or database, RENAME TABLE
    (temporary tables aside)."""
    start = statement_start(tokens)
    head = [t.text.upper() for t in tokens[start : start + 6] if t.kind == "word"]
    if not head or head[0] not in ("CREATE", "ALTER", "DROP", "RENAME") or "TEMPORARY" in head:
        return False
    return any(word in ("TABLE", "TABLES", "DATABASE", "SCHEMA", "SEQUENCE") for word in head[1:])


class DdlApplier:
    """Applies statements to a model; each ``apply`` returns the tables it changed. With ``temporary``, CREATE and
    DROP of a TEMPORARY table are applied like those of a table (to a session's own model of its temporary tables);
    without it they change nothing."""

    def __init__(self, model: SchemaModel, *, temporary: bool = False) -> None:
        self.model = model
        self.temporary = temporary

    def apply(self, default_schema: str, sql: str, sql_mode: int = 0) -> list[Change]:
        tokens = tokenize(sql, sql_mode)
        for other in reading_modes(sql, sql_mode)[1:]:
            try:
                alike = tokenize(sql, other) == tokens
            except DdlError:
                alike = False
            if not alike:
                raise DdlError(
                    "SET STATEMENT sets the sql_mode of a statement whose text reads otherwise under another: the "
                    "server read it under the session's sql_mode, which the binlog does not say"
                )
        parser = _Parser(tokens)
        parser.i = statement_start(parser.tokens)
        if _changes_tables(parser.tokens) and has_undecoded_bytes(sql):
            # A name or label read from it could be anything: never guess one (binlog.events.statement_text).
            raise DdlError("the statement has bytes its client charset cannot decode, or an unknown client charset")
        changes: list[Change] = []
        if parser.accept("CREATE"):
            self._create(parser, default_schema, changes)
        elif parser.accept("ALTER"):
            self._alter(parser, default_schema, changes)
        elif parser.accept("DROP"):
            self._drop(parser, default_schema, changes)
        elif parser.accept("RENAME") and parser.accept("TABLE", "TABLES"):
            self._rename(parser, default_schema, changes)
        return changes

    def _schema(self, schema: str | None, default_schema: str) -> str:
        name = schema if schema is not None else default_schema
        if not name:
            raise DdlError("an unqualified table name and no default database")
        return self.model.name(name)

    # CREATE

    def _create(self, p: _Parser, default_schema: str, changes: list[Change]) -> None:
        replace_ = p.accept_seq("OR", "REPLACE")
        if p.accept("DATABASE", "SCHEMA"):
            p.if_not_exists()
            name = p.identifier()
            charset, _ = self._options(p, table=False, default_charset=self.model.server_charset)
            if replace_:
                for schema, table in self.model.drop_database(name):
                    changes.append(Change(schema, table, None))
            if not self.model.has_database(name) or replace_:
                self.model.set_database(name, charset)
            return
        if p.accept("TEMPORARY") and not self.temporary:
            return  # temporary tables are the session's own: they never appear in TABLE_MAPs of other tables
        if p.accept("SEQUENCE"):
            self._create_sequence(p, default_schema, changes)
            return
        if not p.accept("TABLE"):
            return  # views, indexes, triggers, routines...
        created = self._new_table(p, default_schema)
        if created is None:
            return
        schema, table = created
        paren_like = (
            p.peek() is not None
            and p.peek(1) is not None
            and p.tokens[p.i].text == "("
            and p.tokens[p.i + 1].is_word("LIKE")
        )
        if p.accept("LIKE") or paren_like:
            if paren_like:
                p.i += 2
            src_schema, src_table = p.qualified()
            source_schema = self._schema(src_schema, default_schema)
            source = self.model.get(source_schema, src_table)
            if source is None:
                raise DdlError(f"CREATE TABLE ... LIKE an unknown table {src_table}")
            copied_from = self.model.stored_name(source_schema, src_table)
            self.model.put(schema, table, source)
            changes.append(Change(*self.model.stored_name(schema, table), source, copied_from))
            return
        specs: list[tuple[_ColumnSpec, tuple[str, str | None] | None]] = []
        pk: tuple[str, ...] = ()
        uniques: list[_UniqueKey] = []
        if p.accept_op("("):
            while True:
                if p.accept("SELECT") or p.accept_op("("):
                    raise DdlError("CREATE TABLE ... SELECT without a column list")
                token = p.peek()
                if token is None:
                    raise DdlError("unterminated column list")
                if token.kind == "word" and (
                    token.text.upper() in (*_TABLE_CONSTRAINT_WORDS, "CHECK") or _clause_of_words(p)
                ):
                    found = self._table_constraint(p, uniques)
                    if found is not None:
                        pk = found
                else:
                    name = p.identifier()
                    specs.append((p.column_spec(name), None))
                if p.accept_op(")"):
                    break
                p.expect_op(",")
        elif not p.at_end():
            raise DdlError("CREATE TABLE ... SELECT without a column list")
        options = p.i
        charset, versioned = self._options(p, table=True, default_charset=self.model.database_charset(schema))
        engine = _engine(p.tokens[options : p.i])
        charset = charset or self.model.database_charset(schema)
        while not p.at_end():
            token, following = p.peek(), p.peek(1)
            selects = following is not None and following.is_word("SELECT", "WITH")
            if p.accept("SELECT", "AS", "WITH") or (token is not None and token.text == "(" and selects):
                raise DdlError("CREATE TABLE ... SELECT: the selected columns are not in the statement")
            if token is not None and token.kind == "op" and token.text == "(":
                p.skip_group()  # a partitioning's list: PARTITION BY HASH(id), (PARTITION p0 ...)
            else:
                p.i += 1
        columns = [build_column(spec, charset) for spec, _ in specs]
        for spec, _ in specs:
            if spec.primary:
                pk = (spec.name,)
        if versioned or any(spec.versioning for spec, _ in specs):
            # System-versioned: its own ROW START/END columns (the primary key then ends with the ROW END one),
            # or the hidden pair the server adds after the others.
            row_end = [spec.name for spec, _ in specs if spec.row_period == "end"]
            if not any(spec.row_period for spec, _ in specs):
                columns += SYSTEM_TIME
            elif pk and row_end:
                pk = (*pk, row_end[0])
        uniques += [_UniqueKey(((spec.name, None),), False) for spec, _ in specs if spec.unique]
        hashed = sum(_hashed(key, columns, engine) for key in uniques)
        columns += hidden(long_unique_hash_columns(hashed))
        definition = TableDef(tuple(_with_pk(columns, pk)), pk, charset)
        self.model.put(schema, table, definition)
        changes.append(Change(*self.model.stored_name(schema, table), definition))

    def _new_table(self, p: _Parser, default_schema: str) -> tuple[str, str] | None:
        """The [IF NOT EXISTS] name a CREATE TABLE or SEQUENCE gives; None when IF NOT EXISTS finds it there."""
        if_not_exists = p.if_not_exists()
        schema_, table_ = p.qualified()
        schema = self._schema(schema_, default_schema)
        table = self.model.name(table_)
        if if_not_exists and self.model.get(schema, table) is not None:
            return None
        return schema, table

    def _create_sequence(self, p: _Parser, default_schema: str, changes: list[Change]) -> None:
        created = self._new_table(p, default_schema)
        if created is None:
            return
        schema, table = created
        definition = TableDef(SEQUENCE_COLUMNS, (), self.model.database_charset(schema))
        self.model.put(schema, table, definition)
        changes.append(Change(*self.model.stored_name(schema, table), definition))

    def _table_constraint(self, p: _Parser, uniques: list[_UniqueKey] | None = None) -> tuple[str, ...] | None:
        """A key or constraint in a column list; the primary key's columns if it is one. A UNIQUE key goes in
        ``uniques``."""
        if p.accept("CONSTRAINT"):
            token = p.peek()
            if token is not None and not token.is_word("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
                p.identifier()
        if uniques is not None and p.accept("UNIQUE"):
            p.accept("KEY", "INDEX")
            using_hash = False
            while (token := p.peek()) is not None and not (token.kind == "op" and token.text == "("):
                using_hash |= token.is_word("HASH")  # USING HASH before the parts
                p.i += 1  # the key's name, USING ...
            parts = p.key_parts()
            while (token := p.peek()) is not None and not (token.kind == "op" and token.text in ",)"):
                using_hash |= token.is_word("HASH")
                p.i += 1
            uniques.append(_UniqueKey(tuple(parts), using_hash))
            return None
        if p.accept_seq("PRIMARY", "KEY"):
            while True:
                token = p.peek()
                if token is None:
                    raise DdlError("unterminated PRIMARY KEY")
                if token.kind == "op" and token.text == "(":
                    break
                p.i += 1  # an index name or USING BTREE
            names = tuple(self._column_name(n) for n in p.name_list())
            p.skip_clause()
            return names
        p.skip_clause()
        return None

    def _column_name(self, name: str) -> str:
        return name

    def _options(
        self, p: _Parser, *, table: bool, default_charset: str, alter: bool = False
    ) -> tuple[str | None, bool]:
        """The default charset that database options, or the table options after a column list, name; and whether
        the table options say WITH SYSTEM VERSIONING. ``CHARACTER SET DEFAULT`` names ``default_charset`` (the
        database's, for a table).

        A table's options end at a SELECT (CREATE ... SELECT), a partitioning or a "(" (but for a MERGE table's
        UNION=(...)), and may be separated by commas or spaces alone. In an ALTER TABLE (``alter``) a run of options
        separated by spaces is one clause: it ends at the next comma, where another clause may begin.
        """
        charset: str | None = None
        versioned = False
        while not p.at_end():
            if table and p.accept_seq("WITH", "SYSTEM", "VERSIONING"):
                versioned = True
                continue
            if table:
                token = p.peek()
                assert token is not None
                if token.is_word("SELECT", "AS", "WITH", "IGNORE", "REPLACE", "PARTITION"):
                    break
                if token.kind == "op" and token.text == "(":
                    previous = p.tokens[p.i - 1]
                    if previous.text == "=" or previous.is_word("UNION"):
                        p.skip_group()
                        continue
                    break
                if alter and token.kind == "op" and token.text == ",":
                    break
            if p.accept("DEFAULT"):
                continue  # DEFAULT CHARSET, DEFAULT COLLATE, or an option's value (ROW_FORMAT=DEFAULT)
            if p.accept_seq("CHARACTER", "SET") or p.accept("CHARSET"):
                name = p.charset_name()
                charset = default_charset if name.upper() == "DEFAULT" else _charset_alias(name)
            elif p.accept("COLLATE"):
                name = p.charset_name()
                if name.upper() == "DEFAULT":
                    raise DdlError("COLLATE DEFAULT in the table options")
                charset = charset or charset_of_collation(name)
            else:
                p.i += 1
                if table and not alter:
                    p.accept_op(",")
        return charset, versioned

    # ALTER

    def _alter(self, p: _Parser, default_schema: str, changes: list[Change]) -> None:
        if p.accept("DATABASE", "SCHEMA"):
            token = p.peek()
            name = default_schema
            if token is not None and not token.is_word("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT"):
                name = p.identifier()
            charset, _ = self._options(p, table=False, default_charset=self.model.server_charset)
            if charset is not None and name:
                self.model.set_database(name, charset)
            return
        p.accept("ONLINE")
        p.accept("IGNORE")
        if not p.accept("TABLE"):
            return  # ALTER VIEW, USER, EVENT, SEQUENCE...
        if_exists = p.if_exists()
        schema_, table_ = p.qualified()
        schema = self._schema(schema_, default_schema)
        table = self.model.name(table_)
        p.lock_wait()
        current = self.model.get(schema, table)
        if current is None:
            if if_exists:
                return
            raise DdlError(f"ALTER TABLE of a table the history does not know: {schema}.{table}")
        if any(column.hidden and column.name.startswith(_HASH_COLUMN) for column in current.columns):
            # The server may keep its long UNIQUE keys otherwise once it rebuilds the table (a short key USING HASH
            # becomes a B-tree): its hidden columns after the statement cannot be told from it.
            raise DdlError(f"ALTER TABLE of {schema}.{table}, which has long UNIQUE keys kept by hidden hash columns")
        # The clauses of one ALTER name the columns as the table had them before it (MariaDB and MySQL resolve every
        # DROP, CHANGE, MODIFY and RENAME COLUMN against the old table): "RENAME COLUMN a TO b, RENAME COLUMN b TO a"
        # swaps the two. So each column is followed by its old name, never looked up by a name a clause gave it.
        slots = [_Slot(column, fold_name(column.name)) for column in current.columns]
        key: tuple[_Slot | str, ...] = tuple(
            slots[i] for i in (_original(slots, name) for name in current.primary_key) if i >= 0
        )
        charset = current.charset
        rename_to: tuple[str, str] | None = None
        versioning: bool | None = None  # ADD or DROP SYSTEM VERSIONING
        # The server changes the columns in two passes (mysql_prepare_alter_table): first every DROP, RENAME COLUMN,
        # CHANGE and MODIFY of the table's columns, in place; then, in clause order, the columns it places: ADDs,
        # CHANGE/MODIFY with FIRST or AFTER (taken from their place then), and CHANGE/MODIFY of a column the
        # statement adds (that one goes, the new definition is placed, last without a position). An AFTER names a
        # column as the list stands then: by its new name, and among the added columns only those placed so far.
        placements: list[_Placement] = []
        while not p.at_end():
            if p.accept_seq("ADD", "SYSTEM", "VERSIONING"):
                versioning = True
            elif p.accept_seq("DROP", "SYSTEM", "VERSIONING"):
                versioning = False
            elif p.accept("ADD"):
                key = self._alter_add(p, slots, placements, key, charset, current)
            elif p.accept("DROP"):
                key = self._alter_drop(p, slots, key)
            elif p.accept("MODIFY", "CHANGE"):
                change = p.tokens[p.i - 1].is_word("CHANGE")
                p.accept("COLUMN")
                exists = p.if_exists()
                old = p.identifier() if change else None
                name = p.identifier()
                spec = p.column_spec(name)
                if spec.unique and _hashed(_UniqueKey(((name, None),), False), [build_column(spec, charset)], ""):
                    raise DdlError(f"ALTER TABLE makes {name} a long UNIQUE key, kept by a hidden hash column")
                where = p.position()
                index = _original(slots, old or name)
                if index < 0:
                    # Not a column of the table: the server takes the column this statement ADDs under the new name
                    # (CHANGE y x of an added x replaces x, whatever y is).
                    if _added_name(placements, name):
                        slot = _Slot(build_column(spec, charset), "", spec)
                        placements.append(_Placement(slot, where, replaces=name))
                        key = (slot,) if spec.primary else key
                        continue
                    _refuse_unsure_name(old or name, _names(slots) + [pl.slot.column.name for pl in placements])
                    if exists:
                        continue
                    raise DdlError(f"{'CHANGE' if change else 'MODIFY'} of an unknown column {old or name}")
                replaced = slots.pop(index)
                slot = _Slot(build_column(spec, charset), replaced.origin, spec)
                slots.insert(index, slot)  # by its new name, until its turn to move comes
                if where is not None:
                    placements.append(_Placement(slot, where))
                key = (slot,) if spec.primary else tuple(slot if k is replaced else k for k in key)
            elif p.accept("RENAME"):
                if p.accept("COLUMN"):
                    exists = p.if_exists()
                    old = p.identifier()
                    p.expect("TO")
                    new = p.identifier()
                    index = _original(slots, old)
                    if index < 0:
                        _refuse_unsure_name(old, _names(slots))
                        if exists:
                            continue
                        raise DdlError(f"RENAME COLUMN of an unknown column {old}")
                    slots[index].column = replace(slots[index].column, name=new)
                elif p.accept("INDEX", "KEY"):
                    p.skip_clause()
                else:
                    p.accept("TO", "AS")
                    to_schema, to_table = p.qualified()
                    # An unqualified new name is in the session's database, as for RENAME TABLE, not the table's.
                    rename_to = (self._schema(to_schema, default_schema), self.model.name(to_table))
            elif p.accept("CONVERT"):
                p.expect("TO")
                if not (p.accept_seq("CHARACTER", "SET") or p.accept("CHARSET")):
                    raise DdlError("CONVERT TO without CHARACTER SET")
                new = p.charset_name()
                target = self.model.database_charset(schema) if new.upper() == "DEFAULT" else _charset_alias(new)
                for slot in slots + [placement.slot for placement in placements]:
                    if slot.spec is None:  # the table's column: its data converted (a TEXT grows to hold as many)
                        slot.column = _converted(slot.column, target)
                    else:  # defined by this statement: made in the charset, as any column with no charset of its own
                        spec = replace(slot.spec, charset=None, national=False)
                        slot.column = replace(build_column(spec, target), name=slot.column.name)
                    slot.spec = None  # converted: its charset is the conversion's, whatever the table's becomes
                charset = target
                p.skip_clause()
            elif _starts_table_options(p):
                named, _ = self._options(p, table=True, default_charset=self.model.database_charset(schema), alter=True)
                charset = named or charset
                p.skip_clause()  # a partitioning that ends the run
            else:
                p.skip_clause()  # ALGORITHM, LOCK, FORCE, ENGINE, ALTER COLUMN ... SET DEFAULT, indexes...
            if not p.accept_op(","):
                if p.at_end():
                    break
                p.skip_clause()
                p.accept_op(",")
        key = _place(slots, placements, key)
        kept = {slot.origin for slot in slots}
        for name in current.primary_key:
            if fold_name(name) not in kept and _added(slots, name) >= 0:
                # The server keeps a key's parts by name: the added column takes the dropped one's place in the key.
                raise DdlError(f"ALTER TABLE drops the primary key column {name} and adds one of that name")
        if versioning is False:  # its own ROW START/END columns the statement must DROP itself, or the server refuses
            slots = [slot for slot in slots if not slot.column.hidden]
        elif versioning:
            own_end = [slot for slot in slots if slot.spec is not None and slot.spec.row_period == "end"]
            if own_end and key:
                key = (*key, own_end[0])  # the primary key ends with the ROW END column, as CREATE makes it
            elif not own_end and not any(slot.column.hidden for slot in slots):
                slots += [_Slot(column, fold_name(column.name)) for column in SYSTEM_TIME]
        # A column the statement defines without a charset takes the table's default as the statement leaves it,
        # whatever the order of its clauses ("ADD c TEXT, DEFAULT CHARSET=latin1" makes c latin1).
        for slot in slots:
            if slot.spec is not None and slot.spec.charset is None and charset != current.charset:
                slot.column = replace(build_column(slot.spec, charset), name=slot.column.name)
        # A key column is named by its column's name after the statement: ADD PRIMARY KEY names those already.
        pk = tuple(k.column.name if isinstance(k, _Slot) else k for k in key)
        definition = TableDef(tuple(_with_pk([slot.column for slot in slots], pk)), pk, charset)
        source: tuple[str, str] | None = None
        if rename_to is not None:
            source = self.model.stored_name(schema, table)
            self.model.remove(schema, table)
            changes.append(Change(*source, None))
            schema, table = rename_to
        self.model.put(schema, table, definition)
        changes.append(Change(*self.model.stored_name(schema, table), definition, source))

    def _alter_add(
        self,
        p: _Parser,
        slots: list[_Slot],
        placements: list[_Placement],
        key: tuple[_Slot | str, ...],
        charset: str,
        before: TableDef,
    ) -> tuple[_Slot | str, ...]:
        token = p.peek()
        if token is not None and token.is_word("CONSTRAINT", "PRIMARY", "UNIQUE"):
            uniques: list[_UniqueKey] = []
            found = self._table_constraint(p, uniques)
            if any(_hashed(unique, [slot.column for slot in slots], "") for unique in uniques):
                raise DdlError("ALTER TABLE adds a long UNIQUE key, kept by a hidden hash column")
            return key if found is None else found
        if token is not None and (token.is_word(*_ALTER_SKIP_AFTER_ADD) or _clause_of_words(p)):
            p.skip_clause()
            return key
        p.accept("COLUMN")
        exists = p.if_not_exists()
        if p.accept_op("("):
            while True:
                key = self._add_one(p, slots, placements, key, charset, exists, before)
                if p.accept_op(")"):
                    return key
                p.expect_op(",")
        return self._add_one(p, slots, placements, key, charset, exists, before)

    def _add_one(
        self,
        p: _Parser,
        slots: list[_Slot],
        placements: list[_Placement],
        key: tuple[_Slot | str, ...],
        charset: str,
        if_not_exists: bool,
        before: TableDef,
    ) -> tuple[_Slot | str, ...]:
        name = p.identifier()
        spec = p.column_spec(name)
        where = p.position()
        if if_not_exists:
            # Whether the server looks for the name in the table as it was or as the clauses before leave it, the
            # history cannot tell: only where both answers agree is the clause certain.
            names = [slot.column.name for slot in slots] + [placement.slot.column.name for placement in placements]
            now = any(fold_name(existing) == fold_name(name) for existing in names)
            then = before.index(name) >= 0
            if now != then:
                raise DdlError(f"ADD COLUMN IF NOT EXISTS {name}, a name the statement's other clauses give or take")
            if now:
                return key
            _refuse_unsure_name(name, names + [column.name for column in before.columns])
        slot = _Slot(build_column(spec, charset), "", spec)
        if spec.unique and _hashed(_UniqueKey(((name, None),), False), [slot.column], ""):
            raise DdlError(f"ALTER TABLE adds a column {name} with a long UNIQUE key, kept by a hidden hash column")
        placements.append(_Placement(slot, where))
        return (slot,) if spec.primary else key

    def _alter_drop(self, p: _Parser, slots: list[_Slot], key: tuple[_Slot | str, ...]) -> tuple[_Slot | str, ...]:
        if p.accept_seq("PRIMARY", "KEY"):
            return ()
        token = p.peek()
        if token is not None and (
            token.is_word("INDEX", "KEY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION") or _clause_of_words(p)
        ):
            p.skip_clause()
            return key
        p.accept("COLUMN")
        exists = p.if_exists()
        name = p.identifier()
        index = _original(slots, name)
        if index < 0:
            _refuse_unsure_name(name, _names(slots))
            if exists:
                return key
            raise DdlError(f"DROP of an unknown column {name}")
        dropped = slots.pop(index)
        p.skip_clause()  # RESTRICT / CASCADE
        return tuple(k for k in key if k is not dropped)

    # DROP, RENAME

    def _drop(self, p: _Parser, default_schema: str, changes: list[Change]) -> None:
        if p.accept("DATABASE", "SCHEMA"):
            p.if_exists()
            name = p.identifier()
            for schema, table in self.model.drop_database(name):
                changes.append(Change(schema, table, None))
            return
        if p.accept("TEMPORARY") and not self.temporary:
            return
        if not p.accept("TABLE", "TABLES", "SEQUENCE"):
            return
        p.if_exists()
        while True:
            schema_, table_ = p.qualified()
            schema = self._schema(schema_, default_schema)
            stored = self.model.stored_name(schema, table_)
            if self.model.remove(schema, table_) is not None:
                changes.append(Change(*stored, None))
            if not p.accept_op(","):
                break

    def _rename(self, p: _Parser, default_schema: str, changes: list[Change]) -> None:
        # MariaDB's RENAME TABLE IF EXISTS passes over the pairs whose table does not exist (and logs the statement
        # as written): a table the history does not know is then one the server did not have.
        missing_ok = p.if_exists()
        while True:
            from_schema, from_table = p.qualified()
            p.lock_wait()
            p.expect("TO")
            to_schema, to_table = p.qualified()
            source_schema = self._schema(from_schema, default_schema)
            stored = self.model.stored_name(source_schema, from_table)
            definition = self.model.remove(source_schema, from_table)
            if definition is None and missing_ok:
                if not p.accept_op(","):
                    break
                continue
            if definition is None:
                raise DdlError(f"RENAME TABLE of a table the history does not know: {source_schema}.{from_table}")
            changes.append(Change(*stored, None))
            target_schema = self._schema(to_schema, default_schema)
            target = self.model.name(to_table)
            if not self.temporary and self.model.get(target_schema, target) is not None:
                # The server renames no table onto another, but a session's temporary table may take the name of a
                # table, and that rename is logged as if of the table of its name, even by a session logging rows.
                raise DdlError(
                    f"RENAME TABLE onto {target_schema}.{target}, which exists: a temporary table was renamed"
                )
            self.model.put(target_schema, target, definition)
            changes.append(Change(*self.model.stored_name(target_schema, target), definition, stored))
            if not p.accept_op(","):
                break


def _converted(column: Column, charset: str) -> Column:
    """A column after CONVERT TO CHARACTER SET: text columns take the charset; TEXT grows to hold as many chars."""
    if column.charset is None or (column.data_type == "longtext" and column.charset == "utf8mb4" and charset == ""):
        return column
    if column.data_type.endswith("text"):
        limits = dict(_TEXT_SIZES)
        chars = limits[column.data_type[: -len("text")]] // max(1, max_bytes_per_char(column.charset))
        kind = _text_type("text", chars * max_bytes_per_char(charset))
        return replace(column, data_type=kind, column_type=kind, charset=charset)
    return replace(column, charset=charset)


def apply_statement(
    model: SchemaModel, default_schema: str, sql: str, sql_mode: int = 0, *, temporary: bool = False
) -> list[Change]:
    """Applies one statement, read under the session's ``sql_mode``; the tables it changed (none for statements that
    change no table). ``temporary``: CREATE and DROP of a TEMPORARY table count too (``DdlApplier``)."""
    return DdlApplier(model, temporary=temporary).apply(default_schema, sql, sql_mode)
