"""Every name the file system allows, through the folder source and the per-document pipeline.

A name is any bytes but NUL and ``/``, up to 255 of them. Each input must end with a result or a
failure record that carries its exact name (reversibly, :func:`daemon.fs.names.name_fields`), be moved
to ``done/`` or ``failed/`` under its exact bytes unless that name is taken, and overwrite nothing that
was there. The engine is the fake one; the tokenizer is the tiny model's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.config import Config, EngineConfig, FolderSourceConfig, SummaryConfig
from daemon.document.reader import DocumentReader
from daemon.engine.admission import Admission, AdmissionLimits
from daemon.folder.sink import FolderSink
from daemon.folder.source import FolderSource, is_candidate_name
from daemon.fs.names import MAX_NAME_BYTES, record_stem
from daemon.pipeline import OK, DocumentPipeline
from daemon.summary.profiles import build_profiles
from daemon.summary.summarizer import Summarizer
from tests.doubles.engine import FakeEngine

WAIT = 10.0
SENTINEL = b"already here: must never be overwritten\n"
LONG_240 = os.fsdecode(b"long-" + b"x" * 231 + b".txt")
LONG_250 = os.fsdecode(b"longer-" + b"y" * 239 + b".txt")
FULL_255 = os.fsdecode("é".encode() * 127 + b"z")
NOT_UTF8 = os.fsdecode(b"bad-\xff\xfe-caf\xe9.txt")

NAMES = (
    st.binary(min_size=1, max_size=MAX_NAME_BYTES)
    .map(lambda raw: raw.replace(b"\x00", b"_").replace(b"/", b"_"))
    .map(os.fsdecode)
    .filter(is_candidate_name)
)


@dataclass
class Input:
    name: str
    data: bytes
    good: bool
    taken: bool  # an earlier input of this name left its files and records behind


def text_for(index: int) -> bytes:
    return f"Document {index}. A short notice about the delivery of goods.\n".encode() * 5


def bad_for(index: int) -> bytes:
    """Bytes refused as binary, distinct per input (so each can be found where it was moved)."""
    return b"\x01\x02\x03" + str(index).encode()


def make_pipeline(tokenizer: Any) -> DocumentPipeline:
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6))
    engine = FakeEngine()
    engine.delay = 0.0
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024), summary=SummaryConfig(max_summary_tokens=16)
    )
    profiles = build_profiles(config, tokenizer)
    summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=admission)
    reader = DocumentReader(max_input_bytes=1 << 20)
    return DocumentPipeline(summarizer, model_name="tiny", reader=reader)


def exact_name(fields: dict[str, Any]) -> bytes:
    """The documented way back from a record's name fields to the file name's bytes."""
    if "file_name_b64" in fields:
        return base64.b64decode(fields["file_name_b64"])
    return str(fields["file_name"]).encode("utf-8")


def listing(folder: Path) -> dict[bytes, bytes]:
    """Every file in ``folder`` by its exact name's bytes."""
    return {name: (folder / os.fsdecode(name)).read_bytes() for name in os.listdir(bytes(folder))}


async def run_inputs(root: Path, inputs: list[Input], tokenizer: Any) -> FolderSourceConfig:
    """Drop ``inputs`` (and, for taken ones, earlier files of the same names), then process them all."""
    config = FolderSourceConfig(
        inbox=root / "inbox", outbox=root / "outbox", done=root / "done", failed=root / "failed",
        settle_seconds=0.0, rescan_seconds=3600.0,
    )  # fmt: skip
    for folder in (config.inbox, config.outbox, config.done, config.failed):
        folder.mkdir(parents=True)
    for entry in inputs:
        (config.inbox / entry.name).write_bytes(entry.data)
        if entry.taken:
            stem = record_stem(entry.name)
            earlier = (config.done / entry.name, config.failed / entry.name)
            records = (config.outbox / f"{stem}.summary.json", config.failed / f"{stem}.error.json")
            for path in (*earlier, *records):
                path.write_bytes(SENTINEL)
    pipeline = make_pipeline(tokenizer)
    source = FolderSource(config, FolderSink(config.outbox, config.failed), max_input_bytes=1 << 20)
    await source.start()
    items = source.items()
    try:
        outcomes = [await pipeline.process(await asyncio.wait_for(anext(items), WAIT)) for _ in inputs]
    finally:
        await items.aclose()  # type: ignore[attr-defined]
        await source.stop()
    assert sorted(outcomes).count(OK) == sum(entry.good for entry in inputs)
    return config


