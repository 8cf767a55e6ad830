"""One folder under the system's temporary directory for everything a test run writes outside pytest's ``tmp_path``:
the private servers' data directories, the relay processes' logs and data folders, the SQLite store. Removed when
the process that made it exits (by then the fixtures have stopped the servers and processes that used it), so that a
run leaves nothing behind however many processes it started."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_root: Path | None = None


def _run_folder() -> Path:
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="relay-tests-"))
        atexit.register(_remove, _root, os.getpid())
    return _root


def scratch_dir(prefix: str) -> Path:
    """A new, empty folder of this run whose name starts with ``prefix``."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_run_folder()))


def scratch_file(prefix: str, suffix: str = "") -> Path:
    """A new, empty file of this run."""
    descriptor, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=_run_folder())
    os.close(descriptor)
    return Path(name)


def _remove(root: Path, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child, which inherits the handler but not the folder's use
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def small_disk(folder: Path, megabytes: int) -> Iterator[Path]:
    """A tmpfs of ``megabytes`` mounted on ``folder``/disk while inside (mounting needs root, as CI has): the test
    is skipped, saying why, where it cannot be mounted."""
    import subprocess

    import pytest

    mount = folder / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)
