"""Which files a run reads: ``--binlogs`` and ``--logs`` name directories, globs, files or URIs (comma-separated).

Listing happens on the driver, through the Hadoop FileSystem of the Spark driver's JVM, so a name means what it means
to Spark: any scheme Hadoop has a file system for (``file://``, ``hdfs://``, ``s3a://`` with its connector on the
class path), Hadoop's globs (``{a,b}`` included; a comma inside braces does not separate names), and a scheme-less
path on Hadoop's default file system, the local one unless ``fs.defaultFS`` says otherwise. The tasks then read the
listed files through Spark as well, so the executors never need the files on a local disk.

Anything that names nothing, or a file that cannot be opened, is reported as a missing input, the way a file that
fails in its task is, and the run goes on with the rest. Every file of a directory is in the report: read, or passed
over with the reason (a compressed binlog, the binlog index, a name that is not a binlog's). A file whose bytes are
another input's (``identity``) is read once, and the copy is reported as such.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from relay.pipeline.identity import find_copies, find_cut_copies

# binlog.000042, mysql-bin.000001, mariadb-bin.123456: a base name and a numeric extension of six digits or more.
BINLOG_NAME = re.compile(r"^.+\.\d{6,}$")
LOG_NAME = re.compile(r"^relaylogs-\d{8}\.(txt|jsonl)$")
# The worker's marker of a batch it is putting in the log (relay/worker/changelog.py PENDING).
CHANGE_LOG_MARKER = ".relaylogs-pending.json"
GLOB_CHARACTERS = frozenset("*?[{")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")

# How to take the last binlog file of each server's series (see last_of_series): like any other, which must end the
# way a closed binlog ends, or as the server's live binlog, whose end is legitimately open.
ARCHIVED = "archived"
LIVE = "live"
LAST_BINLOG = (ARCHIVED, LIVE)

# What the archivers of binlogs and logs compress with: such a file holds a binlog, but not one a task can decode.
COMPRESSED_SUFFIXES = frozenset({".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4"})


@dataclass
class Inputs:
    binlogs: list[str] = field(default_factory=list)  # fully qualified URIs, as Hadoop lists them
    logs: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # URI -> bytes, to hand the biggest files out first
    missing: list[tuple[str, str]] = field(default_factory=list)  # (what was asked for, why nothing was read)
    # (file, why it is left out) of files whose row changes are counted anyway or that hold none: a copy of another
    # input, the text log of a day whose JSON log is read, the binlog index.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # (file, why it is not read) of files of an input directory whose bytes may hold row changes that the run does
    # not count (a compressed binlog, an unknown name): like a partial file, a problem of the run.
    not_read: list[tuple[str, str]] = field(default_factory=list)
    copies: dict[str, str] = field(default_factory=dict)  # URI of a copy -> URI of the file counted instead


@dataclass(frozen=True)
class PassedOver:
    """A file of an input directory that is not read: why, and whether its bytes may hold uncounted row changes."""

    uri: str
    why: str
    uncounted: bool


@dataclass
class Listing:
    """What the names of one option list: readable files, names that list nothing, files passed over."""

    found: list[tuple[str, int]] = field(default_factory=list)  # (URI, size), in order, no URI twice
    missing: list[tuple[str, str]] = field(default_factory=list)
    passed_over: list[PassedOver] = field(default_factory=list)


class ListingError(Exception):
    """A name that lists nothing readable; the message says why, in one line."""


def base_name(uri: str) -> str:
    return uri.rstrip("/").rpartition("/")[2]


def folder_of(uri: str) -> str:
    return uri.rstrip("/").rpartition("/")[0]


def why_passed_over(name: str, pattern: re.Pattern[str], what: str) -> PassedOver:
    """Why a file of an input directory whose name does not match ``pattern`` is not read (``uri`` left empty)."""
    stem, dot, suffix = name.rpartition(".")
    if dot and f".{suffix.lower()}" in COMPRESSED_SUFFIXES and pattern.match(stem):
        return PassedOver("", f"compressed {what}: decompress it first", uncounted=True)
    if what == "binlog" and name.endswith(".index"):
        # It lists binlog file names, one a line: nothing in it is a row change.
        return PassedOver("", "the binlog index, not a binlog", uncounted=False)
    if what == "change log" and name == CHANGE_LOG_MARKER:
        # The worker's marker of a batch whose lines it is putting in the log: positions and sizes, no row change.
        return PassedOver("", "the change log's marker of a batch being written, not a change log", uncounted=False)
    return PassedOver("", f"not a {what} file name", uncounted=True)


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
        self._gateway = context._gateway
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

    def files(self, name: str, pattern: re.Pattern[str], what: str) -> tuple[list[tuple[str, int]], list[PassedOver]]:
        """(URI, size) of the readable files ``name`` stands for, sorted by URI, and the files passed over.

        A directory contributes the files whose names match ``pattern``, and every other file of it is passed over
        with the reason; a glob or a file is taken as given.
        """
        passed_over: list[PassedOver] = []
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
                found = []
                for status in fs.listStatus(statuses[0].getPath()):
                    if not status.isFile():
                        continue
                    file_name = status.getPath().getName()
                    if pattern.match(file_name):
                        found.append(status)
                    else:
                        why = why_passed_over(file_name, pattern, what)
                        passed_over.append(PassedOver(status.getPath().toString(), why.why, why.uncounted))
                if not found:
                    others = "; ".join(f"{base_name(p.uri)}: {p.why}" for p in sorted(passed_over, key=_uri)[:3])
                    more = " ..." if len(passed_over) > 3 else ""
                    raise ListingError(f"no {what} files in this directory" + (f" ({others}{more})" if others else ""))
            else:
                found = list(statuses)
            listed = sorted((s.getPath().toString(), int(s.getLen())) for s in found)
        except ListingError:
            raise
        except Exception as exc:  # noqa: BLE001 - a Java exception through py4j: say it in one line
            raise ListingError(java_message(exc)) from None
        return listed, sorted(passed_over, key=_uri)

    def check_readable(self, uri: str) -> None:
        """Opens and closes the file, so that a file the tasks could not open is reported here, not fatal there:
        a read that fails inside Spark (not in the decoder) fails the task, and with it the whole run."""
        try:
            path = self._jvm.org.apache.hadoop.fs.Path(uri)
            path.getFileSystem(self._conf).open(path).close()
        except Exception as exc:  # noqa: BLE001 - as in files()
            raise ListingError(f"cannot be opened: {java_message(exc)}") from None

    def head(self, uri: str, count: int) -> bytes:
        """The file's first ``count`` bytes (fewer when it is shorter): a few, through py4j."""
        jvm = self._jvm
        try:
            path = jvm.org.apache.hadoop.fs.Path(uri)
            stream = path.getFileSystem(self._conf).open(path)
            try:
                return bytes(stream.readNBytes(count))
            finally:
                stream.close()
        except Exception as exc:  # noqa: BLE001 - as in files()
            raise ListingError(f"cannot be read: {java_message(exc)}") from None

    def digest(self, uri: str, limit: int | None = None, start: int = 0) -> bytes:
        """SHA-256 of the file's bytes from ``start`` to ``limit`` (its end when None), computed in the JVM: the bytes
        never cross py4j, one call per file whatever its size."""
        jvm = self._jvm
        try:
            path = jvm.org.apache.hadoop.fs.Path(uri)
            stream = path.getFileSystem(self._conf).open(path)
            try:
                if start:
                    stream.seek(start)
                sha = jvm.java.security.MessageDigest.getInstance("SHA-256")
                digesting = jvm.java.security.DigestInputStream(stream, sha)
                if limit is None:
                    digesting.transferTo(jvm.java.io.OutputStream.nullOutputStream())
                elif limit > start:
                    digesting.readNBytes(self._gateway.new_array(jvm.byte, limit - start), 0, limit - start)
                return bytes(sha.digest())
            finally:
                stream.close()
        except Exception as exc:  # noqa: BLE001 - as in files()
            raise ListingError(f"cannot be read: {java_message(exc)}") from None


