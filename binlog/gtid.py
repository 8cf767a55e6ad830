"""GTID state: MariaDB's per-domain positions and MySQL's executed GTID sets."""

from __future__ import annotations

import struct

from binlog.errors import BinlogError, TruncatedEventError


class MariaGtidState:
    """MariaDB's replication state: for each domain, the last GTID (domain-server-sequence) applied."""

    __slots__ = ("_text", "domains")

    def __init__(self, text: str = "") -> None:
        self.domains: dict[int, tuple[int, int]] = {}
        self._text: str | None = None
        for part in filter(None, (p.strip() for p in text.split(","))):
            try:
                domain, server, seq = (int(x) for x in part.split("-"))
            except ValueError:
                raise BinlogError(f"not a MariaDB GTID: {part!r}") from None
            self.domains[domain] = (server, seq)

    def update(self, domain: int, server: int, seq: int) -> None:
        self.domains[domain] = (server, seq)
        self._text = None

    def replace(self, entries: list[tuple[int, int, int]]) -> None:
        for domain, server, seq in entries:
            current = self.domains.get(domain)
            if current is None or current[1] < seq:
                self.domains[domain] = (server, seq)
        self._text = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(self.domains.items()))
        return self._text


def _intervals_add(intervals: list[list[int]], start: int, end: int) -> None:
    """Add [start, end) to a sorted list of disjoint half-open intervals, merging neighbours."""
    for i, (lo, hi) in enumerate(intervals):
        if end < lo:
            intervals.insert(i, [start, end])
            return
        if start <= hi:
            lo, hi = min(lo, start), max(hi, end)
            j = i + 1
            while j < len(intervals) and intervals[j][0] <= hi:
                hi = max(hi, intervals[j][1])
                j += 1
            intervals[i:j] = [[lo, hi]]
            return
    intervals.append([start, end])


def uuid_text(raw: bytes) -> str:
    """A source uuid's 16 bytes as ``str(uuid.UUID(bytes=raw))`` writes them (without importing uuid for it)."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class MysqlGtidSet:
    """A MySQL GTID set ("uuid:1-42:50,uuid2:1-7"), as executed-set text and as the binary form the protocol uses."""

    __slots__ = ("_text", "sets")

    def __init__(self, text: str = "") -> None:
        self.sets: dict[str, list[list[int]]] = {}
        self._text: str | None = None
        for part in filter(None, (p.strip() for p in text.replace("\n", "").split(","))):
            sid, *ranges = part.split(":")
            import uuid  # here only: the decoder reads uuids as bytes (uuid_text)

            sid = str(uuid.UUID(sid))
            intervals = self.sets.setdefault(sid, [])
            for r in ranges:
                lo, _, hi = r.partition("-")
                try:
                    _intervals_add(intervals, int(lo), int(hi or lo) + 1)
                except ValueError:
                    raise BinlogError(f"not a MySQL GTID set: {text!r}") from None

    def add(self, sid: str, gno: int) -> None:
        _intervals_add(self.sets.setdefault(sid, []), gno, gno + 1)
        self._text = None

    def union(self, other: MysqlGtidSet) -> None:
        for sid, intervals in other.sets.items():
            mine = self.sets.setdefault(sid, [])
            for lo, hi in intervals:
                _intervals_add(mine, lo, hi)
        self._text = None

    def __str__(self) -> str:
        if self._text is None:
            parts = []
            for sid in sorted(self.sets):
                ranges = [f"{lo}" if hi - lo == 1 else f"{lo}-{hi - 1}" for lo, hi in self.sets[sid]]
                parts.append(":".join([sid, *ranges]))
            self._text = ",".join(parts)
        return self._text

    def encode(self) -> bytes:
        """The binary form of COM_BINLOG_DUMP_GTID and PREVIOUS_GTIDS: u64 n_sids, then per sid 16 bytes, u64 n,
        n * (u64 start, u64 end exclusive)."""
        out = [struct.pack("<Q", len(self.sets))]
        for sid in sorted(self.sets):
            out.append(bytes.fromhex(sid.replace("-", "")))  # the sids are uuid_text's
            intervals = self.sets[sid]
            out.append(struct.pack("<Q", len(intervals)))
            for lo, hi in intervals:
                out.append(struct.pack("<QQ", lo, hi))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> MysqlGtidSet:
        result = cls()
        try:
            (n_sids,) = struct.unpack_from("<Q", data, 0)
            pos = 8
            for _ in range(n_sids):
                sid = uuid_text(data[pos : pos + 16])
                (n,) = struct.unpack_from("<Q", data, pos + 16)
                pos += 24
                intervals = result.sets.setdefault(sid, [])
                for _ in range(n):
                    lo, hi = struct.unpack_from("<QQ", data, pos)
                    pos += 16
                    _intervals_add(intervals, lo, hi)
        except (struct.error, ValueError):
            raise TruncatedEventError("GTID set runs past its event") from None
        return result


def is_mysql_gtid_text(text: str) -> bool:
    return ":" in text
