"""Kafka clients that are not Python against ``kop serve``: kcat (Debian's, on its own librdkafka,
which negotiates older protocol versions than confluent-kafka's) and kafkajs (a JavaScript
client with its own protocol code, from npm)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kop_spark import Broker, Record

from .kop_server import KopServer

NODE_MODULES = Path(__file__).resolve().parent.parent / ".tools" / "node_modules"


@pytest.fixture
def server(tmp_path) -> Iterator[KopServer]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 2)
    with KopServer(root) as s:
        yield s


def _run(command: list[str], stdin: str = "", env: dict[str, str] | None = None) -> str:
    out = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_kcat_produces_and_consumes(server: KopServer) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is installed by ./dev.sh setup (apt-get install kcat)"
    lines = [f"k{i}:v{i}" for i in range(50)]
    _run(
        [kcat, "-b", server.bootstrap, "-t", "t", "-P", "-K:", "-X", "enable.idempotence=true"], "\n".join(lines) + "\n"
    )
    with Broker(server.root) as b:
        stored = {(r.key, r.value) for p in range(2) for r in b.fetch("t", p, 0, max_records=100)}
        b.produce("t", [Record(value=b"from the broker", key=b"kb")], 0)
    assert stored == {(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)}
    out = _run([kcat, "-b", server.bootstrap, "-t", "t", "-C", "-e", "-f", "%k=%s@%p:%o\\n"])
    consumed = {line.split("@")[0] for line in out.splitlines()}
    assert consumed == {f"k{i}=v{i}" for i in range(50)} | {"kb=from the broker"}


_KAFKAJS = """
const { Kafka, logLevel } = require("kafkajs");
const kafka = new Kafka({ clientId: "kafkajs-test", brokers: [process.argv[1]], logLevel: logLevel.ERROR });
(async () => {
  const producer = kafka.producer({ idempotent: true });
  await producer.connect();
  await producer.send({ topic: "t", messages: [...Array(30).keys()].map(i => ({ key: `j${i}`, value: `js${i}` })) });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: "js" });
  await consumer.connect();
  await consumer.subscribe({ topic: "t", fromBeginning: true });
  const seen = [];
  await new Promise(resolve => consumer.run({ eachMessage: async ({ partition, message }) => {
    seen.push([partition, Number(message.offset), message.value.toString()]);
    if (seen.length === 30) resolve();
  } }));
  await consumer.disconnect();
  console.log(JSON.stringify(seen));
})().catch(e => { console.error(e); process.exit(1); });
"""


def test_kafkajs_produces_and_consumes_with_a_group(server: KopServer) -> None:
    node = shutil.which("node")
    assert node and (NODE_MODULES / "kafkajs").is_dir(), "kafkajs is installed by ./dev.sh setup (npm, .tools/)"
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    seen = json.loads(_run([node, "-e", _KAFKAJS, server.bootstrap], env=env))
    with Broker(server.root) as b:
        stored = {(p, r.offset, r.value.decode()) for p in range(2) for r in b.fetch("t", p, 0, max_records=100)}
        committed = b.fetch_offsets("js")
    assert {tuple(s) for s in seen} == stored and len(stored) == 30
    assert sum(o.offset for o in committed.values()) == 30