def check_outcome(config: FolderSourceConfig, inputs: list[Input]) -> None:
    done, failed, outbox = listing(config.done), listing(config.failed), listing(config.outbox)
    records = [json.loads(data) for data in outbox.values() if data != SENTINEL]
    failures = {name: data for name, data in failed.items() if name.endswith(b".error.json")}
    records += [json.loads(data) for data in failures.values() if data != SENTINEL]
    by_name = {exact_name(record["metadata"]): record for record in records}
    assert len(by_name) == len(records) == len(inputs)  # one record each, none overwritten
    for entry in inputs:
        raw = os.fsencode(entry.name)
        record = by_name[raw]
        assert record["id"] == record["metadata"]["file_name"]
        assert ("summary" in record) == entry.good
        folder = done if entry.good else failed
        moved = [name for name, data in folder.items() if data == entry.data]
        assert len(moved) == 1, "the input's bytes are in its folder exactly once"
        if not entry.taken and not raw.endswith(b".error.json"):
            assert moved == [raw], "moved under its exact name"
        if entry.taken:
            assert done[raw] == failed[raw] == SENTINEL
    sentinels = sum(data == SENTINEL for listing_ in (done, failed, outbox) for data in listing_.values())
    assert sentinels == 4 * sum(entry.taken for entry in inputs)
    assert os.listdir(config.inbox) == []  # nothing left behind, no temporary files anywhere
    assert not [name for name in [*done, *failed, *outbox] if name.endswith(b".tmp")]


def test_long_undecodable_and_full_length_names_end_with_records(tokenizer: Any, tmp_path: Path) -> None:
    inputs = [
        Input(LONG_240, text_for(1), good=True, taken=False),
        Input(LONG_250, text_for(2), good=True, taken=True),
        Input(FULL_255, text_for(3), good=True, taken=True),
        Input(NOT_UTF8, text_for(4), good=True, taken=False),
        Input(os.fsdecode(b"\xff" * 255), bad_for(5), good=False, taken=True),
        Input("p", b"", good=False, taken=False),
        Input("p.error.json", b"\x00\x01\x02binary", good=False, taken=False),
    ]
    config = asyncio.run(run_inputs(tmp_path, inputs, tokenizer))
    check_outcome(config, inputs)
    result = json.loads((config.outbox / f"{LONG_240}.summary.json").read_bytes())
    assert result["id"] == LONG_240  # a 240-byte name still fits as NAME.summary.json
    # The earlier input of this name (a sentinel) keeps its record: this one's is STEM~2.
    outbox = os.listdir(config.outbox)
    (shortened,) = [n for n in outbox if n.startswith("longer-") and n.endswith("~2.summary.json")]
    assert len(os.fsencode(shortened)) < 140
    assert json.loads((config.outbox / shortened).read_bytes())["metadata"]["file_name"] == LONG_250
    undecodable = json.loads((config.outbox / f"{record_stem(NOT_UTF8)}.summary.json").read_bytes())
    assert undecodable["metadata"] == {
        "file_name": "bad-\\xff\\xfe-caf\\xe9.txt",
        "file_name_b64": base64.b64encode(b"bad-\xff\xfe-caf\xe9.txt").decode(),
    }
    assert (config.done / NOT_UTF8).read_bytes() == text_for(4)  # moved byte-exact


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(NAMES, st.booleans(), st.booleans()), min_size=1, max_size=4, unique_by=lambda t: t[0])
)
def test_any_names_end_with_records_and_overwrite_nothing(
    tokenizer: Any, cases: list[tuple[str, bool, bool]]
) -> None:
    inputs = [
        Input(name, text_for(index) if good else bad_for(index), good, taken)
        for index, (name, good, taken) in enumerate(cases)
    ]
    with tempfile.TemporaryDirectory() as root:
        config = asyncio.run(run_inputs(Path(root), inputs, tokenizer))
        check_outcome(config, inputs)
