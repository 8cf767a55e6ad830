"""Where a run writes: ``--out`` as Hadoop understands it, so that every output goes through Hadoop's file systems.

``file://``, ``hdfs://nn:8020/...`` and ``s3a://bucket/...`` keep their scheme and authority (a ``pathlib.Path``
would collapse ``//`` and lose them), a scheme-less path is on Hadoop's default file system as the inputs' are, and
the Parquet outputs and the run report land side by side wherever that is.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from relay.pipeline.inputs import HadoopFiles, java_message


class OutputError(Exception):
    """The output location cannot be written; the message says why, in one line."""


class OutputLocation:
    def __init__(self, spark: Any, out: str) -> None:
        context = getattr(spark, "sparkContext", spark)
        self._jvm = context._jvm
        self._conf = context._jsc.hadoopConfiguration()
        name = HadoopFiles(spark).qualified(str(out))
        try:
            path = self._jvm.org.apache.hadoop.fs.Path(name)
            self._fs = path.getFileSystem(self._conf)
            self.uri = str(self._fs.makeQualified(path).toString()).rstrip("/")
        except Exception as exc:  # noqa: BLE001 - a Java exception through py4j: say it in one line
            raise OutputError(f"output {out}: {java_message(exc)}") from None

    def child(self, name: str) -> str:
        """The URI of an output under the location (string joined: the scheme and authority stay as they are)."""
        return f"{self.uri}/{name}"

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _plain_fs(self) -> Any:
        """The file system without Hadoop's checksum sidecars (``.name.crc``) where it has them: the local one."""
        try:
            return self._fs.getRawFileSystem()
        except Exception:  # noqa: BLE001 - not a ChecksumFileSystem: it writes no sidecars
            return self._fs

    def write_text(self, name: str, text: str) -> str:
        """Writes (replaces) a small text file under the location; returns its URI."""
        uri = self.child(name)
        fs = self._plain_fs()
        try:
            fs.mkdirs(self._path(self.uri))
            stream = fs.create(self._path(uri), True)
            try:
                stream.write(bytearray(text.encode("utf-8")))
            finally:
                stream.close()
        except Exception as exc:  # noqa: BLE001 - as in __init__
            raise OutputError(f"cannot write {uri}: {java_message(exc)}") from None
        return uri

    def probe(self) -> None:
        """Creates the location if need be, writes and removes a file in it, and removes the location again if it
        did not exist: the run finds out that it cannot write before decoding, not after, and leaves nothing."""
        fs = self._plain_fs()
        folder = self._path(self.uri)
        probe = self._path(self.child(f".relay-probe-{uuid.uuid4().hex[:12]}"))
        created = None  # the outermost folder the probe created, removed again at the end
        try:
            if fs.exists(folder):
                if not fs.getFileStatus(folder).isDirectory():
                    raise OutputError(f"output {self.uri} is a file, not a directory")
            else:
                top = folder
                while top.getParent() is not None and not fs.exists(top.getParent()):
                    top = top.getParent()
                if not fs.mkdirs(folder):
                    raise OutputError(f"output {self.uri} cannot be created")
                created = top
            stream = fs.create(probe, True)
            try:
                stream.write(bytearray(b"relay"))
            finally:
                stream.close()
            fs.delete(probe, False)
        except OutputError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in __init__
            raise OutputError(f"output {self.uri} cannot be written: {java_message(exc)}") from None
        finally:
            if created is not None:
                # The probe's own folder: nothing else can be in it. Failing to remove it must not hide the cause.
                with contextlib.suppress(Exception):
                    fs.delete(created, True)
