"""A ``semiret serve`` process on a free loopback port, started and waited for: what the fault test and the
load benchmark run their requests against (and a way to run a server beside a script of one's own)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
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
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "semiret.cli", "serve", "--port", str(self.port), "--workers", str(workers),
                        *[arg for name, path in indexes.items() for arg in ("--index", f"{name}={path}")],
                        *(extra_args or [])]
        self.environment = {**os.environ, **({"SEMIRET_API_KEY": api_key} if api_key else {})}
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None

    def start(self) -> "ServerProcess":
        import httpx

        self.process = subprocess.Popen(self.command, env=self.environment, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SemiretError(f"the server exited ({self.process.returncode}): {self.process.stderr.read().decode()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.kill()
        raise SemiretError(f"the server was not ready after {self.start_timeout:.0f} s: {' '.join(self.command)}")

    def kill(self) -> None:
        """SIGKILL to the server and its workers: no chance to finish anything."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self._reap()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self._reap()

    def _reap(self) -> None:
        if self.process is not None:
            self.process.wait()
            self.process.stderr.close()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
