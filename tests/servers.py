"""Real servers on loopback for the tests: ZooKeeper, etcd, moto's S3 server, Azurite and a Spark
Connect server; and GCS's XML API (``gcs_process.py``), for which no emulator can be installed.

Each starts on a free port with its data in a temporary directory, is waited for until it
answers, and can be stopped and started again on the same port and data (for outage tests).
``./dev.sh setup`` installs them all; a missing one fails the test naming what to install.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Generator
from pathlib import Path

from kop_spark.storage.metadata.zookeeper import close_sessions

REPO = Path(__file__).resolve().parent.parent
AZURITE = REPO / ".tools" / "node_modules" / ".bin" / "azurite-blob"
MINIO_KEY, MINIO_SECRET = "testing", "testing-secret"
AZURITE_ACCOUNT = "devstoreaccount1"
BUCKET = "kop-test"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _ports_below_the_ephemeral_range() -> list[int]:
    """Ports the kernel never picks for a bind to port 0 or a connection's own end, from a random
    start: processes of one run seldom meet. None where the range starts too low to leave any."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral = int(f.read().split()[0])
    ports = range(10_000, ephemeral)
    start = random.Random().randrange(len(ports)) if ports else 0
    return [*ports[start:], *ports[:start]]


_BELOW_EPHEMERAL = _ports_below_the_ephemeral_range()
_PORTS = itertools.cycle(_BELOW_EPHEMERAL)  # none soon taken again; next() of a C iterator: thread-safe


def free_port() -> int:
    """A port no one listens on, outside the ephemeral range. A client of a stopped test server
    keeps dialling its port; were that port ephemeral, Spark could later listen there for a Python
    worker to connect back, take the client for its worker and fail the query ("Python worker
    failed to connect back ... Authentication failed": a CI run's notebook on PySpark 4.2)."""
    for port in itertools.islice(_PORTS, len(_BELOW_EPHEMERAL)):
        if _unused(port):
            return port
    with socket.socket() as s:  # none left below the range: an ephemeral one, as before
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unused(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:  # listened on, or closed a moment ago (TIME_WAIT): either way, not this one
            return False
        return True


def _require(path: str | Path, what: str) -> str:
    found = shutil.which(str(path)) if os.sep not in str(path) else (str(path) if Path(path).exists() else None)
    if not found:
        raise RuntimeError(f"{what} is not installed ({path}): run ./dev.sh setup, which installs it")
    return found


class Server:
    """One server process: ``start`` waits until ``ready`` says it answers; ``stop`` ends it."""

    def __init__(
        self,
        name: str,
        port: int,
        command: list[str],
        ready: Callable[[], bool],
        workdir: Path,
        env: dict[str, str] | None = None,
    ):
        self.name, self.port, self.command, self._ready, self.workdir = name, port, command, ready, workdir
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"{name}.log"

    def start(self, timeout: float = 60) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start; its log:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self, graceful: bool = False) -> None:
        """Kill the server; ``graceful`` lets it save first (Azurite keeps its data in memory
        and saves it every few seconds, so a killed one forgets its last writes)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None


def requests_since(server: Server, since: int, naming: str) -> list[str]:
    """The requests a server logged past ``since`` (a length of its log) that name ``naming``."""
    return [line for line in server.log.read_text()[since:].splitlines() if naming in line]


def zookeeper_packets(port: int) -> tuple[int, int]:
    """The packets a ZooKeeper server has received and sent (its ``srvr`` command)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"srvr")
        answer = b"".join(iter(lambda: conn.recv(4096), b"")).decode()
    received, sent = (int(answer.split(f"{name}: ", 1)[1].split()[0]) for name in ("Received", "Sent"))
    return received, sent


