"""The remote engine's own logic against scripted servers (tests/doubles/openai_server.py): the start-up
checks, and what each way a request can go wrong becomes (sent again elsewhere, moved, counted,
too_long). The same behaviours against real vLLM servers: tests/e2e/test_remote_fleet.py."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daemon.config import EngineConfig, RemoteEngineConfig
from daemon.contracts import Sampling
from daemon.engine.remote.engine import RemoteEngine
from daemon.errors import ConfigError, RequestError
from daemon.ops.metrics import ENDPOINT_REJECTIONS, ENDPOINT_REQUESTS, ENGINE_REJECTIONS
from tests.doubles.openai_server import FakeOpenAIServer

SAMPLING = Sampling(max_tokens=8, temperature=0.0, top_p=1.0, repetition_penalty=1.0)


class ShiftedTokenizer:
    """Another tokenizer: the tiny one's ids, shifted (what a server of another model would say)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.chat_template = tokenizer.chat_template

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [token + 1 for token in self._tokenizer.encode(text, add_special_tokens=add_special_tokens)]

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        return self._tokenizer.apply_chat_template(conversation, **kwargs)


def _config(*urls: str, **remote: Any) -> EngineConfig:
    settings: dict[str, Any] = {
        "metrics_interval_seconds": 0.1,
        "backoff_first_seconds": 0.01,
        "backoff_max_seconds": 0.05,
        "down_after_failures": 2,
        **remote,
    }
    return EngineConfig(
        mode="remote",
        model="tiny",
        max_model_len=4096,
        remote=RemoteEngineConfig(endpoints=list(urls), **settings),
    )


@contextlib.asynccontextmanager
async def _two(tokenizer: Any) -> AsyncIterator[tuple[FakeOpenAIServer, FakeOpenAIServer]]:
    """Two matching servers, on the test's own event loop."""
    async with FakeOpenAIServer(tokenizer) as a, FakeOpenAIServer(tokenizer) as b:
        yield a, b


def _document_on(engine: RemoteEngine, server: FakeOpenAIServer) -> str:
    """A request id whose document's first choice is ``server``."""
    for i in range(1000):
        if engine.affinity.order(f"doc-{i}")[0].url == server.url:
            return f"doc-{i}:document1:abcd1234"
    raise AssertionError("no document hashes to that server")


def _count(counter: Any, **labels: str) -> float:
    value: float = counter.labels(**labels)._value.get()
    return value


# -- start-up checks ---------------------------------------------------------------------------------


