"""A real Redis server for tests (Debian's ``redis-server``), on a free loopback port, no persistence.

``redis-server --port P --save '' --appendonly no`` in the foreground as a child process: started in
milliseconds, stopped with SIGTERM, paused with SIGSTOP (a server that accepts connections and never
answers), killed with SIGKILL, started again on the same port. ``scripts/install-redis.sh`` installs
the package (``.ci/run`` runs it).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def redis_binary() -> str | None:
    """The redis-server command on PATH."""
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    """One redis-server on 127.0.0.1:``port``, its working folder ``folder``."""

    port: int
    folder: Path
    maxmemory: str | None = None
    policy: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def up(self) -> None:
        """Start it and wait until it answers PING."""
        binary = redis_binary()
        assert binary is not None, "redis-server is not installed"
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        command += ["--dir", str(self.folder), "--daemonize", "no", "--loglevel", "warning"]
        if self.maxmemory is not None:
            command += ["--maxmemory", self.maxmemory]
        if self.policy is not None:
            command += ["--maxmemory-policy", self.policy]
        log = (self.folder / "redis.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        log.close()
        deadline = time.monotonic() + 10
        while not self._pings():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.process.returncode}: see {self.folder}/redis.log"
                )
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer within 10 s")
            time.sleep(0.02)

    def down(self) -> None:
        """Stop it (SIGCONT first, in case it is paused) and wait for its exit."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: gone at once, connections reset."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the kernel still accepts connections; nothing is answered."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False
