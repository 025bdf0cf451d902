"""``kop serve``: the Kafka protocol front-end, a thin adapter over one Broker (DESIGN.md §7).

It listens on ``kafkaListeners`` (loopback by default; PLAINTEXT, SSL, SASL_PLAINTEXT and
SASL_SSL listeners) and tells a client the first of ``kafkaAdvertisedListeners`` with the
protocol of the listener it came in on (else that listener's bound address). A stop (SIGTERM) closes the
listeners, lets requests being handled finish and be answered, then closes the connections.
Everything it acknowledges is durable as the Broker makes it, so kill -9 is safe too."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence

from ..broker import Broker, MaintenanceReport, TopicInfo
from .connection import Connection
from .context import ServerContext
from .listeners import Listener, parse_listeners
from .memory import keep_large_buffers
from .metrics import MetricsEndpoint, render_gauges
from .oauth_tokens import TokenValidator
from .session import Session
from .store_metrics import FAMILIES, store_samples
from .tls import certificate_principal, server_context

log = logging.getLogger(__name__)

STOP_GRACE_S = 30.0  # longest a stop waits for requests in flight
TRANSACTION_CHECK_S = 1.0  # how often transactions past their timeout are looked for


class KafkaServer:
    def __init__(self, broker: Broker, listeners: str | None = None, advertised: str | None = None):
        config = broker.config
        self.broker = broker
        self.listeners = parse_listeners(listeners or config["kafkaListeners"])
        advertised = advertised if advertised is not None else config["kafkaAdvertisedListeners"]
        self._advertised = parse_listeners(advertised, "kafkaAdvertisedListeners") if advertised else None
        self._max_bytes = config["socket.request.max.bytes"]
        self._idle_ms = config["connections.max.idle.ms"]
        self._servers: list[asyncio.Server] = []
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Future[None]] = []
        self._housekeepers: list[asyncio.Future[None]] = []
        self._stopping = threading.Event()  # housekeeping on worker threads stops at it
        self.bound: list[Listener] = []
        self.ctx: ServerContext | None = None
        self._metrics: MetricsEndpoint | None = None

    async def start(self) -> None:
        config = self.broker.config
        tls = server_context(config) if any(listener.tls for listener in self.listeners) else None
        sasl = any(listener.protocol.startswith("SASL_") for listener in self.listeners)
        oauth = sasl and "OAUTHBEARER" in config["sasl.enabled.mechanisms"].split(",")
        tokens = await asyncio.to_thread(TokenValidator, config) if oauth else None
        for listener in self.listeners:
            server = await asyncio.start_server(
                functools.partial(self._accept, listener.protocol),
                listener.host,
                listener.port,
                limit=1 << 16,
                ssl=tls if listener.tls else None,
            )
            host, port = server.sockets[0].getsockname()[:2]
            self.bound.append(Listener(listener.protocol, host, port))
            self._servers.append(server)
        told = {a.protocol: a for a in reversed(self._advertised or [])}
        advertised = {b.protocol: told.get(b.protocol, b) for b in reversed(self.bound)}
        ctx = ServerContext(self.broker, advertised, tokens, bound=self.bound)
        ctx.restore_groups()  # before any request is served: members find their groups
        self.ctx = ctx
        authorization = ctx.authorization
        if authorization.enabled:
            authorization.load(await ctx.call(self.broker.acls.bindings))
        await self._serve_metrics(ctx)
        self._background = [
            asyncio.ensure_future(ctx.publisher.run()),
            asyncio.ensure_future(authorization.run(lambda: ctx.call(self.broker.acls.bindings))),
            # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms
            _every(TRANSACTION_CHECK_S, lambda: ctx.call(ctx.transactions.expire), "abort timed-out transactions"),
        ]
        self._housekeepers = self._housekeeping()
        for listener in self.bound:
            log.info("kop serve: listening on %s (root %s)", listener, self.broker.root)

    def _housekeeping(self) -> list[asyncio.Future[None]]:
        """Kafka's log manager and log cleaner, and the rest of kop maintenance, each on a thread
        of its own (requests are not held up), each stopped by a stop mid-way."""
        config, b, stop = self.broker.config, self.broker.housekeeping, self._stopping
        ctx = self.ctx
        assert ctx is not None  # started before its housekeeping

        async def retain() -> None:
            await asyncio.to_thread(b.enforce_retention, None, stop)  # lets go of deleted topics' logs
            await self._forget_counts_of_gone_topics(ctx)

        jobs = [_every(config["log.retention.check.interval.ms"] / 1000, retain, "apply retention")]
        if config["log.cleaner.enable"]:
            clean = functools.partial(b.clean_logs, None, stop)
            jobs.append(
                _every(config["log.cleaner.backoff.ms"] / 1000, lambda: asyncio.to_thread(clean), "compact logs")
            )
        if config["maintenanceIntervalSeconds"]:
            maintain = functools.partial(b.maintenance, None, stop=stop)
            jobs.append(_every(config["maintenanceIntervalSeconds"], lambda: _maintain(maintain), "do maintenance"))
        return jobs

    async def _serve_metrics(self, ctx: ServerContext) -> None:
        port = self.broker.config["webServicePort"]
        if port is None:
            return
        self._metrics = MetricsEndpoint(ctx.metrics, self._gauges, functools.partial(self._offsets_and_lag, ctx))
        host, bound = await self._metrics.start(self.broker.config["bindAddress"], port)
        log.info("kop serve: metrics at http://%s:%d/metrics", host, bound)

    async def _offsets_and_lag(self, ctx: ServerContext) -> str:
        members = {g: len(live.members) for g in ctx.active_groups() if (live := ctx.live_group(g)) is not None}
        counted = ctx.metrics.counted_topics()
        topics = await ctx.call(self.broker.topic_infos, True)
        samples = await ctx.call(store_samples, self.broker, topics, members)
        self._forget_counts_of_topics_not_in(ctx, counted, topics)
        return render_gauges(FAMILIES, samples)

    async def _forget_counts_of_gone_topics(self, ctx: ServerContext) -> None:
        counted = ctx.metrics.counted_topics()
        self._forget_counts_of_topics_not_in(ctx, counted, await ctx.call(self.broker.topic_infos, True))

    @staticmethod
    def _forget_counts_of_topics_not_in(ctx: ServerContext, counted: set[str], listed: Sequence[TopicInfo]) -> None:
        """Drop the traffic counts of deleted topics (by this server or another process), as Kafka
        drops a deleted topic's metrics: at each scrape, and after each retention pass, so that a
        server nobody scrapes does not keep every topic it ever served. Only topics ``counted``
        before the listing: one made since is not taken for gone."""
        names = {t.name for t in listed}
        ctx.metrics.forget_topics({t for t in counted if ctx.listed_topic(t) not in names})

    def _gauges(self) -> dict[str, float]:
        return {
            "kop_server_ALIVE_CHANNEL_COUNT": len(self._connections),
            "kop_server_ACTIVE_CHANNEL_COUNT": sum(not c.idle.is_set() for c in self._connections),
            "kop_server_REQUEST_QUEUE_SIZE": sum(c.in_flight for c in self._connections),
        }

    async def _accept(self, protocol: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.ctx is not None
        peer = writer.get_extra_info("peername")
        session = Session(protocol, peer[0] if isinstance(peer, tuple) else str(peer))
        if protocol == "SSL":
            session.principal = certificate_principal(writer.get_extra_info("peercert")) or session.principal
        connection = Connection(self.ctx, reader, writer, self._max_bytes, session, self._idle_ms)
        self._connections.add(connection)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await connection.run()
        except asyncio.CancelledError:
            # Cancelled by our own stop, the connection closed: end as a closed connection does.
            # (Python 3.11's asyncio logs a cancelled connection task as an error, with a traceback.)
            if not self._stopping.is_set():
                raise
        finally:
            self._connections.discard(connection)
            if task is not None:
                self._tasks.discard(task)

    async def stop(self) -> None:
        """Stop listening, answer what is in flight, close every connection."""
        self._stopping.set()  # housekeeping under way gives up (its futures, cancelled, drop the news)
        for job in self._housekeepers:
            job.cancel()
        for server in self._servers:
            server.close()
        if self._metrics is not None:
            await self._metrics.stop()
        for c in self._connections:
            c.stopping = True
        busy = [c.idle.wait() for c in self._connections]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*busy), STOP_GRACE_S)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if self.ctx is not None:
            for job in self._background:
                job.cancel()
            await asyncio.gather(*self._background, *self._housekeepers, return_exceptions=True)
            await self.ctx.publisher.withdraw()
            self.ctx.close()
        log.info("kop serve: stopped")


def _every(interval_s: float, work: Callable[[], Awaitable[object]], what: str) -> asyncio.Future[None]:
    """Do ``work`` every ``interval_s``, until cancelled; a failure is logged, and tried again."""

    async def run() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await work()
            except Exception as e:
                log.warning("cannot %s (trying again): %s", what, e)

    return asyncio.ensure_future(run())


async def _maintain(maintenance: Callable[[], MaintenanceReport]) -> None:
    report = await asyncio.to_thread(maintenance)  # a damaged partition's error is logged by it
    if report.ledgers_merged or report.files_removed:
        log.info(
            "maintenance: merged away %d small ledgers, removed %d orphaned files",
            report.ledgers_merged,
            len(report.files_removed),
        )


async def serve(broker: Broker, listeners: str | None = None, advertised: str | None = None) -> None:
    """Run a server until SIGTERM or SIGINT."""
    keep_large_buffers()
    server = KafkaServer(broker, listeners, advertised)
    await server.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await stopping.wait()
    finally:
        await server.stop()
