"""One client connection: size-prefixed requests in, responses out in the same order.

A connection's requests are taken one at a time, in order, as a Kafka broker takes them (their
order is what keeps a producer's batches in order). A produce is taken once its batches are
checked and queued for their partitions' next writes; it is answered when they are written,
while the requests after it are already being taken (up to ``MAX_IN_FLIGHT``), so the produces a
client pipelines share writes and CASes (group commit) instead of waiting for one sync each.
A request that is malformed, truncated, larger than ``socket.request.max.bytes``, or of a version
this server does not handle closes this connection only, with a log line; nothing is allocated
from a length the client sent before its bytes arrive. A connection that owes no answer and has
sent nothing, or only part of a request, for ``connections.max.idle.ms`` is closed, as a Kafka
broker closes idle connections: otherwise clients that vanish without a FIN (a dead host, a
dropped NAT mapping) would hold their sockets for ever."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kio.schema.errors import ErrorCode

from .apis import API_VERSIONS, APIS, versions_response
from .context import ServerContext
from .handlers.sasl import login_step
from .messages import InvalidRequestError, decode_request, encode_response, peek_header
from .metrics import answered_well
from .sasl import SaslAuthenticationError
from .session import SASL_APIS, Session

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 16  # answers a connection may owe before it reads on
Answer = bytes | None | asyncio.Future[bytes | None]


class Connection:
    def __init__(
        self,
        ctx: ServerContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_bytes: int,
        session: Session,
        idle_ms: int = 600_000,
    ):
        self._ctx = ctx
        self._reader = reader
        self._writer = writer
        self._max_bytes = max_bytes
        self._idle_s = idle_ms / 1000
        self._last_active = time.monotonic()  # when it last had nothing to take or answer
        self._watchdog: asyncio.TimerHandle | None = None
        self.session = session
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.idle = asyncio.Event()  # not handling a request: a graceful stop waits for this
        self.idle.set()
        self.stopping = False  # set by a graceful stop: no new request is taken
        self._taking = False  # a request is being taken (until its answer is queued)
        self._owed = 0  # answers queued and not yet written

    async def run(self) -> None:
        answers: asyncio.Queue[Answer] = asyncio.Queue(MAX_IN_FLIGHT)
        writing = asyncio.ensure_future(self._write(answers))
        self._watchdog = asyncio.get_running_loop().call_later(self._idle_s, self._close_if_idle)
        try:
            while True:
                frame = await self._read_frame()
                if frame is None or self.stopping:
                    break
                self.idle.clear()
                self._taking = True
                self._owed += 1
                await _unless_done(answers.put(await self._handle(frame)), writing)
                self._taking = False
                self._settle()  # its answer may be written already
                if self.session.close_after_answer:  # a refused login
                    break
            await _unless_done(answers.join(), writing)  # what was taken is answered before closing
        except (InvalidRequestError, SaslAuthenticationError) as e:
            log.warning("closing the connection from %s: %s", self.peer, e)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except Exception:  # a bug: this connection ends, the server goes on
            log.exception("closing the connection from %s after an unexpected error", self.peer)
        finally:
            writing.cancel()
            if self._watchdog is not None:
                self._watchdog.cancel()
            self.idle.set()
            self._writer.close()

    async def _write(self, answers: asyncio.Queue[Answer]) -> None:
        """Write the answers in the order their requests came, as each is ready."""
        while True:
            answer = await answers.get()
            try:
                data = await answer if isinstance(answer, asyncio.Future) else answer
                if data is not None:
                    self._writer.write(data)
                    await self._writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("closing the connection from %s after an unexpected error", self.peer)
                self._writer.close()
                raise
            finally:
                answers.task_done()
                self._owed -= 1
            self._settle()

    def _settle(self) -> None:
        """Idle once no request is being taken and every answer is written; either may come last."""
        if not self._taking and not self._owed:
            self.idle.set()
            self._last_active = time.monotonic()

    async def _read_frame(self) -> bytes | None:
        try:
            size_bytes = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return None  # closed between requests
        size = int.from_bytes(size_bytes, "big", signed=True)
        if not 0 < size <= self._max_bytes:
            raise InvalidRequestError(f"a request of {size} bytes (socket.request.max.bytes is {self._max_bytes})")
        return await self._reader.readexactly(size)

    def _close_if_idle(self) -> None:
        """The idle watchdog: one timer a connection, not one per read (a timeout on each read
        would cost every request a task). Idleness counts from when the last request was answered
        (or taken, if it is not answered: acks=0); one being taken or answered is no idleness."""
        busy = not self.idle.is_set()
        wait = (time.monotonic() if busy else self._last_active) + self._idle_s - time.monotonic()
        if wait > 0:
            self._watchdog = asyncio.get_running_loop().call_later(wait, self._close_if_idle)
            return
        log.info("closing the connection from %s: idle for connections.max.idle.ms", self.peer)
        self._writer.close()  # the read under way ends, and with it ``run``

    async def _handle(self, frame: bytes) -> Answer:
        if self.session.raw_tokens:  # after a v0 SaslHandshake: a bare token, answered bare
            token = await login_step(self._ctx, self.session, frame)
            return len(token).to_bytes(4, "big") + token
        api_key, version, correlation_id = peek_header(frame)
        if self.session.needs_login and api_key not in SASL_APIS:
            raise InvalidRequestError(f"API key {api_key} before the client authenticated on a SASL listener")
        if self.session.expired(self._ctx.broker.clock.now_ms()) and api_key not in SASL_APIS:
            raise InvalidRequestError(
                f"the login of {self.session.principal} ended (connections.max.reauth.ms) and it did not log in again"
            )
        api = APIS.get(api_key)
        if api_key == API_VERSIONS and api is not None and not api.supports(version):
            return encode_response(correlation_id, versions_response(0, ErrorCode.unsupported_version))
        if api is None or not api.supports(version):
            raise InvalidRequestError(f"API key {api_key} version {version} is not supported")
        header, request = decode_request(frame, api_key, version)
        timed = _Timed(self._ctx, type(request).__name__.removesuffix("Request"))
        try:
            response = await api.handler(
                self._ctx, header._replace(client_host=self.session.host, session=self.session), request
            )
        except BaseException:
            timed.done(success=False)
            raise
        if isinstance(response, asyncio.Future):  # taken, answered once written
            response.add_done_callback(timed.answered)
            return asyncio.ensure_future(_encoded(correlation_id, response))
        timed.done(success=response is None or answered_well(response))
        return None if response is None else encode_response(correlation_id, response)

    @property
    def in_flight(self) -> int:
        """Requests taken and not yet answered."""
        return self._owed


class _Timed:
    """A request's time from its arrival to its answer (``kop_server_REQUEST_LATENCY``)."""

    def __init__(self, ctx: ServerContext, name: str):
        self._ctx, self._name = ctx, name
        self._start = time.perf_counter()

    def done(self, success: bool) -> None:
        self._ctx.metrics.request(self._name, (time.perf_counter() - self._start) * 1000, success)

    def answered(self, answer: asyncio.Future[Any]) -> None:
        """An answer given once written (a produce's)."""
        failed = answer.cancelled() or answer.exception() is not None
        self.done(success=not failed and (answer.result() is None or answered_well(answer.result())))


async def _unless_done(step: Any, writing: asyncio.Future[None]) -> None:
    """Await ``step`` unless the writing of answers ends first (the connection failed)."""
    task = asyncio.ensure_future(step)
    await asyncio.wait([task, writing], return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        task.cancel()
        raise ConnectionError("the connection failed while answers were owed")


async def _encoded(correlation_id: int, response: asyncio.Future[Any]) -> bytes | None:
    answer = await response
    return None if answer is None else encode_response(correlation_id, answer)
