"""``docsumd cache info`` and ``docsumd cache clear``, run as ``python -m daemon`` in their own process
against a real SQLite store that a SummaryCache filled (and a real redis-server): what they print,
their exit codes, the terminal's confirmation, and a daemon's cache open on the file meanwhile."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis as redis_sync

from daemon.cache import CachedSummary, KeyMaker, KeyScope, ModelRevision, Step, SummaryCache, sha256_of
from daemon.cache.keys import CacheKey
from daemon.cache.sqlite import SqliteStore
from daemon.contracts import Sampling
from tests.redis_server import RedisServer

KEYS = KeyMaker(KeyScope.create({"dtype": "bfloat16"}, model=ModelRevision("0" * 16, "folder", 1)))
STEP = Step(
    template=([1], [2]),
    sampling=Sampling(max_tokens=128, temperature=0.0, top_p=1.0, repetition_penalty=1.0),
    prompt_version="summary-v4",
    profile_version="abc",
)
PART = KEYS.part([5, 6, 7], STEP)
COMBINE = KEYS.combine([PART], STEP)
DOCUMENT = KEYS.document(sha256_of([b"a contract"]), settings={"profile": "default"}, options={})
PASSWORD = "s3cr/et:p@ss"


def config_at(tmp_path: Path, cache: str = "") -> Path:
    """A config whose cache file is ``tmp_path/cache/summaries.sqlite3`` (relative to the file)."""
    path = tmp_path / "docsumd.toml"
    path.write_text(f'[engine]\nmodel = "m"\n\n[cache]\npath = "cache/summaries.sqlite3"\n{cache}')
    return path


def cache_over(path: Path) -> SummaryCache:
    return SummaryCache(
        SqliteStore(path, max_bytes=64 << 20, timeout=5.0), KEYS, max_value_bytes=1 << 20, retry_seconds=30.0
    )


def entry(text: str, key: CacheKey) -> CachedSummary:
    return CachedSummary(text, 3000, 100, "stop", time.time(), key.parts)


async def filled(path: Path) -> None:
    """The store as a daemon's summary cache leaves it: a part, a combine step, a document."""
    cache = cache_over(path)
    await cache.start()
    try:
        await cache.put_many(
            [(key, entry(f"the {key.kind}'s summary", key)) for key in (PART, COMBINE, DOCUMENT)]
        )
        assert all(await cache.get_many([PART, COMBINE, DOCUMENT]))
    finally:
        await cache.stop()


