"""``kop serve`` as the tests run it: a real subprocess on free loopback ports (``servers.free_port``,
read back from its "listening on" log lines), stopped with SIGTERM or killed with SIGKILL."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

from .conftest import PYTHON, python_subprocess_env
from .servers import free_port

_LISTENING = re.compile(r"listening on (\w+)://([\d.]+):(\d+)")


class KopServer:
    def __init__(
        self,
        root: str,
        conf: Sequence[str] = (),
        port: int = 0,
        protocols: Sequence[str] = ("PLAINTEXT",),
        open_files: int | None = None,  # the soft limit it starts with, as a shell's ulimit -Sn
    ):
        self.root = root
        self.open_files = open_files
        self.conf = list(conf)
        self.port = port
        self.protocols = list(protocols)
        self.proc: subprocess.Popen[str] | None = None
        self.bootstrap = ""  # the first listener's host:port
        self.bootstraps: dict[str, str] = {}  # each listener's, by protocol
        self.log: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()  # the log line by line, then None at exit

    def start(self, timeout: float = 60) -> KopServer:
        args = [PYTHON, "-m", "kop_spark.cli", "--root", self.root, *(f"--conf={c}" for c in self.conf)]
        if self.open_files is not None:  # the shell's ulimit, then exec: the server keeps the shell's pid
            args = ["/bin/sh", "-c", 'ulimit -Sn "$0" && exec "$@"', str(self.open_files), *args]
        given = [self.port] if self.port else []
        ports = given + [free_port() for _ in self.protocols[len(given) :]]
        listeners = ",".join(f"{p}://127.0.0.1:{n}" for p, n in zip(self.protocols, ports, strict=True))
        self.proc = subprocess.Popen(
            [*args, "serve", "--listeners", listeners],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=python_subprocess_env(),
        )
        self._lines = queue.Queue()
        threading.Thread(target=self._drain, args=(self.proc, self._lines), daemon=True).start()
        while True:
            try:
                found = _LISTENING.search(self.wait_for("", timeout))
            except TimeoutError:
                self.kill()
                raise
            if found:
                self.bootstraps[found[1]] = f"{found[2]}:{found[3]}"
                if len(self.bootstraps) == len(self.protocols):
                    self.bootstrap = self.bootstraps[self.protocols[0]]
                    self.port = int(self.bootstrap.rsplit(":", 1)[1])
                    return self

    def _drain(self, proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log.append(line)
            lines.put(line)
        lines.put(None)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """The next line of the log holding ``text``; the lines before it are passed over."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"kop serve did not log {text!r} within {timeout} s") from None
            if line is None:
                raise RuntimeError(f"kop serve exited before logging {text!r}:\n" + "".join(self.log))
            if text in line:
                return line

    def whole_log(self, timeout: float = 60) -> str:
        """The log, once the server has exited and the last of it is read."""
        deadline = time.monotonic() + timeout
        while self._lines.get(timeout=max(0.0, deadline - time.monotonic())) is not None:
            pass
        return "".join(self.log)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, as a service manager stops it; returns its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            tail = "".join(self.log[-40:])
            raise AssertionError(
                f"kop serve did not stop within {timeout} s of SIGTERM; its log ends:\n{tail}"
            ) from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> KopServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
