"""``manage.py usagepipeline`` as an operator runs it: a bad master, an unwritable output and a missing input each
end in one line and exit status 1 within seconds, before any decoding; a partial input ends in exit status 2; no run
leaves files behind in the temporary folders it was given."""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path

import pytest

from devtools.sandbox import MariaDB, free_tcp_port
from tests.helpers.pipeline import event_map, run_workload, usagepipeline

pytestmark = pytest.mark.spark


def leftovers(folder: Path, wait: float = 15.0) -> list[str]:
    """What a run left in the temporary folders it was given. Spark's JVM outlives the command's Python by the time
    its shutdown hooks take (they remove its scratch folders), so this waits for them a little."""
    deadline = time.monotonic() + wait
    while True:
        found = sorted(str(p.relative_to(folder)) for name in ("tmp", "spark-local") for p in (folder / name).iterdir())
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_unreachable_master_is_one_line_at_once(tmp_path: Path) -> None:
    port = free_tcp_port()
    code, out, err, seconds = usagepipeline(
        tmp_path, "--binlogs", str(tmp_path), "--out", str(tmp_path / "out"), "--master", f"spark://127.0.0.1:{port}"
    )
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"CommandError: master spark://127.0.0.1:{port} is not reachable (127.0.0.1:{port}: connection refused)"
    ]
    assert seconds < 15 and leftovers(tmp_path) == []


@pytest.mark.parametrize("master", ["spark://127.0.0.1", "local[x]", "spark:/127.0.0.1:7077", "yarnn"])
def test_malformed_master_is_one_line(tmp_path: Path, master: str) -> None:
    code, _out, err, seconds = usagepipeline(tmp_path, "--binlogs", str(tmp_path), "--out", "x", "--master", master)
    assert code == 1 and len(err.splitlines()) == 1 and seconds < 15
    assert err.startswith(f"CommandError: --master {master!r}")


def test_unwritable_output_fails_before_decoding(tmp_path: Path) -> None:
    """The output's folder cannot be made (its parent is a file): found by the probe, before any input is read."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    binlogs = tmp_path / "binlogs"
    binlogs.mkdir()
    (binlogs / "binlog.000001").write_bytes(b"\xfebin")
    code, out, err, seconds = usagepipeline(
        tmp_path, "--binlogs", str(binlogs), "--out", str(blocker / "out"), "--master", "local[1]", "--no-load"
    )
    assert code == 1 and "decode" not in out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"CommandError: output file:{blocker}/out cannot be"), err
    assert seconds < 60 and blocker.read_text() == "not a folder"
    assert leftovers(tmp_path) == []


def test_missing_input_fails_before_decoding_and_verbose_shows_sparks_log(tmp_path: Path) -> None:
    args = ("--binlogs", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"), "--master", "local[1]")
    code, out, err, seconds = usagepipeline(tmp_path, *args)
    assert code == 1 and "decode" not in out and seconds < 60
    assert err.splitlines() == [f"CommandError: missing input: {tmp_path / 'nowhere'}: no such file or directory"]
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []

    code, _out, err, _seconds = usagepipeline(tmp_path, *args, "--verbose")
    assert code == 1 and len(err.splitlines()) > 1 and "Spark" in err
    assert err.splitlines()[-1].startswith("CommandError: missing input:")


def test_partial_input_is_in_the_exit_status(fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    """A binlog cut inside a transaction: the run goes on, writes its outputs, and exits 2 with the file's line."""
    server, schema = fresh_schema
    _w, files = run_workload(server, schema)
    binlogs = tmp_path / "binlogs"
    binlogs.mkdir()
    cut = event_map(files[0])[-2][0]  # the start of the last transaction's commit: inside that transaction
    (binlogs / files[0].name).write_bytes(files[0].read_bytes()[:cut])
    for path in files[1:]:
        (binlogs / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "out"
    code, stdout, err, _seconds = usagepipeline(
        tmp_path, "--binlogs", str(binlogs), "--out", f"file://{out}", "--master", "local[1]", "--no-load"
    )
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"not counted: file:{binlogs / files[0].name}: partial: ends inside")
    assert lines[1].startswith("CommandError: 1 input(s) not counted in full (3 of 3 files counted)")
    assert "files: 2 complete" in stdout and "1 partial" in stdout
    assert len(list(out.glob("run-*.json"))) == 1 and (out / "usage_hourly").is_dir()
    assert leftovers(tmp_path) == []


def test_files_passed_over_are_named_and_only_uncounted_bytes_are_in_the_exit_status(
    fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """A copy of a binlog and the binlog index are skipped, which is no problem: the copy's changes are counted from
    the original, the index holds none. A compressed binlog is not read: its changes are not counted, exit status 2."""
    server, schema = fresh_schema
    _w, files = run_workload(server, schema)
    binlogs = tmp_path / "binlogs"
    binlogs.mkdir()
    for path in files[:2]:
        shutil.copy(path, binlogs / path.name)
    shutil.copy(files[0], binlogs / f"{files[0].name}-copy.{files[0].name.rpartition('.')[2]}")
    stem = files[0].name.rpartition(".")[0]
    (binlogs / f"{stem}.index").write_text("".join(f"./{p.name}\n" for p in files))
    args = ("--binlogs", str(binlogs), "--out", str(tmp_path / "out"), "--master", "local[1]", "--no-load")

    code, stdout, err, _seconds = usagepipeline(tmp_path, *args)
    assert code == 0, err
    copy = sorted(binlogs.glob("*-copy.*"))[0]
    assert f"skipped file:{copy}: duplicate of file:{binlogs / files[0].name}, not counted" in stdout
    assert f"skipped file:{binlogs / stem}.index: the binlog index, not a binlog" in stdout
    assert "files: 2 complete" in stdout and "2 skipped" in stdout

    (binlogs / f"{files[2].name}.gz").write_bytes(gzip.compress(files[2].read_bytes()))
    code, stdout, err, _seconds = usagepipeline(tmp_path, *args)
    assert code == 2, err
    compressed = f"file:{binlogs / files[2].name}.gz"
    lines = err.splitlines()
    assert lines[0] == f"not counted: {compressed}: not read: compressed binlog: decompress it first"
    assert len(lines) == 2 and lines[1].startswith("CommandError: 1 input(s) not counted in full (2 of 3 files")
    assert "1 not read" in stdout and leftovers(tmp_path) == []
