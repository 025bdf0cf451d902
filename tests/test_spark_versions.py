"""The Spark tests that matter, on the older PySpark versions Databricks runs (4.0 on 17.3 LTS, 4.1
on 18 LTS, 4.2 on 19): batch reads and writes, streaming reads with each rate option (Spark's
admission control from 4.2; the source's own bound before), exactly-once streaming writes through a
rerun batch, group commits, the notebooks and Spark Connect. ``./dev.sh setup``
installs each version into ``.tools/``; the suite then runs in a child pytest with that PySpark
ahead of the environment's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import PYTHON, python_subprocess_env

PROJECT = Path(__file__).resolve().parent.parent
VERSIONS = sorted(p.parent.name.removeprefix("pyspark-") for p in (PROJECT / ".tools").glob("pyspark-*/pyspark"))
SUITE = [
    "tests/test_spark_source.py",
    "tests/test_spark_runtimes.py",
    "tests/test_notebooks.py",
    "tests/test_spark_connect.py",
    "tests/test_spark_sink.py::test_written_records_read_back_by_broker_and_a_kafka_client",
    "tests/test_spark_sink.py::test_a_failed_job_leaves_nothing_visible_or_staged",
    "tests/test_spark_sink.py::test_stream_write_and_a_rerun_batch_is_applied_once",
]


CI_VERSIONS = {"4.0", "4.1", "4.2"}


def test_the_older_pysparks_ci_runs_are_installed() -> None:
    assert {v.rsplit(".", 1)[0] for v in VERSIONS} >= CI_VERSIONS, (
        f"PySpark versions in .tools/: {VERSIONS}; ./dev.sh setup installs them"
    )


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_the_spark_suite_passes_on(version: str) -> None:
    env = python_subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT / ".tools" / f"pyspark-{version}"), env["PYTHONPATH"]])
    env["KOP_EXPECTED_PYSPARK"] = version
    done = subprocess.run(
        [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITE],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, f"PySpark {version}:\n{done.stdout[-6000:]}"
