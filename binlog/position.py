"""Position: where a stream is, and where to resume it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Position:
    """A place in the source's binlog.

    ``file``/``pos`` is the classic coordinate (the end of the last event taken). ``gtid`` is the GTID state after that
    point: on MariaDB the per-domain list ("0-1-42,1-1-7"), on MySQL the executed GTID set ("uuid:1-42"). A position
    with an empty ``file`` and a non-empty ``gtid`` starts a stream by GTID.
    """

    file: str
    pos: int
    gtid: str = ""

    def __str__(self) -> str:
        text = f"{self.file}:{self.pos}"
        return f"{text} [{self.gtid}]" if self.gtid else text
