"""The daemon end to end on the Kafka path: real vLLM engine (tiny model), real broker (noida-db).

The daemon runs both sources at once (the harness's config always has the folder), sharing one engine.
Besides text and JSON messages, the end-to-end test sends documents as raw binary values (a real PDF, a
DOCX, an HTML page, with and without a ``content-type`` header) and hostile ones (an encrypted PDF, a
zip-bomb DOCX, a JPEG labelled as a PDF) through the real sandboxed extraction workers.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.corpus import corpus_text
from tests.e2e.harness import (
    MAX_KAFKA_MESSAGE_BYTES,
    DaemonProcess,
    Layout,
    configure_kafka,
    drop_file,
    wait_for,
)
from tests.kafka_broker import (
    KafkaBroker,
    Message,
    Topics,
    all_committed,
    committed_offsets,
    create_topics,
    produce,
    produce_batch,
    read_all,
)

pytestmark = [pytest.mark.engine, pytest.mark.kafka]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"
DOCX_TYPE = b"application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def _jpeg() -> bytes:
    """A real JPEG photo (Pillow, which vLLM installs, writes it)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 40, 40)).save(buffer, "JPEG")
    return buffer.getvalue()


def _extraction_workers(daemon: DaemonProcess) -> list[int]:
    """Pids of the daemon's extraction workers (its children running daemon.document.sandbox.worker; they
    have a session of their own, so the process-group check does not see them)."""
    assert daemon.proc is not None
    pids = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(status.read_text().rsplit(")", 1)[1].split()[1])
            command = (status.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == daemon.proc.pid and b"daemon.document.sandbox.worker" in command:
            pids.append(int(status.parent.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _records(broker: KafkaBroker, topic: str) -> list[Any]:
    return asyncio.run(read_all(broker.bootstrap, topic))


def test_kafka_end_to_end(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path, kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input], partitions=2))
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.output, topics.dead]))
    apache = corpus_text(corpus, "legal-common-apache-2.0.txt").decode()
    good: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
        (
            b"apache",
            json.dumps(
                {"id": "apache", "text": apache, "options": {"style": "bullets", "max_summary_tokens": 16}}
            ).encode(),
            [("trace-id", b"t-123")],
        ),
        (b"debian", corpus_text(corpus, "legal-debian-social-contract.txt"), []),
        (b"w99", corpus_text(corpus, "paper-aclsum-w99-0615.txt"), [("content-type", b"text/plain")]),
        (b"cc0", json.dumps({"text": corpus_text(corpus, "legal-cal-cc0-1.0.txt").decode()}).encode(), []),
    ]
    malformed = b'{"id": "broken", "text": "no end'
    oversized = b"word " * (MAX_KAFKA_MESSAGE_BYTES // 5 + 1000)
    bad: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
        (b"broken", malformed, []),
        (b"oversized", oversized, []),
        (
            b"haiku",
            json.dumps({"id": "haiku", "text": "Some text.", "options": {"style": "haiku"}}).encode(),
            [],
        ),
        (b"nul", (corpus / "bad" / "nul_bytes.txt").read_bytes(), []),
    ]
    expected_reasons = {
        "broken": "invalid_message",
        "oversized": "too_large",
        "haiku": "invalid_options",
        "nul": "nul_bytes",
    }
    # Documents as raw binary values, the id from the key, the format from the bytes: a content-type
    # header is a hint only (and a wrong one changes nothing).
    pdf = (FIXTURES / "pdf" / "cnfsat.pdf").read_bytes()
    docx = (FIXTURES / "docx" / "contract.docx").read_bytes()
    html = (FIXTURES / "html" / "debian-policy-ch-binary.html").read_bytes()
    binary: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = [
        (b"manual-pdf", pdf, [("content-type", b"application/pdf")]),
        (b"contract-docx", docx, []),
        (b"policy-html", html, [("content-type", b"text/html; charset=utf-8")]),
    ]
    jpeg = _jpeg()
    hostile: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = [
        (b"locked-pdf", (FIXTURES / "pdf" / "generated" / "encrypted.pdf").read_bytes(), []),
        (b"bomb-docx", (FIXTURES / "docx" / "bomb.docx").read_bytes(), [("content-type", DOCX_TYPE)]),
        (b"photo-as-pdf", jpeg, [("content-type", b"application/pdf")]),
    ]
    expected_reasons |= {"locked-pdf": "encrypted", "bomb-docx": "too_large", "photo-as-pdf": "binary"}
    good += binary
    bad += hostile
    # Half before the start, half while it runs; both partitions get some of each.
    first: list[Message] = [*good[:2], *bad[:2], binary[0], hostile[0]]
    asyncio.run(produce(kafka_broker.bootstrap, topics.input, first))
    configure_kafka(layout, kafka_broker, topics)
    daemon = start_daemon()
    daemon.wait_ready()
    then: list[Message] = [*good[2:4], *bad[2:4], *binary[1:], *hostile[1:]]
    asyncio.run(produce(kafka_broker.bootstrap, topics.input, then))
    # A header name that is not UTF-8: the Kafka client cannot decode the record (see undecodable.py).
    forged = [(b"forged", b"Some text.", [(b"\xc3\x28", b"v")])]
    forged_at = asyncio.run(produce_batch(kafka_broker.bootstrap, topics.input, forged, partition=1))
    expected_reasons[f"{topics.input}-1-{forged_at}"] = "invalid_message"
    # The folder source runs beside it, on the same engine.
    drop_file(layout.inbox, "folder-doc.txt", corpus_text(corpus, "legal-cal-ms-rl.txt"))

    def finished() -> bool:
        return len(_records(kafka_broker, topics.output)) >= len(good) and len(
            _records(kafka_broker, topics.dead)
        ) >= len(expected_reasons)

    wait_for(finished, 300, "every Kafka input to have a result or a dead letter", interval=1.0)
    wait_for(
        lambda: all_committed(kafka_broker, topics), 30, "the group to commit every offset", interval=0.5
    )
    wait_for((layout.outbox / "folder-doc.txt.summary.json").exists, 120, "the folder document")

    assert daemon.proc is not None
    assert daemon.proc.poll() is None, daemon.log_tail()  # the hostile values stopped nothing
    assert daemon.http_get("/healthz")[0] == 200
    _, metrics = daemon.http_get("/metrics")
    assert f'docsumd_documents_total{{outcome="ok",source="kafka"}} {float(len(good))}' in metrics
    assert 'docsumd_documents_total{outcome="invalid_message",source="kafka"} 2.0' in metrics
    assert 'docsumd_documents_total{outcome="ok",source="folder"} 1.0' in metrics
    assert 'docsumd_extractions_total{format="pdf",outcome="ok"} 1.0' in metrics
    assert 'docsumd_extractions_total{format="pdf",outcome="encrypted"} 1.0' in metrics
    assert 'docsumd_extractions_total{format="docx",outcome="too_large"} 1.0' in metrics
    workers = _extraction_workers(daemon)
    assert workers, "no extraction worker: the binary values were not extracted"

    def lag_is_zero() -> bool:
        text = daemon.http_get("/metrics")[1]
        lines = [line for line in text.splitlines() if line.startswith("docsumd_kafka_consumer_lag{")]
        return len(lines) == 2 and all(line.endswith(" 0.0") for line in lines)

    wait_for(lag_is_zero, 15, "the lag metric of both partitions to reach 0")

    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    assert daemon.leftover_processes() == [], daemon.stop_log()  # every process of the daemon exits with it
    wait_for(lambda: not any(map(_alive, workers)), 15, "the extraction workers to exit")

    # Results: one per good input, key = id, the folder's record, headers for model and prompt version.
    results = _records(kafka_broker, topics.output)
    assert Counter(r.key.decode() for r in results) == Counter(
        ["apache", "debian", "w99", "cc0", "manual-pdf", "contract-docx", "policy-html"]
    )
    for record in results:
        value = json.loads(record.value)
        headers = dict(record.headers)
        assert value["id"] == record.key.decode()
        assert value["source"] == "kafka"
        assert isinstance(value["summary"], str)
        assert value["summary_tokens"] > 0
        assert headers["model"].decode() == value["model"]
        assert headers["prompt_version"].decode() == value["prompt_version"]
        assert value["metadata"]["topic"] == topics.input
        assert set(value) >= set(json.loads((layout.outbox / "folder-doc.txt.summary.json").read_text()))
    by_id = {r.key.decode(): json.loads(r.value) for r in results}
    assert (by_id["apache"]["style"], by_id["apache"]["max_summary_tokens"]) == ("bullets", 16)
    assert by_id["apache"]["metadata"]["headers"] == {"trace-id": "t-123"}
    assert dict(next(r for r in results if r.key == b"apache").headers)["trace-id"] == b"t-123"
    assert by_id["debian"]["input_bytes"] == len(good[1][1] or b"")
    assert by_id["cc0"]["metadata"]["key"] == "cc0"
    assert by_id["debian"]["format"] == "text"
    # The binary values: their detected format, what extraction recorded, and where each part came from.
    for (key, value, sent_headers), fmt in zip(binary, ["pdf", "docx", "html"], strict=True):
        result = by_id[key.decode()]
        assert result["format"] == fmt, (key, result["format"])
        assert result["input_bytes"] == len(value)
        assert result["summary"], key
        assert result["extraction"], key
        assert result["metadata"]["headers"] == {name: header.decode() for name, header in sent_headers}
        sources = result["sources"]
        assert [source["part"] for source in sources] == list(range(1, len(sources) + 1))
        assert sources[-1]["chars"][1] > 0
    manual = by_id["manual-pdf"]
    assert manual["extraction"]["pages"] >= 2
    assert all(source["pages"][0] <= source["pages"][1] for source in manual["sources"])
    assert manual["sources"][0]["pages"][0] == 1
    assert manual["sources"][-1]["pages"][1] == manual["extraction"]["pages"]
    assert any(source.get("section") or source.get("headings") for source in by_id["policy-html"]["sources"])

    # Dead letters: the stable reason, where the message was, and its payload (cut when too large).
    letters = {r.key.decode(): json.loads(r.value) for r in _records(kafka_broker, topics.dead)}
    assert {key: letter["reason"] for key, letter in letters.items()} == expected_reasons
    for key, letter in letters.items():
        assert letter["id"] == key
        assert letter["topic"] == topics.input
        assert letter["partition"] in (0, 1)
        assert letter["offset"] >= 0
        assert len(letter["message"]) > 5
    assert letters["broken"]["payload"] == malformed.decode()
    assert letters["broken"]["payload_truncated"] is False
    assert letters["oversized"]["payload_bytes"] == len(oversized)
    assert letters["oversized"]["payload_truncated"] is True
    assert len(letters["oversized"]["payload"]) < len(oversized)
    assert letters["nul"]["payload_encoding"] == "utf-8"
    # A binary value's payload is base64, whole when it fits dead_letter_payload_bytes (64 KiB).
    assert letters["photo-as-pdf"]["payload_encoding"] == "base64"
    assert base64.b64decode(letters["photo-as-pdf"]["payload"]) == jpeg
    assert letters["bomb-docx"]["payload_bytes"] == len(hostile[1][1])
    assert letters["bomb-docx"]["payload_truncated"] is True
    assert letters["locked-pdf"]["metadata"]["key"] == "locked-pdf"
    assert all_committed(kafka_broker, topics)


