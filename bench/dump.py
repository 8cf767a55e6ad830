"""Whole-process ``python -m binlog dump`` vs ``mariadb-binlog -v`` on the same binlog file(s), in CPU seconds.

    .venv/bin/python bench/dump.py                          # 25,000 inserts + 25,000 updates, 7 runs of each
    .venv/bin/python bench/dump.py --json                   # time ``dump --json`` instead of the text form
    .venv/bin/python bench/dump.py --save /tmp/dumpbench    # keep the binlog files (and reuse them: --files)
    .venv/bin/python bench/dump.py --files /tmp/dumpbench/*-bin.0* --start-position 4
    .venv/bin/python bench/dump.py --baseline HEAD          # also time the binlog/ package of a commit, same run
    .venv/bin/python bench/dump.py --rows 5000 --statement-rows 1   # a transaction a row: per-event costs
    .venv/bin/python bench/dump.py --cold-bytecode          # compile binlog/ in every run of ours

Without ``--files`` it starts a private MariaDB (``--binlog-row-metadata=FULL``), writes bench/decode.py's workload
(a 21-column table of every common type, 10% NULL text) to its binlog and takes the closed files of that span. Each
command runs ``--runs`` times, interleaved, with its output to /dev/null; a run's cost is the child's user+sys CPU
time (from ``os.wait4``), which a busy machine skews much less than wall time (shown too). It prints each command's
median, the ratio ``mariadb-binlog CPU / ours CPU`` (1.0x: as fast as the server's own tool), and the load average
before and after.

``--baseline REV`` extracts ``binlog/`` of that commit (``git archive``, read-only) into a temporary directory and
times its ``dump`` too, so a change is measured against its predecessor under the same load; its output must be ours
byte for byte.

Our runs read their bytecode from a cache of their own (``PYTHONPYCACHEPREFIX`` in the temporary directory, written
by the first, untimed run), as an installed package has its bytecode compiled once: the other binary is not
compiled in its runs either. Where ``PYTHONDONTWRITEBYTECODE`` is set and the source tree has no ``__pycache__``,
every run would otherwise compile the package first (about 0.05 CPU-s); ``--cold-bytecode`` measures that: the
runs inherit the environment as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run_once(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``argv``, its stdout to /dev/null."""
    with open(os.devnull, "wb") as null:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=null, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]}...: exit status {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def output_of(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """(lines, SHA-256) of a run's output."""
    out = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, check=True).stdout
    return out.count(b"\n"), hashlib.sha256(out).hexdigest()


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=25_000, help="rows inserted, then updated (a change each)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--statement-rows", type=int, help="rows per INSERT and UPDATE (1: a transaction a row)")
    parser.add_argument("--json", action="store_true", help="time `dump --json` (mariadb-binlog stays -v)")
    parser.add_argument("--files", nargs="+", type=Path, help="binlog files to use instead of a new workload")
    parser.add_argument("--start-position", type=int, default=4, help="with --files: start of the first file")
    parser.add_argument("--save", type=Path, help="copy the workload's binlog files into this directory")
    parser.add_argument("--baseline", metavar="REV", help="also time binlog/ as of this commit")
    parser.add_argument("--cold-bytecode", action="store_true", help="no bytecode cache: compile in every run")
    args = parser.parse_args()

    server = None
    base = Path(tempfile.mkdtemp(prefix="relay-bench-dump-"))
    try:
        if args.files:
            files, pos = [f.resolve() for f in args.files], args.start_position
        else:
            from bench.decode import write_workload
            from tests.helpers.mariadb import MariaDB

            server = MariaDB(base / "server", row_metadata_full=True).start()
            file, pos, _ = write_workload(server, args.rows, args.statement_rows)
            files = [f for f in server.binlog_files() if f.name >= file][:-1]  # the span: closed files only
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                for f in files:
                    shutil.copy2(f, args.save / f.name)
                files = [args.save / f.name for f in files]
                print(f"binlog files saved: {' '.join(map(str, files))} (start position {pos})")
            server.stop()  # its files stay; its CPU is no longer in the way

        tool = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
        if tool is None:
            raise SystemExit("mariadb-binlog not found")
        names = [str(f) for f in files]
        flags = ["--json"] if args.json else []
        dump = [sys.executable, "-m", "binlog", "dump", *flags, "--start-position", str(pos), *names]
        ours = "python -m binlog dump" + (" --json" if args.json else "")

        def python_env(name: str, **extra: str) -> dict[str, str] | None:
            if args.cold_bytecode:
                return dict(os.environ, **extra) if extra else None
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            return dict(env, PYTHONPYCACHEPREFIX=str(base / "bytecode" / name), **extra)

        commands: dict[str, tuple[list[str], Path, dict[str, str] | None]] = {
            "mariadb-binlog -v": ([tool, "-v", f"--start-position={pos}", *names], ROOT, None),
            ours: (dump, ROOT, python_env("ours")),
        }
        if args.baseline:
            old = base / "baseline"
            old.mkdir()
            archive = subprocess.run(["git", "archive", args.baseline, "binlog"], cwd=ROOT, capture_output=True,
                                     check=True).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
            commands[f"dump as of {args.baseline}"] = (dump, old, python_env("baseline", PYTHONPATH=str(old)))

        rows, digest = output_of(*commands[ours])  # also writes the bytecode caches the timed runs read
        for name, (argv, cwd, env) in commands.items():
            if name.startswith("dump as of") and output_of(argv, cwd, env) != (rows, digest):
                raise SystemExit(f"{name}: an output other than {ours}'s")
        size = sum(f.stat().st_size for f in files)
        print(f"{rows:,} row changes, {len(files)} binlog file(s), {size / 1e6:.1f} MB; {args.runs} runs of each, "
              f"interleaved; load average before: {_loadavg()}")  # fmt: skip
        print("python bytecode: " + ("as the environment has it (compiled in every run without a cache)"
                                     if args.cold_bytecode else "cached by the first run, as installed"))  # fmt: skip

        cpu: dict[str, list[float]] = {name: [] for name in commands}
        wall: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, (argv, cwd, env) in commands.items():
                c, w = run_once(argv, cwd, env)
                cpu[name].append(c)
                wall[name].append(w)
        median = {name: statistics.median(values) for name, values in cpu.items()}
        for name in commands:
            runs = " ".join(f"{x:.2f}" for x in sorted(cpu[name]))
            print(f"  {name:<28} median {median[name]:6.3f} CPU-s  wall {statistics.median(wall[name]):6.3f} s  "
                  f"({rows / median[name]:>9,.0f} rows/CPU-s; runs {runs})")  # fmt: skip
        native = median["mariadb-binlog -v"]
        print()
        for name in commands:
            if name != "mariadb-binlog -v":
                print(f"  {name} / mariadb-binlog -v: {native / median[name]:.2f}x  (target >= 0.5x)")
        print(f"load average after: {_loadavg()}")
    finally:
        if server is not None:
            server.destroy()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
