"""Which input files are one file: a byte-identical copy under another name (binlog.000002 and
binlog-copy.000002), or the same file reached through two paths (a symbolic link, a bind mount, two URIs of one
store). Counting both would count every change in it twice.

A file's identity is its content. Names cannot tell (a copy is renamed), nor can a binlog's first events: a server
that flushes its binlogs twice within a second writes two files that begin with the same format description and
the same GTID list, and the second may then hold transactions the first does not. So files are compared by size
first, which reads nothing; files of the same size by a digest of their first ``HEAD_BYTES``; and only files equal
that far by a digest of all their bytes, which reads them once more than the decode does. Different binlogs of an
archive seldom have the same size, so in practice only real copies and small files are read here.

A copy can also be cut short: taken while its server was still writing the file, or interrupted. Its bytes are then
the start of the whole file's, and counting both counts its transactions twice (change log lines alike). Files that
begin with the same ``KEY_BYTES`` (a binlog's format description, with the second it was created in; a change log's
first line) are compared further, shortest against longer: a file whose bytes are all the start of a longer one's is
that one's cut copy, and only the longer is counted. A binlog's format description flags and checksum are left out
of these comparisons: its server clears the flag that says the file is in use when it closes the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# Bytes compared before whole files are: enough to cover a binlog's header events and its first transactions.
HEAD_BYTES = 1 << 16
# The start that files must share to be one another's cut copies. A shorter file counts nothing (a binlog's format
# description alone is longer) and is left alone.
KEY_BYTES = 128

# digest(uri, limit): a digest of the file's first ``limit`` bytes, or of all of them when ``limit`` is None.
Digest = Callable[[str, int | None], bytes]
# digest(uri, limit, start): a digest of the file's bytes from ``start`` to ``limit`` (its end when None).
RangeDigest = Callable[[str, int | None, int], bytes]
# head(uri, count): the file's first ``count`` bytes (fewer when it is shorter).
Head = Callable[[str, int], bytes]
BINLOG_MAGIC = b"\xfebin"
# The magic number and a binlog event's header, up to its flags: what tells a format description's length.
BINLOG_HEAD_BYTES = 4 + 19


def find_copies(files: Iterable[tuple[str, int]], digest: Digest) -> dict[str, str]:
    """Copy URI -> the URI of the first file of ``files`` (in their order) with the same bytes."""
    by_size: dict[int, list[str]] = {}
    for uri, size in files:
        by_size.setdefault(size, []).append(uri)
    copies: dict[str, str] = {}
    for size, uris in by_size.items():
        if len(uris) < 2:
            continue
        for same_head in _groups(uris, lambda uri: digest(uri, HEAD_BYTES)):
            # A file no longer than the head was digested whole already.
            groups = [same_head] if size <= HEAD_BYTES else _groups(same_head, lambda uri: digest(uri, None))
            for original, *others in groups:
                copies.update((other, original) for other in others)
    return copies


def find_cut_copies(files: Iterable[tuple[str, int]], digest: RangeDigest, head: Head) -> dict[str, str]:
    """Cut copy URI -> the URI of the longest file of ``files`` whose bytes it starts (files of different sizes).

    A binlog copied while its server still wrote it differs from the file its server closed in its format
    description's flags (the in-use flag, cleared at the close) and so in that event's checksum: those bytes are
    left out of the comparison."""
    volatile: dict[str, list[tuple[int, int]]] = {}

    def stable(uri: str, end: int) -> bytes:
        return b"".join(digest(uri, to, at) for at, to in _segments(end, volatile[uri]))

    # One small read a file: its first KEY_BYTES give both its volatile bytes and its key (those bytes without them).
    by_key: dict[bytes, list[tuple[int, str]]] = {}
    for uri, size in files:
        if size >= KEY_BYTES:
            start = head(uri, KEY_BYTES)
            volatile[uri] = _volatile(start)
            key = b"".join(start[at:to] for at, to in _segments(KEY_BYTES, volatile[uri]))
            by_key.setdefault(key, []).append((size, uri))
    cut: dict[str, str] = {}
    for members in by_key.values():
        members.sort(key=lambda member: -member[0])  # longest first, each compared with the longer ones
        for at, (size, uri) in enumerate(members):
            longer = [other for other_size, other in members[:at] if other_size > size and other not in cut]
            head_bytes = min(size, HEAD_BYTES)
            if longer:
                start = stable(uri, head_bytes)
                longer = [other for other in longer if stable(other, head_bytes) == start]
            if longer and size > HEAD_BYTES:
                whole = stable(uri, size)
                longer = [other for other in longer if stable(other, size) == whole]
            if longer:
                cut[uri] = longer[0]
    return cut


def _volatile(start: bytes) -> list[tuple[int, int]]:
    """The byte ranges of a file, given its first bytes, that a copy may differ in from the file it was taken from:
    a binlog's format description flags and checksum; none for any other file."""
    if not start.startswith(BINLOG_MAGIC) or len(start) < BINLOG_HEAD_BYTES:
        return []
    size = int.from_bytes(start[4 + 9 : 4 + 13], "little")  # the format description event's length
    if size < 19 + 4:
        return []
    return [(4 + 17, 4 + 19), (4 + size - 4, 4 + size)]


def _segments(end: int, volatile: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[0, end) without the ``volatile`` ranges, as (start, end) pairs."""
    segments = []
    at = 0
    for low, high in sorted(volatile):
        if low >= end:
            break
        if low > at:
            segments.append((at, low))
        at = max(at, high)
    if at < end:
        segments.append((at, end))
    return segments


def _groups(uris: list[str], key: Callable[[str], bytes]) -> list[list[str]]:
    """``uris`` grouped by ``key``, in their order; a group of one needs no further reading."""
    groups: dict[bytes, list[str]] = {}
    for uri in uris:
        groups.setdefault(key(uri), []).append(uri)
    return [group for group in groups.values() if len(group) > 1]
