"""One etcd watch over every key of a store, as Pulsar's etcd metadata store keeps one.

Spoken through the gateway's ``/v3/watch``: a POST of one create request, answered by a stream
of JSON lines, one a response: first ``created``, at the store's revision then, then every
change after it. So a probe answered after the watch was created stays true until its key's
change is told, and looks at unchanged keys ask etcd nothing (see ``Watches``).

The gateway reads no request on a stream once it answers, so one stream watches one range: the
store's prefix, every key under it, values and all (etcd sends no event without the value).

A watch is stopped when no look came for ``IDLE_S``, and while the stream is down nothing is
kept: looks ask etcd. A stream whose server is gone without a word (a host lost, a cable cut)
is found out by TCP keep-alives within 5 s (``_KEEPALIVE``): until then, looks trust what was kept.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator

from .watches import Watches

log = logging.getLogger(__name__)

IDLE_S = 60.0
# Probes after 2 s idle, 1 s apart, 3 unanswered: a dead peer is found within 5 s.
_KEEPALIVE = {"TCP_KEEPIDLE": 2, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3}
_RETRY_S = 1.0
_watchers: dict[tuple[tuple[str, ...], bytes, int], EtcdWatch] = {}
_watchers_lock = threading.Lock()


class StreamEnded(Exception):
    """The watch's stream ended, or said something a watch stream does not."""


def watch_of(endpoints: list[str], prefix: bytes) -> EtcdWatch:
    """The watch of ``prefix`` on ``endpoints``, shared by this process's stores on them (so that
    a write through one drops what another kept), started if it is not running."""
    key = (tuple(endpoints), prefix, os.getpid())
    with _watchers_lock:
        watch = _watchers.get(key)
        if watch is None:
            watch = _watchers[key] = EtcdWatch(key)
        watch.looked_at = time.monotonic()
    return watch


def running_watch(endpoints: list[str], prefix: bytes) -> EtcdWatch | None:
    """The watch of ``prefix`` on ``endpoints`` if one runs here; none is started."""
    with _watchers_lock:
        return _watchers.get((tuple(endpoints), prefix, os.getpid()))


class EtcdWatch:
    """A thread that keeps the watch standing, telling ``watches`` of each changed key (by its
    key in etcd, the store's prefix included) and, where a key was made or removed, of its
    parents, which are listings."""

    def __init__(self, key: tuple[tuple[str, ...], bytes, int]):
        self._key = key
        self.looked_at = time.monotonic()
        self.watches = Watches()
        self.watches.away(standing=False)
        self._thread = threading.Thread(target=self._run, name=f"etcd-watch {key[0][0]}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._idle():
            for endpoint in self._key[0]:
                try:
                    self._follow(endpoint)
                except (OSError, ValueError, KeyError, StreamEnded):
                    pass  # etcd restarted, or is away: watch again, elsewhere or later
                except Exception as e:
                    # An answer of a shape etcd never sends (a proxy's?) ended the thread, and with
                    # it the watch for as long as the process ran: every look asked etcd.
                    log.warning("etcd watch on %s: %r; watching again", endpoint, e)
                finally:
                    self.watches.away(standing=False)
                if self._idle():
                    return
            time.sleep(_RETRY_S)

    def _idle(self) -> bool:
        with _watchers_lock:
            if time.monotonic() - self.looked_at < IDLE_S:
                return False
            if _watchers.get(self._key) is self:
                del _watchers[self._key]
            return True

    def _follow(self, endpoint: str) -> None:
        prefix = self._key[1]
        start = prefix or b"\0"  # from NUL on is every key
        create = {"create_request": {"key": b64(start), "range_end": b64(prefix_end(start))}}
        with _connect(endpoint) as sock:
            for line in streamed_lines(sock, endpoint, "/v3/watch", json.dumps(create).encode()):
                if self._idle():
                    return
                if line.strip():
                    self._handle(json.loads(line).get("result"), line)

    def _handle(self, result: dict | None, line: bytes) -> None:
        if result is None or result.get("canceled") or result.get("compact_revision"):
            raise StreamEnded(line[:300].decode(errors="replace"))
        if result.get("created"):
            self.watches.standing()
        for event in result.get("events") or ():
            self._told(base64.b64decode(event["kv"]["key"]).decode(), event)

    def _told(self, key: str, event: dict) -> None:
        self.watches.written(key, made=event.get("type") == "DELETE" or event["kv"].get("version") == "1")


def _connect(endpoint: str) -> socket.socket:
    parsed = urllib.parse.urlsplit(endpoint)
    assert parsed.hostname is not None and parsed.port is not None  # parse_etcd_url checked
    sock = socket.create_connection((parsed.hostname, parsed.port), timeout=_RETRY_S * 5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in _KEEPALIVE.items():
        if hasattr(socket, option):  # Linux's; elsewhere the system's keep-alive times stand
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
    if parsed.scheme == "https":
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parsed.hostname)
    # Woken each second to stop when idle; an idle watch stream is silent.
    sock.settimeout(_RETRY_S)
    return sock


def streamed_lines(sock: socket.socket, endpoint: str, api: str, body: bytes) -> Iterator[bytes]:
    """The lines of a streamed answer to a POST, each as it comes; a second without one yields
    ``b""`` (so that the caller may stop)."""
    host = urllib.parse.urlsplit(endpoint).netloc
    head = f"POST {api} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    reader = _ChunkedReader(sock)
    status, headers = reader.head()
    if not status.startswith(b"HTTP/1.1 200") or b"transfer-encoding: chunked" not in headers.lower():
        raise StreamEnded(f"{endpoint}{api}: {status.decode(errors='replace')}")
    line = b""
    while True:
        data = reader.chunk()
        if data is None:
            yield b""
            continue
        line += data
        *lines, line = line.split(b"\n")
        yield from lines


class _ChunkedReader:
    """HTTP/1.1's chunked transfer coding, read off a socket that times out each second."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._buffer = b""

    def _fill(self) -> bool:
        try:
            data = self._sock.recv(1 << 16)
        except TimeoutError:
            return False
        if not data:
            raise StreamEnded("the server closed the stream")
        self._buffer += data
        return True

    def _take_line(self) -> bytes | None:
        end = self._buffer.find(b"\r\n")
        if end < 0:
            return None
        line, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
        return line

    def head(self) -> tuple[bytes, bytes]:
        deadline = time.monotonic() + 5 * _RETRY_S
        while b"\r\n\r\n" not in self._buffer:
            if not self._fill() and time.monotonic() > deadline:
                raise StreamEnded("no answer to the watch")
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        status, _, headers = head.partition(b"\r\n")
        return status, headers

    def chunk(self) -> bytes | None:
        """The next chunk's data; None if none came within a second."""
        size_line = self._take_line()
        while size_line is None:
            if not self._fill():
                return None
            size_line = self._take_line()
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            raise StreamEnded("the stream ended")
        while len(self._buffer) < size + 2:
            self._fill()
        data, self._buffer = self._buffer[:size], self._buffer[size + 2 :]
        return data


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prefix_end(prefix: bytes) -> bytes:
    """The first key past every key starting with ``prefix`` (etcd's range_end for a prefix)."""
    if prefix == b"\0":
        return b"\0"  # etcd's "every key from here on"
    end = bytearray(prefix)
    end[-1] += 1  # keys here are ASCII, so the last byte is below 0xff
    return bytes(end)
