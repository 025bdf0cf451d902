"""A TCP proxy on loopback in front of a server, which tells how many requests a client had in
flight at once: each request is held until ``gather`` are (or ``hold_s`` has passed), so requests
made at once are seen together however fast the server answers them, and requests made in turn
are seen one at a time. A request is in flight from its first bytes to its answer's first.
``latency_s`` holds each request that long at least: an object store's first-byte latency, on
loopback (the benchmarks')."""

from __future__ import annotations

import socket
import threading
import time


class InFlightProxy:
    def __init__(self, port: int, gather: int = 1, hold_s: float = 0.2, latency_s: float = 0.0):
        self._target, self._gather, self._hold_s, self._latency_s = port, gather, hold_s, latency_s
        self._changed = threading.Condition()
        self._in_flight: set[socket.socket] = set()
        self.most_in_flight = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def wait_in_flight(self, n: int, timeout_s: float = 30) -> None:
        """Until ``n`` requests are held here at once."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._in_flight) >= n, timeout_s):
                raise TimeoutError(f"{n} requests were not in flight at once within {timeout_s} s")

    def __enter__(self) -> InFlightProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            server = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        with client, server:
            while data := _receive(client):
                due = time.monotonic() + self._latency_s
                with self._changed:
                    self._in_flight.add(client)
                    self.most_in_flight = max(self.most_in_flight, len(self._in_flight))
                    self._changed.notify_all()
                    self._changed.wait_for(lambda: len(self._in_flight) >= self._gather, self._hold_s)
                time.sleep(max(0.0, due - time.monotonic()))
                server.sendall(data)

    def _answers(self, server: socket.socket, client: socket.socket) -> None:
        while data := _receive(server):
            with self._changed:
                self._in_flight.discard(client)
            try:
                client.sendall(data)
            except OSError:
                return
        try:
            client.shutdown(socket.SHUT_RDWR)  # the server closed: so does the client's side
        except OSError:
            pass


def _receive(s: socket.socket) -> bytes:
    try:
        return s.recv(1 << 16)
    except OSError:
        return b""
