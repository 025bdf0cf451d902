import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import kop_spark
from kop_spark.faults import CRASH_POINTS_ENV
from kop_spark.storage.metadata.zookeeper import close_sessions

from . import servers

os.environ[CRASH_POINTS_ENV] = "1"  # the tests' processes, and those they start, die where a test asks


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture(scope="session")
def disk_tmp_root():
    """A temporary directory in the system's (``TMPDIR``), not pytest's: ``./dev.sh test`` puts
    pytest's on tmpfs where it can, and tmpfs before Linux 6.6 takes no ``O_DIRECT`` writes, which
    the tests of writes around the page cache need."""
    path = Path(tempfile.mkdtemp(prefix="kop-disk-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def disk_tmp_path(disk_tmp_root):
    """A test's own directory in ``disk_tmp_root``."""
    return Path(tempfile.mkdtemp(dir=disk_tmp_root))


@pytest.fixture
def broker(root):
    b = kop_spark.Broker(root)
    yield b
    b.close()


def python_subprocess_env():
    """Environment for child Python processes that import kop_spark from this checkout."""
    env = dict(os.environ)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers need kop_spark too
    return env


PYTHON = sys.executable


def forget_last_batch_commit(checkpoint: str) -> None:
    """Drop a streaming query's last commit-log entry, as if its driver died before recording it:
    Spark re-runs that batch when the query restarts."""
    commits = os.path.join(checkpoint, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):
        os.remove(os.path.join(commits, name))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``admission_control`` need Spark's own (PySpark 4.2+): Trigger.AvailableNow
    ending a run at what was there while a rate option holds each batch back. And the longest
    file first."""
    # The Spark suites on the older PySparks are the longest file by far: collected first, one
    # worker runs it while the other takes the rest, rather than it starting last, alone.
    items.sort(key=lambda item: item.path.name != "test_spark_versions.py")
    from kop_spark.spark._compat import ADMISSION_CONTROL

    if ADMISSION_CONTROL:
        return
    skip = pytest.mark.skip(reason="this PySpark has no admission control for Python sources")
    for item in items:
        if "admission_control" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def expected_pyspark():
    """Under the version suite (test_spark_versions), the PySpark it asked for is the one running."""
    expected = os.environ.get("KOP_EXPECTED_PYSPARK")
    if expected:
        import pyspark

        assert pyspark.__version__ == expected, f"PySpark {pyspark.__version__} runs, not {expected}"


@pytest.fixture(scope="session")
def spark(running):
    """One local Spark session for the Spark tests. ``format("kop")`` is found without a register
    call, through the installed ``pyspark_kop`` package, as it would be for a user. The servers
    start first: Spark's Python workers get the environment the JVM started with, so the object
    stores' endpoint and credentials must be in it by then, as they are on a configured cluster."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kop-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Dlog4j.rootLogger=ERROR")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def read_partition(b, topic, partition):
    """(log start, log end, every record between them) of a partition, read as a consumer reads it."""
    start, end = b.list_offsets(topic, partition, "earliest"), b.list_offsets(topic, partition, "latest")
    out, offset = [], start
    while offset < end:
        got = b.fetch(topic, partition, offset, max_records=5000)
        if not got:  # only compaction empties the rest of a log
            break
        out += got
        offset = got[-1].offset + 1
    return start, end, out


@pytest.fixture(scope="module", autouse=True)
def zookeeper_sessions_end_with_their_module():
    """A ZooKeeper session lasts as long as its process, and kazoo's connection loop draws from
    the global ``random`` all the while: Hypothesis, which checks that nothing moves it while a
    test draws, warned in a module run after the ZooKeeper tests. Each module's sessions end with it."""
    yield
    close_sessions()


@pytest.fixture(scope="session")
def running(tmp_path_factory):
    """ZooKeeper, etcd, moto's S3 server and Azurite on loopback, once per run (see servers.py)."""
    yield from servers.start_all(tmp_path_factory.mktemp("servers"))
