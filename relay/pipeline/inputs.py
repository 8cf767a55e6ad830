"""Which files a run reads: ``--binlogs`` and ``--logs`` name directories, globs, files or URIs (comma-separated).

Listing happens on the driver, through the Hadoop FileSystem of the Spark driver's JVM, so a name means what it means
to Spark: any scheme Hadoop has a file system for (``file://``, ``hdfs://``, ``s3a://`` with its connector on the
class path), Hadoop's globs (``{a,b}`` included; a comma inside braces does not separate names), and a scheme-less
path on Hadoop's default file system, the local one unless ``fs.defaultFS`` says otherwise. The tasks then read the
listed files through Spark as well, so the executors never need the files on a local disk.

Anything that names nothing, or a file that cannot be opened, is reported as a missing input, the way a file that
fails in its task is, and the run goes on with the rest.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

# binlog.000042, mysql-bin.000001, mariadb-bin.123456: a base name and a numeric extension of six digits or more.
BINLOG_NAME = re.compile(r"^.+\.\d{6,}$")
LOG_NAME = re.compile(r"^relaylogs-\d{8}\.(txt|jsonl)$")
GLOB_CHARACTERS = frozenset("*?[{")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")

# How to take the last binlog file of each server's series (see last_of_series): like any other, which must end the
# way a closed binlog ends, or as the server's live binlog, whose end is legitimately open.
ARCHIVED = "archived"
LIVE = "live"
LAST_BINLOG = (ARCHIVED, LIVE)


@dataclass
class Inputs:
    binlogs: list[str] = field(default_factory=list)  # fully qualified URIs, as Hadoop lists them
    logs: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # URI -> bytes, to hand the biggest files out first
    missing: list[tuple[str, str]] = field(default_factory=list)  # (what was asked for, why nothing was read)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why it is left out)


class ListingError(Exception):
    """A name that lists nothing readable; the message says why, in one line."""


def base_name(uri: str) -> str:
    return uri.rstrip("/").rpartition("/")[2]


def folder_of(uri: str) -> str:
    return uri.rstrip("/").rpartition("/")[0]


def split_names(spec: str) -> list[str]:
    """The comma-separated names of ``spec``; a comma inside a glob's braces belongs to the glob."""
    names: list[str] = []
    depth = 0
    current: list[str] = []
    for char in spec:
        if char == "," and depth == 0:
            names.append("".join(current))
            current = []
            continue
        if char == "{":
            depth += 1
        elif char == "}" and depth:
            depth -= 1
        current.append(char)
    names.append("".join(current))
    return [name.strip() for name in names if name.strip()]


class HadoopFiles:
    """File listing through the JVM's Hadoop FileSystem, with the Spark context's Hadoop configuration."""

    def __init__(self, spark: Any) -> None:
        context = getattr(spark, "sparkContext", spark)  # a SparkSession or a SparkContext
        self._jvm = context._jvm
        self._conf = context._jsc.hadoopConfiguration()
        default = self._jvm.org.apache.hadoop.fs.FileSystem.getDefaultUri(self._conf)
        self._default_is_local = str(default.getScheme() or "file") == "file"

    def qualified(self, name: str) -> str:
        """``name`` with ``~`` expanded and, on a local default file system, a relative path made absolute here:
        the JVM's working directory is where the driver started, not necessarily where it is now."""
        if name.startswith("~"):
            name = os.path.expanduser(name)
        if self._default_is_local and not SCHEME.match(name) and not name.startswith("/"):
            name = os.path.abspath(name)
        return name

    def files(self, name: str, pattern: re.Pattern[str], what: str) -> list[tuple[str, int]]:
        """(URI, size) of the readable files ``name`` stands for, sorted by URI.

        A directory contributes the files whose names match ``pattern``; a glob or a file is taken as given.
        """
        name = self.qualified(name)
        try:
            path = self._jvm.org.apache.hadoop.fs.Path(name)
            fs = path.getFileSystem(self._conf)
            statuses = fs.globStatus(path)
            if statuses is None:  # Hadoop's answer for a plain path that does not exist
                raise ListingError("no such file or directory")
            if any(char in name for char in GLOB_CHARACTERS):
                found = [s for s in statuses if s.isFile()]
                if not found:
                    raise ListingError("no file matches")
            elif statuses[0].isDirectory():
                found = [s for s in fs.listStatus(statuses[0].getPath()) if s.isFile()]
                found = [s for s in found if pattern.match(s.getPath().getName())]
                if not found:
                    raise ListingError(f"no {what} files in this directory")
            else:
                found = list(statuses)
            listed = sorted((s.getPath().toString(), int(s.getLen())) for s in found)
        except ListingError:
            raise
        except Exception as exc:  # noqa: BLE001 - a Java exception through py4j: say it in one line
            raise ListingError(java_message(exc)) from None
        return listed

    def check_readable(self, uri: str) -> None:
        """Opens and closes the file, so that a file the tasks could not open is reported here, not fatal there:
        a read that fails inside Spark (not in the decoder) fails the task, and with it the whole run."""
        try:
            path = self._jvm.org.apache.hadoop.fs.Path(uri)
            path.getFileSystem(self._conf).open(path).close()
        except Exception as exc:  # noqa: BLE001 - as in files()
            raise ListingError(f"cannot be opened: {java_message(exc)}") from None


