"""Which files a run reads: ``--binlogs`` and ``--logs`` name directories, globs or files (comma-separated).

Listing happens on the driver; anything that names nothing is reported as a missing input, the way a file that
fails in its task is, and the run goes on with the rest.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path

# binlog.000042, mysql-bin.000001, mariadb-bin.123456: a base name and a numeric extension of six digits or more.
BINLOG_NAME = re.compile(r"^.+\.\d{6,}$")
LOG_NAME = re.compile(r"^relaylogs-\d{8}\.(txt|jsonl)$")


@dataclass
class Inputs:
    binlogs: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (what was asked for, why nothing was read)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why it is left out)


def _local(spec: str) -> str:
    return spec[len("file://") :] if spec.startswith("file://") else spec


def expand(spec: str, pattern: re.Pattern[str], what: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Files named by ``spec`` (a comma-separated list of directories, globs and files), sorted, no duplicates.

    A directory contributes the files whose names match ``pattern``; a glob or a file is taken as given.
    """
    found: list[str] = []
    missing: list[tuple[str, str]] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        path = Path(_local(part)).expanduser()
        if path.is_dir():
            names = sorted(str(p) for p in path.iterdir() if p.is_file() and pattern.match(p.name))
            if not names:
                missing.append((part, f"no {what} files in this directory"))
            found.extend(names)
        elif glob.has_magic(str(path)):
            names = sorted(p for p in glob.glob(str(path)) if Path(p).is_file())
            if not names:
                missing.append((part, "no file matches"))
            found.extend(names)
        elif path.exists():
            found.append(str(path))
        else:
            missing.append((part, "no such file or directory"))
    return list(dict.fromkeys(found)), missing


def collect(binlogs: str | None, logs: str | None) -> Inputs:
    """The run's files. Where a day has both change log layouts, the JSON lines are read and the text is skipped:
    a logger writing both layouts writes every change twice."""
    inputs = Inputs()
    if binlogs:
        inputs.binlogs, missing = expand(binlogs, BINLOG_NAME, "binlog")
        inputs.missing.extend(missing)
    if logs:
        files, missing = expand(logs, LOG_NAME, "change log")
        inputs.missing.extend(missing)
        json_days = {(str(Path(f).parent), Path(f).stem) for f in files if f.endswith(".jsonl")}
        for name in files:
            if name.endswith(".txt") and (str(Path(name).parent), Path(name).stem) in json_days:
                inputs.skipped.append((name, "the same day's .jsonl file is read instead"))
            else:
                inputs.logs.append(name)
    return inputs
