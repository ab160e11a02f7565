"""Shipping the processor's code to where Spark runs its Python workers.

A UDF defined in the user's module is pickled by reference: executors import that module
by name, and on a cluster it is not there (``ModuleNotFoundError`` on the executor; over
Connect the client sees only "An exception was thrown from the Python worker"). With
``SparkSettings.ship_code`` on, ``on_start`` sends the module -- or, when it is inside a
package, the whole top-level package as a zip -- before the warm-up:

- Spark Connect: ``addArtifacts(path, pyfile=True)``, into this session only;
- classic PySpark: ``sparkContext.addPyFile``, to every executor of the application.

Off by default: local mode runs the driver's own interpreter and files, and shipping a
large package every start costs time. Dependencies from PyPI are not shipped; the
executors' environment needs them (``spark.executorEnv.*``, ``spark.pyspark.python``, or
the image the cluster runs).
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import weakref
import zipfile
from pathlib import Path
from typing import Any

from .._errors import ConfigError
from ._jobs import is_connect

log = logging.getLogger("eosflow.spark")


_sent: weakref.WeakKeyDictionary[Any, dict[str, Path]] = weakref.WeakKeyDictionary()
"""Per session, what was shipped by top-level name: Spark refuses the same file name a
second time from another path (two processors of one package share the session)."""

_archives: list[Path] = []
"""Temporary folders of zips classic Spark still serves (it reads the file when an
executor fetches it, not when it is added); removed when the session stops."""


def ship(spark: Any, module: str) -> Path:
    """Send ``module``'s code to the executors once per session; the file or zip sent."""
    sent = _sent.setdefault(spark, {})
    top = module.split(".")[0]
    if top in sent:
        return sent[top]
    path = code_archive(module)
    made = path.parent if path.parent.name.startswith(TEMP_PREFIX) else None
    if is_connect(spark):
        try:  # the bytes are uploaded now: the zip is not needed afterwards
            spark.addArtifacts(str(path), pyfile=True)
        finally:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
    else:
        if made is not None:
            _archives.append(made)
        spark.sparkContext.addPyFile(str(path))
    sent[top] = path
    log.info("shipped %s to the Spark executors (%s)", module, path.name)
    return path


def remove_archives() -> None:
    """Delete the zips written for classic sessions (call once the session stopped)."""
    while _archives:
        shutil.rmtree(_archives.pop(), ignore_errors=True)


TEMP_PREFIX = "eosflow-ship-"


def code_archive(module: str) -> Path:
    """The file that carries ``module``: its ``.py`` when it stands alone, else a zip of
    its top-level package (written to a temporary folder)."""
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    file = getattr(loaded, "__file__", None)
    if loaded is None or file is None or top == "__main__":
        raise ConfigError(
            f"EOSFLOW_SPARK_SHIP_CODE: cannot ship module {module!r}: it has no file "
            "(define the processor in an importable module)"
        )
    source = Path(file)
    if not hasattr(loaded, "__path__"):  # a plain module
        return source
    root = source.parent
    target = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX)) / f"{top}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in sorted(root.rglob("*.py")):
            archive.write(f, f.relative_to(root.parent).as_posix())
    return target
