"""Ships the code that the tasks import to the executors, so that any Spark master (not only local) can run them.

The tasks import ``binlog`` and ``relay.pipeline`` (which imports neither Django nor the rest of ``relay``); both
go into one zip that ``SparkContext.addPyFile`` puts on every executor's ``sys.path``.

The zip is built in a folder of Spark's driver scratch space (under ``SparkFiles.getRootDirectory()``), which Spark
deletes when the context stops or the JVM exits: the driver serves the file from where it was added for as long as
executors may start (a worker lost mid-run brings new ones), so it cannot be removed earlier, and a folder of our
own under /tmp would outlive every run that failed.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
# (folder under the project root, recurse): what the tasks import.
SHIPPED = (("binlog", True), ("relay/pipeline", True))
PACKAGE_MARKERS = ("relay/__init__.py",)


def build_zip(destination: Path, root: Path = PROJECT_ROOT) -> Path:
    """A zip of the shipped packages' Python files, with paths relative to the project root."""
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, recurse in SHIPPED:
            base = root / folder
            files = base.rglob("*.py") if recurse else base.glob("*.py")
            for path in sorted(files):
                if "__pycache__" not in path.parts:
                    archive.write(path, path.relative_to(root).as_posix())
        for marker in PACKAGE_MARKERS:
            archive.write(root / marker, marker)
    return destination


def ship_packages(spark_context: Any) -> Path:
    """Once per SparkContext: Spark refuses a second file of the same name from another path."""
    shipped = getattr(spark_context, "_relay_shipped", None)
    if shipped is not None:
        return shipped
    from pyspark import SparkFiles

    # A subfolder: addPyFile copies the zip into the root folder itself, which must not be the file being copied.
    folder = Path(SparkFiles.getRootDirectory()) / "relay-pipeline"
    folder.mkdir(parents=True, exist_ok=True)
    path = build_zip(folder / "relay_pipeline_tasks.zip")
    spark_context.addPyFile(str(path))
    spark_context._relay_shipped = path
    return path
