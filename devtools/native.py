"""Builds the compiled row decoder (``binlog/_rows.c``) in place, beside its Python fallback.

    .venv/bin/python -m devtools.native          # build when the source is newer than the built module
    .venv/bin/python -m devtools.native --force  # build again

``scripts/bootstrap`` runs it. The relay works without the built module (``binlog/nativerows.py`` then uses the
generated Python decoders), so a machine without a C compiler still runs it; ``BINLOG_NATIVE=0`` chooses the Python
decoders where the module is built.
"""

from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "binlog" / "_rows.c"


def built_module() -> Path:
    return ROOT / "binlog" / ("_rows" + str(sysconfig.get_config_var("EXT_SUFFIX")))


def build(force: bool = False) -> Path:
    """The built module, compiled first when it is missing or older than its source."""
    target = built_module()
    if not force and target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return target
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extension = Extension("binlog._rows", [str(SOURCE.relative_to(ROOT))], extra_compile_args=["-O2", "-Wall"])
    distribution = Distribution({"name": "binlog-relay-native", "ext_modules": [extension]})
    command = build_ext(distribution)
    command.inplace = True
    command.force = True
    command.build_temp = str(ROOT / "build" / "native")
    command.ensure_finalized()
    command.run()
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="build even if the built module is up to date")
    args = parser.parse_args()
    import os

    os.chdir(ROOT)  # setuptools resolves the source and the in-place target from the current directory
    print(f"native row decoder: {build(args.force).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