def java_message(exc: BaseException) -> str:
    """The first line of a Java exception's message (or of a Python one), without py4j's wrapping."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        text = str(java.getMessage() or java.getClass().getName())
    else:
        text = str(exc) or exc.__class__.__name__
    return text.strip().splitlines()[0] if text.strip() else exc.__class__.__name__


def expand(
    hadoop: HadoopFiles, spec: str, pattern: re.Pattern[str], what: str
) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    """Files named by ``spec`` (comma-separated directories, globs, files, URIs), sorted, no duplicates."""
    found: list[tuple[str, int]] = []
    missing: list[tuple[str, str]] = []
    for name in split_names(spec):
        try:
            listed = hadoop.files(name, pattern, what)
        except ListingError as exc:
            missing.append((name, str(exc)))
            continue
        for uri, size in listed:
            try:
                hadoop.check_readable(uri)
            except ListingError as exc:
                missing.append((uri, str(exc)))
                continue
            found.append((uri, size))
    return list(dict.fromkeys(found)), missing


def last_of_series(binlogs: list[str]) -> set[str]:
    """The highest-numbered file of each series (same folder, same base name: one server's binlog.000001,
    binlog.000002...): the only one that its server may still be writing."""
    last: dict[tuple[str, str], tuple[int, str]] = {}
    for uri in binlogs:
        stem, _, number = base_name(uri).rpartition(".")
        if not number.isdigit():
            continue
        key = (folder_of(uri), stem)
        if key not in last or int(number) > last[key][0]:
            last[key] = (int(number), uri)
    return {uri for _, uri in last.values()}


def collect(spark: Any, binlogs: str | None, logs: str | None) -> Inputs:
    """The run's files, listed with ``spark``'s Hadoop configuration. Where a day has both change log layouts, the
    JSON lines are read and the text is skipped: a logger writing both layouts writes every change twice."""
    hadoop = HadoopFiles(spark)
    inputs = Inputs()
    if binlogs:
        files, missing = expand(hadoop, binlogs, BINLOG_NAME, "binlog")
        inputs.binlogs = [uri for uri, _ in files]
        inputs.sizes.update(files)
        inputs.missing.extend(missing)
    if logs:
        files, missing = expand(hadoop, logs, LOG_NAME, "change log")
        inputs.missing.extend(missing)
        json_days = {(folder_of(uri), base_name(uri).rsplit(".", 1)[0]) for uri, _ in files if uri.endswith(".jsonl")}
        for uri, size in files:
            if uri.endswith(".txt") and (folder_of(uri), base_name(uri).rsplit(".", 1)[0]) in json_days:
                inputs.skipped.append((uri, "the same day's .jsonl file is read instead"))
            else:
                inputs.logs.append(uri)
                inputs.sizes[uri] = size
    return inputs
