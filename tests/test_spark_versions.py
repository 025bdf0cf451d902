"""The Spark tests that matter, on the older PySpark versions Databricks runs (4.0 on 17.3 LTS, 4.1
on 18 LTS, 4.2 on 19), each on the Python those runtimes run (3.12): batch reads and writes, streaming
reads with each rate option (Spark's admission control from 4.2; the source's own bound before),
exactly-once streaming writes through a rerun batch, group commits, the notebooks and a Spark
Connect client's batch reads and writes.
The option checks and data-loss cases of the source are kop's own code, the same on every runtime,
and run on the newest only. ``./dev.sh setup`` installs each version into ``.tools/`` and makes
``.tools/py3.12``; the suite then runs in a child pytest of that Python with that PySpark ahead of
the environment's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import PYTHON, python_subprocess_env

PROJECT = Path(__file__).resolve().parent.parent
VERSIONS = sorted(p.parent.name.removeprefix("pyspark-") for p in (PROJECT / ".tools").glob("pyspark-*/pyspark"))
SOURCE_TESTS = [  # of tests/test_spark_source.py: what a runtime's Python Data Source API decides
    "test_spark_reads_every_offset_the_broker_assigned",
    "test_format_is_found_without_register_and_register_is_harmless",
    "test_batch_starting_and_ending_offsets",
    "test_stream_restart_from_checkpoint_reads_each_record_once",
    "test_max_offsets_per_trigger_is_shared_by_backlog",
    "test_min_offsets_per_trigger_waits_for_enough_records",
    "test_max_trigger_delay_lets_a_small_batch_through",
    "test_max_bytes_per_trigger",
    "test_available_now_stops_at_what_was_there",
    "test_new_topics_and_partitions_start_from_earliest",
    "test_group_offsets_follow_the_query",
    "test_an_available_now_runs_last_batch_is_committed_to_the_group",
    "test_starting_offsets_group",
]
SUITE = [
    *(f"tests/test_spark_source.py::{name}" for name in SOURCE_TESTS),
    "tests/test_spark_runtimes.py",
    "tests/test_notebooks.py",
    # A Connect client's reads and writes. A stream through Connect runs the server-side code of the
    # classic streams above, and runs on the newest version only (35 s a version).
    "tests/test_spark_connect.py::test_batch_read_and_write_through_spark_connect",
    "tests/test_spark_sink.py::test_written_records_read_back_by_broker_and_a_kafka_client",
    "tests/test_spark_sink.py::test_a_failed_job_leaves_nothing_visible_or_staged",
    "tests/test_spark_sink.py::test_stream_write_and_a_rerun_batch_is_applied_once",
]


CI_VERSIONS = {"4.0", "4.1", "4.2"}
DATABRICKS_PYTHON = PROJECT / ".tools" / "py3.12" / "bin" / "python"


def test_the_suite_names_tests_that_exist() -> None:
    """A renamed test would otherwise drop out of the version suite unseen (pytest refuses a node
    id it cannot find, but only once the slow suite runs)."""
    source = (PROJECT / "tests" / "test_spark_source.py").read_text()
    assert [name for name in SOURCE_TESTS if f"def {name}(" not in source] == []


def test_the_older_pysparks_ci_runs_are_installed() -> None:
    assert {v.rsplit(".", 1)[0] for v in VERSIONS} >= CI_VERSIONS, (
        f"PySpark versions in .tools/: {VERSIONS}; ./dev.sh setup installs them"
    )


# A whole suite in a child pytest, whose tests each have pytest-timeout's 300 s: the suite has the
# child's own bound, not that of one test (on a machine half as fast, a suite took longer).
SUITE_TIMEOUT = 1800


@pytest.mark.timeout(SUITE_TIMEOUT + 60)
@pytest.mark.parametrize("version", VERSIONS)
def test_the_spark_suite_passes_on(version: str) -> None:
    python = _databricks_python()
    env = python_subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT / ".tools" / f"pyspark-{version}"), env["PYTHONPATH"]])
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = python
    env["KOP_EXPECTED_PYSPARK"] = version
    _suite_passes(f"PySpark {version} on {python}", python, env, SUITE)


@pytest.mark.timeout(SUITE_TIMEOUT + 60)
def test_the_codec_twins_agree_on_databricks_python() -> None:
    """The compiled codec built for Python 3.12 (the wheel Databricks installs) against the
    pure-Python one, there."""
    if not DATABRICKS_PYTHON.exists():
        pytest.skip("no Python 3.12 on this machine: ./dev.sh setup makes .tools/py3.12 from one")
    _suite_passes("Python 3.12", str(DATABRICKS_PYTHON), python_subprocess_env(), ["tests/test_codec_twins.py"])


def _databricks_python() -> str:
    """Python 3.12, which Databricks 17.3 LTS, 18, 19 and serverless run whatever this
    environment's is; this environment's where the machine has none (set-up says so)."""
    return str(DATABRICKS_PYTHON) if DATABRICKS_PYTHON.exists() else PYTHON


def _suite_passes(what: str, python: str, env: dict[str, str], tests: list[str]) -> None:
    """Run ``tests`` in a child pytest of ``python`` with ``env``; its output's end if it fails."""
    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT,
    )
    assert done.returncode == 0, f"{what}:\n{done.stdout[-6000:]}"
