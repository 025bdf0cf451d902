"""Google Cloud Storage's XML API, as obstore (the ``object_store`` crate) speaks it to a ``gs://``
root, on loopback, with its objects in memory: PUT with ``x-goog-if-generation-match`` (0: only
a new object; N: only over generation N), GET with ``Range``, HEAD, DELETE, and the bucket's
listing (``list-type=2``). Every answer carries the object's ``ETag`` and ``x-goog-generation``,
as GCS's do, and a failed precondition is 412.

No GCS emulator on PyPI, npm or Debian serves the XML API with preconditions (gcp-storage-emulator
serves the JSON API; fake-gcs-server is a Go binary), so this process follows Google's XML API
reference for the requests above, and nothing more: anything else is answered 501, so a test
that needs more fails naming it. Conditional PUTs are checked and applied under one lock, as
GCS applies them atomically.

Usage: gcs_process.py PORT BUCKET"""

from __future__ import annotations

import email.utils
import hashlib
import re
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape


@dataclass(frozen=True)
class _Object:
    data: bytes
    generation: int
    etag: str
    modified: float


class _Bucket:
    def __init__(self) -> None:
        self.objects: dict[str, _Object] = {}
        self.lock = threading.Lock()
        self._generation = time.time_ns() // 1000  # GCS's generations are microseconds

    def put(self, key: str, data: bytes, if_generation: int | None) -> _Object | None:
        """The object written; None when ``if_generation`` does not hold."""
        with self.lock:
            current = self.objects.get(key)
            if if_generation is not None and if_generation != (current.generation if current else 0):
                return None
            self._generation += 1
            obj = _Object(data, self._generation, f'"{hashlib.md5(data).hexdigest()}"', time.time())
            self.objects[key] = obj
            return obj


BUCKETS: dict[str, _Bucket] = {}
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as GCS
    disable_nagle_algorithm = True  # else each answer's body waits on the client's delayed ACK of its headers

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _target(self) -> tuple[_Bucket | None, str, dict[str, list[str]]]:
        parts = urllib.parse.urlsplit(self.path)
        bucket, _, key = parts.path.lstrip("/").partition("/")
        return BUCKETS.get(urllib.parse.unquote(bucket)), urllib.parse.unquote(key), urllib.parse.parse_qs(parts.query)

    def _answer(self, status: HTTPStatus, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: HTTPStatus, code: str) -> None:
        body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code></Error>".encode()
        self._answer(status, body, {"Content-Type": "application/xml"})

    def _object_headers(self, obj: _Object) -> dict[str, str]:
        return {
            "ETag": obj.etag,
            "x-goog-generation": str(obj.generation),
            "x-goog-metageneration": "1",
            "Last-Modified": email.utils.formatdate(obj.modified, usegmt=True),
        }

    def do_PUT(self) -> None:
        bucket, key, query = self._target()
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if bucket is None:
            return self._error(HTTPStatus.NOT_FOUND, "NoSuchBucket")
        if not key or query or "x-goog-copy-source" in self.headers:  # multipart parts and copies are not served
            return self._error(HTTPStatus.NOT_IMPLEMENTED, "NotImplemented")
        match = self.headers.get("x-goog-if-generation-match")
        obj = bucket.put(key, data, None if match is None else int(match))
        if obj is None:
            return self._error(HTTPStatus.PRECONDITION_FAILED, "PreconditionFailed")
        self._answer(HTTPStatus.OK, headers=self._object_headers(obj))

    def do_GET(self) -> None:
        bucket, key, query = self._target()
        if bucket is None:
            return self._error(HTTPStatus.NOT_FOUND, "NoSuchBucket")
        if not key:
            return self._list(bucket, query)
        obj = bucket.objects.get(key)
        if obj is None:
            return self._error(HTTPStatus.NOT_FOUND, "NoSuchKey")
        headers = self._object_headers(obj)
        wanted = _RANGE.fullmatch(self.headers.get("Range", ""))
        if wanted is None:
            return self._answer(HTTPStatus.OK, obj.data, headers)
        start = int(wanted[1])
        end = min(int(wanted[2]) + 1 if wanted[2] else len(obj.data), len(obj.data))
        if start >= len(obj.data):
            return self._error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, "InvalidRange")
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(obj.data)}"
        self._answer(HTTPStatus.PARTIAL_CONTENT, obj.data[start:end], headers)

    do_HEAD = do_GET

    def do_DELETE(self) -> None:
        bucket, key, _ = self._target()
        if bucket is None:
            return self._error(HTTPStatus.NOT_FOUND, "NoSuchBucket")
        with bucket.lock:
            found = bucket.objects.pop(key, None)
        if found is None:
            return self._error(HTTPStatus.NOT_FOUND, "NoSuchKey")
        self._answer(HTTPStatus.NO_CONTENT)

    def do_POST(self) -> None:  # multipart uploads are not served
        self._error(HTTPStatus.NOT_IMPLEMENTED, "NotImplemented")

    def _list(self, bucket: _Bucket, query: dict[str, list[str]]) -> None:
        def arg(name: str, default: str = "") -> str:
            return query.get(name, [default])[0]

        prefix, delimiter = arg("prefix"), arg("delimiter")
        after = max(arg("start-after"), arg("continuation-token"))
        limit = int(arg("max-keys", "1000"))
        with bucket.lock:
            listed = sorted((k, o) for k, o in bucket.objects.items() if k.startswith(prefix) and k > after)
        contents: list[tuple[str, _Object]] = []
        prefixes: list[str] = []
        last = ""
        for key, obj in listed:
            if len(contents) + len(prefixes) == limit:
                break
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut < 0:
                contents.append((key, obj))
                last = key
            elif key[: cut + 1] not in prefixes:
                prefixes.append(key[: cut + 1])
                last = key[: cut + 1] + "\U0010ffff"  # past every key under the prefix
        truncated = len(contents) + len(prefixes) == limit and listed[-1][0] > last
        xml = ['<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>']
        xml.append(f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(contents) + len(prefixes)}</KeyCount>")
        for key, obj in contents:
            modified = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(obj.modified))
            xml.append(
                f"<Contents><Key>{escape(key)}</Key><Generation>{obj.generation}</Generation>"
                f"<LastModified>{modified}</LastModified><ETag>{escape(obj.etag)}</ETag>"
                f"<Size>{len(obj.data)}</Size></Contents>"
            )
        xml += [f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes]
        xml.append(f"<IsTruncated>{str(truncated).lower()}</IsTruncated>")
        if truncated:
            xml.append(f"<NextContinuationToken>{escape(last)}</NextContinuationToken>")
        xml.append("</ListBucketResult>")
        self._answer(HTTPStatus.OK, "".join(xml).encode(), {"Content-Type": "application/xml"})


if __name__ == "__main__":
    port, bucket_name = int(sys.argv[1]), sys.argv[2]
    BUCKETS[bucket_name] = _Bucket()
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    server.serve_forever()
