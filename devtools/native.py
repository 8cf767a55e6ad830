"""Builds the compiled hot paths in place, each beside the Python code it stands in for.

    .venv/bin/python -m devtools.native          # build what is missing or built from another version of its source
    .venv/bin/python -m devtools.native --force  # build again

* ``binlog/_rows.c``: the row decoder (``binlog/nativerows.py``; the generated Python decoders otherwise);
* ``binlog/_events.c``: packets into events, and the most frequent events decoded in one call
  (``binlog.parser.EventDecoder.feed_from``, ``binlog.connection.ReplicationConnection.read_events``);
* ``clientproto/_records.c``: the record form's column bytes (``clientproto.records.encode_images``) and its text
  (``record_text``);
* ``relay/worker/_copytext.c``: the COPY text of the rows the worker stores (``relay.worker.bulk.insert_rows``).

``scripts/bootstrap`` runs it. The relay works without them (the Python code runs instead), so a machine without a
C compiler still runs it; ``RELAY_NATIVE=0`` chooses the Python code where they are built.
"""

from __future__ import annotations

import argparse
import hashlib
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Each compiled module: its name and its source.
MODULES = (
    ("binlog._rows", ROOT / "binlog" / "_rows.c", ()),
    ("binlog._events", ROOT / "binlog" / "_events.c", ("z",)),
    ("clientproto._records", ROOT / "clientproto" / "_records.c", ()),
    ("relay.worker._copytext", ROOT / "relay" / "worker" / "_copytext.c", ()),
)


def built_module(name: str) -> Path:
    return ROOT.joinpath(*name.split(".")).with_name(
        name.rsplit(".", 1)[1] + str(sysconfig.get_config_var("EXT_SUFFIX"))
    )


def build(force: bool = False) -> list[Path]:
    """The built modules, each compiled first when it is missing or was built from another version of its source."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    built = []
    for name, source, libraries in MODULES:
        target = built_module(name)
        built.append(target)
        digest = hashlib.sha1(source.read_bytes()).hexdigest()  # in the module, checked when it is loaded
        if not force and target.exists() and digest.encode() in target.read_bytes():
            continue
        extension = Extension(
            name,
            [str(source.relative_to(ROOT))],
            define_macros=[("SOURCE_SHA1", f'"{digest}"')],
            extra_compile_args=["-O2", "-Wall"],
            libraries=list(libraries),
        )
        command = build_ext(Distribution({"name": "binlog-relay-native", "ext_modules": [extension]}))
        command.inplace = True
        command.force = True
        command.build_temp = str(ROOT / "build" / "native")
        command.ensure_finalized()
        command.run()
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="build even if the built module is up to date")
    args = parser.parse_args()
    import os

    os.chdir(ROOT)  # setuptools resolves the source and the in-place target from the current directory
    for target in build(args.force):
        print(f"compiled: {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
