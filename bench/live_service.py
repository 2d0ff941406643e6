"""A real meshplan service in a subprocess (its own process group): `uvicorn app.main:app`
on a free loopback port with the given `MESHPLAN_*` environment. Used by the fault
benchmark (`bench.faults`) and the fault and replica tests (`tests/app/test_faults_*.py`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(os.environ.get("MESHPLAN_TEST_SERVER_ROOT") or Path(__file__).resolve().parents[1])
"""The checkout the server runs from (override: compare against another checkout)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """`uvicorn app.main:app` on a free loopback port with the given `MESHPLAN_*` env."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> LiveServer:
        """Launch the server and wait until `/v1/health` answers."""
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> LiveServer:
        """Start the server process without waiting for it (start several at once, then
        `wait_ready` on each)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1"]
                + ["--port", str(self.port)],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> LiveServer:
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not start")

    def wait_warm(self, timeout_s: float = 120.0) -> None:
        """Until `/v1/health` reports every search worker started and initialised (until then
        a search runs on a thread of the API process)."""
        deadline = time.monotonic() + timeout_s
        with self.client() as client:
            while not client.get("/v1/health").json()["pool"]["warm"]:
                if time.monotonic() > deadline:
                    raise RuntimeError("the search worker pool never warmed up")
                time.sleep(0.1)

    @property
    def pgid(self) -> int:
        assert self.proc is not None
        return os.getpgid(self.proc.pid)

    def signal_group(self, sig: int, timeout_s: float = 60.0) -> int:
        """Send `sig` to the whole process group and wait for the server to exit."""
        assert self.proc is not None
        os.killpg(self.pgid, sig)
        return self.proc.wait(timeout=timeout_s)

    def group_alive(self) -> list[int]:
        """Pids still in the server's process group."""
        import psutil

        assert self.proc is not None
        pgid = self.proc.pid
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.info["pid"]) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.info["pid"])
            except (ProcessLookupError, psutil.Error):
                pass
        return out

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60)
