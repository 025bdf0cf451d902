"""One client connection: size-prefixed requests in, responses out in the same order.

As a Kafka broker does, a connection's requests are handled one at a time (a client pipelines
them; their order is what keeps a producer's batches in order), while other connections go on.
A request that is malformed, truncated, larger than ``socket.request.max.bytes``, or of a version
this server does not handle closes this connection only, with a log line; nothing is allocated
from a length the client sent before its bytes arrive."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from .apis import API_VERSIONS, APIS, versions_response
from .context import ServerContext
from .messages import InvalidRequestError, decode_request, encode_response, peek_header

log = logging.getLogger(__name__)


class Connection:
    def __init__(self, ctx: ServerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_bytes: int):
        self._ctx = ctx
        self._reader = reader
        self._writer = writer
        self._max_bytes = max_bytes
        peer = writer.get_extra_info("peername")
        self.host = peer[0] if isinstance(peer, tuple) else str(peer)
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.idle = asyncio.Event()  # not handling a request: a graceful stop waits for this
        self.idle.set()
        self.stopping = False  # set by a graceful stop: no new request is taken

    async def run(self) -> None:
        try:
            while True:
                frame = await self._read_frame()
                if frame is None or self.stopping:
                    return
                self.idle.clear()
                response = await self._handle(frame)
                if response is not None:
                    self._writer.write(response)
                    await self._writer.drain()
                self.idle.set()
        except InvalidRequestError as e:
            log.warning("closing the connection from %s: %s", self.peer, e)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except Exception:  # a bug: this connection ends, the server goes on
            log.exception("closing the connection from %s after an unexpected error", self.peer)
        finally:
            self.idle.set()
            self._writer.close()

    async def _read_frame(self) -> bytes | None:
        try:
            size_bytes = await self._reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return None  # closed between requests
        size = int.from_bytes(size_bytes, "big", signed=True)
        if not 0 < size <= self._max_bytes:
            raise InvalidRequestError(f"a request of {size} bytes (socket.request.max.bytes is {self._max_bytes})")
        return await self._reader.readexactly(size)

    async def _handle(self, frame: bytes) -> bytes | None:
        api_key, version, correlation_id = peek_header(frame)
        api = APIS.get(api_key)
        if api_key == API_VERSIONS and api is not None and not api.supports(version):
            return encode_response(correlation_id, versions_response(0, ErrorCode.unsupported_version))
        if api is None or not api.supports(version):
            raise InvalidRequestError(f"API key {api_key} version {version} is not supported")
        header, request = decode_request(frame, api_key, version)
        response = await api.handler(self._ctx, header._replace(client_host=self.host), request)
        return None if response is None else encode_response(correlation_id, response)