def etcd_requests(port: int) -> int:
    """The reads and transactions an etcd server has answered, by its own count (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in lines
        if line.startswith("grpc_server_handled_total{")
        and 'grpc_code="OK"' in line
        and ('grpc_method="Range"' in line or 'grpc_method="Txn"' in line)
    )


def _answers_tcp(port: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    return ready


def _answers_http(url: str, body: bytes | None = None) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, body), timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # it answers, if only to refuse
        except OSError:
            return False

    return ready


def zookeeper(workdir: Path) -> Server:
    port = free_port()
    java = _require("java", "Java")
    jar = _require("/usr/share/java/zookeeper.jar", "ZooKeeper (Debian package zookeeper)")
    # Without a binding SLF4J drops ZooKeeper's log, and a failed start would say nothing of why;
    # the Debian package brings libslf4j-java, whose simple binding logs to stderr.
    classpath = ":".join(["/etc/zookeeper/conf", jar, *glob.glob("/usr/share/java/slf4j-simple.jar")])
    command = [
        java,
        "-Xmx256m",
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        classpath,
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(port),
        str(workdir / "data"),
    ]

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"srvr")
                return b"Mode" in s.recv(1024)
        except OSError:
            return False

    return Server("zookeeper", port, command, ready, workdir)


def etcd(workdir: Path) -> Server:
    port, peer = free_port(), free_port()
    command = [
        _require("etcd", "etcd (Debian package etcd-server)"),
        "--data-dir",
        str(workdir / "data"),
        "--listen-client-urls",
        f"http://127.0.0.1:{port}",
        "--advertise-client-urls",
        f"http://127.0.0.1:{port}",
        "--listen-peer-urls",
        f"http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls",
        f"http://127.0.0.1:{peer}",
        "--initial-cluster",
        f"default=http://127.0.0.1:{peer}",
    ]
    return Server(
        "etcd", port, command, _answers_http(f"http://127.0.0.1:{port}/v3/kv/range", b'{"key":"AA=="}'), workdir
    )


def moto_s3(workdir: Path, env: dict[str, str] | None = None) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).with_name("moto_s3_process.py")), "-H", "127.0.0.1", "-p", str(port)]
    return Server("moto", port, command, _answers_http(f"http://127.0.0.1:{port}/moto-api/"), workdir, env=env)


def gcs(workdir: Path) -> Server:
    """GCS's XML API with one bucket, ``BUCKET``; its objects live in memory, so a restart loses them."""
    port = free_port()
    command = [sys.executable, str(Path(__file__).with_name("gcs_process.py")), str(port), BUCKET]
    return Server("gcs", port, command, _answers_http(f"http://127.0.0.1:{port}/{BUCKET}?list-type=2"), workdir)


def azurite(workdir: Path) -> Server:
    port = free_port()
    command = [
        _require(AZURITE, "Azurite (npm package azurite)"),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        str(workdir / "data"),
        "--skipApiVersionCheck",
        "--silent",
    ]
    return Server("azurite", port, command, _answers_tcp(port), workdir)


def spark_connect(workdir: Path, spark_home: str, env: dict[str, str]) -> Server:
    """PySpark's own Spark Connect server (``spark_home``: the pyspark package), local[2]; its Python
    workers run with ``env``."""
    port = free_port()
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }
    command = [os.path.join(spark_home, "bin", "spark-submit"), "--master", "local[2]"]
    command += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    command += [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")] + ["spark-internal"]
    return Server("spark-connect", port, command, _answers_tcp(port), workdir, {**env, "SPARK_HOME": spark_home})


def s3_env(port: int) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": MINIO_KEY,
        "AWS_SECRET_ACCESS_KEY": MINIO_SECRET,
        "AWS_REGION": "us-east-1",
    }


def gcs_env(port: int) -> dict[str, str]:
    """A service account as obstore takes an emulator's: its endpoint, and no OAuth."""
    account = {"gcs_base_url": f"http://127.0.0.1:{port}", "disable_oauth": True}
    account |= dict.fromkeys(("client_email", "private_key", "private_key_id"), "")
    return {"GOOGLE_SERVICE_ACCOUNT_KEY": json.dumps(account)}


def azure_env(port: int) -> dict[str, str]:
    return {
        "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
        "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
        "AZURE_STORAGE_ENDPOINT": f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}",
    }


def start_all(base: Path) -> Generator[dict[str, Server], None, None]:
    """Every server, with a bucket and a container named ``BUCKET``; the clouds' environment
    variables point at them while they run. Stopped when the generator is closed."""
    started = {}
    try:
        for name, make in (
            ("zookeeper", zookeeper),
            ("etcd", etcd),
            ("s3", moto_s3),
            ("gcs", gcs),
            ("azure", azurite),
        ):
            started[name] = start_on_a_free_port(make, base / name)
        env = {**s3_env(started["s3"].port), **gcs_env(started["gcs"].port), **azure_env(started["azure"].port)}
        os.environ.update(env)  # obstore and the child processes read the clouds' variables
        make_bucket(started["s3"].port)
        _make_container(started["azure"].port)
        yield started
    finally:
        if "zookeeper" in started:  # else this process's session reconnects, and warns, until it exits
            close_sessions(f"127.0.0.1:{started['zookeeper'].port}")
        for server in started.values():
            server.stop()


def start_on_a_free_port(make: Callable[[Path], Server], workdir: Path, attempts: int = 3) -> Server:
    """A port ``free_port`` found can be taken before the server binds it (by another test process),
    so a server that does not start is tried on new ports;
    pytest's summary shows each failed start as a warning, with the server's log."""
    for _ in range(attempts - 1):
        server = make(workdir)
        try:
            server.start()
            return server
        except RuntimeError as e:
            warnings.warn(f"{e}\n(port {server.port}; trying another)", stacklevel=1)
    server = make(workdir)
    server.start()
    return server


def make_bucket(port: int, name: str = BUCKET) -> None:
    import boto3

    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(Bucket=name)


def _make_container(port: int) -> None:
    from azure.storage.blob import BlobServiceClient

    account = AZURITE_ACCOUNT
    url = f"http://127.0.0.1:{port}/{account}"
    BlobServiceClient(url, credential={"account_name": account, "account_key": AZURITE_KEY}).create_container(BUCKET)
