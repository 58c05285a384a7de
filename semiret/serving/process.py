"""A ``semiret serve`` process on a free loopback port, started and waited for: what the fault test and the
load benchmark run their requests against (and a way to run a server beside a script of one's own)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from semiret.errors import SemiretError


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """``python -m semiret.cli serve --index ... --port PORT [options]`` in its own process group.

    ``with ServerProcess(indexes, api_key=...) as server:`` starts it and returns once ``/readyz`` answers;
    the block's end stops it (SIGTERM, then SIGKILL); :meth:`kill` is ``kill -9`` of the whole group, workers
    included, at once."""

    def __init__(self, indexes: dict[str, str | Path], api_key: str | None = None, workers: int = 1,
                 extra_args: list[str] | None = None, start_timeout: float = 60.0):
        self.port = free_port()
        arguments = extra_args or []
        certificate = arguments[arguments.index("--ssl-certfile") + 1] if "--ssl-certfile" in arguments else None
        self.url = f"{'https' if certificate else 'http'}://127.0.0.1:{self.port}"
        self.ssl_context = ssl.create_default_context(cafile=certificate) if certificate else None
        """With ``--ssl-certfile``: a context trusting that certificate, for the readiness check and for clients."""
        self.command = [sys.executable, "-m", "semiret.cli", "serve", "--port", str(self.port), "--workers", str(workers),
                        *[arg for name, path in indexes.items() for arg in ("--index", f"{name}={path}")],
                        *(extra_args or [])]
        self.environment = {**os.environ, **({"SEMIRET_API_KEY": api_key} if api_key else {})}
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self.log = None

    def start(self) -> "ServerProcess":
        self.log = tempfile.TemporaryFile()  # not a pipe: a server that logs much would block once it is full
        self.process = subprocess.Popen(self.command, env=self.environment, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SemiretError(f"the server exited ({self.process.returncode}): {self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1.0, context=self.ssl_context):
                    return self  # 200: ready (an error status raises)
            except OSError:  # not listening yet, or not ready (urllib's HTTPError is an OSError)
                time.sleep(0.05)
        self.kill()
        raise SemiretError(f"the server was not ready after {self.start_timeout:.0f} s: {' '.join(self.command)}")

    def kill(self) -> None:
        """SIGKILL to the server and its workers: no chance to finish anything."""
        self._signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM (a graceful shutdown), then SIGKILL to whatever of the group is left after 10 s."""
        self._signal(signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def output(self) -> str:
        """What the server printed so far."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def _signal(self, number: int) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, number)  # the group: worker processes too, even if the first one exited
        except ProcessLookupError:
            pass  # all gone already

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
