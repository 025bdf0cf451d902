"""Which PySpark the Spark layer runs on. kop-spark does not install one: a Databricks runtime (or
any cluster) brings its own, and installing PyPI's over it breaks the cluster. ``pip install
"kop-spark[spark]"`` brings one to a plain machine. Without a supported PySpark, importing the
Spark layer fails once, saying what was found and what is supported; the storage, the CLI and
``kop serve`` never import PySpark."""

from __future__ import annotations

import importlib.metadata

SUPPORTED = (4, 0)  # oldest: PySpark 4.0 (Databricks 17.3 LTS) to 4.3
SUPPORTED_TEXT = "PySpark 4.0 to 4.3"


class UnsupportedSparkError(ImportError):
    """The Spark layer cannot run on the PySpark installed (or on none)."""


def pyspark_version() -> tuple[int, ...] | None:
    """The installed PySpark's (major, minor), or None when there is none."""
    try:
        import pyspark
    except ModuleNotFoundError as e:
        if e.name == "pyspark":
            return None
        raise
    text = getattr(pyspark, "__version__", "") or importlib.metadata.version("pyspark")
    return tuple(int(p) for p in text.split(".")[:2])


def require_pyspark() -> None:
    """Raise ``UnsupportedSparkError`` unless a supported PySpark is installed."""
    found = pyspark_version()
    if found is None:
        raise UnsupportedSparkError(
            f"format('kop') needs {SUPPORTED_TEXT}, and no pyspark is installed: "
            'pip install "kop-spark[spark]" (on Databricks, the runtime\'s is used)'
        )
    if found < SUPPORTED:
        version = ".".join(map(str, found))
        raise UnsupportedSparkError(f"format('kop') needs {SUPPORTED_TEXT}; PySpark {version} is installed")
