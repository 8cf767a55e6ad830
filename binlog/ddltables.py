"""The tables a DDL statement names, for a statement ``binlog.ddl`` could not apply: those tables' layouts are no
longer known, and their rows must get positional names until they are re-read.

The statement is read with the same tokenizer, under the same sql_mode, as the applier reads it, so a comment
between the words (``ALTER TABLE /* c */ t``), an executable comment or a "double-quoted" name under ANSI_QUOTES
names the table the server changed. Naming too many tables is safe (their rows go positional until re-read); naming
too few is not, so a statement whose tables cannot be told names none, and the caller then takes every table.
"""

from __future__ import annotations

from binlog.ddl import DdlError, Token, reading_modes, statement_start, tokenize

# A table's name follows these words: CREATE/ALTER/DROP TABLE t, RENAME TABLE a TO b, ALTER TABLE a RENAME TO b,
# CREATE TABLE a LIKE b (a TO of RENAME COLUMN or RENAME INDEX names no table).
_BEFORE_A_NAME = ("TABLE", "TABLES", "SEQUENCE", "TO", "AS", "LIKE")
_NOT_A_NAME = ("IF", "NOT", "EXISTS", "CHARACTER", "CHARSET", "SELECT", "WITH")


def tables_named(query: str, default_schema: str, sql_mode: int = 0) -> list[tuple[str, str]] | None:
    """The (schema, table) pairs ``query`` names, unqualified names in ``default_schema``; None when it cannot be
    read into words, or names no table at all. A statement the server may have read under another sql_mode (behind
    SET STATEMENT sql_mode = ...) names the tables of every such reading."""
    found: list[tuple[str, str]] = []
    for mode in reading_modes(query, sql_mode):
        try:
            named = _tables_named(tokenize(query, mode), default_schema)
        except DdlError:
            if mode == sql_mode:
                return None
            continue
        found += [name for name in named if name not in found]
    return found or None


def _tables_named(tokens: list[Token], default_schema: str) -> list[tuple[str, str]]:
    tokens = tokens[statement_start(tokens) :]
    # DROP TABLE a, b and RENAME TABLE a TO b, c TO d list several tables, each after a comma.
    listing = bool(tokens) and tokens[0].is_word("DROP", "RENAME")
    found: list[tuple[str, str]] = []
    for i, token in enumerate(tokens):
        follows = token.is_word(*_BEFORE_A_NAME) or (listing and token.kind == "op" and token.text == ",")
        if not follows or (token.is_word("TO") and _renames_a_column_or_index(tokens, i)):
            continue
        j = i + 1
        while j < len(tokens) and tokens[j].is_word("IF", "NOT", "EXISTS"):
            j += 1
        name = _qualified(tokens, j, default_schema)
        if name is not None:
            found.append(name)
    return found


def _renames_a_column_or_index(tokens: list[Token], to: int) -> bool:
    """Whether the TO at ``to`` is that of RENAME COLUMN|INDEX|KEY [IF EXISTS] old TO new."""
    for i in range(to - 1, max(to - 6, 0) - 1, -1):
        if tokens[i].is_word("RENAME"):
            return i + 1 < to and tokens[i + 1].is_word("COLUMN", "INDEX", "KEY")
    return False


def _qualified(tokens: list[Token], i: int, default_schema: str) -> tuple[str, str] | None:
    if not _a_name(tokens, i):
        return None
    if i + 2 < len(tokens) and tokens[i + 1].kind == "op" and tokens[i + 1].text == "." and _a_name(tokens, i + 2):
        return tokens[i].text, tokens[i + 2].text
    return default_schema, tokens[i].text


def _a_name(tokens: list[Token], i: int) -> bool:
    if i >= len(tokens):
        return False
    token = tokens[i]
    return token.kind == "name" or (token.kind == "word" and not token.is_word(*_NOT_A_NAME))
