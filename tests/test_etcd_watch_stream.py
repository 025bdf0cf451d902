"""The stream of an etcd watch, as the gateway sends it: JSON lines in HTTP/1.1 chunks. Apart
from the ZooKeeper tests, whose sessions' kazoo loops draw from the global ``random`` while
Hypothesis draws (which it warns of)."""

from __future__ import annotations

import json
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kop_spark.storage.metadata import etcd_watch


@settings(deadline=None, max_examples=100)
@given(
    messages=st.lists(st.dictionaries(st.text(max_size=30), st.integers() | st.text(max_size=300)), max_size=6),
    cuts=st.lists(st.integers(1, 400), max_size=12),
    read=st.integers(1, 64),
)
def test_a_watch_stream_gives_each_message_whatever_chunks_carry_it(
    messages: list[dict], cuts: list[int], read: int
) -> None:
    """The gateway streams a watch as JSON lines in HTTP/1.1 chunks, which may end anywhere in a
    line (a large value spans several), and a read of the socket may end anywhere in a chunk."""
    body = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in _pieces(body, cuts)) + b"0\r\n\r\n"
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    answer = _Answer([answer[at : at + read] for at in range(0, len(answer), read)])
    lines = []
    with pytest.raises(etcd_watch.StreamEnded, match="the stream ended"):
        for line in etcd_watch.streamed_lines(answer, "http://127.0.0.1:1", "/v3/watch", b"{}"):  # type: ignore[arg-type]  # a socket's recv
            assert line, "a read found nothing, with the whole answer there"
            lines.append(json.loads(line))
    assert lines == messages


def test_a_watch_outlives_an_answer_of_a_shape_etcd_never_sends() -> None:
    """Watched again, as after a stream that ended: the thread ended, and the process's looks
    asked etcd every time for as long as it ran."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    odd = b'{"result": {"created": true, "events": [{"kv": 5}]}}\n'
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(odd), odd)
    port = listener.getsockname()[1]
    watch = etcd_watch.watch_of([f"http://127.0.0.1:{port}"], b"/odd")
    try:
        for attempt in ("first", "second, watched again"):
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                pytest.fail(f"no {attempt} watch within 10 s: the watch's thread ended")
            with conn:
                conn.recv(65536)
                conn.sendall(answer)
                while conn.recv(65536):  # until the watch lets go of it
                    pass
    finally:
        watch.looked_at = time.monotonic() - etcd_watch.IDLE_S  # idle: its thread ends
        listener.close()


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut after each length in ``cuts`` (the rest in one piece); no empty piece."""
    out, at = [], 0
    for cut in cuts:
        out.append(data[at : at + cut])
        at += cut
    return [p for p in [*out, data[at:]] if p]


class _Answer:
    """What a socket's reads give: the answer, a piece a read."""

    def __init__(self, pieces: list[bytes]):
        self._pieces = pieces

    def sendall(self, data: bytes) -> None:
        pass

    def recv(self, size: int) -> bytes:
        return self._pieces.pop(0) if self._pieces else b""