def docsumd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m daemon ARGS`` in its own process, stdin not a terminal; ``env`` added to ours."""
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def on_terminal(*args: str, answer: str) -> tuple[int, str, str]:
    """``docsumd ARGS`` with a terminal as its stdin, ``answer`` typed on it."""
    master, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "daemon", *args],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.close(terminal)
        os.write(master, answer.encode())
        out, err = process.communicate(timeout=120)
    finally:
        os.close(master)
    return process.returncode, out, err


def info(config: Path) -> dict[str, Any]:
    done = docsumd("cache", "info", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def test_info_shows_what_a_summary_cache_stored(tmp_path: Path) -> None:
    config = config_at(tmp_path)
    store = tmp_path / "cache" / "summaries.sqlite3"
    await filled(store)
    done = docsumd("cache", "info", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert f"store: SQLite file {store}" in done.stdout
    assert "entries: 3 (combine 1, document 1, part 1)" in done.stdout
    assert "bounds: max_bytes 1.0 GiB, max_value_bytes 1.0 MiB" in done.stdout
    report = info(config)
    assert report["enabled"] is True
    assert report["store"]["path"] == str(store)
    assert report["contents"]["entries"] == 3
    assert report["contents"]["kinds"] == {"combine": 1, "document": 1, "part": 1}
    assert report["contents"]["bytes"] > 0


async def test_clear_with_yes_empties_the_store_a_running_cache_goes_on_using(tmp_path: Path) -> None:
    config = config_at(tmp_path)
    store = tmp_path / "cache" / "summaries.sqlite3"
    await filled(store)
    running = cache_over(store)  # a daemon's cache, its connection open on the file all along
    await running.start()
    try:
        assert all(await running.get_many([PART, COMBINE, DOCUMENT]))
        done = docsumd("cache", "clear", "--config", str(config), "--yes")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"cleared {store}: removed 3 entries (")
        assert "of pages freed)" in done.stdout
        assert await running.get_many([PART, COMBINE, DOCUMENT]) == [None, None, None]
        await running.put(PART, entry("made again", PART))
        found = await running.get(PART)
        assert found is not None
        assert found.text == "made again"
        assert running.available
    finally:
        await running.stop()
    assert info(config)["contents"]["entries"] == 1


async def test_clear_without_yes_and_no_terminal_refuses(tmp_path: Path) -> None:
    config = config_at(tmp_path)
    await filled(tmp_path / "cache" / "summaries.sqlite3")
    done = docsumd("cache", "clear", "--config", str(config))
    assert done.returncode == 2
    assert "no terminal to ask on: pass --yes" in done.stderr
    assert info(config)["contents"]["entries"] == 3


async def test_clear_on_a_terminal_asks_first(tmp_path: Path) -> None:
    config = config_at(tmp_path)
    store = tmp_path / "cache" / "summaries.sqlite3"
    await filled(store)
    code, out, err = on_terminal("cache", "clear", "--config", str(config), answer="n\n")
    assert code == 0
    assert f"{store} holds 3 entries" in err
    assert "delete them all? [y/N]" in err
    assert "not cleared" in err
    assert out == ""
    assert info(config)["contents"]["entries"] == 3
    code, out, err = on_terminal("cache", "clear", "--config", str(config), answer="y\n")
    assert code == 0, err
    assert "removed 3 entries" in out
    assert info(config)["contents"]["entries"] == 0


def test_no_cache_file_yet_is_said_and_none_is_made(tmp_path: Path) -> None:
    config = config_at(tmp_path)
    done = docsumd("cache", "info", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "no cache file yet" in done.stdout
    assert info(config)["exists"] is False
    done = docsumd("cache", "clear", "--config", str(config), "--yes")
    assert done.returncode == 0, done.stderr
    assert "no cache file yet" in done.stdout
    assert not (tmp_path / "cache").exists()


def test_a_cache_turned_off_is_said_so(tmp_path: Path) -> None:
    config = config_at(tmp_path, "enabled = false\n")
    done = docsumd("cache", "info", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("summary cache: off in this config (enabled = false)\n")


def test_config_errors_and_paths_that_are_not_files_exit_2(tmp_path: Path) -> None:
    missing = docsumd("cache", "info", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2
    assert "no such config file" in missing.stderr
    bad = config_at(tmp_path, "max_bytes = 1\n")
    done = docsumd("cache", "clear", "--config", str(bad), "--yes")
    assert done.returncode == 2
    assert "cache.max_bytes" in done.stderr
    fifo = config_at(tmp_path)
    (tmp_path / "cache").mkdir()
    os.mkfifo(tmp_path / "cache" / "summaries.sqlite3")
    done = docsumd("cache", "info", "--config", str(fifo))
    assert done.returncode == 2
    assert "is a FIFO (named pipe), not a cache file: left alone" in done.stderr


def test_a_store_that_cannot_be_read_exits_1(tmp_path: Path) -> None:
    config = config_at(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "summaries.sqlite3").write_bytes(b"someone's notes\n" * 100)
    done = docsumd("cache", "info", "--config", str(config))
    assert done.returncode == 1
    assert "the summary cache cannot be read" in done.stderr
    assert "left as it is" in done.stderr
    assert (tmp_path / "cache" / "summaries.sqlite3").read_bytes() == b"someone's notes\n" * 100


@pytest.mark.redis
def test_a_redis_store_s_password_is_never_printed(
    tmp_path: Path, make_redis_server: Callable[..., RedisServer]
) -> None:
    server = make_redis_server()
    client = redis_sync.Redis.from_url(server.url)
    client.config_set("requirepass", PASSWORD)
    client.close()
    url = f"redis://user:{quote(PASSWORD, safe='')}@127.0.0.1:{server.port}/0"
    client = redis_sync.Redis.from_url(url.replace("user:", ":"))
    try:
        client.set("docsumd:k1", "{v")
        client.set("docsumd:k2", "{v")
        client.set("other:k", "kept")
    finally:
        client.close()
    config = config_at(tmp_path, 'backend = "redis"\n\n[cache.redis]\nurl = "redis://127.0.0.1:1/0"\n')
    environment = {"DOCSUMD_CACHE__REDIS__URL": url.replace("user:", ":")}
    outputs = []
    for args in (("info",), ("info", "--json"), ("clear", "--yes")):
        done = docsumd("cache", *args, "--config", str(config), env=environment)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    assert "entries: 2" in outputs[0]
    assert json.loads(outputs[1])["store"]["url"] == f"redis://127.0.0.1:{server.port}/0"
    assert outputs[2].startswith(f"cleared the keys under 'docsumd:' on redis://127.0.0.1:{server.port}/0")
    # The same password for a user the server does not know: refused, and the error shows neither.
    wrong = docsumd("cache", "info", "--config", str(config), env={"DOCSUMD_CACHE__REDIS__URL": url})
    assert wrong.returncode == 1
    outputs.append(wrong.stdout + wrong.stderr)
    for output in outputs:
        assert "s3cr" not in output
        assert quote(PASSWORD, safe="") not in output
