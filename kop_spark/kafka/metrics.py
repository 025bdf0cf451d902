"""``kop serve``'s metrics, under KoP's names (``kop_server_*``), in Prometheus's text format at
``http://<bindAddress>:<webServicePort>/metrics``, where Pulsar's web service serves KoP's:

- ``kop_server_ALIVE_CHANNEL_COUNT`` (gauge): client connections open;
- ``kop_server_ACTIVE_CHANNEL_COUNT`` (gauge): those with a request under way;
- ``kop_server_REQUEST_QUEUE_SIZE`` (gauge): requests taken and not yet answered;
- ``kop_server_REQUEST_LATENCY`` (summary, ms; labels ``request``, ``success``): from a request's
  arrival to its answer, ``success`` false when the answer carries an error code anywhere (Kafka
  counts those in ErrorsPerSec), or the request failed;
- ``kop_server_BYTES_IN``, ``kop_server_MESSAGE_IN`` (counters; ``topic``, ``partition``): what
  produces appended; ``kop_server_BYTES_OUT``, ``kop_server_MESSAGE_OUT``: what fetches returned;
- offsets and consumer lag under kafka_exporter's names (``store_metrics``).

Everything is counted on the server's event loop, so nothing is locked; a scrape is answered there
too, from the counts as they stand. The endpoint serves GET /metrics and nothing else, on loopback
unless ``bindAddress`` says otherwise."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

log = logging.getLogger(__name__)

Gauges = Callable[[], dict[str, float]]  # a gauge's name -> its value now
Scraped = Callable[[], Awaitable[str]]  # more families, read at each scrape

_HELP = {
    "kop_server_ALIVE_CHANNEL_COUNT": ("gauge", "Client connections open"),
    "kop_server_ACTIVE_CHANNEL_COUNT": ("gauge", "Client connections with a request under way"),
    "kop_server_REQUEST_QUEUE_SIZE": ("gauge", "Requests taken and not yet answered"),
    "kop_server_REQUEST_LATENCY": ("summary", "Time from a request's arrival to its answer, in milliseconds"),
    "kop_server_BYTES_IN": ("counter", "Bytes of record batches appended by produces"),
    "kop_server_MESSAGE_IN": ("counter", "Records appended by produces"),
    "kop_server_BYTES_OUT": ("counter", "Bytes of record batches returned by fetches"),
    "kop_server_MESSAGE_OUT": ("counter", "Records returned by fetches"),
}
_MAX_REQUEST_BYTES = 8192  # a scrape's request line and headers


class ServerMetrics:
    def __init__(self) -> None:
        self._latency: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])  # count, sum
        self._traffic: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])  # bytes, records

    def request(self, name: str, millis: float, success: bool) -> None:
        entry = self._latency[(name, "true" if success else "false")]
        entry[0] += 1
        entry[1] += millis

    def produced(self, topic: str, partition: int, size: int, records: int) -> None:
        self._count("IN", topic, partition, size, records)

    def fetched(self, topic: str, partition: int, size: int, records: int) -> None:
        self._count("OUT", topic, partition, size, records)

    def _count(self, way: str, topic: str, partition: int, size: int, records: int) -> None:
        entry = self._traffic[(way, topic, partition)]
        entry[0] += size
        entry[1] += records

    def counted_topics(self) -> set[str]:
        return {topic for _, topic, _ in self._traffic}

    def forget_topics(self, topics: Collection[str]) -> None:
        """Drop the counts of topics gone, as Kafka drops a deleted topic's metrics: a server
        whose topics come and go would otherwise keep, and serve, every one it ever counted."""
        for key in [k for k in self._traffic if k[1] in topics]:
            del self._traffic[key]

    def render(self, gauges: dict[str, float]) -> str:
        """Prometheus's text exposition format (0.0.4)."""
        samples: dict[str, list[str]] = defaultdict(list)
        for name, value in gauges.items():
            samples[name].append(f"{name} {value:g}")
        for (request, success), (count, total) in sorted(self._latency.items()):
            labels = f'{{request="{request}",success="{success}"}}'
            samples["kop_server_REQUEST_LATENCY"] += [
                f"kop_server_REQUEST_LATENCY_count{labels} {count}",
                f"kop_server_REQUEST_LATENCY_sum{labels} {total:.3f}",
            ]
        for (way, topic, partition), (size, records) in sorted(self._traffic.items()):
            labels = f'{{topic="{_escape(topic)}",partition="{partition}"}}'
            samples[f"kop_server_BYTES_{way}"].append(f"kop_server_BYTES_{way}{labels} {size}")
            samples[f"kop_server_MESSAGE_{way}"].append(f"kop_server_MESSAGE_{way}{labels} {records}")
        return "".join(_family(name, samples.get(name, ())) for name in _HELP)


def render_gauges(families: Mapping[str, str], samples: Mapping[str, Sequence[tuple[dict[str, str], int]]]) -> str:
    """Gauge families (name -> help) and their samples (labels, value) in the text format."""
    out = []
    for name, text in families.items():
        out.append(f"# HELP {name} {text}\n# TYPE {name} gauge\n")
        for labels, value in samples.get(name, ()):
            pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{pairs}}} {value}\n")
    return "".join(out)


def answered_well(response: Any) -> bool:
    """Whether an answer (a kio entity) carries no error code, at its top or in any part."""
    parts = [response]
    while parts:
        entity = parts.pop()
        for name in entity.__dataclass_fields__:
            value = getattr(entity, name)
            if name == "error_code" and value != ErrorCode.none:
                return False
            if isinstance(value, tuple) and value and hasattr(value[0], "__dataclass_fields__"):
                parts.extend(value)
            elif hasattr(value, "__dataclass_fields__"):
                parts.append(value)
    return True


def _family(name: str, lines: Iterable[str]) -> str:
    kind, text = _HELP[name]
    return "".join([f"# HELP {name} {text}\n# TYPE {name} {kind}\n", *(f"{line}\n" for line in lines)])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsEndpoint:
    """GET /metrics over HTTP/1.1, one request a connection (as Prometheus scrapes)."""

    def __init__(self, metrics: ServerMetrics, gauges: Gauges, scraped: Scraped):
        self._metrics = metrics
        self._gauges = gauges
        self._scraped = scraped
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; the address bound."""
        self._server = await asyncio.start_server(self._answer, host, port, limit=_MAX_REQUEST_BYTES)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, path, *_ = [*head.split(b"\r\n", 1)[0].decode("latin-1").split(" "), "", ""]
            if method != "GET":
                status, body = "405 Method Not Allowed", "only GET /metrics is served\n"
            elif path.split("?", 1)[0].rstrip("/") != "/metrics":
                status, body = "404 Not Found", f"{path} is not served: GET /metrics\n"
            else:
                store = await self._read_store()  # first: it drops the counts of topics gone
                status, body = "200 OK", self._metrics.render(self._gauges()) + store
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError, ConnectionError) as e:
            log.warning("metrics endpoint: dropped a malformed or unfinished request: %s", type(e).__name__)
        finally:
            writer.close()

    async def _read_store(self) -> str:
        """The families read from the store; none (and a warning) when it cannot be read, so the
        server's own metrics are still answered."""
        try:
            return await self._scraped()
        except Exception as e:
            log.warning("metrics endpoint: cannot read offsets and lag from the store: %s", e)
            return ""