def _uri(passed_over: PassedOver) -> str:
    return passed_over.uri


def java_message(exc: BaseException) -> str:
    """The first line of a Java exception's message (or of a Python one), without py4j's wrapping."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        text = str(java.getMessage() or java.getClass().getName())
    else:
        text = str(exc) or exc.__class__.__name__
    return text.strip().splitlines()[0] if text.strip() else exc.__class__.__name__


def expand(hadoop: HadoopFiles, spec: str, pattern: re.Pattern[str], what: str) -> Listing:
    """Files named by ``spec`` (comma-separated directories, globs, files, URIs), sorted, no URI twice."""
    listing = Listing()
    found: dict[str, int] = {}
    for name in split_names(spec):
        try:
            listed, passed_over = hadoop.files(name, pattern, what)
        except ListingError as exc:
            listing.missing.append((name, str(exc)))
            continue
        listing.passed_over += passed_over
        for uri, size in listed:
            if uri in found:  # named twice (a directory and a glob inside it): the one file, read once
                continue
            try:
                hadoop.check_readable(uri)
            except ListingError as exc:
                listing.missing.append((uri, str(exc)))
                continue
            found[uri] = size
    listing.found = list(found.items())
    listing.passed_over = list({p.uri: p for p in listing.passed_over}.values())
    return listing


def find_input_copies(hadoop: HadoopFiles, files: list[tuple[str, int]]) -> dict[str, tuple[str, str]]:
    """Copy URI -> (original URI, why it is not counted) among ``files``: see ``identity``."""

    def digest(uri: str, limit: int | None, start: int = 0) -> bytes:
        try:
            return hadoop.digest(uri, limit, start)
        except ListingError:
            # Equal to no other file's digest: the file is read by its task like any other, and reported there.
            return b"unreadable " + uri.encode()

    def head(uri: str, count: int) -> bytes:
        try:
            return hadoop.head(uri, count)
        except ListingError:
            return b""

    copies = {
        copy: (original, f"duplicate of {original}, not counted")
        for copy, original in find_copies(files, digest).items()
    }
    sizes = dict(files)
    rest = [(uri, size) for uri, size in files if uri not in copies]
    for copy, original in find_cut_copies(rest, digest, head).items():
        copies[copy] = (original, f"the first {sizes[copy]:,} bytes of {original} (a copy cut short), not counted")
    return copies


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
        files = _listed(hadoop, inputs, expand(hadoop, binlogs, BINLOG_NAME, "binlog"))
        inputs.binlogs = [uri for uri, _ in files]
        inputs.sizes.update(files)
    if logs:
        files = _listed(hadoop, inputs, expand(hadoop, logs, LOG_NAME, "change log"))
        json_days = {(folder_of(uri), base_name(uri).rsplit(".", 1)[0]) for uri, _ in files if uri.endswith(".jsonl")}
        for uri, size in files:
            if uri.endswith(".txt") and (folder_of(uri), base_name(uri).rsplit(".", 1)[0]) in json_days:
                inputs.skipped.append((uri, "the same day's .jsonl file is read instead"))
            else:
                inputs.logs.append(uri)
                inputs.sizes[uri] = size
    return inputs


def _listed(hadoop: HadoopFiles, inputs: Inputs, listing: Listing) -> list[tuple[str, int]]:
    """The files of ``listing`` to read; what it found missing, passed over or copied goes into ``inputs``."""
    inputs.missing += listing.missing
    for passed_over in listing.passed_over:
        (inputs.not_read if passed_over.uncounted else inputs.skipped).append((passed_over.uri, passed_over.why))
    copies = find_input_copies(hadoop, listing.found)
    inputs.copies.update((copy, original) for copy, (original, _) in copies.items())
    inputs.skipped += [(copy, why) for copy, (_, why) in copies.items()]
    return [(uri, size) for uri, size in listing.found if uri not in copies]