async def test_matching_servers_pass_the_checks_and_serve(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_matching_servers_pass_the_checks_and_serve(tokenizer, a, b)


async def _test_matching_servers_pass_the_checks_and_serve(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    engine = RemoteEngine(_config(a.url, b.url), tokenizer=tokenizer)
    async with engine:
        assert [endpoint.usable for endpoint in engine.endpoints] == [True, True]
        assert engine.kv_cache_tokens == 2 * 1048576  # from their cache_config_info
        assert engine.cache_block_tokens == 128
        generation = await engine.generate([1, 2, 3], SAMPLING, "doc:document1:abcd1234")
    assert generation.text == "Summary."
    assert (generation.prompt_tokens, generation.output_tokens, generation.finish_reason) == (3, 2, "length")
    # The checks sent one test completion each; the request went to exactly one server.
    assert len(a.completions) + len(b.completions) == 3


async def test_a_server_with_another_tokenizer_stops_the_start_naming_it(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_a_server_with_another_tokenizer_stops_the_start_naming_it(tokenizer, a, b)


async def _test_a_server_with_another_tokenizer_stops_the_start_naming_it(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    b.tokenizer = ShiftedTokenizer(tokenizer)
    with pytest.raises(ConfigError, match=rf"endpoint {b.url}: its tokenizer differs") as raised:
        await RemoteEngine(_config(a.url, b.url), tokenizer=tokenizer).start()
    assert a.url not in str(raised.value)


async def test_a_shorter_context_or_a_refused_key_stops_the_start(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_a_shorter_context_or_a_refused_key_stops_the_start(tokenizer, a, b)


async def _test_a_shorter_context_or_a_refused_key_stops_the_start(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    a.max_model_len = 2048
    b.api_key = "right"
    with pytest.raises(ConfigError) as raised:
        await RemoteEngine(_config(a.url, b.url, api_key="wrong"), tokenizer=tokenizer).start()
    message = str(raised.value)
    assert f"endpoint {a.url}: serves 'tiny' with a context of 2048 tokens" in message
    assert f"endpoint {b.url}: the API key was refused (HTTP 401" in message


async def test_a_server_that_cannot_be_reached_at_start_is_down_not_an_error(tokenizer: Any) -> None:
    async with FakeOpenAIServer(tokenizer) as a:
        gone = FakeOpenAIServer(tokenizer)
        async with gone:
            url = gone.url
        engine = RemoteEngine(_config(a.url, url), tokenizer=tokenizer)
        async with engine:
            assert [endpoint.usable for endpoint in engine.endpoints] == [True, False]
            assert engine.problem is None


# -- requests ----------------------------------------------------------------------------------------


async def test_refusals_are_sent_again_elsewhere_and_never_fail(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_refusals_are_sent_again_elsewhere_and_never_fail(tokenizer, a, b)


async def _test_refusals_are_sent_again_elsewhere_and_never_fail(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    engine = RemoteEngine(_config(a.url, b.url), tokenizer=tokenizer)
    async with engine:
        request_id = _document_on(engine, a)
        a.script.extend(["503", "in_band_503"])
        b.script.extend(["503"])
        rejections = ENGINE_REJECTIONS._value.get()
        generation = await engine.generate([1, 2, 3], SAMPLING, request_id)
    assert generation.text == "Summary."
    assert ENGINE_REJECTIONS._value.get() - rejections == 3
    assert _count(ENDPOINT_REJECTIONS, endpoint=a.url, status="503") >= 2
    # Each try has its own X-Request-Id (the request's id, then the try).
    tries = [rid for rid in a.request_ids + b.request_ids if rid.startswith("doc-")]
    assert sorted(tries) == sorted({f"{request_id}-try{n}" for n in range(1, 5)})


async def test_a_429_keeps_its_endpoint_from_new_documents_for_its_retry_after(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_a_429_keeps_its_endpoint_from_new_documents_for_its_retry_after(tokenizer, a, b)


async def _test_a_429_keeps_its_endpoint_from_new_documents_for_its_retry_after(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    engine = RemoteEngine(_config(a.url, b.url), tokenizer=tokenizer)
    async with engine:
        a.script.append("429")
        await engine.generate([1, 2, 3], SAMPLING, _document_on(engine, a))
        endpoint = next(e for e in engine.endpoints if e.url == a.url)
        assert endpoint.cooling  # Retry-After: 2 s
        assert endpoint.cool_until - time.monotonic() > 1.5


async def test_a_lost_stream_is_sent_again_and_too_many_losses_fail_the_request(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_a_lost_stream_is_sent_again_and_too_many_losses_fail_the_request(tokenizer, a, b)


async def _test_a_lost_stream_is_sent_again_and_too_many_losses_fail_the_request(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    engine = RemoteEngine(_config(a.url, b.url, max_lost_tries=3), tokenizer=tokenizer)
    async with engine:
        request_id = _document_on(engine, a)
        a.script.append("cut")
        told: list[bool] = []
        generation = await engine.generate(
            [1, 2, 3], SAMPLING, request_id, on_prefilled=lambda: told.append(True)
        )
        assert generation.text == "Summary."
        assert told == [True]  # the prefill is told once, however many tries
        a.script.extend(["cut"] * 5)
        b.script.extend(["cut"] * 5)
        with pytest.raises(RequestError, match="lost 3 times") as raised:
            await engine.generate([1, 2, 3], SAMPLING, request_id)
        assert raised.value.reason == "engine_error"


async def test_a_prompt_longer_than_the_servers_context_is_too_long(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_a_prompt_longer_than_the_servers_context_is_too_long(tokenizer, a, b)


async def _test_a_prompt_longer_than_the_servers_context_is_too_long(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    engine = RemoteEngine(_config(a.url, b.url), tokenizer=tokenizer)
    async with engine:
        a.script.append("400_too_long")
        with pytest.raises(RequestError) as raised:
            await engine.generate([1, 2, 3], SAMPLING, _document_on(engine, a))
    assert raised.value.reason == "too_long"
    assert _count(ENDPOINT_REQUESTS, endpoint=a.url, outcome="too_long") >= 1


async def test_requests_on_a_server_that_stops_answering_move_within_seconds(tokenizer: Any) -> None:
    async with _two(tokenizer) as (a, b):
        await _test_requests_on_a_server_that_stops_answering_move_within_seconds(tokenizer, a, b)


async def _test_requests_on_a_server_that_stops_answering_move_within_seconds(
    tokenizer: Any, a: FakeOpenAIServer, b: FakeOpenAIServer
) -> None:
    engine = RemoteEngine(_config(a.url, b.url), tokenizer=tokenizer)
    async with engine:
        request_id = _document_on(engine, a)
        a.script.append("slow")  # the stream starts, then nothing: a server that hangs
        task = asyncio.create_task(engine.generate([1, 2, 3], SAMPLING, request_id))
        await asyncio.sleep(0.3)
        a.metrics_up = False  # its load reads now time out: down after two of them
        started = time.monotonic()
        generation = await asyncio.wait_for(task, 30)
        moved_after = time.monotonic() - started
    assert generation.text == "Summary."
    assert moved_after < 10
    assert _count(ENDPOINT_REQUESTS, endpoint=a.url, outcome="moved") >= 1


async def test_with_every_server_down_requests_wait_and_the_engine_says_why(tokenizer: Any) -> None:
    a = FakeOpenAIServer(tokenizer)
    await a.__aenter__()
    port = a.port
    engine = RemoteEngine(_config(a.url), tokenizer=tokenizer)
    try:
        await engine.start()
        await a.stop()
        task = asyncio.create_task(engine.generate([1, 2, 3], SAMPLING, "doc:document1:abcd1234"))
        for _ in range(100):
            if engine.problem:
                break
            await asyncio.sleep(0.05)
        assert engine.problem is not None
        assert "no remote endpoint takes work" in engine.problem
        assert not task.done()  # waiting, not failed
        # The server comes back on its port: the request runs.
        back = FakeOpenAIServer(tokenizer)
        back.port = port
        await _serve_on(back, port)
        try:
            generation = await asyncio.wait_for(task, 30)
        finally:
            await back.stop()
        assert generation.text == "Summary."
        assert engine.problem is None
    finally:
        await engine.stop()


async def _serve_on(server: FakeOpenAIServer, port: int) -> None:
    """Start ``server`` on ``port`` (the one its predecessor had)."""
    from aiohttp import web

    await server.__aenter__()  # on a free port first, to build the app
    assert server._runner is not None
    site = web.TCPSite(server._runner, "127.0.0.1", port)
    await site.start()


# -- TLS ---------------------------------------------------------------------------------------------


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for ``localhost`` it signed, with its key (PEM files)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("docsumd test CA"))
        .issuer_name(name("docsumd test CA"))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


async def test_an_https_server_is_verified_against_the_configured_ca(tokenizer: Any, tmp_path: Path) -> None:
    import ssl

    ca, cert, key = _certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    async with FakeOpenAIServer(tokenizer, ssl_context=context) as server:
        assert server.url.startswith("https://localhost:")
        # Not signed by a CA the system trusts: the server is down for docsumd, not misconfigured.
        untrusted = RemoteEngine(_config(server.url), tokenizer=tokenizer)
        async with untrusted:
            assert not untrusted.endpoints[0].usable
            assert "CERTIFICATE_VERIFY_FAILED" in (untrusted.endpoints[0].problem or "")
        trusted = RemoteEngine(_config(server.url, ca_file=ca), tokenizer=tokenizer)
        async with trusted:
            generation = await trusted.generate([1, 2, 3], SAMPLING, "doc:document1:abcd1234")
        assert generation.text == "Summary."
        unverified = RemoteEngine(_config(server.url, verify_tls=False), tokenizer=tokenizer)
        async with unverified:
            assert unverified.endpoints[0].usable


async def test_a_ca_file_that_cannot_be_read_is_a_config_error(tokenizer: Any, tmp_path: Path) -> None:
    engine = RemoteEngine(
        _config("https://localhost:1", ca_file=tmp_path / "missing.pem"), tokenizer=tokenizer
    )
    with pytest.raises(ConfigError, match="cannot set up TLS"):
        await engine.start()
