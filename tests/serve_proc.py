"""`orcd serve` as a real subprocess on a free loopback port: the one launcher every live-server test uses."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """Starts `python -m orcd.cli.main serve --model MODEL --port P *args`; output goes to `log_path`.

    `env` replaces variables of this process's environment; names mapped to None are removed.
    """

    def __init__(self, model: Path, log_path: Path, *args: str, env: dict[str, str | None] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = dict(os.environ)
        for name, value in (env or {}).items():
            if value is None:
                full_env.pop(name, None)
            else:
                full_env[name] = value
        cmd = [sys.executable, "-m", "orcd", "serve", "--model", str(model), "--port", str(self.port),
               *args]
        self._log = open(log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=full_env)
        self.pid = self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until /health answers 200; fails with the server's log if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"orcd serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"orcd serve not ready after {timeout} s:\n{self.log()}")

    def stop(self) -> int:
        """SIGTERM, then the exit status (killed after 60 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