def test_kafka_restart_mid_stream_loses_nothing(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path, kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input], partitions=2))
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.output, topics.dead]))
    names = sorted(p.name for p in (corpus / "docs").iterdir() if p.stat().st_size < 12_000)[:10]
    assert len(names) >= 6
    asyncio.run(
        produce(
            kafka_broker.bootstrap,
            topics.input,
            [(name.encode(), corpus_text(corpus, name), []) for name in names],
        )
    )
    # Two documents at a time, and no drain: a stop aborts what is in flight (left unacknowledged).
    configure_kafka(
        layout, kafka_broker, topics, **{"service.max_inflight_documents": "2", "service.drain_seconds": "0"}
    )
    first = start_daemon()
    first.wait_ready()
    wait_for(lambda: len(_records(kafka_broker, topics.output)) >= 2, 240, "the first results", interval=0.5)
    first.signal(signal.SIGTERM)
    assert first.wait_exit() == 0, first.log_tail()
    done_before = {r.key.decode() for r in _records(kafka_broker, topics.output)}
    committed_before = asyncio.run(committed_offsets(kafka_broker.bootstrap, topics.group, topics.input))

    second = start_daemon()
    second.wait_ready()

    def all_done() -> bool:
        return {r.key.decode() for r in _records(kafka_broker, topics.output)} >= set(names)

    wait_for(all_done, 300, "every document to have a result after the restart", interval=1.0)
    wait_for(
        lambda: all_committed(kafka_broker, topics), 30, "the group to commit every offset", interval=0.5
    )
    second.signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.log_tail()

    counts = Counter(r.key.decode() for r in _records(kafka_broker, topics.output))
    assert set(counts) == set(names)
    assert _records(kafka_broker, topics.dead) == []
    # The stop committed what was finished: a second result only for documents whose result was
    # written while the stop cut them off (at most the two in flight).
    duplicates = sum(count - 1 for count in counts.values())
    assert duplicates <= 2, counts
    print(  # for the test log: how far the first daemon got
        f"before restart: {len(done_before)} of {len(names)} done, committed {committed_before}; "
        f"duplicates {duplicates}"
    )
    assert len(done_before) < len(names), "the first daemon finished everything: the restart proved nothing"
