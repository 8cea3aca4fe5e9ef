"""The remote engine against real vLLM servers: two OpenAI servers of the CPU build with the tiny model,
and the real daemon (``docsumd run``, folder source) in remote mode.

One test, in steps that share the two servers (a server costs 35 s to 3 minutes to start and 2.7 GiB;
the later steps kill them, so they cannot be shared with other tests):

1. the local tokenizer differs from the servers' (a second tiny model with another vocabulary as
   ``engine.tokenizer``): ``docsumd run`` stops at start with exit 2 naming the endpoints;
2. documents through both servers, one of them started with ``--max-num-queued-reqs 1``: it returns
   real 503s (HTTP and in-band), and none becomes a document's failure;
3. the other server is killed (SIGKILL to its process group) while documents are in flight on it:
   every document ends once, as a summary, none fails;
4. the last server is killed too: the daemon reports itself unhealthy, takes no new input and fails
   nothing; a SIGTERM then drains and exits 0 with those inputs unacknowledged.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, drop_file, run_cli, wait_for, wait_for_progress
from tests.e2e.test_dashboard_metrics import all_queries, exposition, problems, remote_queries
from tests.e2e.vllm_servers import START_TIMEOUT_SECONDS, VllmServer

pytestmark = pytest.mark.engine

FIRST_BATCH = [
    "legal-cal-ms-rl.txt",
    "legal-cal-ofl-1.1.txt",
    "legal-common-artistic.txt",
    "legal-cal-cc0-1.0.txt",
    "legal-debian-social-contract.txt",
    "legal-common-apache-2.0.txt",
    "paper-aclsum-w99-0615.txt",
    "paper-aclsum-d08-1038.txt",  # longer than the context: in parts
]
# After the kill, one server is left, which takes one request at a time: short documents.
SECOND_BATCH = [
    "legal-cal-osl-3.0.txt",
    "legal-cal-ecl-2.0.txt",
    "legal-cal-lppl-1.3c.txt",  # in parts
    "legal-cal-ms-rl.txt",
    "legal-cal-ofl-1.1.txt",
]


@pytest.fixture(scope="module")
def fleet(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[VllmServer, VllmServer]]:
    """Two servers of the tiny model, started together: ``open`` as any deployment runs one, and
    ``queue1``, which refuses a request while another is unfinished (vLLM's own admission)."""
    logs = tmp_path_factory.mktemp("vllm-servers")
    servers = (
        VllmServer("open", tiny_model, "--enable-prompt-tokens-details", log_dir=logs),
        VllmServer("queue1", tiny_model, "--max-num-queued-reqs", "1", log_dir=logs),
    )
    try:
        for server in servers:
            server.start()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        for server in servers:
            server.wait_healthy(deadline)
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny model whose tokenizer has another vocabulary (its ids differ for the same text)."""
    from daemon.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("other-tokenizer"), vocab_size=4096, seed=1)


def _remote_config(layout: Layout, servers: tuple[VllmServer, ...], **extra: str) -> None:
    layout.write_config(
        **{
            "engine.mode": '"remote"',
            "engine.max_num_seqs": "16",
            "engine.remote.endpoints": json.dumps([server.url for server in servers]),
            "engine.remote.metrics_interval_seconds": "0.5",
            "engine.remote.backoff_max_seconds": "2.0",
            # A loaded CI machine can take minutes per request; the deadlines are not what is tested.
            "engine.remote.timeout_base_seconds": "600",
            **extra,
        }
    )
    # The local engine's keys stay in the file: in remote mode they are only noted.
    assert "kv_cache_memory_bytes" in layout.config.read_text()


def _drop(layout: Layout, corpus: Path, names: list[str], prefix: str = "") -> list[str]:
    dropped = []
    for name in names:
        drop_file(layout.inbox, prefix + name, (corpus / "docs" / name).read_bytes())
        dropped.append(prefix + name)
    return dropped


def _metric(daemon: DaemonProcess, line_start: str) -> float:
    """The value of the first line of the daemon's /metrics that starts with ``line_start``."""
    _, text = daemon.http_get("/metrics")
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.timeout(1800)  # minutes per step on a loaded 2-core machine (servers start in the fixture)
def test_remote_fleet(
    layout: Layout,
    start_daemon: Callable[..., DaemonProcess],
    corpus: Path,
    fleet: tuple[VllmServer, VllmServer],
    other_tokenizer: Path,
) -> None:
    open_server, queue1 = fleet

    # 1. Another tokenizer: exit 2 before anything is read, naming the endpoints.
    _remote_config(layout, fleet, **{"engine.tokenizer": json.dumps(str(other_tokenizer))})
    proc = run_cli(layout, "run", "--config", str(layout.config), timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"endpoint {open_server.url}: its tokenizer differs from the local one" in proc.stderr
    assert f"endpoint {queue1.url}: its tokenizer differs" in proc.stderr

    # 2. Both servers; queue1 refuses with real 503s; no document fails for it.
    _remote_config(layout, fleet)
    first = _drop(layout, corpus, FIRST_BATCH)
    daemon = start_daemon()
    daemon.wait_ready(timeout=300)
    wait_for_progress(
        lambda: len(layout.names(layout.outbox, ".summary.json")), len(first), 240, "the first batch"
    )
    assert layout.names(layout.failed) == set()
    assert queue1.metric("vllm:admission_rejections_total") > 0  # the server did refuse requests
    assert _metric(daemon, f'docsumd_endpoint_rejections_total{{endpoint="{queue1.url}",status="503"}}') > 0
    assert _metric(daemon, "docsumd_engine_rejections_total") > 0
    assert (
        _metric(daemon, f'docsumd_endpoint_requests_total{{endpoint="{open_server.url}",outcome="ok"}}') > 0
    )
    for name in first:
        result = layout.result(name)
        assert result["summary"], name
        assert result["prompt_version"] == "summary-v5"
    assert any(layout.result(name)["strategy"] == "map_reduce" for name in first)
    # The dashboard's remote row and the endpoint alert query only what this daemon exports.
    queries = remote_queries(all_queries())
    assert not problems(queries, exposition(daemon.http_get("/metrics")[1])), problems(
        queries, exposition(daemon.http_get("/metrics")[1])
    )

    # 3. Kill the open server while documents are in flight on it: all end once, none fails.
    second = _drop(layout, corpus, SECOND_BATCH, prefix="b-")
    on_open = f'docsumd_endpoint_inflight_requests{{endpoint="{open_server.url}"}}'
    wait_for(lambda: _metric(daemon, on_open) > 0, 240, "requests in flight on the open server")
    open_server.kill(signal.SIGKILL)
    wait_for_progress(
        lambda: len(layout.names(layout.outbox, ".summary.json")),
        len(first) + len(second),
        300,
        "the second batch",
    )
    assert layout.names(layout.failed) == set()
    assert _metric(daemon, f'docsumd_endpoint_up{{endpoint="{open_server.url}"}}') == 0
    moved = _metric(daemon, f'docsumd_endpoint_retries_total{{endpoint="{open_server.url}",reason="moved"}}')
    lost = _metric(daemon, f'docsumd_endpoint_retries_total{{endpoint="{open_server.url}",reason="lost"}}')
    down = _metric(daemon, f'docsumd_endpoint_retries_total{{endpoint="{open_server.url}",reason="down"}}')
    assert moved + lost + down > 0  # its requests went to the other server
    assert layout.names(layout.outbox, ".summary.json") == {f"{n}.summary.json" for n in first + second}
    assert layout.inputs_in(layout.done) == set(first + second)  # each input acknowledged once
    assert daemon.http_get("/healthz")[0] == 200

    # 4. Kill the last server: unhealthy, no input taken, nothing failed; SIGTERM drains and exits 0.
    queue1.kill(signal.SIGKILL)
    wait_for(lambda: daemon.http_get("/healthz")[0] == 503, 60, "the daemon to report itself unhealthy")
    waiting = _drop(layout, corpus, FIRST_BATCH[:3], prefix="c-")
    time.sleep(3.0)  # several load reads and rescans: nothing may be taken or failed meanwhile
    assert layout.names(layout.failed) == set()
    assert set(waiting) <= layout.inputs_in(layout.inbox)  # not claimed
    assert _metric(daemon, "docsumd_endpoints_usable") == 0
    assert _metric(daemon, "docsumd_engine_up") == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    assert set(waiting) <= layout.pending()
    assert layout.names(layout.failed) == set()
    events = [event.get("event") for event in daemon.log_events()]
    assert "intake paused: no engine server takes work" in events
    assert "remote mode: these engine keys are for the local engine and change nothing" in events
